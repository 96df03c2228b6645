import pandas as pd
import pytest

from kmtrf_core.book.ch08_cost import PAPER_FRACTION, speedup_finding

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
