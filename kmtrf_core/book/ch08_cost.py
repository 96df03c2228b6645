"""Chapter 8 (``book/08_cost.ipynb``): the verdict on BN's speed at large ``k``.

The counts and measurements are the cost room's (:mod:`kmtrf_core.cost`);
:func:`speedup_range` bounds a measured speedup by what any two of its timed repetitions
allow, and :func:`speedup_finding` turns the measured Table 1, with those ranges, into the
verdict of the claim ``cost_speedup``. The chapter's own claims table reads the same ranges
through :func:`range_above`, :func:`ranges_above`, :func:`range_within` and :func:`ranges_grow`:
each says ``True`` or ``False`` only when the whole range is on one side, and ``"inconclusive"``
otherwise. The peak memory is measured several times too, and read the same way
(:func:`speedup_range` with ``metric="peak"``, :func:`kernel_memory_lines`).
"""

from __future__ import annotations

import pandas as pd

from ..validation import check_table
from .claims import Finding
from .uncertainty import range_ahead

__all__ = ["PAPER_FRACTION", "kernel_memory_lines", "range_above", "range_within", "ranges_above", "ranges_grow",
           "speedup_finding", "speedup_range"]


PAPER_FRACTION = 0.75
"""How much of the paper's forward speedup (Table 1) ours must reach at the same ``k`` to count as reproduced."""


def speedup_range(raw: pd.DataFrame, metric: str = "forward", scheme: str = "bn", baseline: str = "oh",
                  by: str = "k") -> pd.DataFrame:
    """The range of ``baseline`` time over ``scheme`` time that the timed repetitions allow, per ``by``.

    The low end pairs the baseline's fastest repetition with the scheme's slowest, the high end
    the other way round, so every ratio of one repetition of each lies inside. It is the
    uncertainty of a timing ratio on a shared machine, where other work only adds time. With
    ``metric="peak"`` the same for the peak memory of a training step over its repeated
    measurements (``memory_repeats`` of :func:`~kmtrf_core.cost.measure_grid`): above 1 where
    ``scheme`` needs less, and BN's reduction in percent is ``100 (1 - 1 / ratio)``.

    Parameters
    ----------
    raw : pandas.DataFrame
        From :func:`~kmtrf_core.cost.measure_grid`: one row per (grid point, scheme) with
        ``{metric}_min_ms`` and ``{metric}_max_ms`` (``peak_min_mb`` and ``peak_max_mb`` for memory).
    metric : {"forward", "backward", "eval", "peak"}
        The timed phase, or the peak memory.
    scheme, baseline : str
        The schemes whose ratio ``baseline / scheme`` is bounded.
    by : str or list of str
        The column(s) naming a grid point (one row of each scheme per grid point).

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
    >>> grid = pd.DataFrame({"d": [2, 2, 4, 4], "k": [6, 6, 6, 6], "scheme": ["oh", "bn", "oh", "bn"],
    ...                      "forward_min_ms": [1.0, 1.0, 2.0, 1.0], "forward_max_ms": [1.5, 1.2, 2.2, 1.1]})
    >>> speedup_range(grid, by=["d", "k"]).round(2).values.tolist()
    [[0.83, 1.5], [1.82, 2.2]]
    >>> peaks = pd.DataFrame({"k": [6, 6], "scheme": ["oh", "bn"], "peak_min_mb": [36.3, 36.1],
    ...                       "peak_max_mb": [36.4, 36.2]})
    >>> speedup_range(peaks, "peak").round(4).loc[6].tolist()  # BN below OH in every pair of measurements
    [1.0028, 1.0083]
    """
    unit = "mb" if metric == "peak" else "ms"
    low_column, high_column = f"{metric}_min_{unit}", f"{metric}_max_{unit}"
    keys = [by] if isinstance(by, str) else list(by)
    check_table(raw, "raw", [*keys, "scheme", low_column, high_column])
    by = keys[0] if len(keys) == 1 else keys
    sides = {}
    for name in (scheme, baseline):
        part = raw[raw.scheme == name]
        if part.empty or part.duplicated(subset=keys).any():
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
        needs the whole range on its side of the threshold it names: a range
        above 1 that reaches into the target is partly (faster holds, the
        fraction is undecided), a range across 1 is inconclusive.

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
    ('partly', "forward 9.80x (81% of the paper's 12.14x; 8.50x to 11.00x over the repetitions)")
    >>> speedup_finding(measured.assign(forward_speedup=[1.0, 1.1]), paper, 32, 1024, "cpu",
    ...                 ranges=ranges.assign(low=[0.8, 0.9], high=[1.2, 1.3])).verdict
    'inconclusive'
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
    # faster on the whole range but the target undecided is "partly", as the ledger combines a check
    # that holds (faster) with an undecided one (the paper's fraction)
    outcome = ("reproduced" if low >= target else "not reproduced" if high <= 1
               else "partly" if low > 1 else "inconclusive")
    return Finding(f"forward {speedup:.2f}x ({speedup / theirs:.0%} of the paper's {theirs:.2f}x{spread}), backward "
                   f"{top.backward_speedup:.2f}x, memory -{top.memory_reduction_pct:.0f}% at k = {k} "
                   f"(d = {d}, n = {n}, {device})", outcome,
                   check=f"BN's forward speedup over OH at k = {k} at least {fraction:.0%} of the paper's "
                         f"{theirs:.2f}x (faster but less: partly)"
                         + (", the whole range over the timed repetitions on its side" if ranges is not None else ""))


