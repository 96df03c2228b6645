"""Intervals and margins for comparative verdicts (kmtrf_core.book.uncertainty)."""

import math

import numpy as np
import pytest

from kmtrf_core.book.uncertainty import (Comparison, bootstrap_interval, combine, compare, draws_interval,
                                         geometric_mean, geometric_text, log_ratios, point_value, range_ahead,
                                         range_text, tally, versus_text)


def test_the_interval_covers_the_true_mean_at_about_its_level():
    rng = np.random.default_rng(0)
    covered = 0
    for _ in range(200):
        values = 1.0 + 0.1 * rng.standard_normal(100)
        _, lo, hi = bootstrap_interval(values, resamples=400, seed=int(rng.integers(1 << 30)))
        covered += lo <= 1.0 <= hi
    assert 0.88 <= covered / 200 <= 0.99


def test_the_interval_shrinks_with_more_tasks_and_its_point_is_the_median_over_seeds_of_the_mean():
    rng = np.random.default_rng(1)
    few, many = 1 + 0.1 * rng.standard_normal(32), 1 + 0.1 * rng.standard_normal(1024)
    assert np.diff(bootstrap_interval(many)[1:])[0] < np.diff(bootstrap_interval(few)[1:])[0] / 3
    seeds = np.array([[0.8] * 4, [0.9] * 4, [1.5] * 4])
    assert bootstrap_interval(seeds)[0] == pytest.approx(0.9)


def test_a_paired_comparison_sees_a_small_shift_that_unpaired_noise_would_hide():
    rng = np.random.default_rng(2)
    tasks = 1 + 0.3 * rng.standard_normal((3, 256))  # tasks differ a lot from each other ...
    better = tasks - 0.02                            # ... the variant is better on each by 0.02
    assert compare(better, tasks, margin=0.01).verdict == "reproduced"
    assert compare(better, tasks, margin=0.03).verdict == "not reproduced"
    unpaired = 1 + 0.3 * rng.standard_normal((3, 256))
    assert compare(unpaired - 0.02, tasks, margin=0.01).verdict == "inconclusive"


def test_compare_with_a_threshold_and_diverged_tasks():
    assert compare(np.full(64, 0.9) + np.linspace(-0.01, 0.01, 64), 1.0).verdict == "reproduced"
    assert compare(np.full(64, 1.1), 1.0).verdict == "not reproduced"
    diverged = np.r_[np.full(63, 0.5), np.inf]
    assert compare(diverged, 1.0).verdict == "not reproduced"  # an infinite mean is not below Lloyd


@pytest.mark.parametrize("kwargs, match", [
    (dict(a=[1.0], b=1.0), "B >= 2"), (dict(a=[1.0, np.nan], b=1.0), "NaN"),
    (dict(a=[1.0, 2.0], b=[1.0, 2.0, 3.0]), "shape"), (dict(a=[1.0, 2.0], b=1.0, margin=-1), "margin"),
    (dict(a=[1.0, 2.0], b=float("inf")), "finite"), (dict(a=[1.0, 2.0], b=True), "finite"),
])
def test_bad_input_is_refused(kwargs, match):
    with pytest.raises(ValueError, match=match):
        compare(**kwargs)


def test_combine():
    assert combine(["reproduced"]) == "reproduced"
    assert combine(["reproduced", "not reproduced"]) == "partly"
    assert combine(["inconclusive", "inconclusive"]) == "inconclusive"
    assert combine(["not reproduced", "inconclusive"]) == "not reproduced"  # one check fails, none holds
    assert combine(["not reproduced"]) == "not reproduced"
    with pytest.raises(ValueError, match="verdicts"):
        combine([])
    with pytest.raises(ValueError, match="verdicts"):
        combine(["maybe"])


def test_range_ahead_and_range_text():
    assert range_ahead((800.0, 1100.0), (1300.0, 1600.0), 200) == "reproduced"  # exactly the margin
    assert range_ahead((800.0, 1101.0), (1300.0, 1600.0), 200) == "inconclusive"
    assert range_ahead((1300.0, 1600.0), (800.0, 1100.0), 200) == "not reproduced"
    assert range_ahead((800.0, 1100.0), (900.0, 1000.0), 0) == "inconclusive"  # nested
    assert range_ahead((800.0, 900.0), (900.0, 1000.0), 0) == "inconclusive"  # a tie is no order
    assert range_ahead((800.0, 899.0), (900.0, 1000.0), 0) == "reproduced"
    inf = float("inf")
    assert range_ahead((800.0, 900.0), (1000.0, inf), 100) == "reproduced"  # a seed that never gets there
    assert range_ahead((inf, inf), (inf, inf), 100) == "inconclusive"  # neither gets there
    assert range_ahead((inf, inf), (100.0, 200.0), 100) == "not reproduced"
    for a, b, margin, match in (((float("nan"), 1.0), (1.0, 2.0), 0, "NaN"), ((2.0, 1.0), (1.0, 2.0), 0, "after"),
                                ((1.0,), (1.0, 2.0), 0, "pairs"), ((1.0, 2.0), (1.0, 2.0), -1, "margin")):
        with pytest.raises(ValueError, match=match):
            range_ahead(a, b, margin)
    assert [range_text(*pair) for pair in ((1300.0, 1600.0), (5.0, 5.0), (900.0, inf), (inf, inf))] == [
        "1300-1600", "5", "900-never", "never"]


