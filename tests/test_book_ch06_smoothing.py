import pandas as pd
import pytest

from kmtrf_core.book.ch06_smoothing import bound_finding


def _gaps(holds):
    return pd.DataFrame({"omega": ["ne", "l2", "ne", "l2"], "bound": [1.0, 0.5, 1.5, 0.75],
                         "search_max": [0.6, 0.45, 0.9, 0.75], "bound_holds": holds})


def test_the_bound_holding_everywhere_is_reproduced_and_the_l2_attainment_is_read_off():
    finding = bound_finding(_gaps([True] * 4), tau=0.5)
    assert finding.verdict == "reproduced"
    assert "4 of 4" in finding.value and "tau = 0.5" in finding.value
    assert "factor 1.0000" in finding.value  # the second L2 row reaches its bound


@pytest.mark.parametrize("holds, expected", [([True, False, True, True], "partly"), ([False] * 4, "not reproduced")])
def test_a_broken_bound_is_not_reproduced(holds, expected):
    assert bound_finding(_gaps(holds)).verdict == expected


def test_missing_columns_are_refused():
    with pytest.raises(ValueError, match="gaps"):
        bound_finding(pd.DataFrame({"omega": ["l2"], "bound": [1.0]}))
