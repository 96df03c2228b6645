"""The counted cost tables and the fitted cost model of chapter 8 (kmtrf_core.cost.fit)."""

import math

import numpy as np
import pandas as pd
import pytest
from scipy.optimize import nnls

from kmtrf_core.cost import attention_cost
from kmtrf_core.cost.fit import (
    CostModel,
    attention_table,
    count_table,
    fit_cost_model,
    nondecreasing,
    table1_layout,
    with_counts,
)


def test_count_table_matches_attention_cost_at_the_paper_sizes():
    table = count_table(32, [6, 25, 100, 400, 1000], n=1024, batch=32)
    assert table.index.name == "k" and table.index.tolist() == [6, 25, 100, 400, 1000]
    assert table["d_emb OH"].tolist() == [38, 57, 132, 432, 1032]
    assert table["d_emb BN"].tolist() == [35, 37, 39, 41, 42]
    oh, bn = attention_cost(32, 1000, 1024, "oh", batch=32), attention_cost(32, 1000, 1024, "bn", batch=32)
    row = table.loc[1000]
    assert row["GFLOP OH"] == oh["flops"] / 1e9 and row["GFLOP BN"] == bn["flops"] / 1e9
    assert row["FLOP ratio OH/BN"] == oh["flops"] / bn["flops"]
    assert row["byte ratio OH/BN"] == oh["bytes"] / bn["bytes"]
    assert row["weights MB (both)"] == oh["weight_bytes"] / 2**20 == bn["weight_bytes"] / 2**20
    # the numbers chapter 8 prints (and the prose quotes: 1.09 at k = 6, 58 at k = 1000)
    assert table["FLOP ratio OH/BN"].round(2).tolist() == [1.09, 1.62, 4.15, 18.53, 58.51]
    assert table["byte ratio OH/BN"].round(2).tolist() == [1.01, 1.09, 1.41, 2.43, 3.70]
    assert table["tokens MB OH"].round(2).tolist() == [28.67, 43.79, 108.67, 450.56, 1529.86]


def test_count_table_ratios_grow_with_k_and_shares_are_fractions():
    table = count_table(4, [2, 4, 16, 64], n=128, batch=2)
    assert nondecreasing(table["FLOP ratio OH/BN"], slack=0.0)
    for column in ("projection share OH", "projection share BN"):
        assert ((table[column] > 0) & (table[column] < 1)).all()
    with pytest.raises(ValueError):
        count_table(4, [], n=16, batch=1)
    with pytest.raises(ValueError):
        count_table(4, [32], n=16, batch=1)  # k > n


def test_attention_table_splits_the_total():
    cost = attention_cost(32, 1000, 1024, "oh", batch=32)
    table = attention_table(cost)
    assert table.columns.tolist() == ["queries", "keys", "GFLOP", "weights MB", "tokens MB"]
    assert math.isclose(table.GFLOP.sum(), cost["flops"] / 1e9)
    assert math.isclose(table["weights MB"].sum(), cost["weight_bytes"] / 2**20)
    assert table.round(1).GFLOP.tolist() == [341.4, 347.9, 343.0, 336.6]


def _comparison():
    return pd.DataFrame(dict(
        k=[6, 400], extra_oh=[6, 400], extra_bn=[3, 9],
        forward_oh=[9.2, 191.7], forward_bn=[8.9, 24.0], forward_speedup=[9.2 / 8.9, 191.7 / 24.0],
        backward_oh=[14.6, 293.4], backward_bn=[13.0, 41.6], backward_speedup=[14.6 / 13.0, 293.4 / 41.6],
        eval_oh=[9.0, 189.5], eval_bn=[8.6, 23.4], eval_speedup=[9.0 / 8.6, 189.5 / 23.4],
        peak_mb_oh=[13.8, 85.4], peak_mb_bn=[13.7, 40.0], memory_reduction_pct=[0.72, 53.16],
    ))


def test_table1_layout_cells():
    table = table1_layout(_comparison())
    assert table.index.tolist() == [6, 400]
    assert table.columns.tolist() == [
        "d_emb - d  OH / BN", "forward ms  OH / BN [speedup]", "backward ms  OH / BN [speedup]",
        "eval ms  OH / BN [speedup]", "peak MB  OH / BN [reduction]",
    ]
    assert table.loc[400].tolist() == [
        "400 / 9", "191.7 / 24.0 [7.99x]", "293.4 / 41.6 [7.05x]", "189.5 / 23.4 [8.10x]",
        "85.4 / 40.0 [53.2%]",
    ]


def test_nondecreasing_slack():
    assert nondecreasing([1.0, 6.7, 36.9, 53.2])
    assert not nondecreasing([1.04, 0.82, 2.68, 8.00])  # the quick run of chapter 8: a 21% drop
    assert nondecreasing([1.0, 0.91])  # within 10%
    assert not nondecreasing([1.0, 0.89])
    assert nondecreasing([-1.0, -1.05])  # slack relative to the magnitude
    assert nondecreasing([5.0]) and nondecreasing([])
    with pytest.raises(ValueError):
        nondecreasing([1.0, 2.0], slack=-0.1)