def range_above(low: float, high: float, threshold: float = 1.0):
    """``True`` when the whole range ``[low, high]`` is above ``threshold``, ``False`` when it is at or
    below it, ``"inconclusive"`` when it straddles it.

    >>> range_above(1.2, 1.5), range_above(0.7, 0.9), range_above(0.9, 1.3)
    (True, False, 'inconclusive')
    """
    low, high = _range(low, high)
    return True if low > threshold else False if high <= threshold else "inconclusive"


def ranges_above(ranges: pd.DataFrame, threshold: float = 1.0):
    """:func:`range_above` for every row at once: ``True`` when every row's range is above ``threshold``,
    ``False`` when some row's is at or below it, ``"inconclusive"`` otherwise.

    >>> ranges = pd.DataFrame({"low": [1.01, 1.2], "high": [1.03, 1.5]})
    >>> ranges_above(ranges), ranges_above(ranges.assign(low=[0.99, 1.2])), ranges_above(ranges.assign(low=[0.9, 1.2],
    ...                                                                                             high=[1.0, 1.5]))
    (True, 'inconclusive', False)
    """
    check_table(ranges, "ranges", ["low", "high"])  # (refuses an empty table too)
    return _every(range_above(low, high, threshold) for low, high in zip(ranges.low, ranges.high))


def _every(answers):
    """``True`` when every answer is ``True``, ``False`` when one is ``False``, else ``"inconclusive"``."""
    answers = list(answers)
    return False if False in answers else True if all(a is True for a in answers) else "inconclusive"


def kernel_memory_lines(direct: pd.DataFrame, fused: pd.DataFrame, names=("direct", "sdpa")) -> str:
    """Does the fused kernel lower the peak memory, and BN's share of it? On the measurements' ranges.

    Two lines for chapter 8: whether ``fused`` lowers the peak of both schemes at the smallest
    ``k`` (every measurement of it below every measurement with ``direct``), and whether it makes
    BN's relative memory reduction larger at every ``k`` (the reduction's range, from
    :func:`speedup_range` with ``metric="peak"``, above the other kernel's). Each answers yes, no
    (the whole range on the other side) or inconclusive.

    Parameters
    ----------
    direct, fused : pandas.DataFrame
        :func:`~kmtrf_core.cost.measure_grid` of the two kernels over the same ``k`` (one ``d``),
        with ``peak_min_mb`` and ``peak_max_mb``.
    names : (str, str)
        The kernels' names, for the lines.

    Examples
    --------
    >>> def table(oh, bn):  # (min, max) peaks in MB at k = 6 and k = 100
    ...     rows = [(k, s, *peaks[i]) for s, peaks in (("oh", oh), ("bn", bn)) for i, k in enumerate((6, 100))]
    ...     return pd.DataFrame(rows, columns=["k", "scheme", "peak_min_mb", "peak_max_mb"])
    >>> direct = table(oh=[(36.3, 36.4), (60.0, 61.0)], bn=[(36.1, 36.2), (40.0, 40.5)])
    >>> fused = table(oh=[(10.0, 10.5), (30.0, 30.2)], bn=[(9.95, 10.3), (15.0, 15.1)])
    >>> print(kernel_memory_lines(direct, fused))
    sdpa lowers the peak of both schemes at the smallest k = 6, where the weights dominate: yes (OH 10.0-10.5 MB vs 36.3-36.4 MB; BN 9.9-10.3 MB vs 36.1-36.2 MB)
    sdpa makes BN's relative memory reduction larger at every k: inconclusive (k=6: -3.0% to 5.2% vs 0.3% to 0.8%; k=100: 49.7% to 50.3% vs 32.5% to 34.4%)
    """
    tables = {"direct": direct, "fused": fused}
    for name, table in tables.items():
        check_table(table, name, ["k", "scheme", "peak_min_mb", "peak_max_mb"])
        if not (table[["peak_min_mb", "peak_max_mb"]] > 0).all().all():  # also refuses NaN: not measured
            raise ValueError(f"{name} must hold measured peaks (positive MB), got {table.peak_min_mb.min()!r} "
                             f"to {table.peak_max_mb.max()!r}")
    if len(names) != 2:
        raise ValueError(f"names must be the two kernels' names, got {names!r}")
    k0 = min(direct.k)

    def peaks(name, scheme):
        table = tables[name]
        row = table[(table.k == k0) & (table.scheme == scheme)]
        if len(row) != 1:
            raise ValueError(f"{name} must hold one row of scheme {scheme!r} at k = {k0}, got {len(row)}")
        return float(row.peak_min_mb.iloc[0]), float(row.peak_max_mb.iloc[0])

    at_k0 = {(name, s): peaks(name, s) for name in tables for s in ("oh", "bn")}
    held = {"reproduced": True, "not reproduced": False}  # range_ahead's verdicts as range_above's answers
    lower = [held.get(range_ahead(at_k0[("fused", s)], at_k0[("direct", s)], 0.0), "inconclusive")
             for s in ("oh", "bn")]  # every fused measurement below every direct one
    # BN's reduction in percent over every pair of measurements, low and high ends per k
    reductions = {name: 100 * (1 - 1 / speedup_range(table, "peak")) for name, table in tables.items()}
    ks = reductions["direct"].index.intersection(reductions["fused"].index)
    larger = [held.get(range_ahead(tuple(reductions["direct"].loc[k]), tuple(reductions["fused"].loc[k]), 0.0),
                       "inconclusive") for k in ks]

    def answer(cases):  # every case yes; one case the other way round: no
        return {True: "yes", False: "no"}.get(_every(cases), "inconclusive")

    mb = [f"{s.upper()} {at_k0[('fused', s)][0]:.1f}-{at_k0[('fused', s)][1]:.1f} MB vs "
          f"{at_k0[('direct', s)][0]:.1f}-{at_k0[('direct', s)][1]:.1f} MB" for s in ("oh", "bn")]
    spans = [f"k={k}: " + " vs ".join(f"{reductions[name].loc[k, 'low']:.1f}% to {reductions[name].loc[k, 'high']:.1f}%"
                                       for name in ("fused", "direct")) for k in ks]
    return (f"{names[1]} lowers the peak of both schemes at the smallest k = {k0}, where the weights dominate: "
            f"{answer(lower)} ({'; '.join(mb)})\n"
            f"{names[1]} makes BN's relative memory reduction larger at every k: {answer(larger)} ({'; '.join(spans)})")


