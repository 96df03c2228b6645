"""Chapter 8 (``book/08_cost.ipynb``): the verdict on BN's speed at large ``k``.

The counts and measurements are the cost room's (:mod:`kmtrf_core.cost`);
:func:`speedup_finding` turns the measured Table 1 into the verdict of the
claim ``cost_speedup``.
"""

from __future__ import annotations

import pandas as pd

from ..validation import check_table
from .claims import Finding

__all__ = ["PAPER_FRACTION", "speedup_finding"]


PAPER_FRACTION = 0.75
"""How much of the paper's forward speedup (Table 1) ours must reach at the same ``k`` to count as reproduced."""


def speedup_finding(measured: pd.DataFrame, paper: pd.DataFrame, d: int, n: int, device: str,
                    fraction: float = PAPER_FRACTION) -> Finding:
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

    Returns
    -------
    Finding
        For the claim ``cost_speedup``: reproduced at ``fraction`` of the
        paper's number or more, partly when BN is faster but by less, not
        reproduced when it is not faster.

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
    """
    check_table(measured, "measured", ["forward_speedup", "backward_speedup", "memory_reduction_pct"])
    check_table(paper, "paper", ["forward_speedup"])
    shared = sorted(set(measured.index) & set(paper.index))
    if not shared:
        raise ValueError(f"measured and paper share no k (measured {sorted(measured.index)}, paper "
                         f"{sorted(paper.index)})")
    k = int(shared[-1])
    top, theirs = measured.loc[k], float(paper.loc[k, "forward_speedup"])
    speedup = float(top.forward_speedup)
    outcome = "reproduced" if speedup >= fraction * theirs else "partly" if speedup > 1 else "not reproduced"
    return Finding(f"forward {speedup:.2f}x ({speedup / theirs:.0%} of the paper's {theirs:.2f}x), backward "
                   f"{top.backward_speedup:.2f}x, memory -{top.memory_reduction_pct:.0f}% at k = {k} "
                   f"(d = {d}, n = {n}, {device})", outcome,
                   check=f"BN's forward speedup over OH at k = {k} at least {fraction:.0%} of the paper's "
                         f"{theirs:.2f}x (faster but less: partly)")
