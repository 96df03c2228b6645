"""Chapter 8 (``book/08_cost.ipynb``): the verdict on BN's speed at large ``k``.

The counts and measurements are the cost room's (:mod:`kmtrf_core.cost`);
:func:`speedup_finding` turns the measured Table 1 into the verdict of the
claim ``cost_speedup``.
"""

from __future__ import annotations

import pandas as pd

from ..validation import check_table
from .claims import Finding, verdict

__all__ = ["speedup_finding"]


def speedup_finding(measured: pd.DataFrame, paper: pd.DataFrame | None, d: int, n: int, device: str) -> Finding:
    """Is BN's forward pass faster than OH's at the largest ``k``, and by at least 2x?

    Parameters
    ----------
    measured : pandas.DataFrame
        Our Table 1, indexed by ``k``: ``forward_speedup``,
        ``backward_speedup`` (OH time / BN time) and ``memory_reduction_pct``.
    paper : pandas.DataFrame or None
        The paper's Table 1 indexed by ``k`` with ``forward_speedup``; its
        number at our largest ``k`` is quoted when it has that row.
    d, n : int
        The sizes of the measurement, for the text.
    device : str
        Where it was measured, for the text.

    Returns
    -------
    Finding
        For the claim ``cost_speedup``: faster, and at least 2x faster.

    Examples
    --------
    >>> measured = pd.DataFrame({"forward_speedup": [1.0, 9.8], "backward_speedup": [1.0, 8.1],
    ...                          "memory_reduction_pct": [1.0, 55.0]}, index=[6, 1000])
    >>> paper = pd.DataFrame({"forward_speedup": [0.88, 12.14]}, index=[6, 1000])
    >>> finding = speedup_finding(measured, paper, 32, 1024, "cpu")
    >>> finding.verdict, finding.value
    ('reproduced', 'forward 9.80x, backward 8.10x, memory -55% at k = 1000 (d = 32, n = 1024, cpu); paper 12.1x')
    """
    check_table(measured, "measured", ["forward_speedup", "backward_speedup", "memory_reduction_pct"])
    k_max = int(measured.index.max())
    top = measured.loc[k_max]
    note = "" if paper is None or k_max not in paper.index else f"; paper {paper.loc[k_max, 'forward_speedup']:.1f}x"
    speedup = top.forward_speedup
    return Finding(f"forward {speedup:.2f}x, backward {top.backward_speedup:.2f}x, "
                   f"memory -{top.memory_reduction_pct:.0f}% at k = {k_max} (d = {d}, n = {n}, {device}){note}",
                   verdict(int(speedup > 1) + int(speedup >= 2), 2),
                   check=f"BN's forward pass faster than OH's at k = {k_max}, and at least 2x faster")
