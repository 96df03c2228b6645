import math

import pytest
import torch

from kmtrf_core import embedding_dim
from kmtrf_core.cost.harness import (
    METRICS,
    compare_schemes,
    machine_description,
    measure_grid,
    measure_model,
)
from kmtrf_core.cost import attention_cost
from kmtrf_core.cost.harness import _configs
from kmtrf_core.cost.memory import MEMORY_CPU_FRESH, MEMORY_CPU_HWM, check_dtype, cpu_peak_mb, cuda_peak_mb

TINY = dict(n=16, batch=2, repeats=2, warmup=1, device="cpu")


@pytest.fixture(autouse=True)
def _one_thread():
    # These tests check shapes and signs, not speed. With two OpenMP threads on a busy
    # two-core machine each tiny op can wait a scheduler slice at a barrier (100x slower).
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def test_measure_model_returns_sane_positive_numbers():
    r = measure_model(2, 3, "oh", memory=True, **TINY)
    assert (r.d, r.k, r.scheme, r.n, r.batch, r.d_emb) == (2, 3, "oh", 16, 2, embedding_dim(2, 3, "oh"))
    assert r.device == "cpu" and r.threads == 1 and r.dtype == "float32"
    for metric in METRICS:
        assert len(r.times_ms[metric]) == 2
        assert all(t > 0 and math.isfinite(t) for t in r.times_ms[metric])
        s = r.stats(metric)
        assert s["min"] <= s["median"] <= s["max"] and s["min"] <= s["mean"] <= s["max"] and s["std"] >= 0
    assert r.memory_method in (MEMORY_CPU_HWM, MEMORY_CPU_FRESH)
    assert r.peak_mb >= 0 and math.isfinite(r.peak_mb)
    # weights 12 d_emb^2 + codes + X + C, float32
    assert r.resident_mb == pytest.approx((12 * 25 + 3 * 3 + 2 * 16 * 2 + 2 * 3 * 2) * 4 / 2**20)
    row = r.as_dict()
    assert {f"{m}_{s}_ms" for m in METRICS for s in ("median", "mean", "std", "min", "max")} <= set(row)
    assert "times_ms" not in row and "peaks_mb" not in row
    assert r.peaks_mb == (r.peak_mb,) and row["peak_min_mb"] == row["peak_max_mb"] == r.peak_mb


def test_the_peak_is_measured_memory_repeats_times():
    r = measure_model(2, 3, "oh", memory=True, memory_repeats=3, **TINY)
    assert len(r.peaks_mb) == 3 and all(p >= 0 and math.isfinite(p) for p in r.peaks_mb)
    assert r.peak_mb == sorted(r.peaks_mb)[1]  # the median
    df = measure_grid([2], [2, 3], memory=True, memory_repeats=2, **TINY)
    assert (df.peak_min_mb <= df.peak_mb).all() and (df.peak_mb <= df.peak_max_mb).all()
    assert measure_model(2, 3, "oh", memory=False, memory_repeats=3, **TINY).peaks_mb == ()
    with pytest.raises(ValueError, match="memory_repeats"):
        measure_model(2, 3, "oh", memory_repeats=0, **TINY)


def test_measure_grid_shape_and_comparison():
    df = measure_grid([2, 3], [2, 4], memory=False, impl="sdpa", **TINY)
    assert len(df) == 2 * 2 * 2
    assert df[["d", "k", "scheme"]].values.tolist()[:2] == [[2, 2, "oh"], [2, 2, "bn"]]
    assert (df[[f"{m}_median_ms" for m in METRICS]] > 0).all().all()
    assert df.peak_mb.isna().all() and (df.memory_method == "not measured").all()
    c = compare_schemes(df)
    assert len(c) == 4
    assert (c.extra_oh == c.k).all()
    assert (c.extra_bn == [1, 2, 1, 2]).all()
    assert ((c.forward_speedup - c.forward_oh / c.forward_bn).abs() < 1e-12).all()


def test_memory_grows_with_the_batch():
    # Both batches in one worker process: the measure itself, without the timing loops.
    configs = _configs([(4, 3, "bn")], n=256, batch=4, gamma=1.0, impl="direct", dtype=torch.float32, seed=0)
    configs += _configs([(4, 3, "bn")], n=256, batch=64, gamma=1.0, impl="direct", dtype=torch.float32, seed=0)
    (small, large), method = cpu_peak_mb(configs, threads=torch.get_num_threads())
    assert method in (MEMORY_CPU_HWM, MEMORY_CPU_FRESH)
    # batch 64 stores 64 (256 x 256) float32 attention weights alone: 16 MiB
    assert large > 16
    assert large > 4 * small > 0


def test_fresh_process_fallback_measures_too():
    configs = _configs([(4, 3, "bn")], n=256, batch=32, gamma=1.0, impl="direct", dtype=torch.float32, seed=0)
    (peak,), method = cpu_peak_mb(configs, threads=1, fresh=True)
    assert method == MEMORY_CPU_FRESH
    assert peak > 8  # 32 (256 x 256) float32 attention weights alone: 8 MiB


