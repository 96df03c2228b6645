"""kmtrf_core: the thin, fast core behind the kmtrf book.

The folders are the rooms:

* the package top holds the paper's mathematics, one idea per module
  (:mod:`~kmtrf_core.embeddings`, :mod:`~kmtrf_core.attention`,
  :mod:`~kmtrf_core.model`, :mod:`~kmtrf_core.construction`,
  :mod:`~kmtrf_core.lloyd`, :mod:`~kmtrf_core.objectives`,
  :mod:`~kmtrf_core.tasks`, :mod:`~kmtrf_core.lipschitz`,
  :mod:`~kmtrf_core.evaluate`, :mod:`~kmtrf_core.padding`, :mod:`~kmtrf_core.landscape`,
  :mod:`~kmtrf_core.algorithms`,
  :mod:`~kmtrf_core.dissimilarity`), with :mod:`~kmtrf_core.validation`
  (argument checks) and :mod:`~kmtrf_core.device` (where tensors go);
* :mod:`kmtrf_core.training`: the config, the training loop with its
  checkpoints, the runs (cache, sweeps) and the command line;
* :mod:`kmtrf_core.cost`: the analytic FLOP/byte model and the timing and
  memory harness;
* :mod:`kmtrf_core.estimator`: :class:`~kmtrf_core.estimator.TransformerKMeans`,
  the scikit-learn estimator on the layer (it may train a layer on demand);
* :mod:`kmtrf_core.book`: what only the book needs (run profiles, the claims
  ledger, figure helpers, the experiments several chapters share).

The flat API below re-exports the paper room, the training and cost rooms and the estimator;
the book's plumbing is imported from :mod:`kmtrf_core.book`. Importing the package (or any
paper module) loads only the paper room, torch, numpy and pandas: the names of the other rooms
load their room on first use (``kmtrf_core.TrainConfig`` imports :mod:`kmtrf_core.training`
then), so ``import kmtrf_core.lloyd`` pulls in neither scikit-learn, Dask, POT nor tqdm.
"""

import importlib

from .algorithms import (
    algorithm_distance,
    compare_algorithms,
    fit_reference,
    minibatch_kmeans_step,
    relaxed_lloyd_step,
    soft_kmeans_step,
)
from .attention import attention_weights, distance_attention, hardmax_weights, sqdist
from .construction import code_geometry, code_lloyd_step, finite_gamma_error, layer_trace
from .device import default_device
from .dissimilarity import block_labels, block_summary, distance_samples, emd_matrix
from .embeddings import (
    SCHEMES,
    binary_codes,
    cluster_codes,
    code_dim,
    embed,
    embedding_dim,
    parameter_count,
    parameter_reduction,
)
from .evaluate import (
    MODES,
    center_trajectory,
    evaluate_models,
    family_matrix,
    final_ratios,
    lloyd_loss_trajectory,
    loss_trajectory,
    relative_loss,
    trajectory_losses,
    trajectory_table,
)
from .landscape import Landscape, filter_normalized_direction, loss_surface
from .lipschitz import LipschitzBound, center_norm_sq, empirical_lipschitz, lipschitz_bound, random_parameters
from .lloyd import (
    LloydTrajectory,
    assign,
    has_empty_cluster,
    kmeans_objective,
    lloyd,
    lloyd_step,
    lloyd_trajectory,
)
from .model import ClusterTransformer, lloyd_weights
from .objectives import (
    OMEGAS,
    regularized_weights,
    smoothed_kmeans_loss,
    smoothed_point_losses,
    smoothing_constant,
    smoothing_gap,
    sparsemax,
    sparsemax_is_tight,
    sparsemax_threshold,
    weight_gap,
    weight_gap_bound,
)
from .padding import PAD_FILLS, pad_tasks, padded_trajectory
from .tasks import (
    FAMILIES,
    SHIFTS,
    family_tasks,
    make_generator,
    min_max_scale,
    sample_tasks,
    shifted_tasks,
    to_unit_cube,
)
__version__ = "0.1.0"

__all__ = [
    # estimator
    "TransformerKMeans",
    # attention
    "attention_weights",
    "distance_attention",
    "hardmax_weights",
    "sqdist",
    # construction
    "code_geometry",
    "code_lloyd_step",
    "finite_gamma_error",
    "layer_trace",
    "lloyd_weights",
    # embeddings
    "SCHEMES",
    "binary_codes",
    "cluster_codes",
    "code_dim",
    "embed",
    "embedding_dim",
    "parameter_count",
    "parameter_reduction",
    # lloyd
    "LloydTrajectory",
    "assign",
    "has_empty_cluster",
    "kmeans_objective",
    "lloyd",
    "lloyd_step",
    "lloyd_trajectory",
    # model
    "ClusterTransformer",
    # lipschitz
    "LipschitzBound",
    "center_norm_sq",
    "empirical_lipschitz",
    "lipschitz_bound",
    "random_parameters",
    # objectives
    "OMEGAS",
    "regularized_weights",
    "smoothed_kmeans_loss",
    "smoothed_point_losses",
    "smoothing_constant",
    "smoothing_gap",
    "sparsemax",
    "sparsemax_is_tight",
    "sparsemax_threshold",
    "weight_gap",
    "weight_gap_bound",
    # tasks
    "FAMILIES",
    "SHIFTS",
    "family_tasks",
    "make_generator",
    "min_max_scale",
    "sample_tasks",
    "shifted_tasks",
    "to_unit_cube",
    # dissimilarity
    "block_labels",
    "block_summary",
    "distance_samples",
    "emd_matrix",
    # evaluate
    "MODES",
    "center_trajectory",
    "evaluate_models",
    "family_matrix",
    "final_ratios",
    "lloyd_loss_trajectory",
    "loss_trajectory",
    "relative_loss",
    "trajectory_losses",
    "trajectory_table",
    # padding (a layer on smaller tasks; Appendix A)
    "PAD_FILLS",
    "pad_tasks",
    "padded_trajectory",
    # algorithms (what a learned step resembles; Appendix A)
    "algorithm_distance",
    "compare_algorithms",
    "fit_reference",
    "minibatch_kmeans_step",
    "relaxed_lloyd_step",
    "soft_kmeans_step",
    # landscape
    "Landscape",
    "filter_normalized_direction",
    "loss_surface",
    # device
    "default_device",
    # training
    "TrainConfig",
    "TrainingDiverged",
    "convergence_summary",
    "sweep",
    "train",
    "train_cached",
    # cost
    "Measurement",
    "attention_cost",
    "compare_schemes",
    "machine_description",
    "measure_grid",
    "measure_model",
    "training_step_ms",
]

_LAZY = {
    "TransformerKMeans": "estimator",
    **dict.fromkeys(("TrainConfig", "TrainingDiverged", "convergence_summary", "sweep", "train", "train_cached"),
                    "training"),
    **dict.fromkeys(("Measurement", "attention_cost", "compare_schemes", "machine_description", "measure_grid",
                     "measure_model", "training_step_ms"), "cost"),
}
"""Flat names of the other rooms -> their room, imported on first use (PEP 562)."""


def __getattr__(name: str):
    if name in _LAZY:
        value = getattr(importlib.import_module(f".{_LAZY[name]}", __name__), name)
        globals()[name] = value  # the next lookup is a plain attribute
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list:
    return sorted(set(globals()) | set(_LAZY))
