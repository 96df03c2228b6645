import pandas as pd
import pytest

from kmtrf_core.book.ch08_cost import (PAPER_FRACTION, kernel_memory_lines, range_above, range_within,
                                      ranges_above, ranges_grow, speedup_finding, speedup_range)

PAPER = pd.DataFrame({"forward_speedup": [0.88, 4.0, 12.1]}, index=[6, 100, 1000])


def _measured(speedup):
    return pd.DataFrame({"forward_speedup": [0.9, speedup], "backward_speedup": [1.0, 3.0],
                         "memory_reduction_pct": [2.0, 50.0]}, index=[6, 100])


@pytest.mark.parametrize("speedup, expected", [(3.0, "reproduced"), (2.99, "partly"), (1.5, "partly"),
                                               (0.8, "not reproduced")])
def test_the_verdict_compares_with_the_paper_at_the_largest_shared_k(speedup, expected):
    assert PAPER_FRACTION * 4.0 == 3.0
    finding = speedup_finding(_measured(speedup), PAPER, d=32, n=512, device="cpu")
    assert finding.verdict == expected
    assert "at k = 100" in finding.value and "of the paper's 4.00x" in finding.value
    assert "75% of the paper's 4.00x" in finding.check


def test_a_stricter_fraction_and_no_shared_k():
    assert speedup_finding(_measured(3.0), PAPER, 32, 512, "cpu", fraction=0.9).verdict == "partly"
    with pytest.raises(ValueError, match="share no k"):
        speedup_finding(_measured(3.0), PAPER.loc[[1000]], 32, 512, "cpu")


def test_missing_columns_are_refused():
    with pytest.raises(ValueError, match="measured"):
        speedup_finding(pd.DataFrame({"forward_speedup": [2.0]}, index=[6]), PAPER, 32, 512, "cpu")
    with pytest.raises(ValueError, match="paper"):
        speedup_finding(_measured(3.0), pd.DataFrame({"x": [1.0]}, index=[100]), 32, 512, "cpu")


def _raw():
    return pd.DataFrame({"k": [6, 6, 100, 100], "scheme": ["oh", "bn", "bn", "oh"],
                         "forward_min_ms": [1.0, 1.1, 2.0, 6.0], "forward_max_ms": [1.5, 1.2, 2.5, 9.0],
                         "backward_min_ms": [2.0, 2.0, 3.0, 9.0], "backward_max_ms": [2.0, 2.0, 3.0, 9.0]})


def test_speedup_range_pairs_the_extreme_repetitions():
    ranges = speedup_range(_raw())
    assert ranges.loc[6].tolist() == pytest.approx([1.0 / 1.2, 1.5 / 1.1])
    assert ranges.loc[100].tolist() == pytest.approx([6.0 / 2.5, 9.0 / 2.0])
    assert speedup_range(_raw(), "backward").loc[100].tolist() == pytest.approx([3.0, 3.0])
    with pytest.raises(ValueError, match="one row of scheme 'bn' per k"):
        speedup_range(pd.concat([_raw(), _raw().iloc[[1]]]))
    with pytest.raises(ValueError, match="no k measured for both"):
        speedup_range(_raw().assign(k=[6, 7, 8, 9]))
    with pytest.raises(ValueError, match="raw"):
        speedup_range(_raw().drop(columns="forward_max_ms"))


# (2.9, 3.2): faster on the whole range, the paper's fraction (3.0) undecided: partly, as the ledger combines
@pytest.mark.parametrize("low, high, expected", [(3.0, 3.5, "reproduced"), (2.9, 3.2, "partly"),
                                                 (1.2, 2.9, "partly"), (0.9, 2.0, "inconclusive"),
                                                 (0.5, 1.0, "not reproduced")])
def test_with_ranges_the_verdict_needs_the_whole_range(low, high, expected):
    measured = _measured((low + high) / 2)
    ranges = pd.DataFrame({"low": [0.9, low], "high": [1.0, high]}, index=[6, 100])
    finding = speedup_finding(measured, PAPER, 32, 512, "cpu", ranges=ranges)
    assert finding.verdict == expected
    assert f"{low:.2f}x to {high:.2f}x over the repetitions" in finding.value
    assert "whole range" in finding.check


def test_ranges_must_cover_the_value_and_the_k():
    with pytest.raises(ValueError, match="must hold the measured"):
        speedup_finding(_measured(3.0), PAPER, 32, 512, "cpu",
                        ranges=pd.DataFrame({"low": [3.1], "high": [3.5]}, index=[100]))
    with pytest.raises(ValueError, match="no row for k = 100"):
        speedup_finding(_measured(3.0), PAPER, 32, 512, "cpu",
                        ranges=pd.DataFrame({"low": [1.0], "high": [1.0]}, index=[6]))


def test_speedup_range_per_grid_point_of_several_columns():
    grid = pd.DataFrame({"d": [2, 2, 4, 4], "k": [6, 6, 6, 6], "scheme": ["oh", "bn", "oh", "bn"],
                         "forward_min_ms": [1.0, 1.0, 2.0, 1.0], "forward_max_ms": [1.5, 1.2, 2.2, 1.1]})
    ranges = speedup_range(grid, by=["d", "k"])
    assert ranges.index.tolist() == [(2, 6), (4, 6)]
    assert ranges.loc[(2, 6)].tolist() == pytest.approx([1.0 / 1.2, 1.5])
    with pytest.raises(ValueError, match="exactly one row"):
        speedup_range(grid.assign(d=2), by=["d", "k"])


