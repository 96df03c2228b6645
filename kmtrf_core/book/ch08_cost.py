"""Chapter 8 (``book/08_cost.ipynb``): the verdict on BN's speed at large ``k``.

The counts and measurements are the cost room's (:mod:`kmtrf_core.cost`);
:func:`speedup_range` bounds a measured speedup by what any two of its timed repetitions
allow, and :func:`speedup_finding` turns the measured Table 1, with those ranges, into the
verdict of the claim ``cost_speedup``.
"""

from __future__ import annotations

import pandas as pd

from ..validation import check_table
from .claims import Finding

__all__ = ["PAPER_FRACTION", "speedup_finding", "speedup_range"]


PAPER_FRACTION = 0.75
"""How much of the paper's forward speedup (Table 1) ours must reach at the same ``k`` to count as reproduced."""


def speedup_range(raw: pd.DataFrame, metric: str = "forward", scheme: str = "bn", baseline: str = "oh",
                  by: str = "k") -> pd.DataFrame:
    """The range of ``baseline`` time over ``scheme`` time that the timed repetitions allow, per ``by``.

    The low end pairs the baseline's fastest repetition with the scheme's slowest, the high end
    the other way round, so every ratio of one repetition of each lies inside. It is the
    uncertainty of a timing ratio on a shared machine, where other work only adds time.

    Parameters
    ----------
    raw : pandas.DataFrame
        From :func:`~kmtrf_core.cost.measure_grid`: one row per (grid point, scheme) with
        ``{metric}_min_ms`` and ``{metric}_max_ms``.
    metric : {"forward", "backward", "eval"}
        The timed phase.
    scheme, baseline : str
        The schemes whose ratio ``baseline / scheme`` is bounded.
    by : str
        The column naming a grid point (one value per row of each scheme).

    Returns
    -------
    pandas.DataFrame
        Indexed by ``by``: ``low`` and ``high``.

    Examples
    --------
    >>> raw = pd.DataFrame({"k": [1000, 1000], "scheme": ["oh", "bn"], "forward_min_ms": [100.0, 8.0],
    ...                     "forward_max_ms": [120.0, 10.0]})
    >>> speedup_range(raw).loc[1000].tolist()
    [10.0, 15.0]
    """
    low_column, high_column = f"{metric}_min_ms", f"{metric}_max_ms"
    check_table(raw, "raw", [by, "scheme", low_column, high_column])
    sides = {}
    for name in (scheme, baseline):
        part = raw[raw.scheme == name]
        if part.empty or part[by].duplicated().any():
            raise ValueError(f"raw must hold exactly one row of scheme {name!r} per {by}, got {len(part)} rows")
        sides[name] = part.set_index(by)
    both = sides[scheme].index.intersection(sides[baseline].index)
    if both.empty:
        raise ValueError(f"raw has no {by} measured for both {baseline!r} and {scheme!r}")
    fast, slow = sides[scheme].loc[both], sides[baseline].loc[both]
    return pd.DataFrame({"low": slow[low_column] / fast[high_column], "high": slow[high_column] / fast[low_column]})


def speedup_finding(measured: pd.DataFrame, paper: pd.DataFrame, d: int, n: int, device: str,
                    fraction: float = PAPER_FRACTION, ranges: pd.DataFrame | None = None) -> Finding:
    """Does BN's forward pass reach ``fraction`` of the paper's speedup over OH at the largest shared ``k``?

    Parameters
    ----------
    measured : pandas.DataFrame
        Our Table 1, indexed by ``k``: ``forward_speedup``,
        ``backward_speedup`` (OH time / BN time) and ``memory_reduction_pct``.
    paper : pandas.DataFrame
        The paper's Table 1 indexed by ``k`` with ``forward_speedup``.
    d, n : int
        The sizes of the measurement, for the text.
    device : str
        Where it was measured, for the text.
    fraction : float
        The share of the paper's speedup to reach (:data:`PAPER_FRACTION`).
    ranges : pandas.DataFrame, optional
        From :func:`speedup_range` (forward): the verdict then rests on the whole range at that
        ``k`` instead of the one value, and the value shows it.

    Returns
    -------
    Finding
        For the claim ``cost_speedup``: reproduced at ``fraction`` of the
        paper's number or more, partly when BN is faster but by less, not
        reproduced when it is not faster. With ``ranges``, each of these
        needs the whole range on its side of the threshold it names; a range
        across a threshold is inconclusive.

    Examples
    --------
    >>> measured = pd.DataFrame({"forward_speedup": [1.0, 9.8], "backward_speedup": [1.0, 8.1],
    ...                          "memory_reduction_pct": [1.0, 55.0]}, index=[6, 1000])
    >>> paper = pd.DataFrame({"forward_speedup": [0.88, 12.14]}, index=[6, 1000])
    >>> finding = speedup_finding(measured, paper, 32, 1024, "cpu")
    >>> finding.verdict, finding.value
    ('reproduced', "forward 9.80x (81% of the paper's 12.14x), backward 8.10x, memory -55% at k = 1000 (d = 32, n = 1024, cpu)")
    >>> speedup_finding(measured.assign(forward_speedup=[1.0, 4.0]), paper, 32, 1024, "cpu").verdict
    'partly'
    >>> ranges = pd.DataFrame({"low": [0.8, 8.5], "high": [1.2, 11.0]}, index=[6, 1000])
    >>> finding = speedup_finding(measured, paper, 32, 1024, "cpu", ranges=ranges)
    >>> finding.verdict, finding.value.split(",")[0]
    ('inconclusive', "forward 9.80x (81% of the paper's 12.14x; 8.50x to 11.00x over the repetitions)")
    """
    check_table(measured, "measured", ["forward_speedup", "backward_speedup", "memory_reduction_pct"])
    check_table(paper, "paper", ["forward_speedup"])
    shared = sorted(set(measured.index) & set(paper.index))
    if not shared:
        raise ValueError(f"measured and paper share no k (measured {sorted(measured.index)}, paper "
                         f"{sorted(paper.index)})")
    k = int(shared[-1])
    top, theirs = measured.loc[k], float(paper.loc[k, "forward_speedup"])
    speedup, target = float(top.forward_speedup), fraction * theirs
    low = high = speedup
    spread = ""
    if ranges is not None:
        check_table(ranges, "ranges", ["low", "high"])
        if k not in ranges.index:
            raise ValueError(f"ranges has no row for k = {k} (its k: {sorted(ranges.index)})")
        low, high = float(ranges.loc[k, "low"]), float(ranges.loc[k, "high"])
        if not low <= speedup <= high:
            raise ValueError(f"ranges at k = {k} ({low:.3g} to {high:.3g}) must hold the measured {speedup:.3g}")
        spread = f"; {low:.2f}x to {high:.2f}x over the repetitions"
    outcome = ("reproduced" if low >= target else "not reproduced" if high <= 1
               else "partly" if low > 1 and high < target else "inconclusive")
    return Finding(f"forward {speedup:.2f}x ({speedup / theirs:.0%} of the paper's {theirs:.2f}x{spread}), backward "
                   f"{top.backward_speedup:.2f}x, memory -{top.memory_reduction_pct:.0f}% at k = {k} "
                   f"(d = {d}, n = {n}, {device})", outcome,
                   check=f"BN's forward speedup over OH at k = {k} at least {fraction:.0%} of the paper's "
                         f"{theirs:.2f}x (faster but less: partly)"
                         + (", the whole range over the timed repetitions on its side" if ranges is not None else ""))