def test_a_task_that_diverged_on_both_sides_is_a_tie():
    a = np.ones((2, 8))
    b = np.full((2, 8), 2.0)
    a[1, 3] = b[1, 3] = np.inf
    c = compare(a, b)  # the other tasks: a below b by 1; the shared divergence: 0
    assert c.verdict == "reproduced" and np.isfinite([c.difference, c.low, c.high]).all()
    value, _, _ = bootstrap_interval(a, minus=b)
    assert value == np.median([-1.0, -7 / 8])
    b[1, 3] = 5.0  # one side only: that side does not beat the other
    assert compare(b, a).verdict == "reproduced" and compare(a, b).verdict == "not reproduced"


def test_draws_interval_is_the_central_percentile_interval():
    draws = np.random.default_rng(3).standard_normal(4000)
    low, high = draws_interval(draws)
    np.testing.assert_allclose((low, high), np.percentile(draws, [2.5, 97.5]), rtol=1e-14)
    assert np.mean((draws >= low) & (draws <= high)) == pytest.approx(0.95, abs=1e-3)
    np.testing.assert_allclose(draws_interval(draws, level=0.5), np.percentile(draws, [25, 75]), rtol=1e-14)
    assert all(np.isnan(draws_interval([1.0, np.nan, 2.0])))  # NaN stays visible, never separated
    for bad, match in (([], "draws must be a non-empty 1-D"), (np.ones((2, 3)), r"got shape \(2, 3\)")):
        with pytest.raises(ValueError, match=match):
            draws_interval(bad)
    for level in (0.0, 1.0, float("nan")):
        with pytest.raises(ValueError, match="level"):
            draws_interval(draws, level=level)


def test_comparison_text_keeps_huge_differences_short():
    small = Comparison(-0.031, -0.045, -0.018, 0.01, "reproduced").text()
    assert small == "-0.031 [-0.045, -0.018] (95% CI; margin 0.01)"
    huge = Comparison(3416902263908453.0, 76453157812843.9, 8.1e15, 0.01, "not reproduced").text()
    assert huge == "+3.417e+15 [+7.645e+13, +8.100e+15] (95% CI; margin 0.01)" and len(huge) < 60
    assert Comparison(math.inf, 1.0, math.inf, 0.0, "not reproduced").text().startswith("+inf [+1.000, +inf]")


def test_tally_counts_each_way_in_the_words_given():
    verdicts = ["reproduced", "not reproduced", "not reproduced", "inconclusive"]
    assert tally(verdicts) == "1 below, 2 above, 1 inconclusive"
    assert tally(verdicts, "better", "worse", "open") == "1 better, 2 worse, 1 open"
    assert tally(verdicts, None, "above") == "2 above, 1 inconclusive"
    assert tally(["reproduced"], zeros=False) == "1 below"
    assert tally([], zeros=False) == "" and tally([]) == "0 below, 0 above, 0 inconclusive"
    with pytest.raises(ValueError, match="verdicts"):
        tally(["partly"])  # a combined verdict is not one comparison's


def test_versus_text_names_each_statistic_and_the_seed_count():
    noise = 0.01 * np.random.default_rng(2).standard_normal((3, 64))
    a = np.array([[1.0], [1.5], [2.0]]) + noise
    b = np.array([[1.1], [1.2], [2.5]]) + noise  # per-seed differences -0.1, +0.3, -0.5: median -0.1
    c = compare(a, b, 0.01)
    text = versus_text("wide", a, "own", b, c, unit="training seed")
    assert text.startswith(f"wide {point_value(a):.3f} vs own {point_value(b):.3f} (medians over 3 training seeds, "
                           "the difference paired by seed) ")
    assert text.endswith(c.text()) and c.text().startswith("-0.100")
    assert round(point_value(a) - point_value(b), 3) == 0.3  # the medians' difference is another number
    one = versus_text("x", a[0], "y", b[0], compare(a[0], b[0]))
    assert "(medians over 1 seed, the difference paired by seed)" in one


# --- the paper's statistic for its multi-step figures: the mean over tasks of the log ratio ----------------------

FEW_BAD = np.r_[np.full(180, 0.6), np.full(20, 10.0)]  # 1 task in 10 at ten times Lloyd's loss


def test_log_ratios_keep_a_diverged_task_infinite_and_refuse_what_has_no_log():
    assert log_ratios([[1.0, math.e], [math.inf, 0.5]]).tolist() == [[0.0, 1.0], [math.inf, math.log(0.5)]]
    for bad in ([1.0, 0.0], [1.0, -2.0], [1.0, math.nan]):
        with pytest.raises(ValueError, match="values must be ratios above 0"):
            log_ratios(bad)
    with pytest.raises(ValueError, match="^a must be ratios above 0"):  # compare names its argument
        compare([1.0, -1.0], 1.0, statistic="geometric")
    with pytest.raises(ValueError, match="^b must be ratios above 0"):
        compare([1.0, 2.0], 0.0, statistic="geometric")