def range_within(low: float, high: float, lower: float, upper: float):
    """``True`` when the whole range ``[low, high]`` lies inside ``[lower, upper]``, ``False`` when it lies
    entirely outside, ``"inconclusive"`` when it reaches across a bound.

    >>> range_within(0.9, 1.1, 0.8, 1.25), range_within(1.3, 1.6, 0.8, 1.25), range_within(1.0, 1.4, 0.8, 1.25)
    (True, False, 'inconclusive')
    """
    low, high = _range(low, high)
    if not lower <= upper:
        raise ValueError(f"lower must not be above upper, got {lower} and {upper}")
    if lower <= low and high <= upper:
        return True
    return False if high < lower or low > upper else "inconclusive"


def ranges_grow(ranges: pd.DataFrame, slack: float = 0.0):
    """Does a quantity grow (or fall by at most ``slack``, relative) from row to row, on its ranges?

    ``True`` when every row's low end is at least ``1 - slack`` times the previous row's high end,
    ``False`` when some row's high end is below ``1 - slack`` times the previous row's low end,
    ``"inconclusive"`` otherwise.

    Parameters
    ----------
    ranges : pandas.DataFrame
        ``low`` and ``high`` per row, in order (:func:`speedup_range`, indexed by ``k``).
    slack : float
        The relative fall allowed from one row to the next, in ``[0, 1)``.

    Examples
    --------
    >>> ranges = pd.DataFrame({"low": [0.9, 2.0, 5.0], "high": [1.1, 2.5, 6.0]}, index=[6, 100, 1000])
    >>> ranges_grow(ranges), ranges_grow(ranges.iloc[::-1]), ranges_grow(ranges.assign(low=[0.9, 1.0, 5.0]))
    (True, False, 'inconclusive')
    """
    check_table(ranges, "ranges", ["low", "high"])
    if not 0 <= slack < 1:
        raise ValueError(f"slack must be in [0, 1), got {slack}")
    rows = [_range(low, high) for low, high in zip(ranges.low, ranges.high)]
    pairs = list(zip(rows, rows[1:]))
    if any(high < (1 - slack) * before_low for (before_low, _), (_, high) in pairs):
        return False
    return True if all(low >= (1 - slack) * before_high for (_, before_high), (low, _) in pairs) else "inconclusive"


def _range(low, high) -> tuple:
    low, high = float(low), float(high)
    if not low <= high:  # also refuses NaN
        raise ValueError(f"a range needs low <= high, got {low} and {high}")
    return low, high
