import pandas as pd
import pytest

from kmtrf_core.book.ch08_cost import speedup_finding


def _measured(speedup):
    return pd.DataFrame({"forward_speedup": [0.9, speedup], "backward_speedup": [1.0, 3.0],
                         "memory_reduction_pct": [2.0, 50.0]}, index=[6, 100])


@pytest.mark.parametrize("speedup, expected", [(2.5, "reproduced"), (1.5, "partly"), (0.8, "not reproduced")])
def test_the_verdict_reads_the_largest_k(speedup, expected):
    finding = speedup_finding(_measured(speedup), None, d=32, n=512, device="cpu")
    assert finding.verdict == expected
    assert "at k = 100" in finding.value and "paper" not in finding.value


def test_the_paper_is_quoted_only_at_a_k_it_has():
    paper = pd.DataFrame({"forward_speedup": [0.88, 4.2]}, index=[6, 100])
    assert speedup_finding(_measured(2.5), paper, 32, 512, "cpu").value.endswith("paper 4.2x")
    assert "paper" not in speedup_finding(_measured(2.5), paper.iloc[:1], 32, 512, "cpu").value


def test_missing_columns_are_refused():
    with pytest.raises(ValueError, match="measured"):
        speedup_finding(pd.DataFrame({"forward_speedup": [2.0]}, index=[6]), None, 32, 512, "cpu")