def test_attention_cost_matches_a_hand_count():
    # d=1, k=2, n=3, OH: m = 3. Attentions (q, r): (3,2), (3,3), (2,3), (2,2).
    cost = attention_cost(1, 2, 3, "oh", batch=2, itemsize=8)
    m = 3
    pairs = [(3, 2), (3, 3), (2, 3), (2, 2)]
    assert cost["d_emb"] == m
    assert cost["projection_flops"] == 2 * sum(2 * m * m * (q + 2 * r) for q, r in pairs)
    assert cost["attention_flops"] == 2 * sum(4 * q * r * m for q, r in pairs)
    assert cost["flops"] == 2 * (12 * m * m * 5 + 4 * m * 25)
    assert [a["weight_bytes"] for a in cost["attentions"]] == [2 * q * r * 8 for q, r in pairs]
    assert cost["weight_bytes"] == 2 * 25 * 8
    assert cost["token_bytes"] == 2 * sum((q + 2 * r) * m for q, r in pairs) * 8
    assert cost["param_bytes"] == 12 * m * m * 8
    assert cost["bytes"] == cost["weight_bytes"] + cost["token_bytes"] + cost["param_bytes"]
    # only d_emb differs between schemes: the weights do not depend on it
    bn = attention_cost(1, 2, 3, "bn", batch=2, itemsize=8)
    assert bn["weight_bytes"] == cost["weight_bytes"] and bn["d_emb"] == 2 and bn["flops"] < cost["flops"]


def test_compare_schemes_gain_and_speedup():
    import pandas as pd

    df = pd.DataFrame(dict(d=[2, 2], k=[4, 4], scheme=["oh", "bn"], d_emb=[6, 4], peak_mb=[10.0, 8.0],
                           forward_median_ms=[4.0, 2.0], backward_median_ms=[6.0, 3.0], eval_median_ms=[1.0, 2.0]))
    row = compare_schemes(df).iloc[0]
    assert row.forward_speedup == 2.0 and row.forward_gain_pct == 50.0
    assert row.eval_speedup == 0.5 and row.eval_gain_pct == -100.0
    assert row.memory_reduction_pct == 20.0
    with pytest.raises(ValueError, match="scheme"):
        compare_schemes(df, scheme="sc")
    with pytest.raises(ValueError, match="stat"):
        compare_schemes(df, stat="mode")


def test_machine_description_names_the_machine():
    info = machine_description("cpu")
    assert info["device"] == "cpu" and info["cpu_count"] >= 1
    assert info["torch"] == torch.__version__ and info["processor"]


@pytest.mark.parametrize(
    "kwargs, name",
    [
        (dict(d=0), "d"),
        (dict(k=1), "k"),
        (dict(k=20), "k"),
        (dict(scheme="xx"), "scheme"),
        (dict(n=0), "n"),
        (dict(batch=0), "batch"),
        (dict(repeats=0), "repeats"),
        (dict(warmup=-1), "warmup"),
        (dict(impl="flash"), "impl"),
        (dict(gamma=-1.0), "gamma"),
        (dict(gamma=math.inf), "gamma"),
        (dict(dtype=torch.int64), "dtype"),
        # the layer computes in float32/float64 only: refused up front (check_dtype), by name
        (dict(dtype=torch.float16), "^dtype must be torch.float32"),
        (dict(dtype=torch.bfloat16), "^dtype must be torch.float32"),
        (dict(dtype="float16"), "^dtype must be torch.float32"),
    ],
)
def test_bad_input_raises_value_error_naming_the_argument(kwargs, name):
    args = dict(d=2, k=3, scheme="bn", n=16, batch=2, repeats=1, warmup=0, device="cpu", memory=False)
    args.update(kwargs)
    with pytest.raises(ValueError, match=name):
        measure_model(**args)


@pytest.mark.parametrize("kwargs, name", [(dict(d=0), "d"), (dict(k=9), "k"), (dict(scheme="zz"), "scheme"),
                                          (dict(batch=0), "batch"), (dict(itemsize=0), "itemsize")])
def test_attention_cost_bad_input(kwargs, name):
    args = dict(d=2, k=3, n=8, scheme="bn")
    args.update(kwargs)
    with pytest.raises(ValueError, match=name):
        attention_cost(**args)


def test_empty_grid_raises():
    with pytest.raises(ValueError, match="k_grid"):
        measure_grid([2], [], n=8, batch=2, device="cpu", memory=False)


def test_the_memory_measure_is_reexported_by_the_cost_package():
    import kmtrf_core.cost as cost
    from kmtrf_core.cost import memory

    for name in ("MEMORY_CUDA", "MEMORY_CPU_HWM", "MEMORY_CPU_FRESH", "cpu_peak_mb", "cuda_peak_mb"):
        assert getattr(cost, name) is getattr(memory, name)
    assert cpu_peak_mb([], threads=1) == ([], MEMORY_CPU_HWM)


def test_cuda_peak_mb_refuses_a_device_that_is_not_cuda():
    config = _configs([(2, 3, "bn")], n=8, batch=2, gamma=1.0, impl="direct", dtype=torch.float32, seed=0)[0]
    with pytest.raises(ValueError, match="device"):
        cuda_peak_mb(config, "cpu")


def test_string_choices_in_any_case_are_recorded_as_the_choice():
    r = measure_model(2, 3, "BN", impl="SDPA", memory=False, **TINY)
    assert (r.scheme, r.impl) == ("bn", "sdpa")  # the choice, not the spelling it was given in
    assert r.stats("FORWARD") == r.stats("forward")
    with pytest.raises(ValueError, match="metric"):
        r.stats("latency")


def test_check_dtype_takes_float32_and_float64_only():
    assert (check_dtype("float32"), check_dtype(torch.float64)) == (torch.float32, torch.float64)
    # names in any case, as check_choice takes every other option
    assert (check_dtype("Float32"), check_dtype(" FLOAT64 ")) == (torch.float32, torch.float64)
    for dtype in (torch.float16, torch.bfloat16, "bfloat16", "Float16", "BFLOAT16", "INT64", torch.int64, "float",
                  "", None):
        with pytest.raises(ValueError, match=r"^dtype must be torch.float32 or torch.float64"):
            check_dtype(dtype)
