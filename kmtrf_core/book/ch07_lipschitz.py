"""Chapter 7 (``book/07_lipschitz.ipynb``): the verdict on the Lipschitz bound of Theorem 3.1.

The bound and the measured constants are the paper room's
(:mod:`kmtrf_core.lipschitz`). This module runs and reads the measurements:

* :func:`measure_constants`: the measured constants of independent random
  searches next to both bounds, per ``(d, scheme, omega)``;
* :func:`best_constants`: one row per setting (the largest measurement, the
  best lower bound, and the spread over searches);
* :func:`lipschitz_finding`: the verdict of the claim ``lipschitz_bound``.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import torch

from ..lipschitz import empirical_lipschitz, lipschitz_bound
from ..tasks import sample_tasks
from ..validation import check_int, check_table
from .claims import Finding, verdict
from .profiles import LipschitzSizes
from .uncertainty import combine, range_ahead

__all__ = ["best_constants", "lipschitz_finding", "measure_constants"]

SCHEMES = ("oh", "bn")
OMEGAS = ("ne", "l2")


def measure_constants(sizes: LipschitzSizes, searches: int | None = None, seed: int = 0,
                      tau: float = 0.1, gamma: float = 1.0) -> pd.DataFrame:
    """Measured Lipschitz constants of independent random searches, with both bounds (chapter 7).

    Per ``d`` of ``sizes.emp_d_grid``, ``sizes.emp_tasks`` normal tasks (``emp_n`` points,
    ``emp_k`` centers, float64, drawn from ``d``); per embedding (OH, BN) and regularized min
    (NE, L2), ``searches`` runs of :func:`~kmtrf_core.lipschitz.empirical_lipschitz` with
    ``sizes.pairs`` parameter pairs each, every run from its own generator. A run's measurement
    is the larger of its two estimates; both are lower bounds on the true constant, so a run
    says nothing above it, and the spread over runs is how far one search's answer can move.

    Parameters
    ----------
    sizes : LipschitzSizes
        ``profile.chapter("lipschitz")``.
    searches : int, optional
        Independent searches per setting (default ``sizes.searches``).
    seed : int
        Seeds the searches' generators.
    tau, gamma : float
        The setting (Theorem 3.1 with ``Gamma1 = Gamma2 = 1``).

    Returns
    -------
    pandas.DataFrame
        One row per ``(d, scheme, omega, search)``: ``quotient``, ``gradient``, ``log10_measured``,
        ``log10_refined`` and ``log10_paper`` (the two bounds, ``combine="sum"``) and
        ``bound_holds`` (measured <= refined <= paper).

    Examples
    --------
    >>> from kmtrf_core.book.profiles import get_profile
    >>> sizes = get_profile("quick").chapter("lipschitz")
    >>> table = measure_constants(sizes, searches=2)
    >>> len(table) == len(sizes.emp_d_grid) * 2 * 2 * 2, bool(table.bound_holds.all())
    (True, True)
    """
    searches = sizes.searches if searches is None else check_int(searches, "searches")
    rows = []
    for d in sizes.emp_d_grid:
        X, C = sample_tasks(sizes.emp_tasks, sizes.emp_n, d, sizes.emp_k, generator=d, dtype=torch.float64)
        for s, scheme in enumerate(SCHEMES):
            for o, omega in enumerate(OMEGAS):
                setting = dict(n=sizes.emp_n, k=sizes.emp_k, d=d, scheme=scheme, gamma=gamma, tau=tau,
                               omega=omega, combine="sum")
                paper, refined = lipschitz_bound(**setting), lipschitz_bound(**setting, refined=True)
                for search in range(searches):
                    state = np.random.SeedSequence([seed, d, s, o, search]).generate_state(1)[0]
                    est = empirical_lipschitz(X, C, scheme, gamma=gamma, tau=tau, omega=omega, pairs=sizes.pairs,
                                              generator=torch.Generator().manual_seed(int(state)))
                    measured = max(est["quotient"], est["gradient"])
                    rows.append(dict(d=d, scheme=scheme, omega=omega, search=search, quotient=est["quotient"],
                                     gradient=est["gradient"], log10_measured=math.log10(measured),
                                     log10_refined=refined.log10_alpha, log10_paper=paper.log10_alpha,
                                     bound_holds=math.log(measured) <= refined.log_alpha <= paper.log_alpha))
    return pd.DataFrame(rows)


def best_constants(measured: pd.DataFrame) -> pd.DataFrame:
    """One row per ``(d, scheme, omega)`` of :func:`measure_constants`: the best lower bound and the spread.

    Parameters
    ----------
    measured : pandas.DataFrame
        From :func:`measure_constants` (one row per setting and search).

    Returns
    -------
    pandas.DataFrame
        ``quotient``, ``gradient`` and ``log10_measured``: the largest over the searches (the best
        lower bound found); ``log10_lowest``: the smallest search's; the two bounds; ``bound_holds``
        for every search; ``searches``.

    Examples
    --------
    >>> measured = pd.DataFrame({"d": 2, "scheme": "oh", "omega": "l2", "search": [0, 1], "quotient": [1.0, 3.0],
    ...     "gradient": [2.0, 1.0], "log10_measured": [0.3, 0.5], "log10_refined": 9.0, "log10_paper": 12.0,
    ...     "bound_holds": True})
    >>> best = best_constants(measured)
    >>> best[["log10_measured", "log10_lowest"]].values.tolist(), best.searches.tolist()
    ([[0.5, 0.3]], [2])
    """
    check_table(measured, "measured", ["d", "scheme", "omega", "quotient", "gradient", "log10_measured",
                                       "log10_refined", "log10_paper", "bound_holds"])
    grouped = measured.groupby(["d", "scheme", "omega"], sort=False)
    return pd.DataFrame({
        "quotient": grouped.quotient.max(), "gradient": grouped.gradient.max(),
        "log10_measured": grouped.log10_measured.max(), "log10_lowest": grouped.log10_measured.min(),
        "log10_refined": grouped.log10_refined.first(), "log10_paper": grouped.log10_paper.first(),
        "bound_holds": grouped.bound_holds.all(), "searches": grouped.size(),
    }).reset_index()


def lipschitz_finding(measured: pd.DataFrame, by_d: pd.DataFrame) -> Finding:
    """Are the measured constants under both bounds, is OH's bound below BN's, and do the measurements agree?

    The bound's ordering (OH below BN) is a property of the formula; the third check asks whether
    the measured constants (lower bounds on the true ones, :func:`~kmtrf_core.lipschitz.empirical_lipschitz`)
    order the same way, OH's below BN's, in every measured ``(omega, d)``. With several searches
    per setting (a ``search`` column, :func:`measure_constants`) the order counts only when every
    OH search is below every BN search; where the two ranges overlap it is "inconclusive"
    (:func:`~kmtrf_core.book.uncertainty.range_ahead`). With one row per setting it is read on
    the points.

    Parameters
    ----------
    measured : pandas.DataFrame
        One row per measured setting, or per setting and search, with ``d``, ``scheme``
        (``oh``/``bn``), ``omega``, ``log10_measured``, ``log10_refined`` (the refined bound) and
        ``bound_holds`` (measured <= refined <= the paper's bound).
    by_d : pandas.DataFrame
        Indexed by ``d``, with ``"BN - OH (log10)"``, the difference of the bounds.

    Returns
    -------
    Finding
        For the claim ``lipschitz_bound``: three checks
        (:func:`~kmtrf_core.book.uncertainty.combine`).

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
    measured under both bounds: True; OH's bound below BN's at every d: True; measured OH below BN in 1 of 2 settings, BN below OH in 1 (one search each; BN - OH of the largest -0.05 to +0.20 in log10) -> partly
    """
    check_table(measured, "measured", ["d", "scheme", "omega", "log10_measured", "log10_refined", "bound_holds"])
    check_table(by_d, "by_d", ["BN - OH (log10)"])
    if not np.isfinite(measured.log10_measured.to_numpy(dtype=float)).all():
        raise ValueError("measured must hold finite log10_measured values (no NaN or inf)")
    under = bool(measured.bound_holds.all())
    oh_smaller = bool((by_d["BN - OH (log10)"] > 0).all())
    spread = measured.groupby(["omega", "d", "scheme"]).log10_measured.agg(["min", "max", "size"])
    schemes = spread.index.to_frame(index=False).groupby(["omega", "d"]).scheme.agg(set)
    missing = [(omega, d) for (omega, d), present in schemes.items() if not {"oh", "bn"} <= present]
    if missing:
        raise ValueError(f"measured must hold OH and BN rows for every (omega, d); not for {missing}")
    outcomes = []
    for (omega, d), part in spread.groupby(level=["omega", "d"]):
        oh, bn = part.loc[(omega, d, "oh")], part.loc[(omega, d, "bn")]
        outcomes.append(range_ahead((oh["min"], oh["max"]), (bn["min"], bn["max"]), 0.0))
    gap = spread["max"].xs("bn", level="scheme") - spread["max"].xs("oh", level="scheme")
    ordered, reversed_, open_ = (outcomes.count(v) for v in ("reproduced", "not reproduced", "inconclusive"))
    order = combine(outcomes)
    looseness = measured.log10_refined - measured.log10_measured
    searches = int(spread["size"].min())
    each = "one search each" if searches == 1 else f"{searches} searches each"
    outcome = combine([verdict(under), verdict(oh_smaller), order])
    measured_text = (f"measured OH below BN in {ordered} of {len(outcomes)} settings"
                     + (f", BN below OH in {reversed_}" if reversed_ else "")
                     + (f", {open_} with overlapping ranges" if open_ else "")
                     + f" ({each}; BN - OH of the largest {gap.min():+.2f} to {gap.max():+.2f} in log10)")
    return Finding(f"all {len(measured)} measured constants under both bounds: {under} (refined bound "
                   f"{looseness.min():.1f} to {looseness.max():.1f} orders of magnitude above); "
                   f"OH's bound below BN's at every d: {oh_smaller}; {measured_text}", outcome,
                   check="every measured constant under both bounds; OH's bound below BN's at every d; the measured "
                         "constants in the same order (OH below BN) in every setting, every OH search below every "
                         "BN search",
                   report=f"measured under both bounds: {under}; OH's bound below BN's at every d: {oh_smaller}; "
                          f"{measured_text} -> {outcome}")