def test_the_geometric_and_the_arithmetic_verdicts_can_disagree():
    # the mean ratio is 1.54 (not below 1); the geometric mean 0.795 (below), as the paper's figures read it
    assert point_value(FEW_BAD) == pytest.approx(1.54)
    assert geometric_mean(FEW_BAD) == pytest.approx(math.exp(0.9 * math.log(0.6) + 0.1 * math.log(10.0)))
    assert compare(FEW_BAD, 1.0).verdict == "not reproduced"
    geometric = compare(FEW_BAD, 1.0, statistic="geometric")
    assert geometric.verdict == "reproduced"
    assert geometric.difference == pytest.approx(math.log(geometric_mean(FEW_BAD)))  # log units, against log 1
    assert geometric_text(geometric).startswith("geometric mean 0.795 [")
    # uniform ratios: both statistics agree; against another threshold, compared on its log
    assert compare(np.full(64, 0.5), 0.6, statistic="geometric").verdict == "reproduced"
    assert compare(np.full(64, 0.5), 0.4, statistic="geometric").verdict == "not reproduced"
    with pytest.raises(ValueError, match="statistic must be one of"):
        compare(FEW_BAD, 1.0, statistic="median")


def test_the_geometric_statistic_takes_diverged_tasks_and_pairs_like_the_mean():
    rng = np.random.default_rng(4)
    ratios = 0.8 * np.exp(0.1 * rng.standard_normal((2, 128)))
    blown = ratios.copy()
    blown[1, 7] = math.inf
    # one diverged task on one side only: that side does not beat the other, however good the rest
    assert compare(blown, 1.0, statistic="geometric").verdict == "not reproduced"
    assert compare(blown, ratios, statistic="geometric").verdict == "not reproduced"
    assert compare(ratios, blown, statistic="geometric").verdict == "reproduced"
    # diverged on both sides: a tie on that task; the rest decides (0.9 times the other on every task)
    assert compare(blown * 0.9, blown, statistic="geometric").verdict == "reproduced"
    paired = compare(ratios * 0.9, ratios, statistic="geometric")
    assert geometric_text(paired, label="times") == "times 0.900 [0.900, 0.900] (95% CI; margin 0)"
    # unpaired (other tasks): the quotient of the two geometric means, from the two intervals' ends
    unpaired = compare(ratios * 0.5, 0.8 * np.exp(0.1 * rng.standard_normal((2, 128))), paired=False,
                       statistic="geometric")
    assert unpaired.verdict == "reproduced" and 0.4 < math.exp(unpaired.low) < 0.5 < math.exp(unpaired.high) < 0.6


def test_a_geometric_margin_is_relative_and_written_back_as_given():
    ratios = np.full(64, 0.95)
    assert compare(ratios, 1.0, 0.01, statistic="geometric").verdict == "reproduced"   # 0.95 < 0.99
    assert compare(ratios, 1.0, 0.1, statistic="geometric").verdict == "not reproduced"  # 0.95 > 0.9
    comparison = compare(ratios, 1.0, 0.01, statistic="geometric")
    assert comparison.margin == pytest.approx(-math.log(0.99))
    assert geometric_text(comparison) == "geometric mean 0.950 [0.950, 0.950] (95% CI; margin 0.01)"
    assert geometric_text(comparison, reference=2.0, label="") == "1.900 [1.900, 1.900] (95% CI; margin 0.01)"
    with pytest.raises(ValueError, match="margin must be below 1"):
        compare(ratios, 1.0, 1.0, statistic="geometric")
    # a quotient beyond the float range is written as inf, and large ends in scientific notation
    assert "[inf, inf]" in geometric_text(Comparison(math.inf, math.inf, math.inf, 0.0, "not reproduced"))
    assert geometric_text(Comparison(30.0, 29.0, 31.0, 0.0, "not reproduced")).startswith("geometric mean 1.069e+13")


def test_geometric_mean_and_text_refuse_what_they_cannot_read():
    with pytest.raises(ValueError, match="values must be per-task values"):
        geometric_mean(2.0)
    with pytest.raises(ValueError, match="values must be per-task values"):
        geometric_mean(np.ones((2, 2, 2)))  # not silently read as (seeds, tasks)
    with pytest.raises(ValueError, match="comparison must be a Comparison"):
        geometric_text("x")
    with pytest.raises(ValueError, match="reference"):
        geometric_text(Comparison(0.0, 0.0, 0.0, 0.0, "inconclusive"), -1.0)


def test_geometric_text_says_when_both_sides_diverged():
    # unpaired, each side with a diverged task on a different seed: both means are inf, no difference
    a = np.full((2, 8), 0.9)
    b = np.full((2, 8), 1.1)
    a[0, 0], b[1, 0] = np.inf, np.inf
    comparison = compare(a, b, paired=False, statistic="geometric")
    assert math.isnan(comparison.difference) and comparison.verdict == "inconclusive"
    assert geometric_text(comparison, label="times").startswith("times undefined (both sides diverged on some tasks)")
