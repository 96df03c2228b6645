import pandas as pd
import pytest

from kmtrf_core.book.ch07_lipschitz import best_constants, lipschitz_finding, measure_constants
from kmtrf_core.book.profiles import get_profile
from kmtrf_core.lipschitz import lipschitz_bound

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
    assert finding.verdict == "partly" and "1 of 2 settings, BN below OH in 1" in finding.value
    assert "-0.30" in finding.value and "one search each" in finding.value


def _searches(oh, bn, d=2):
    """Per-search rows of one setting: OH's and BN's log10 measurements."""
    return pd.DataFrame([dict(d=d, scheme=scheme, omega="l2", search=i, log10_measured=value,
                              log10_refined=20.0, bound_holds=True)
                         for scheme, values in (("oh", oh), ("bn", bn)) for i, value in enumerate(values)])


def test_several_searches_order_only_when_the_ranges_are_apart():
    bounds = pd.DataFrame({"BN - OH (log10)": [0.5, 0.5]}, index=[2, 4])
    apart = pd.concat([_searches([0.40, 0.45, 0.50], [0.55, 0.60, 0.62]),
                       _searches([0.30, 0.35], [0.40, 0.41], d=4)])
    finding = lipschitz_finding(apart, bounds)
    assert finding.verdict == "reproduced" and "2 of 2 settings" in finding.value
    assert "searches each" in finding.value
    # one BN search below one OH search: the ranges overlap, so the order is open, not reversed
    overlap = pd.concat([_searches([0.40, 0.45, 0.50], [0.48, 0.60, 0.62]),
                         _searches([0.30, 0.35], [0.40, 0.41], d=4)])
    finding = lipschitz_finding(overlap, bounds)
    assert finding.verdict == "partly" and "1 with overlapping ranges" in finding.value
    assert "BN below OH" not in finding.value
    everything_open = pd.concat([_searches([0.40, 0.50], [0.45, 0.60]), _searches([0.30, 0.40], [0.35, 0.41], d=4)])
    # the bound checks hold, the order is open everywhere: partly
    assert lipschitz_finding(everything_open, bounds).verdict == "partly"


def test_measure_constants_repeats_independent_searches():
    sizes = get_profile("quick").chapter("lipschitz")
    table = measure_constants(sizes, searches=2)
    assert len(table) == len(sizes.emp_d_grid) * 2 * 2 * 2
    assert table.groupby(["d", "scheme", "omega"]).search.nunique().eq(2).all()
    assert table.bound_holds.all()
    # each row is empirical_lipschitz on the documented tasks; the two searches differ
    first = table[(table.d == sizes.emp_d_grid[0]) & (table.scheme == "bn") & (table.omega == "l2")]
    assert first.quotient.nunique() == 2
    bound = lipschitz_bound(sizes.emp_n, sizes.emp_k, sizes.emp_d_grid[0], "bn", tau=0.1, omega="l2",
                            combine="sum", refined=True)
    assert first.log10_refined.iloc[0] == bound.log10_alpha
    assert (first.log10_measured < bound.log10_alpha).all()
    # a search does not depend on how many others run: one search is the first of two
    one = measure_constants(sizes, searches=1)
    pd.testing.assert_frame_equal(one, table[table.search == 0].reset_index(drop=True))
    pd.testing.assert_frame_equal(table, measure_constants(sizes, searches=2))  # seeded
    best = best_constants(table)
    assert len(best) == len(table) // 2
    assert (best.log10_measured >= best.log10_lowest).all() and best.searches.eq(2).all()
    with pytest.raises(ValueError, match="searches"):
        measure_constants(sizes, searches=0)
    with pytest.raises(ValueError, match="measured"):
        best_constants(table.drop(columns="gradient"))


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
    with pytest.raises(ValueError, match="finite log10_measured"):
        lipschitz_finding(_measured().assign(log10_measured=float("nan")), BOUNDS_ORDERED)
    only_oh = _measured()
    with pytest.raises(ValueError, match=r"OH and BN rows .*\('l2', 4\)"):
        lipschitz_finding(only_oh[~((only_oh.d == 4) & (only_oh.scheme == "bn"))], BOUNDS_ORDERED)
