"""When a learned layer has finished learning: the flattening rule, and where the plateau ends.

At the paper's learning rate (0.01) the relative validation loss (Eq. 20)
sits on a plateau near 1.6-1.8 for one to two thousand steps before it drops
below one Lloyd step. A run that stops on the plateau measures the plateau,
not the layer. The book therefore trains every layer a claim rests on until
its validation curve has *flattened*, by one rule (:data:`FLAT_RULE`):

* the curve is the median over seeds of the relative validation loss at each
  validation step, averaged over the :data:`SMOOTHING` validations ending at a
  step;
* it has flattened at step ``s`` when that average moved by at most ``tol``
  (relative) between ``0.8 s`` and ``s``, the last fifth of the run;
* the rule is checked only from ``min_steps`` on: a plateau is flat too, so
  the minimum is set past the end of the plateau measured at these sizes
  (:mod:`kmtrf_core.book.catalog` says which value and why).

:func:`~kmtrf_core.training.train` applies the rule while training
(``TrainConfig.until_flat``); :func:`flattening` reports it afterwards.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

__all__ = ["FLAT_RULE", "FLAT_TOLERANCE", "SMOOTHING", "first_below", "flattening", "is_flat", "validation_curve"]

FLAT_TOLERANCE = 0.02
"""The relative change over the last fifth of a run below which its curve counts as flat."""

SMOOTHING = 3
"""Validations averaged at each end of the last fifth."""

WINDOW = 0.2
"""The share of the run (its last fifth) over which flatness is judged."""

FLAT_RULE = (
    "flattened = the median over seeds of the relative validation loss (Eq. 20), averaged over "
    f"{SMOOTHING} validations, moved by less than {{tol:.0%}} over the last fifth of the run; "
    "checked from min_steps on"
)
"""The rule in words, with ``{tol}`` to format (chapter captions and the catalog print it)."""


def validation_curve(history) -> pd.Series:
    """The median over seeds of the relative validation loss, per validation step.

    Parameters
    ----------
    history : pandas.DataFrame
        One run's history (columns ``step``, ``seed``, ``val_relative_loss``).

    Returns
    -------
    pandas.Series
        Indexed by step, sorted.

    Examples
    --------
    >>> history = pd.DataFrame({"step": [0, 0, 5, 5, 7, 7], "seed": [0, 1] * 3,
    ...     "val_relative_loss": [2.0, 4.0, 1.0, 3.0, math.nan, math.nan]})
    >>> validation_curve(history).to_dict()
    {0: 3.0, 5: 2.0}
    """
    validated = history.dropna(subset=["val_relative_loss"])
    return validated.groupby("step").val_relative_loss.median().sort_index()


def _smoothed_at(steps: np.ndarray, values: np.ndarray, upto: float) -> float:
    """The mean of the last :data:`SMOOTHING` values at steps ``<= upto`` (NaN if none)."""
    chosen = values[steps <= upto][-SMOOTHING:]
    return float(chosen.mean()) if len(chosen) else math.nan


def is_flat(steps, values, tol: float = FLAT_TOLERANCE, min_steps: int = 0) -> bool:
    """Whether a validation curve has flattened at its last step (the rule of this module).

    Parameters
    ----------
    steps : array-like of int
        Validation steps, increasing.
    values : array-like of float
        The curve (median over seeds) at those steps.
    tol : float
        Largest relative change over the last fifth that counts as flat.
    min_steps : int
        Not flat before this step.

    Returns
    -------
    bool

    Examples
    --------
    >>> steps = np.arange(0, 1501, 100)
    >>> plateau_then_drop = np.r_[[1.7] * 6, [1.2, 0.95, 0.92], [0.91] * 7]
    >>> is_flat(steps[:6], plateau_then_drop[:6])  # a plateau looks flat ...
    True
    >>> is_flat(steps[:6], plateau_then_drop[:6], min_steps=800)  # ... so the rule waits
    False
    >>> is_flat(steps[:11], plateau_then_drop[:11], min_steps=800)  # 1.023 -> 0.913: still moving
    False
    >>> is_flat(steps, plateau_then_drop, min_steps=800)  # 0.910 -> 0.910
    True
    """
    steps, values = np.asarray(steps, dtype=float), np.asarray(values, dtype=float)
    if len(steps) < 2 or steps[-1] < min_steps or not np.isfinite(values[-1]):
        return False
    last = steps[-1]
    if steps[0] > (1 - WINDOW) * last:
        return False
    before = _smoothed_at(steps, values, (1 - WINDOW) * last)
    now = _smoothed_at(steps, values, last)
    return bool(abs(now - before) <= tol * abs(before))


def first_below(steps, values, level: float = 1.0) -> float:
    """The first step at which the curve is below ``level`` (NaN if never).

    With ``level = 1`` this is where a learned layer first beats one Lloyd
    step on the validation tasks: the end of the plateau.

    >>> first_below([0, 100, 200, 300], [1.7, 1.6, 0.98, 0.9])
    200.0
    >>> first_below([0, 100], [1.7, 1.6])
    nan
    """
    steps, values = np.asarray(steps, dtype=float), np.asarray(values, dtype=float)
    below = np.nonzero(values < level)[0]
    return float(steps[below[0]]) if len(below) else math.nan


def flattening(history, by=(), tol: float = FLAT_TOLERANCE, min_steps: int = 0) -> pd.DataFrame:
    """Per run: how many steps it trained, its final curve value, whether it flattened, where it beat Lloyd.

    Parameters
    ----------
    history : pandas.DataFrame
        From :func:`~kmtrf_core.training.train` or :func:`~kmtrf_core.training.sweep`.
    by : tuple of str
        Columns that identify a run (empty: the whole history is one run).
    tol : float
        As in :func:`is_flat`.
    min_steps : int
        As in :func:`is_flat`.

    Returns
    -------
    pandas.DataFrame
        Columns ``steps``, ``final``, ``flattened``, ``below_lloyd_at``
        (:func:`first_below` at 1), one row per run, indexed by ``by``.

    Examples
    --------
    >>> history = pd.DataFrame({"scheme": "oh", "seed": 0, "step": np.arange(0, 1501, 100),
    ...     "val_relative_loss": np.r_[[1.7] * 6, [1.2, 0.95, 0.92], [0.91] * 7]})
    >>> flattening(history, by=("scheme",)).to_dict("records")
    [{'steps': 1500, 'final': 0.91, 'flattened': True, 'below_lloyd_at': 700.0}]
    """
    by = list(by)
    groups = history.groupby(by) if by else [((), history)]
    rows = []
    for key, run in groups:
        key = key if isinstance(key, tuple) else (key,)
        curve = validation_curve(run)
        steps, values = curve.index.to_numpy(), curve.to_numpy()
        rows.append(dict(zip(by, key), steps=int(run.step.max()), final=float(values[-1]),
                         flattened=is_flat(steps, values, tol, min_steps),
                         below_lloyd_at=first_below(steps, values)))
    table = pd.DataFrame(rows)
    return table.set_index(by) if by else table
