"""Chapter 6 (``book/06_smoothing.ipynb``): the verdict on the bound of Proposition H.1.

The regularized mins and their bounds are the paper room's
(:mod:`kmtrf_core.objectives`); the chapter searches for the largest weight
gap, and :func:`bound_finding` turns the search into the verdict of the claim
``smoothing_bound``.
"""

from __future__ import annotations

import pandas as pd

from ..validation import check_table
from .claims import Finding, verdict

__all__ = ["bound_finding"]


def bound_finding(gaps: pd.DataFrame, tau: float = 0.1) -> Finding:
    """Does the bound of Proposition H.1 hold in every ``(k, Omega)`` case, and how close is the L2 bound?

    Parameters
    ----------
    gaps : pandas.DataFrame
        One row per ``(k, omega)`` with ``bound`` (Proposition H.1),
        ``search_max`` (the largest gap found by ascent) and ``bound_holds``.
    tau : float
        The penalty of the search, for the text.

    Returns
    -------
    Finding
        For the claim ``smoothing_bound``.

    Examples
    --------
    >>> gaps = pd.DataFrame({"omega": ["ne", "l2"], "bound": [1.2, 0.8], "search_max": [0.7, 0.79],
    ...                      "bound_holds": [True, True]})
    >>> finding = bound_finding(gaps)
    >>> finding.verdict, finding.value
    ('reproduced', 'bound holds in 2 of 2 (k, Omega) cases at tau = 0.1; the L2 bound is attained up to a factor 0.9875')
    """
    check_table(gaps, "gaps", ["omega", "bound", "search_max", "bound_holds"])
    l2 = gaps[gaps.omega == "l2"]
    attained = (l2.search_max / l2.bound).max()
    holds = int(gaps.bound_holds.sum())
    return Finding(f"bound holds in {holds} of {len(gaps)} (k, Omega) cases at tau = {tau}; "
                   f"the L2 bound is attained up to a factor {attained:.4f}",
                   verdict(holds, len(gaps)), check="the largest weight gap found stays under the bound, every case")
