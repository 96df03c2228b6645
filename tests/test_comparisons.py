"""The comparisons chapters share, each a verdict decided on intervals (kmtrf_core.book.comparisons)."""

import numpy as np
import pytest

from kmtrf_core.book.comparisons import below_finding, better_finding, interval_finding, versus_finding
from kmtrf_core.book.uncertainty import compare


def test_better_below_and_versus_findings_decide_on_intervals():
    rng = np.random.default_rng(0)
    tasks = 1 + 0.1 * rng.standard_normal((3, 256))
    better = better_finding({"lloyd": tasks, "oh": tasks - 0.05, "bn": tasks + 0.05}, "lloyd", "loss")
    assert better.verdict == "partly" and "oh" in better.value and "95% CI" in better.value
    assert better_finding({"base": tasks, "same": tasks + 0.001}, "base", "loss").verdict == "not reproduced"
    assert below_finding({"a": tasks - 0.5, "b": tasks - 0.2}, "ratio").verdict == "reproduced"
    assert below_finding({"a": tasks + 0.2}, "ratio").verdict == "not reproduced"
    assert below_finding({"a": tasks}, "ratio").verdict == "inconclusive"  # 1.0 +- 0.01: inside the noise
    assert below_finding({"a": tasks + 0.5}, "ratio", threshold=2.0).verdict == "reproduced"
    samples = {("plain", "normal"): tasks, ("ffn", "normal"): tasks - 0.1,
               ("plain", "gumbel"): tasks + 0.1, ("ffn", "gumbel"): tasks}
    versus = versus_finding(samples, "ffn", "plain")
    assert versus.verdict == "reproduced" and "normal" in versus.value and versus.uncertainty


def test_interval_finding_counts_each_way_and_leaves_out_zero_counts():
    rng = np.random.default_rng(1)
    tasks = 1 + 0.1 * rng.standard_normal(256)
    outcomes = {"low": compare(tasks - 0.5, 1.0), "high": compare(tasks + 0.5, 1.0), "noise": compare(tasks, 1.0)}
    assert [c.verdict for c in outcomes.values()] == ["reproduced", "not reproduced", "inconclusive"]
    finding = interval_finding("v", outcomes, "all below 1", "below 1")
    assert finding.verdict == "partly"
    assert finding.report == "1 of 3 below 1 (95% intervals), 1 not, 1 inconclusive -> partly"
    assert finding.uncertainty.startswith("low: -0.5") and finding.uncertainty.count("95% CI") == 3
    every = interval_finding("v", {"low": outcomes["low"]}, "below 1", "below 1")
    assert (every.verdict, every.report) == ("reproduced", "1 of 1 below 1 (95% intervals) -> reproduced")
    assert interval_finding("v", {"high": outcomes["high"]}, "c", "below 1").verdict == "not reproduced"
    with pytest.raises(ValueError):
        interval_finding("v", {}, "c", "below 1")  # no comparison: no verdict


def test_below_finding_on_the_geometric_mean_decides_on_log_ratios_and_prints_ratios():
    few_bad = np.r_[np.full(180, 0.6), np.full(20, 10.0)]  # mean ratio 1.54, geometric mean 0.795
    good = np.full(64, 0.9)
    mean = below_finding({"OH": few_bad, "BN": good}, "ratio")
    geometric = below_finding({"OH": few_bad, "BN": good}, "ratio", statistic="geometric")
    assert mean.verdict == "partly" and geometric.verdict == "reproduced"
    assert geometric.value.startswith("ratio, geometric mean over tasks: OH 0.795 [")
    assert "BN 0.900 [0.900, 0.900] (95% CI; margin 0)" in geometric.value
    assert geometric.uncertainty.startswith("OH: 0.795 [") and "BN: 0.900 [0.900, 0.900]" in geometric.uncertainty
    assert geometric.check == "every geometric mean over tasks below 1, its 95% interval entirely below"
    assert geometric.report == "2 of 2 below 1 (95% intervals) -> reproduced"
    # another threshold is compared on its log, a margin relative to it
    assert below_finding({"BN": good}, "r", threshold=0.95, statistic="geometric").verdict == "reproduced"
    strict = below_finding({"BN": good}, "r", threshold=0.95, margin=0.1, statistic="geometric")
    assert strict.verdict == "not reproduced" and "below 0.95 times 0.9" in strict.check
    # a diverged task is a loss on either statistic
    blown = good.copy()
    blown[3] = np.inf
    assert below_finding({"BN": blown}, "r", statistic="geometric").verdict == "not reproduced"
    with pytest.raises(ValueError, match="statistic must be one of"):
        below_finding({"BN": good}, "r", statistic="log")
