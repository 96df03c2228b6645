"""Held-out tasks and the tables read on them: what Part III's chapters (16-21) share.

Each of Part III's chapters evaluates catalog layers on fresh tasks from a
run's own distribution (:func:`eval_tasks`), from the same starts as Lloyd's
algorithm, follows their re-embedded trajectories, padded to a wider layer
where needed (:func:`transfer_trajectories`), and reads the median ratio to
Lloyd at chosen steps (:func:`ratio_at`), or per task (:func:`task_ratios`), the samples
that a verdict's interval is drawn from (:mod:`~kmtrf_core.book.uncertainty`); chapters 11 and 14 lay
such samples out as a train x test family matrix of geometric means (:func:`geometric_matrix`). The experiment's logic lives in the
paper room (:func:`~kmtrf_core.evaluate.center_trajectory`,
:func:`~kmtrf_core.padding.padded_trajectory`,
:func:`~kmtrf_core.evaluate.trajectory_table`); this module only arranges it.
"""

from __future__ import annotations

import pandas as pd
import torch

from ..evaluate import center_trajectory, lloyd_loss_trajectory, trajectory_losses
from ..model import check_model
from ..padding import padded_trajectory
from ..tasks import FAMILIES, sample_tasks
from ..training import TrainConfig
from ..validation import check_int, check_table
from .uncertainty import geometric_mean

__all__ = ["eval_tasks", "geometric_matrix", "ratio_at", "task_ratios", "transfer_trajectories"]


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
        (:func:`~kmtrf_core.padding.pad_tasks`); a layer whose ``(d, k)``
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


def task_ratios(trajectories: dict, X: torch.Tensor, C: torch.Tensor) -> dict:
    """Per task, the ratio of each trajectory's k-means loss to Lloyd's after the same number of steps.

    The per-task values behind :func:`~kmtrf_core.evaluate.trajectory_table`'s ``ratio`` (its mean
    over tasks), for the intervals of :mod:`~kmtrf_core.book.uncertainty`.

    Parameters
    ----------
    trajectories : dict
        Label -> centers ``(T + 1, (S,) B, k, d)`` from the initial centers ``C``
        (:func:`transfer_trajectories`).
    X, C : torch.Tensor
        The tasks.

    Returns
    -------
    dict
        Label -> float64 array ``(T + 1, S, B)`` (``S = 1`` for a single layer); a
        task whose centers left the float range has ratio ``inf``.

    Examples
    --------
    >>> from kmtrf_core.lloyd import lloyd_trajectory
    >>> X, C = sample_tasks(5, 20, 2, 3, generator=0, dtype=torch.float64)
    >>> ratios = task_ratios({"lloyd": lloyd_trajectory(X, C, 2).centers}, X, C)["lloyd"]
    >>> ratios.shape, bool((abs(ratios - 1) < 1e-12).all())
    ((3, 1, 5), True)
    """
    if not isinstance(trajectories, dict) or not trajectories:
        raise ValueError("trajectories must be a non-empty dict label -> centers (T + 1, (S,) B, k, d)")
    out, reference = {}, None
    for label, centers in trajectories.items():
        if not isinstance(centers, torch.Tensor) or centers.dim() not in (4, 5) or centers.shape[-3:] != C.shape:
            raise ValueError(f"trajectories[{label!r}] must be centers (T + 1, (S,) B, k, d) for tasks of "
                             f"shape {tuple(C.shape)}")
        centers = centers if centers.dim() == 5 else centers.unsqueeze(1)
        steps = centers.shape[0] - 1
        if reference is None:
            reference = lloyd_loss_trajectory(X, C, steps)  # (T + 1, B)
        elif reference.shape[0] != steps + 1:
            raise ValueError("trajectories must all have the same number of steps")
        with torch.no_grad():  # an overflowed task's loss is inf (trajectory_losses)
            ratio = (trajectory_losses(X, centers.to(X.dtype)) / reference[:, None, :]).double()
        out[label] = torch.where(torch.isfinite(ratio), ratio, torch.full((), float("inf"), dtype=ratio.dtype)
                                 ).cpu().numpy()
    return out


def geometric_matrix(samples: dict, scheme: str, families=FAMILIES) -> pd.DataFrame:
    """One embedding's test x train family matrix of :func:`~kmtrf_core.book.uncertainty.geometric_mean`
    (Figure 8), the statistic :func:`~kmtrf_core.book.ch11_generalization.cell_verdicts` decides on
    (chapters 11 and 14); laid out as :func:`~kmtrf_core.evaluate.family_matrix`.

    >>> samples = {(a, b, "oh"): [[0.5, 2.0]] if a == b else [[1.0, 4.0]] for a in "xy" for b in "xy"}
    >>> geometric_matrix(samples, "oh", families=("x", "y")).values.tolist()
    [[1.0, 2.0], [2.0, 1.0]]
    """
    if missing := [(a, b, scheme) for a in families for b in families if (a, b, scheme) not in samples]:
        raise ValueError(f"samples lacks {len(missing)} (train family, test family, scheme) cells, e.g. {missing[0]}")
    return pd.DataFrame([[geometric_mean(samples[(train, test, scheme)]) for train in families] for test in families],
                        index=pd.Index(families, name="test"), columns=pd.Index(families, name="train_family"))
