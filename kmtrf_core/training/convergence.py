"""When a learned layer has finished learning: the stop rule, and where the plateau ends.

At the paper's learning rate (0.01) the relative validation loss (Eq. 20)
first sits on a plateau above one Lloyd step and only later drops below it
(chapter 9 measures where, run by run). A run that stops on the plateau
measures the plateau, not the layer; a flatness test over a short window
cannot tell the two apart. The book therefore stops a run only by one rule
(:data:`STOP_RULE`, :func:`should_stop`):

* the curve is the median over seeds of the relative validation loss at each
  validation step, averaged over the :data:`SMOOTHING` validations ending at
  that step (:func:`smoothed`);
* the layer must have **beaten Lloyd**: the curve is below 1 at the step;
* and it must be **flat**: its best value so far improved by at most ``tol``
  (relative) over the last ``patience`` steps (:func:`is_flat`,
  :data:`PATIENCE` by default). Since the curve must also be below 1 at the
  step, a run whose median curve is still on the plateau above one Lloyd step
  is never stopped, however long the plateau lasts (one of a few seeds may
  still be on its own plateau when the median is below);
* the rule is checked only from ``min_steps`` on (for an annealed run, from
  the end of its schedule plus the patience:
  :attr:`~kmtrf_core.training.TrainConfig.earliest_stop`).

A run that never satisfies it trains to its cap (``TrainConfig.steps``).
Each run's reason for stopping (:data:`STOP_REASONS`) follows from its history
and config (:func:`stop_reason`), and :func:`flattening` reports it.
:func:`~kmtrf_core.training.train` applies the rule while training
(``TrainConfig.until_flat``).
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

__all__ = ["FLAT_TOLERANCE", "PATIENCE", "SMOOTHING", "STOP_REASONS", "STOP_RULE", "first_below", "flattening",
           "is_flat", "should_stop", "smoothed", "stop_reason", "validation_curve"]

FLAT_TOLERANCE = 0.02
"""The relative improvement of the best value over the patience below which a curve counts as flat."""

SMOOTHING = 3
"""Validations averaged at each step of the curve."""

PATIENCE = 2000
"""Steps without improvement (beyond the tolerance) before a run may stop. It need not outlast a plateau
(chapter 9 measures how long they last): the rule also needs the median over seeds below one Lloyd step,
so a run whose median is on the plateau trains on."""

STOP_RULE = (
    "stop once the median over seeds of the relative validation loss (Eq. 20), averaged over "
    f"{SMOOTHING} validations, is below 1 (beats Lloyd) and its best value improved by less than {{tol:.0%}} "
    "over the last {patience} steps; checked from min_steps on; otherwise train to the cap"
)
"""The rule in words, with ``{tol}`` and ``{patience}`` to format (chapter captions and the catalog print it)."""

STOP_REASONS = ("beat Lloyd, flat", "cap", "fixed budget")
"""Why a run ended: the stop rule held; it reached its cap without the rule holding; it had no rule."""


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


def smoothed(values) -> np.ndarray:
    """The curve averaged over the :data:`SMOOTHING` validations ending at each step (fewer at the start).

    >>> smoothed([3.0, 1.0, 2.0, 6.0]).tolist()
    [3.0, 2.0, 2.0, 3.0]
    """
    values = np.asarray(values, dtype=float)
    sums = np.cumsum(np.r_[0.0, values])
    idx = np.arange(1, len(values) + 1)
    lo = np.maximum(idx - SMOOTHING, 0)
    return (sums[idx] - sums[lo]) / (idx - lo)


def is_flat(steps, values, tol: float = FLAT_TOLERANCE, patience: int = PATIENCE) -> bool:
    """Whether the curve's best (smoothed) value improved by at most ``tol`` over the last ``patience`` steps.

    A plateau is flat too: :func:`should_stop` also asks that the layer beat Lloyd.

    Parameters
    ----------
    steps : array-like of int
        Validation steps, increasing.
    values : array-like of float
        The curve (median over seeds) at those steps.
    tol : float
        Largest relative improvement of the best value that counts as flat.
    patience : int
        The window, in steps; a curve shorter than that is not flat.

    Returns
    -------
    bool

    Examples
    --------
    >>> steps = np.arange(0, 3001, 100)
    >>> settled = np.where(steps < 500, 1.7, 0.9)
    >>> is_flat(steps, settled, patience=2000), is_flat(steps[:20], settled[:20], patience=2000)
    (True, False)
    """
    steps, values = np.asarray(steps, dtype=float), np.asarray(values, dtype=float)
    if len(steps) < 2 or not np.isfinite(values[-1]) or steps[-1] - steps[0] < patience:
        return False
    curve = smoothed(values)
    then = curve[steps <= steps[-1] - patience]
    if not np.isfinite(then).any():
        return False
    best_then, best_now = float(np.nanmin(then)), float(np.nanmin(curve))
    return bool(best_then - best_now <= tol * abs(best_then))


def should_stop(steps, values, tol: float = FLAT_TOLERANCE, patience: int = PATIENCE, min_steps: int = 0) -> bool:
    """The stop rule at the curve's last step: past ``min_steps``, below one Lloyd step, and flat.

    Parameters
    ----------
    steps, values, tol, patience
        As in :func:`is_flat`.
    min_steps : int
        Never before this step.

    Returns
    -------
    bool

    Examples
    --------
    >>> steps = np.arange(0, 5001, 100)
    >>> late_drop = np.where(steps < 2700, 1.7, 0.9)       # a plateau that ends at step 2700
    >>> should_stop(steps[:26], late_drop[:26], min_steps=2500)  # step 2500: flat, but on the plateau
    False
    >>> int(next(s for i, s in enumerate(steps) if should_stop(steps[:i + 1], late_drop[:i + 1], min_steps=2500)))
    4900
    >>> should_stop(steps, np.full(len(steps), 1.7), min_steps=2500)  # never beats Lloyd: train to the cap
    False
    """
    steps_arr, values_arr = np.asarray(steps, dtype=float), np.asarray(values, dtype=float)
    if len(steps_arr) < 1 or steps_arr[-1] < min_steps or not np.isfinite(values_arr[-1]):
        return False
    if not smoothed(values_arr)[-1] < 1.0:
        return False
    return is_flat(steps_arr, values_arr, tol, patience)


def stop_reason(steps, values, cap: int, until_flat: float | None, patience: int = PATIENCE,
                min_steps: int = 0) -> str:
    """Why a run ended (one of :data:`STOP_REASONS`), from its curve and its config's rule.

    Parameters
    ----------
    steps, values : array-like
        The run's validation curve (:func:`validation_curve`); its last step is where it ended.
    cap : int
        The most steps it could train (``TrainConfig.steps``).
    until_flat : float or None
        The rule's tolerance; ``None``: a fixed budget.
    patience, min_steps : int
        As in :func:`should_stop`.

    Examples
    --------
    >>> stop_reason([0, 100, 200], [1.7, 1.7, 1.7], cap=200, until_flat=0.02, patience=100)
    'cap'
    >>> stop_reason([0, 100, 200, 300, 400], [1.7, 0.9, 0.9, 0.9, 0.9], cap=500, until_flat=0.02, patience=100)
    'beat Lloyd, flat'
    >>> stop_reason([0, 100], [1.7, 1.6], cap=100, until_flat=None)
    'fixed budget'
    """
    if until_flat is None:
        return STOP_REASONS[2]
    steps = np.asarray(steps, dtype=float)
    if len(steps) and steps[-1] < cap and should_stop(steps, values, until_flat, patience, min_steps):
        return STOP_REASONS[0]
    return STOP_REASONS[1]


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


def flattening(history, by=(), tol: float = FLAT_TOLERANCE, min_steps: int = 0, patience: int = PATIENCE,
               cap: int | None = None, rule: bool = True) -> pd.DataFrame:
    """Per run: steps trained, final curve value, whether the stop rule held at its end, where it beat Lloyd, why it stopped.

    Parameters
    ----------
    history : pandas.DataFrame
        From :func:`~kmtrf_core.training.train` or :func:`~kmtrf_core.training.sweep`.
    by : tuple of str
        Columns that identify a run (empty: the whole history is one run).
    tol, patience, min_steps
        As in :func:`should_stop`.
    cap : int, optional
        The runs' cap (``TrainConfig.steps``): adds the column ``stopped`` (:func:`stop_reason`).
    rule : bool
        Whether the runs trained under the rule (``until_flat``); ``False``: ``stopped`` is "fixed budget".

    Returns
    -------
    pandas.DataFrame
        Columns ``steps``, ``final``, ``flattened`` (:func:`should_stop` at the last step: below Lloyd
        and flat), ``below_lloyd_at`` (:func:`first_below` at 1), and ``stopped`` with ``cap``; one row
        per run, indexed by ``by``.

    Examples
    --------
    >>> history = pd.DataFrame({"scheme": "oh", "seed": 0, "step": np.arange(0, 3001, 100),
    ...     "val_relative_loss": np.r_[[1.7] * 6, [1.2, 0.95, 0.92], [0.91] * 22]})
    >>> flattening(history, by=("scheme",), cap=5000).to_dict("records")
    [{'steps': 3000, 'final': 0.91, 'flattened': True, 'below_lloyd_at': 700.0, 'stopped': 'beat Lloyd, flat'}]
    """
    by = list(by)
    groups = history.groupby(by) if by else [((), history)]
    keys, rows = [], []
    for key, run in groups:
        keys.append(key if isinstance(key, tuple) else (key,))
        curve = validation_curve(run)
        steps, values = curve.index.to_numpy(), curve.to_numpy()
        row = dict(steps=int(run.step.max()), final=float(values[-1]),
                   flattened=should_stop(steps, values, tol, patience, min_steps),
                   below_lloyd_at=first_below(steps, values))
        if cap is not None:
            row["stopped"] = stop_reason(steps, values, cap, tol if rule else None, patience, min_steps)
        rows.append(row)
    table = pd.DataFrame(rows)
    if by:  # the index carries the run's key, even where a key is named like a column (a grid over "steps")
        table.index = pd.MultiIndex.from_tuples(keys, names=by) if len(by) > 1 else pd.Index(
            [key[0] for key in keys], name=by[0])
    return table
