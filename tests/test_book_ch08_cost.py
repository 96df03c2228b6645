import pandas as pd
import pytest

from kmtrf_core.book.ch08_cost import PAPER_FRACTION, speedup_finding, speedup_range

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


@pytest.mark.parametrize("low, high, expected", [(3.0, 3.5, "reproduced"), (2.9, 3.2, "inconclusive"),
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
