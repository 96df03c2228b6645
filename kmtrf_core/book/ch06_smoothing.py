"""Chapter 6 (``book/06_smoothing.ipynb``): the verdict on the bound of Proposition H.1, and the order of two gaps.

The regularized mins and their bounds are the paper room's
(:mod:`kmtrf_core.objectives`); the chapter searches for the largest weight
gap, and :func:`bound_finding` turns the search into the verdict of the claim
``smoothing_bound``. :func:`gap_order` decides, per ``tau``, which of two
smoothing gaps (L2 against NE, or one family against another) is smaller on
average over tasks, on a 95% interval (:func:`~kmtrf_core.book.uncertainty.compare`).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from ..validation import check_table
from .claims import Finding, verdict
from .uncertainty import compare

__all__ = ["bound_finding", "gap_order"]


def bound_finding(gaps: pd.DataFrame, tau: float = 0.1) -> Finding:
    """Does the bound of Proposition H.1 hold in every ``(k, Omega)`` case, and how close is the L2 bound?

    How close the L2 bound is attained is read per ``k`` as the largest gap
    found (random distance vectors or ascent, whichever is larger) over the
    bound; the value states the smallest of these over ``k`` (the factor up to
    which the bound is attained at *every* ``k``), the ``k`` where it is, and
    the largest.

    Parameters
    ----------
    gaps : pandas.DataFrame
        One row per ``(k, omega)`` with ``bound`` (Proposition H.1),
        ``random_max`` (the largest gap over random distance vectors),
        ``search_max`` (the largest gap found by ascent) and ``bound_holds``;
        at least one row with ``omega == "l2"``.
    tau : float
        The penalty of the search, for the text.

    Returns
    -------
    Finding
        For the claim ``smoothing_bound``.

    Examples
    --------
    >>> gaps = pd.DataFrame({"k": [2, 2, 4, 4], "omega": ["ne", "l2", "ne", "l2"], "bound": [1.2, 0.8, 1.7, 0.9],
    ...                      "random_max": [0.7, 0.8, 0.8, 0.85], "search_max": [0.7, 0.79, 0.86, 0.88],
    ...                      "bound_holds": [True, True, True, True]})
    >>> finding = bound_finding(gaps)
    >>> finding.verdict
    'reproduced'
    >>> print(finding.value)
    bound holds in 4 of 4 (k, Omega) cases at tau = 0.1; the L2 bound is attained up to a factor 0.9778 at every k (the largest gap found over the bound: 0.9778 at k = 4 to 1.0000 at k = 2)
    """
    check_table(gaps, "gaps", ["k", "omega", "bound", "random_max", "search_max", "bound_holds"])
    l2 = gaps[gaps.omega == "l2"]
    if l2.empty:
        raise ValueError(f"gaps must have a row with omega == 'l2', got omegas {sorted(set(gaps.omega))}")
    reached = (l2[["random_max", "search_max"]].max(axis=1) / l2.bound).to_numpy()  # per k
    low, high = int(np.argmin(reached)), int(np.argmax(reached))
    holds = int(gaps.bound_holds.sum())
    return Finding(f"bound holds in {holds} of {len(gaps)} (k, Omega) cases at tau = {tau}; "
                   f"the L2 bound is attained up to a factor {reached[low]:.4f} at every k (the largest gap found "
                   f"over the bound: {reached[low]:.4f} at k = {l2.k.iloc[low]} to {reached[high]:.4f} at "
                   f"k = {l2.k.iloc[high]})",
                   verdict(holds, len(gaps)), check="the largest weight gap found stays under the bound, every case")


def gap_order(first: dict, second: dict, names=("first", "second"), *, paired: bool) -> pd.DataFrame:
    """Per ``tau``, which of two smoothing gaps is smaller on average over tasks, on a 95% interval.

    Parameters
    ----------
    first, second : dict
        ``tau -> per-task gaps`` ``(B,)`` (a task's ``L~ - L``, e.g.
        ``smoothing_gap(X, C, omega, tau).sum(-1)``), the same ``tau`` in both.
    names : (str, str)
        What to call ``first`` and ``second`` in the column ``smaller``.
    paired : bool
        ``True`` when both were measured on the same tasks and centers (L2
        against NE), ``False`` for different tasks (one family against
        another); see :func:`~kmtrf_core.book.uncertainty.compare`.

    Returns
    -------
    pandas.DataFrame
        Indexed by ``tau``: ``difference`` (mean gap of ``first`` minus that of
        ``second``), ``low``, ``high`` (its 95% bootstrap interval over tasks)
        and ``smaller``: the name whose mean gap is smaller where the interval
        excludes 0, ``"inconclusive"`` where it contains 0.

    Examples
    --------
    >>> rng = np.random.default_rng(0)
    >>> base = {tau: tau * (1 + 0.1 * rng.standard_normal(64)) for tau in (0.1, 1.0)}
    >>> below = {0.1: base[0.1] * 0.5, 1.0: base[1.0] + 0.001 * rng.standard_normal(64)}
    >>> gap_order(below, base, ("L2", "NE"), paired=True).smaller.tolist()
    ['L2', 'inconclusive']
    >>> gap_order(base, below, ("L2", "NE"), paired=True).smaller.tolist()
    ['NE', 'inconclusive']
    """
    if sorted(first) != sorted(second) or not first:
        raise ValueError(f"first and second must hold the same taus, got {sorted(first)} and {sorted(second)}")
    if len(names) != 2 or not all(isinstance(name, str) for name in names):
        raise ValueError(f"names must be two strings, got {names!r}")
    rows = []
    for tau in first:
        for name, gaps in (("first", first[tau]), ("second", second[tau])):
            if not np.isfinite(np.asarray(gaps, dtype=float)).all():
                raise ValueError(f"{name}[{tau!r}] must be finite per-task gaps")
        check = compare(first[tau], second[tau], 0.0, paired=paired)
        smaller = {"reproduced": names[0], "not reproduced": names[1]}.get(check.verdict, "inconclusive")
        rows.append(dict(tau=tau, difference=check.difference, low=check.low, high=check.high, smaller=smaller))
    return pd.DataFrame(rows).set_index("tau")
