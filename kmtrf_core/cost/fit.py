"""Counted cost tables and a two-term cost model fitted to measured times (Figure 1, Table 1).

What chapter 8 (the price of an embedding) builds on top of the count of
:func:`~kmtrf_core.cost.analytic.attention_cost` and the measurements of
:mod:`kmtrf_core.cost.harness`:

* :func:`count_table`: OH and BN side by side, by count, for a list of ``k``;
* :func:`attention_table`: one count split into its four attentions;
* :func:`table1_layout`: a :func:`~kmtrf_core.cost.harness.compare_schemes`
  table in the layout of the paper's Table 1 (``OH / BN [ratio]`` cells);
* :func:`with_counts` and :func:`fit_cost_model`: the non-negative
  least-squares fit ``t = a FLOPs + b bytes + c`` of measured times to the
  counts, as a :class:`CostModel`;
* :func:`nondecreasing`: whether a series of point values grows with ``k`` up
  to a relative slack (the book's chapter 8 reads ranges instead).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd
from scipy.optimize import nnls

from ..validation import check_number
from .analytic import attention_cost

__all__ = [
    "CostModel",
    "attention_table",
    "count_table",
    "fit_cost_model",
    "nondecreasing",
    "table1_layout",
    "with_counts",
]

_MB = 2**20


def count_table(d: int, ks, n: int, batch: int, itemsize: int = 4) -> pd.DataFrame:
    """OH and BN by count, one row per ``k``: token size, GFLOPs, shares, ratios, megabytes.

    Two ratios bracket a measured speedup of BN over OH: the FLOP ratio (if
    every operation ran at the same FLOP rate) and the byte ratio (if every
    operation were limited by memory traffic). Used in chapter 8.

    Parameters
    ----------
    d : int
        Data dimension.
    ks : sequence of int
        Cluster counts, one row each (every ``2 <= k <= n``).
    n, batch : int
        Points per task and tasks.
    itemsize : int
        Bytes per number (4 for float32).

    Returns
    -------
    pandas.DataFrame
        Indexed by ``k``; columns ``d_emb OH``, ``d_emb BN``, ``GFLOP OH``,
        ``GFLOP BN``, ``projection share OH``, ``projection share BN`` (the
        share of the FLOPs spent in the Q/K/V projections), ``FLOP ratio
        OH/BN``, ``weights MB (both)`` (the attention weights, the same for
        both schemes), ``tokens MB OH``, ``tokens MB BN`` and ``byte ratio
        OH/BN``; megabytes are MiB.

    Examples
    --------
    >>> table = count_table(d=2, ks=[2, 4], n=8, batch=1)
    >>> table[["d_emb OH", "d_emb BN"]].values.tolist()
    [[4, 3], [6, 4]]
    >>> bool((table["FLOP ratio OH/BN"] > 1).all())
    True
    """
    rows = []
    for k in ks:
        oh = attention_cost(d, k, n, "oh", batch=batch, itemsize=itemsize)
        bn = attention_cost(d, k, n, "bn", batch=batch, itemsize=itemsize)
        rows.append({
            "k": k,
            "d_emb OH": oh["d_emb"],
            "d_emb BN": bn["d_emb"],
            "GFLOP OH": oh["flops"] / 1e9,
            "GFLOP BN": bn["flops"] / 1e9,
            "projection share OH": oh["projection_flops"] / oh["flops"],
            "projection share BN": bn["projection_flops"] / bn["flops"],
            "FLOP ratio OH/BN": oh["flops"] / bn["flops"],
            "weights MB (both)": oh["weight_bytes"] / _MB,
            "tokens MB OH": oh["token_bytes"] / _MB,
            "tokens MB BN": bn["token_bytes"] / _MB,
            "byte ratio OH/BN": oh["bytes"] / bn["bytes"],
        })
    if not rows:
        raise ValueError("ks must not be empty")
    return pd.DataFrame(rows).set_index("k")


def attention_table(cost: dict) -> pd.DataFrame:
    """The four attentions of one :func:`~kmtrf_core.cost.analytic.attention_cost` count.

    Used in chapter 8 to show where the work of a large OH layer goes.

    Parameters
    ----------
    cost : dict
        What :func:`~kmtrf_core.cost.analytic.attention_cost` returns.

    Returns
    -------
    pandas.DataFrame
        Indexed by the attention's ``name``; columns ``queries``, ``keys``,
        ``GFLOP``, ``weights MB`` and ``tokens MB`` (MiB).

    Examples
    --------
    >>> table = attention_table(attention_cost(d=2, k=2, n=4, scheme="bn"))
    >>> table.index.tolist()
    ['points->centers', 'points->points', 'centers->points', 'centers->centers']
    >>> table[["queries", "keys"]].values.tolist()
    [[4, 2], [4, 4], [2, 4], [2, 2]]
    """
    table = pd.DataFrame(cost["attentions"]).set_index("name")
    table["GFLOP"] = table.flops / 1e9
    table["weights MB"] = table.weight_bytes / _MB
    table["tokens MB"] = table.token_bytes / _MB
    return table[["queries", "keys", "GFLOP", "weights MB", "tokens MB"]]


def _cell(oh: float, bn: float, ratio: float, fmt: str) -> str:
    return f"{oh:.1f} / {bn:.1f} [{fmt.format(ratio)}]"


def table1_layout(comparison: pd.DataFrame) -> pd.DataFrame:
    """A :func:`~kmtrf_core.cost.harness.compare_schemes` table laid out like the paper's Table 1.

    One row per ``k``; each cell reads ``OH / BN [ratio]``: milliseconds and
    the speedup for the three times, MiB and the reduction for the peak
    memory, and the extra embedding dimensions ``d_emb - d`` of each scheme.
    Used in chapter 8.

    Parameters
    ----------
    comparison : pandas.DataFrame
        From ``compare_schemes(measured)`` with the default ``scheme="bn"``,
        ``baseline="oh"`` (columns ``k``, ``extra_oh``, ``extra_bn``,
        ``{forward,backward,eval}_{oh,bn,speedup}``, ``peak_mb_oh``,
        ``peak_mb_bn``, ``memory_reduction_pct``).

    Returns
    -------
    pandas.DataFrame
        Indexed by ``k``, five text columns.

    Examples
    --------
    >>> comparison = pd.DataFrame(dict(k=[6], extra_oh=[6], extra_bn=[3],
    ...     forward_oh=[9.2], forward_bn=[8.9], forward_speedup=[9.2 / 8.9],
    ...     backward_oh=[14.6], backward_bn=[13.0], backward_speedup=[14.6 / 13.0],
    ...     eval_oh=[9.0], eval_bn=[8.6], eval_speedup=[9.0 / 8.6],
    ...     peak_mb_oh=[13.8], peak_mb_bn=[13.7], memory_reduction_pct=[0.72]))
    >>> table1_layout(comparison).iloc[0].tolist()
    ['6 / 3', '9.2 / 8.9 [1.03x]', '14.6 / 13.0 [1.12x]', '9.0 / 8.6 [1.05x]', '13.8 / 13.7 [0.7%]']
    """
    c = comparison
    columns = {"k": c.k}
    columns["d_emb - d  OH / BN"] = [f"{a} / {b}" for a, b in zip(c.extra_oh, c.extra_bn)]
    for metric in ("forward", "backward", "eval"):
        cells = zip(c[f"{metric}_oh"], c[f"{metric}_bn"], c[f"{metric}_speedup"])
        columns[f"{metric} ms  OH / BN [speedup]"] = [_cell(*v, "{:.2f}x") for v in cells]
    cells = zip(c.peak_mb_oh, c.peak_mb_bn, c.memory_reduction_pct)
    columns["peak MB  OH / BN [reduction]"] = [_cell(*v, "{:.1f}%") for v in cells]
    return pd.DataFrame(columns).set_index("k")


def nondecreasing(values, slack: float = 0.1) -> bool:
    """Whether a series grows along its order, forgiving a step down of ``slack`` times the value.

    Each value must be at least the one before minus ``slack`` times its
    magnitude; ``slack=0`` asks for a non-decreasing series. It reads point
    values only: chapter 8 decides its growth claims (memory reduction and
    speedup against ``k``, Table 1) on the ranges over repeated measurements
    instead (:func:`~kmtrf_core.book.ch08_cost.ranges_grow`).

    Parameters
    ----------
    values : array_like
        The series, in the order of the growing parameter.
    slack : float
        Relative drop allowed from one value to the next, ``>= 0``.

    Returns
    -------
    bool

    Examples
    --------
    >>> nondecreasing([1.0, 2.0, 1.9, 4.0]), nondecreasing([1.04, 0.82, 2.68, 8.0])
    (True, False)
    >>> nondecreasing([1.0, 0.95], slack=0.0)
    False
    """
    check_number(slack, "slack", allow_zero=True)
    v = np.asarray(values, dtype=float)
    return bool(np.all(v[1:] >= v[:-1] - slack * np.abs(v[:-1])))


def with_counts(measured: pd.DataFrame, itemsize: int = 4) -> pd.DataFrame:
    """A copy of a measurement table with the counted ``flops`` and ``bytes`` of every row.

    Parameters
    ----------
    measured : pandas.DataFrame
        Rows with columns ``d``, ``k``, ``n``, ``scheme`` and ``batch``,
        e.g. from :func:`~kmtrf_core.cost.harness.measure_grid`.
    itemsize : int
        Bytes per number (4 for float32).

    Returns
    -------
    pandas.DataFrame
        ``measured`` with two more columns, ``flops`` and ``bytes`` of the
        forward pass (:func:`~kmtrf_core.cost.analytic.attention_cost`).

    Examples
    --------
    >>> rows = pd.DataFrame(dict(d=[2, 2], k=[2, 2], n=[4, 4], scheme=["oh", "bn"], batch=1))
    >>> with_counts(rows)[["flops", "bytes"]].values.tolist()
    [[1728, 1488], [1080, 1008]]
    """
    counted = [attention_cost(r.d, r.k, r.n, r.scheme, batch=r.batch, itemsize=itemsize)
               for r in measured.itertuples()]
    return measured.assign(flops=[c["flops"] for c in counted], bytes=[c["bytes"] for c in counted])


@dataclass(frozen=True)
class CostModel:
    """``t = a FLOPs + b bytes + c``: a forward pass's time from its counted work (chapter 8).

    Fitted by :func:`fit_cost_model`. ``1 / a`` is an effective FLOP rate of
    the machine for the layer and ``1 / b`` a rate of *counted* bytes (the
    count takes each tensor once, so this sits below the memory bandwidth).

    Attributes
    ----------
    seconds_per_flop, seconds_per_byte : float
        ``a`` and ``b``, ``>= 0``.
    overhead_s : float
        ``c``, seconds per forward pass whatever its size, ``>= 0``.

    Examples
    --------
    >>> model = CostModel(seconds_per_flop=1e-10, seconds_per_byte=1e-9, overhead_s=1e-3)
    >>> print(model)
    effective FLOP rate 10.0 GFLOP/s, counted bytes at 1.00 GB/s, overhead 1.00 ms per forward
    >>> model.predict_ms([1e9], [1e6]).round(6).tolist(), model.flop_share([1e9], [1e6]).round(3).tolist()
    ([102.0], [0.98])
    """

    seconds_per_flop: float
    seconds_per_byte: float
    overhead_s: float

    @property
    def coefficients(self) -> np.ndarray:
        """``[a, b, c]``.

        >>> CostModel(seconds_per_flop=1e-10, seconds_per_byte=1e-9, overhead_s=1e-3).coefficients.tolist()
        [1e-10, 1e-09, 0.001]
        """
        return np.array([self.seconds_per_flop, self.seconds_per_byte, self.overhead_s])

    @property
    def flop_rate(self) -> float:
        """``1 / a`` in FLOP/s (infinite when ``a = 0``).

        >>> CostModel(1e-10, 1e-9, 1e-3).flop_rate, CostModel(0.0, 1e-9, 1e-3).flop_rate
        (10000000000.0, inf)
        """
        return 1 / self.seconds_per_flop if self.seconds_per_flop > 0 else math.inf

    @property
    def byte_rate(self) -> float:
        """``1 / b`` in counted bytes per second (infinite when ``b = 0``).

        >>> round(CostModel(1e-10, 1e-9, 1e-3).byte_rate / 1e9, 9), CostModel(1e-10, 0.0, 1e-3).byte_rate  # GB/s
        (1.0, inf)
        """
        return 1 / self.seconds_per_byte if self.seconds_per_byte > 0 else math.inf

    def predict_ms(self, flops, nbytes) -> np.ndarray:
        """The model's time in ms for counted ``flops`` and ``nbytes`` (arrays of one length).

        >>> CostModel(1e-10, 1e-9, 1e-3).predict_ms([0, 1e9], [0, 0]).round(6).tolist()  # the overhead, then +100 ms
        [1.0, 101.0]
        """
        return 1e3 * (_design(flops, nbytes) @ self.coefficients)

    def flop_share(self, flops, nbytes) -> np.ndarray:
        """The share of the model's time that its FLOP term takes, per row.

        >>> CostModel(1e-10, 1e-9, 0.0).flop_share([1e9, 1e9], [0, 1e8]).round(3).tolist()
        [1.0, 0.5]
        """
        return self.seconds_per_flop * np.asarray(flops, dtype=float) / (self.predict_ms(flops, nbytes) / 1e3)

    def __str__(self) -> str:
        return (f"effective FLOP rate {self.flop_rate / 1e9:.1f} GFLOP/s, "
                f"counted bytes at {self.byte_rate / 1e9:.2f} GB/s, "
                f"overhead {1e3 * self.overhead_s:.2f} ms per forward")


def _design(flops, nbytes) -> np.ndarray:
    try:
        flops, nbytes = np.asarray(flops, dtype=float), np.asarray(nbytes, dtype=float)
    except (TypeError, ValueError):
        raise ValueError("flops and nbytes must be arrays of numbers") from None
    if flops.shape != nbytes.shape or flops.ndim != 1:
        raise ValueError(f"flops and nbytes must be 1-D of one length, got {flops.shape}, {nbytes.shape}")
    return np.column_stack([flops, nbytes, np.ones(len(flops))])


def fit_cost_model(flops, nbytes, seconds) -> CostModel:
    """Fit ``t = a FLOPs + b bytes + c`` with ``a, b, c >= 0`` to measured times (chapter 8).

    Non-negative least squares on the relative error: every row is divided by
    its measured time, so that small and large runs count alike, and the
    columns are scaled to a maximum of 1 before the solve
    (:func:`scipy.optimize.nnls`).

    Parameters
    ----------
    flops, nbytes : array_like
        Counted FLOPs and bytes of each measured configuration, e.g. the
        columns of :func:`with_counts`: finite, ``>= 0``, not all zero.
    seconds : array_like
        Measured time of each configuration in seconds, finite and ``> 0``.

    Returns
    -------
    CostModel

    Raises
    ------
    ValueError
        Naming the argument: lengths that differ, a NaN, inf or negative
        value, counts that are all zero (no column to fit), no row.

    Examples
    --------
    >>> flops = np.array([1e9, 2e9, 4e9, 1e9])
    >>> nbytes = np.array([1e6, 1e6, 2e6, 8e6])
    >>> seconds = 1e-10 * flops + 1e-9 * nbytes + 1e-3
    >>> model = fit_cost_model(flops, nbytes, seconds)
    >>> print(model)
    effective FLOP rate 10.0 GFLOP/s, counted bytes at 1.00 GB/s, overhead 1.00 ms per forward
    >>> bool(np.allclose(model.predict_ms(flops, nbytes), 1e3 * seconds))
    True
    """
    design = _design(flops, nbytes)
    for name, column in (("flops", design[:, 0]), ("nbytes", design[:, 1])):
        bad = column[~(np.isfinite(column) & (column >= 0))]
        if bad.size:
            raise ValueError(f"{name} must be finite and >= 0, got {bad.size} value(s) that are not "
                             f"(first: {float(bad[0])})")
        if len(column) and not np.any(column > 0):
            raise ValueError(f"{name} must not be all zero (its coefficient cannot be fitted)")
    t = np.asarray(seconds, dtype=float)
    if t.shape != (len(design),):
        raise ValueError(f"seconds must have one value per row ({len(design)}), got shape {t.shape}")
    if len(t) == 0 or not np.all(np.isfinite(t) & (t > 0)):
        raise ValueError("seconds must be finite and positive, at least one")
    weighted = design / t[:, None]
    scale = weighted.max(axis=0)
    coef, _ = nnls(weighted / scale, np.ones(len(t)))
    coef = coef / scale
    return CostModel(*(float(c) for c in coef))
