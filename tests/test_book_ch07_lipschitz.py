import pandas as pd
import pytest

from kmtrf_core.book.ch07_lipschitz import lipschitz_finding


def _measured(holds=(True, True)):
    return pd.DataFrame({"log10_measured": [0.5, 1.0], "log10_refined": [10.0, 21.0], "bound_holds": list(holds)})


def test_both_checks_pass():
    finding = lipschitz_finding(_measured(), pd.DataFrame({"BN - OH (log10)": [0.5, 2.0]}, index=[2, 4]))
    assert finding.verdict == "reproduced"
    assert "9.5 to 20.0 orders of magnitude" in finding.value


def test_each_check_counts_once():
    oh_not_smaller = pd.DataFrame({"BN - OH (log10)": [0.5, -0.1]}, index=[2, 4])
    assert lipschitz_finding(_measured(), oh_not_smaller).verdict == "partly"
    assert lipschitz_finding(_measured((True, False)), oh_not_smaller).verdict == "not reproduced"


def test_missing_columns_are_refused():
    with pytest.raises(ValueError, match="by_d"):
        lipschitz_finding(_measured(), pd.DataFrame({"d": [2]}))