def test_with_counts_adds_the_counted_work_row_by_row():
    rows = pd.DataFrame(dict(d=[4, 4, 8], k=[3, 3, 5], n=[16, 16, 32], scheme=["oh", "bn", "oh"],
                             batch=[2, 2, 1], eval_min_ms=[1.0, 2.0, 3.0]))
    counted = with_counts(rows)
    assert "flops" not in rows  # a copy
    for r in counted.itertuples():
        cost = attention_cost(r.d, r.k, r.n, r.scheme, batch=r.batch)
        assert (r.flops, r.bytes) == (cost["flops"], cost["bytes"])
    assert counted.eval_min_ms.tolist() == [1.0, 2.0, 3.0]


def _chapter8_fit(flops, nbytes, seconds):
    """The fit as chapter 8 wrote it in a cell before it moved into the core."""
    t = np.asarray(seconds, dtype=float)
    A = np.column_stack([flops, nbytes, np.ones(len(t))]) / t[:, None]
    coef, _ = nnls(A / A.max(axis=0), np.ones(len(t)))
    coef = coef / A.max(axis=0)
    model_ms = 1e3 * (np.column_stack([flops, nbytes, np.ones(len(t))]) @ coef)
    return coef, model_ms


def test_fit_cost_model_recovers_an_exact_model():
    rng = np.random.default_rng(0)
    flops = rng.uniform(1e8, 1e11, 30)
    nbytes = rng.uniform(1e6, 1e9, 30)
    seconds = 2e-11 * flops + 5e-10 * nbytes + 2e-3
    model = fit_cost_model(flops, nbytes, seconds)
    assert np.allclose(model.coefficients, [2e-11, 5e-10, 2e-3], rtol=1e-6)
    assert np.allclose(model.predict_ms(flops, nbytes), 1e3 * seconds, rtol=1e-6)
    assert math.isclose(model.flop_rate, 5e10, rel_tol=1e-6)
    assert math.isclose(model.byte_rate, 2e9, rel_tol=1e-6)


def test_fit_cost_model_is_the_chapter_cell_and_stays_non_negative():
    rng = np.random.default_rng(1)
    flops = rng.uniform(1e8, 1e10, 26).round()
    nbytes = rng.uniform(1e6, 1e8, 26).round()
    seconds = (1e-11 * flops + 3e-3) * rng.uniform(0.7, 1.4, 26)  # noisy, no byte term
    model = fit_cost_model(flops, nbytes, seconds)
    coef, model_ms = _chapter8_fit(flops, nbytes, seconds)
    assert np.array_equal(model.coefficients, coef)
    assert np.array_equal(model.predict_ms(flops, nbytes), model_ms)
    assert (model.coefficients >= 0).all()
    share = model.flop_share(flops, nbytes)
    assert np.allclose(share, coef[0] * flops / (model_ms / 1e3))
    assert ((share >= 0) & (share <= 1)).all()


def test_cost_model_text_and_infinite_rates():
    model = CostModel(seconds_per_flop=0.0, seconds_per_byte=1e-9, overhead_s=0.0)
    assert model.flop_rate == math.inf
    assert str(model) == "effective FLOP rate inf GFLOP/s, counted bytes at 1.00 GB/s, overhead 0.00 ms per forward"


@pytest.mark.parametrize("seconds", [[1.0, 0.0, 1.0], [1.0, float("nan"), 1.0], [1.0, 1.0]])
def test_fit_cost_model_rejects_bad_times(seconds):
    with pytest.raises(ValueError):
        fit_cost_model([1.0, 2.0, 3.0], [1.0, 1.0, 2.0], seconds)


def test_fit_cost_model_rejects_mismatched_counts():
    with pytest.raises(ValueError):
        fit_cost_model([1.0, 2.0], [1.0], [1.0, 1.0])


@pytest.mark.parametrize("flops, nbytes, name", [
    ([-1e9, 2e9, 4e9], [1e6, 1e6, 2e6], "flops"),
    ([1e9, 2e9, 4e9], [1e6, -1e6, 2e6], "nbytes"),
    ([float("nan"), 2e9, 4e9], [1e6, 1e6, 2e6], "flops"),
    ([1e9, 2e9, 4e9], [1e6, float("inf"), 2e6], "nbytes"),
    ([0.0, 0.0, 0.0], [1e6, 1e6, 2e6], "flops"),
    ([1e9, 2e9, 4e9], [0.0, 0.0, 0.0], "nbytes"),
])
def test_fit_cost_model_rejects_bad_counts_naming_them(flops, nbytes, name):
    # a negative count gave a meaningless rate, NaN or all zeros scipy's "array must not contain infs or NaNs"
    with pytest.raises(ValueError, match=rf"^{name} must"):
        fit_cost_model(flops, nbytes, [1e-3, 2e-3, 3e-3])
