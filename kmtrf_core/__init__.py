"""kmtrf_core: the thin, fast core behind the kmtrf book.

A flat public API: everything a chapter needs is importable from here.
"""

from .attention import attention_weights, distance_attention, hardmax_weights, sqdist
from .construction import code_geometry, code_lloyd_step, finite_gamma_error, layer_trace, lloyd_weights
from .dissimilarity import block_labels, block_summary, distance_samples, emd_matrix
from .embeddings import (
    binary_codes,
    cluster_codes,
    code_dim,
    d_emb,
    embed,
    parameter_count,
    parameter_reduction,
)
from .evaluate import (
    MODES,
    SHIFTS,
    center_trajectory,
    evaluate_models,
    family_generalization,
    family_matrix,
    family_tasks,
    final_ratios,
    lloyd_loss_trajectory,
    loss_trajectory,
    shifted_tasks,
)
from .landscape import Landscape, filter_normalized_direction, loss_surface
from .lloyd import (
    LloydTrajectory,
    assign,
    has_empty_cluster,
    kmeans_objective,
    lloyd,
    lloyd_step,
    lloyd_trajectory,
)
from .lipschitz import LipschitzBound, center_norm_sq, empirical_lipschitz, lipschitz_bound, random_parameters
from .model import ClusterTransformer
from .objectives import (
    OMEGAS,
    kmeans_loss,
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
from .profiles import PROFILES, Profile, default_device, get_profile
from .profiling import ProfileResult, attention_cost, compare_schemes, machine_description, profile_grid, profile_model
from .tasks import FAMILIES, make_generator, min_max_scale, sample_tasks, to_unit_cube
# ``train`` (the function) is not re-exported: it would hide the module ``kmtrf_core.train``
from .train import TrainConfig, TrainingDiverged, sweep, train_cached

__version__ = "0.1.0"

__all__ = [
    "attention_weights",
    "distance_attention",
    "hardmax_weights",
    "sqdist",
    "code_geometry",
    "code_lloyd_step",
    "finite_gamma_error",
    "layer_trace",
    "lloyd_weights",
    "binary_codes",
    "cluster_codes",
    "code_dim",
    "d_emb",
    "embed",
    "parameter_count",
    "parameter_reduction",
    "LloydTrajectory",
    "assign",
    "has_empty_cluster",
    "kmeans_objective",
    "lloyd",
    "lloyd_step",
    "lloyd_trajectory",
    "ClusterTransformer",
    "LipschitzBound",
    "center_norm_sq",
    "empirical_lipschitz",
    "lipschitz_bound",
    "random_parameters",
    "OMEGAS",
    "kmeans_loss",
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
    "PROFILES",
    "Profile",
    "default_device",
    "get_profile",
    "ProfileResult",
    "attention_cost",
    "compare_schemes",
    "machine_description",
    "profile_grid",
    "profile_model",
    "FAMILIES",
    "make_generator",
    "min_max_scale",
    "sample_tasks",
    "to_unit_cube",
    "block_labels",
    "block_summary",
    "distance_samples",
    "emd_matrix",
    "MODES",
    "SHIFTS",
    "center_trajectory",
    "evaluate_models",
    "family_generalization",
    "family_matrix",
    "family_tasks",
    "final_ratios",
    "lloyd_loss_trajectory",
    "loss_trajectory",
    "shifted_tasks",
    "Landscape",
    "filter_normalized_direction",
    "loss_surface",
    "TrainConfig",
    "TrainingDiverged",
    "sweep",
    "train_cached",
]