@pytest.mark.parametrize("low, high, expected", [(1.01, 2.0, True), (0.5, 1.0, False), (0.99, 1.01, "inconclusive")])
def test_range_above(low, high, expected):
    assert range_above(low, high) == expected


@pytest.mark.parametrize("low, high, expected", [(0.8, 1.25, True), (0.5, 0.79, False), (1.26, 2.0, False),
                                                 (0.7, 0.9, "inconclusive"), (0.5, 2.0, "inconclusive")])
def test_range_within(low, high, expected):
    assert range_within(low, high, 0.8, 1.25) == expected


def test_ranges_grow_with_slack():
    ranges = pd.DataFrame({"low": [1.0, 0.95, 3.0], "high": [1.05, 1.1, 3.5]}, index=[6, 100, 1000])
    assert ranges_grow(ranges) == "inconclusive"        # 0.95 below the previous 1.05
    assert ranges_grow(ranges, slack=0.1) is True      # 0.95 >= 0.9 * 1.05
    assert ranges_grow(ranges.iloc[::-1], slack=0.1) is False  # 1.1 < 0.9 * 3.0
    assert ranges_grow(ranges.iloc[:1]) is True        # one row: nothing falls


def test_range_helpers_refuse_bad_input():
    with pytest.raises(ValueError, match="low <= high"):
        range_above(2.0, 1.0)
    with pytest.raises(ValueError, match="low <= high"):
        range_within(float("nan"), 1.0, 0.8, 1.25)
    with pytest.raises(ValueError, match="lower must not be above upper"):
        range_within(1.0, 1.1, 1.25, 0.8)
    with pytest.raises(ValueError, match="slack"):
        ranges_grow(pd.DataFrame({"low": [1.0], "high": [1.0]}), slack=1.0)
    with pytest.raises(ValueError, match="ranges"):
        ranges_grow(pd.DataFrame({"low": [1.0]}))


def _peaks(rows):
    """A measure_grid-like table from {(k, scheme): (least, largest peak in MB)}."""
    return pd.DataFrame([(k, scheme, low, high) for (k, scheme), (low, high) in rows.items()],
                        columns=["k", "scheme", "peak_min_mb", "peak_max_mb"])


def test_memory_ranges_read_every_pair_of_measurements():
    table = _peaks({(6, "oh"): (36.3, 36.4), (6, "bn"): (36.1, 36.2), (100, "oh"): (60.0, 61.0),
                    (100, "bn"): (60.5, 62.0)})
    ratio = speedup_range(table, "peak")  # OH / BN peak
    assert ratio.loc[6].tolist() == pytest.approx([36.3 / 36.2, 36.4 / 36.1])
    assert ranges_above(ratio.loc[[6]]) is True           # BN below OH in every pair at k = 6
    assert ranges_above(ratio) == "inconclusive"          # at k = 100 the measurements overlap
    assert ranges_above(ratio.assign(low=[1.01, 0.9], high=[1.02, 0.95])) is False
    with pytest.raises(ValueError, match="peak_min_mb"):
        speedup_range(table.drop(columns="peak_min_mb"), "peak")
    with pytest.raises(ValueError, match="ranges has no rows"):
        ranges_above(ratio.iloc[:0])


def test_kernel_memory_lines_say_yes_no_or_inconclusive():
    direct = _peaks({(6, "oh"): (36.3, 36.4), (6, "bn"): (36.1, 36.2), (100, "oh"): (60.0, 61.0),
                     (100, "bn"): (40.0, 40.5)})
    fused = _peaks({(6, "oh"): (10.0, 10.5), (6, "bn"): (9.7, 9.9), (100, "oh"): (30.0, 30.2),
                    (100, "bn"): (15.0, 15.1)})
    lower, larger = kernel_memory_lines(direct, fused).splitlines()
    assert lower.startswith("sdpa lowers the peak of both schemes at the smallest k = 6, where the weights "
                            "dominate: yes (OH 10.0-10.5 MB vs 36.3-36.4 MB")
    assert larger.startswith("sdpa makes BN's relative memory reduction larger at every k: yes (k=6: ")
    # the kernels swapped: both answers turn to no
    lower, larger = kernel_memory_lines(fused, direct, names=("fused", "direct")).splitlines()
    assert ": no (" in lower and ": no (" in larger and lower.startswith("direct lowers")
    # the fused OH peak overlapping the direct one at k = 6: that answer is inconclusive
    overlapping = fused.copy()
    overlapping.loc[0, ["peak_min_mb", "peak_max_mb"]] = [36.0, 36.35]
    assert ": inconclusive (" in kernel_memory_lines(direct, overlapping).splitlines()[0]
    with pytest.raises(ValueError, match="fused must hold one row of scheme 'bn' at k = 6"):
        kernel_memory_lines(direct, fused[fused.scheme == "oh"])
    with pytest.raises(ValueError, match="direct"):
        kernel_memory_lines(direct.drop(columns="peak_max_mb"), fused)
    with pytest.raises(ValueError, match="fused must hold measured peaks"):
        kernel_memory_lines(direct, fused.assign(peak_min_mb=float("nan")))
    with pytest.raises(ValueError, match="names"):
        kernel_memory_lines(direct, fused, names=("sdpa",))
    # a k measured with one kernel only is left out of the second line
    extra = pd.concat([fused, _peaks({(400, "oh"): (90.0, 91.0), (400, "bn"): (30.0, 31.0)})], ignore_index=True)
    larger = kernel_memory_lines(direct, extra).splitlines()[1]
    assert "k=6: " in larger and "k=100: " in larger and "k=400" not in larger
