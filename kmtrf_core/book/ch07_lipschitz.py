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
    """Are the measured constants under both bounds, is OH's bound below BN's, and do the measurements agree?

    The bound's ordering (OH below BN) is a property of the formula; the third check asks whether
    the measured constants (lower bounds on the true ones, :func:`~kmtrf_core.lipschitz.empirical_lipschitz`)
    order the same way, OH's below BN's, in every measured ``(omega, d)``.

    Parameters
    ----------
    measured : pandas.DataFrame
        One row per measured setting with ``d``, ``scheme`` (``oh``/``bn``), ``omega``,
        ``log10_measured``, ``log10_refined`` (the refined bound) and ``bound_holds``
        (measured <= refined <= the paper's bound).
    by_d : pandas.DataFrame
        Indexed by ``d``, with ``"BN - OH (log10)"``, the difference of the bounds.

    Returns
    -------
    Finding
        For the claim ``lipschitz_bound``: three checks.

    Examples
    --------
    >>> measured = pd.DataFrame({"d": [2, 2, 4, 4], "scheme": ["oh", "bn"] * 2, "omega": "l2",
    ...                          "log10_measured": [0.5, 0.7, 0.6, 0.55], "log10_refined": [40.0, 52.0, 41, 53],
    ...                          "bound_holds": True})
    >>> by_d = pd.DataFrame({"BN - OH (log10)": [2.0, 1.0]}, index=[2, 4])
    >>> finding = lipschitz_finding(measured, by_d)
    >>> finding.verdict
    'partly'
    >>> print(finding.report)
    measured under both bounds: True; OH's bound below BN's at every d: True; measured OH below BN in 1 of 2 settings (BN - OH -0.05 to +0.20 in log10) -> partly
    """
    check_table(measured, "measured", ["d", "scheme", "omega", "log10_measured", "log10_refined", "bound_holds"])
    check_table(by_d, "by_d", ["BN - OH (log10)"])
    under = bool(measured.bound_holds.all())
    oh_smaller = bool((by_d["BN - OH (log10)"] > 0).all())
    pivot = measured.pivot_table(index=["omega", "d"], columns="scheme", values="log10_measured")
    gap = pivot["bn"] - pivot["oh"]
    ordered = int((gap > 0).sum())
    agrees = ordered == len(gap)
    looseness = measured.log10_refined - measured.log10_measured
    outcome = verdict(int(under) + int(oh_smaller) + int(agrees), 3)
    measured_text = (f"measured OH below BN in {ordered} of {len(gap)} settings (BN - OH {gap.min():+.2f} to "
                     f"{gap.max():+.2f} in log10)")
    return Finding(f"all {len(measured)} measured constants under both bounds: {under} (refined bound "
                   f"{looseness.min():.1f} to {looseness.max():.1f} orders of magnitude above); "
                   f"OH's bound below BN's at every d: {oh_smaller}; {measured_text}", outcome,
                   check="every measured constant under both bounds; OH's bound below BN's at every d; the measured "
                         "constants in the same order (OH below BN) in every setting",
                   report=f"measured under both bounds: {under}; OH's bound below BN's at every d: {oh_smaller}; "
                          f"{measured_text} -> {outcome}")
