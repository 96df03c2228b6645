import pandas as pd
import pytest

from kmtrf_core.book.ch07_lipschitz import lipschitz_finding

BOUNDS_ORDERED = pd.DataFrame({"BN - OH (log10)": [0.5, 2.0]}, index=[2, 4])


def _measured(holds=(True, True, True, True), bn_minus_oh=(0.2, 0.1)):
    rows = []
    for i, (d, gap) in enumerate(zip((2, 4), bn_minus_oh)):
        rows.append(dict(d=d, scheme="oh", omega="l2", log10_measured=0.5, log10_refined=10.0 + d,
                         bound_holds=holds[2 * i]))
        rows.append(dict(d=d, scheme="bn", omega="l2", log10_measured=0.5 + gap, log10_refined=11.0 + d,
                         bound_holds=holds[2 * i + 1]))
    return pd.DataFrame(rows)


def test_all_three_checks_pass():
    finding = lipschitz_finding(_measured(), BOUNDS_ORDERED)
    assert finding.verdict == "reproduced"
    assert "orders of magnitude" in finding.value and "measured OH below BN in 2 of 2 settings" in finding.value


def test_the_measured_order_is_part_of_the_verdict():
    # the bounds order OH below BN by construction; the measurements must agree for "reproduced"
    finding = lipschitz_finding(_measured(bn_minus_oh=(0.2, -0.3)), BOUNDS_ORDERED)
    assert finding.verdict == "partly" and "1 of 2 settings" in finding.value and "-0.30" in finding.value


def test_each_check_counts_once():
    oh_not_smaller = pd.DataFrame({"BN - OH (log10)": [0.5, -0.1]}, index=[2, 4])
    assert lipschitz_finding(_measured(), oh_not_smaller).verdict == "partly"
    none = lipschitz_finding(_measured((True, False, True, True), bn_minus_oh=(-0.1, -0.1)), oh_not_smaller)
    assert none.verdict == "not reproduced"


def test_missing_columns_are_refused():
    with pytest.raises(ValueError, match="by_d"):
        lipschitz_finding(_measured(), pd.DataFrame({"d": [2]}))
    with pytest.raises(ValueError, match="measured"):
        lipschitz_finding(_measured().drop(columns="scheme"), BOUNDS_ORDERED)
