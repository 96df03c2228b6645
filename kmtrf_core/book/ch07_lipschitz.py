"""Chapter 7 (``book/07_lipschitz.ipynb``): the verdict on the Lipschitz bound of Theorem 3.1.

The bound and the measured constants are the paper room's
(:mod:`kmtrf_core.lipschitz`); :func:`lipschitz_finding` turns the chapter's
two tables into the verdict of the claim ``lipschitz_bound``.
"""

from __future__ import annotations

import pandas as pd

from ..validation import check_table
from .claims import Finding, verdict

__all__ = ["lipschitz_finding"]


def lipschitz_finding(measured: pd.DataFrame, by_d: pd.DataFrame) -> Finding:
    """Are the measured constants under both bounds, and is OH's bound below BN's at every ``d``?

    Parameters
    ----------
    measured : pandas.DataFrame
        One row per measured setting with ``log10_measured``,
        ``log10_refined`` (the refined bound) and ``bound_holds`` (measured
        <= refined <= the paper's bound).
    by_d : pandas.DataFrame
        Indexed by ``d``, with ``"BN - OH (log10)"``, the difference of the bounds.

    Returns
    -------
    Finding
        For the claim ``lipschitz_bound``: one check each.

    Examples
    --------
    >>> measured = pd.DataFrame({"log10_measured": [0.5, 0.7], "log10_refined": [40.0, 52.0],
    ...                          "bound_holds": [True, True]})
    >>> by_d = pd.DataFrame({"BN - OH (log10)": [2.0, 1.0]}, index=[2, 4])
    >>> lipschitz_finding(measured, by_d).value
    "all 2 measured constants under both bounds: True (refined bound 39.5 to 51.3 orders of magnitude above); OH's bound below BN's at every d: True"
    """
    check_table(measured, "measured", ["log10_measured", "log10_refined", "bound_holds"])
    check_table(by_d, "by_d", ["BN - OH (log10)"])
    under = bool(measured.bound_holds.all())
    oh_smaller = bool((by_d["BN - OH (log10)"] > 0).all())
    looseness = measured.log10_refined - measured.log10_measured
    return Finding(f"all {len(measured)} measured constants under both bounds: {under} (refined bound "
                   f"{looseness.min():.1f} to {looseness.max():.1f} orders of magnitude above); "
                   f"OH's bound below BN's at every d: {oh_smaller}",
                   verdict(int(under) + int(oh_smaller), 2),
                   check="every measured constant under both bounds; OH's bound below BN's at every d")
