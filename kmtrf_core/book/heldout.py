"""Held-out tasks and the tables read on them: what Part III's chapters (16-21) share.

Each of Part III's chapters evaluates catalog layers on fresh tasks from a
run's own distribution (:func:`eval_tasks`), from the same starts as Lloyd's
algorithm, follows their re-embedded trajectories, padded to a wider layer
where needed (:func:`transfer_trajectories`), and reads the median ratio to
Lloyd at chosen steps (:func:`ratio_at`). The experiment's logic lives in the
paper room (:func:`~kmtrf_core.evaluate.center_trajectory`,
:func:`~kmtrf_core.evaluate.padded_trajectory`,
:func:`~kmtrf_core.evaluate.trajectory_table`); this module only arranges it.
"""

from __future__ import annotations

import pandas as pd
import torch

from ..evaluate import center_trajectory, padded_trajectory
from ..model import check_model
from ..tasks import sample_tasks
from ..training import TrainConfig
from ..validation import check_int, check_table

__all__ = ["eval_tasks", "ratio_at", "transfer_trajectories"]


def eval_tasks(config: TrainConfig, count: int, seed: int = 12345, *, family=None, d: int | None = None,
               k: int | None = None):
    """Held-out tasks ``(X, C)`` from a run's task distribution, optionally at another family, ``d`` or ``k``.

    Parameters
    ----------
    config : TrainConfig
        Gives ``n``, the spread, anisotropy, weights and (by default) family, ``d`` and ``k``.
    count : int
        Number of tasks.
    seed : int
        Seed of the draw (the same seed gives the same tasks for every layer).
    family, d, k : optional
        Overrides.

    Returns
    -------
    (torch.Tensor, torch.Tensor)
        Points ``(count, n, d)`` and initial centers ``(count, k, d)``, float32.

    Examples
    --------
    >>> X, C = eval_tasks(TrainConfig(d=2, k=3, n=16), 4, d=1, k=2)
    >>> tuple(X.shape), tuple(C.shape)
    ((4, 16, 1), (4, 2, 1))
    """
    check_int(count, "count")
    return sample_tasks(count, config.n, config.d if d is None else d, config.k if k is None else k,
                        family=config.family if family is None else family, scale=config.scale,
                        anisotropic=config.anisotropic, unequal_weights=config.unequal_weights,
                        generator=seed)


def ratio_at(table, steps, by=("model",)) -> pd.DataFrame:
    """Median over ensemble members of the ratio to Lloyd after each of ``steps`` (columns ``step1``, ...).

    Parameters
    ----------
    table : pandas.DataFrame
        From :func:`~kmtrf_core.evaluate.evaluate_models` or :func:`~kmtrf_core.evaluate.trajectory_table`.
    steps : sequence of int
        The steps to read.
    by : tuple of str
        The row grouping.

    Returns
    -------
    pandas.DataFrame
        One row per group, one column ``step<t>`` per step.

    Examples
    --------
    >>> table = pd.DataFrame({"model": "bn", "member": [0, 1, 0, 1], "step": [1, 1, 2, 2],
    ...                       "ratio": [0.9, 0.7, 0.8, 0.6]})
    >>> ratio_at(table, [1, 2]).round(2).to_dict("records")
    [{'step1': 0.8, 'step2': 0.7}]
    """
    table = check_table(table, "table", ["member", "step", "ratio", *by])
    picked = table[table.step.isin(list(steps))]
    wide = picked.groupby([*by, "step"], sort=False).ratio.median().unstack("step")
    wide.columns = [f"step{int(step)}" for step in wide.columns]
    return wide


def transfer_trajectories(layers: dict, X: torch.Tensor, C: torch.Tensor, steps: int) -> dict:
    """Re-embedded trajectories of layers used on tasks of their own or of a smaller ``(d, k)``.

    Parameters
    ----------
    layers : dict
        Label -> a layer, or ``(layer, fill)`` to pad with that fill
        (:func:`~kmtrf_core.evaluate.pad_tasks`); a layer whose ``(d, k)``
        exceeds the tasks' is padded with the default fill.
    X, C : torch.Tensor
        The tasks.
    steps : int
        Clustering steps ``T``.

    Returns
    -------
    dict
        Label -> centers ``(T + 1, (S,) B, k, d)``, for :func:`~kmtrf_core.evaluate.trajectory_table`.

    Examples
    --------
    >>> from kmtrf_core.model import ClusterTransformer
    >>> X, C = sample_tasks(3, 20, 2, 3, generator=0, dtype=torch.float64)
    >>> out = transfer_trajectories({"wide": ClusterTransformer.from_lloyd(4, 6, "bn")}, X, C, steps=2)
    >>> tuple(out["wide"].shape)
    (3, 3, 3, 2)
    """
    out = {}
    for label, entry in layers.items():
        model, fill = entry if isinstance(entry, tuple) else (entry, "far")
        model = check_model(model)
        if (model.d, model.k) == (X.shape[-1], C.shape[-2]):
            out[label] = center_trajectory(model, X, C, steps)
        else:
            out[label] = padded_trajectory(model, X, C, steps, fill=fill)
    return out
