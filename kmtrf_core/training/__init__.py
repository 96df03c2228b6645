"""Training the layer, and the runs the book is made of.

* :mod:`~kmtrf_core.training.config`: :class:`TrainConfig`, what defines a run;
* :mod:`~kmtrf_core.training.loop`: Algorithm 1, :func:`train`, with exact resume;
* :mod:`~kmtrf_core.training.checkpoints`: checkpoint files, atomic and checked;
* :mod:`~kmtrf_core.training.runs`: the on-disk cache of trained runs, sweeps, summaries;
* :mod:`~kmtrf_core.training.executor`: runs in parallel on ``dask.distributed``;
* :mod:`~kmtrf_core.training.cli`: ``python -m kmtrf_core.training``.
"""

from .checkpoints import load_checkpoint
from .config import HISTORY_COLUMNS, TrainConfig, TrainingDiverged
from .loop import train, validation_tasks
from .runs import cache_dir, convergence_summary, sweep, train_cached

__all__ = [
    "HISTORY_COLUMNS",
    "TrainConfig",
    "TrainingDiverged",
    "cache_dir",
    "convergence_summary",
    "load_checkpoint",
    "sweep",
    "train",
    "train_cached",
    "validation_tasks",
]
