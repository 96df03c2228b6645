"""Chapter 11's readings and verdicts of Figures 7, 8/18 and 12 (kmtrf_core.book.ch11_generalization)."""


import numpy as np
import pandas as pd
import pytest

from kmtrf_core.book import get_profile
from kmtrf_core.book.groups import PAPER_SCHEMES
from kmtrf_core.book.ch11_generalization import (
    cell_verdicts,
    family_finding,
    family_summary,
    length_finding,
    point_counts,
    ratio_table,
    scheme_layers,
    shift_finding,
)
from kmtrf_core.objectives import OMEGAS
from kmtrf_core.tasks import FAMILIES, SHIFTS


def test_scheme_layers_picks_the_l2_layers():
    models = {(s, o): f"{s}-{o}" for s in PAPER_SCHEMES for o in OMEGAS}
    assert scheme_layers(models) == {"oh": "oh-l2", "bn": "bn-l2", "na": "na-l2"}
    assert list(scheme_layers(models, schemes=("bn", "oh"), omega="ne")) == ["bn", "oh"]


def test_ratio_table_first_and_last_step(step_table):
    table = step_table({"oh": {"reembed": [[4, 2, 1], [4, 4, 3]]},
                               "bn": {"reembed": [[4, 8, 8], [4, 8, 8]]}}, [4.0, 4.0, 4.0])
    out = ratio_table(table)
    assert list(out.columns) == ["ratio_step1", "ratio_step2"]
    assert out.loc[("normal", "oh")].tolist() == [0.75, 0.5]
    assert out.loc[("normal", "bn")].tolist() == [2.0, 2.0]
    assert ratio_table(table, by=["model"]).index.tolist() == ["bn", "oh"]


def _shift_final(oh, bn, na=1.0):
    index = ["no shift", *SHIFTS]
    return pd.DataFrame({"oh": oh, "bn": bn, "na": na}, index=index)


def _samples(final, spread=0.02):
    # per-task ratios scattered by a factor around the cell's value (positive, as ratios are)
    noise = np.exp(spread * np.random.default_rng(0).standard_normal((2, 128)))
    return {(shift, scheme): final.loc[shift, scheme] * noise for shift in final.index for scheme in ("oh", "bn")}


def _few_bad(shape):
    """1 task in 10 at 20 times Lloyd's loss, the rest at 0.5: a mean ratio above 1, a geometric mean of 0.7."""
    seeds, tasks = shape
    return np.tile(np.r_[np.full(tasks - tasks // 10, 0.5), np.full(tasks // 10, 20.0)], (seeds, 1))


FEW_BAD = _few_bad((2, 256))


def test_cell_verdicts_decide_on_the_papers_statistic_unless_told():
    rng = np.random.default_rng(5)
    cells = {"few bad": FEW_BAD, "good": 0.8 * np.exp(0.05 * rng.standard_normal((2, 64))),
             "diverged": np.r_[np.full(63, 0.5), np.inf]}
    assert cell_verdicts(cells) == {"few bad": "reproduced", "good": "reproduced", "diverged": "not reproduced"}
    assert cell_verdicts(cells, statistic="arithmetic") == {"few bad": "not reproduced", "good": "reproduced",
                                                            "diverged": "not reproduced"}
    with pytest.raises(ValueError, match="ratios above 0"):
        cell_verdicts({"negative": np.r_[0.5, -0.1]})


def test_shift_finding_expects_every_shift_double_scale_included_to_beat_lloyd_by_the_last_step():
    assert "double scale" in SHIFTS
    all_but_double = [0.5 if s != "double scale" else 1.5 for s in SHIFTS]
    final = _shift_final([0.9, *all_but_double], [0.9, *all_but_double])
    finding = shift_finding(final, 20, _samples(final))
    assert finding.verdict == "partly"  # the paper's double scale is a win too by T = 20
    assert finding.value.startswith("OH/BN beat Lloyd after 20 steps under 3 of 4 shifts on the paper's statistic "
                                    "(geometric mean over tasks, 95% intervals), 3 of 4 on the mean ratio")
    assert finding.value.endswith("geometric means 0.50 to 1.50")
    assert "the geometric mean ratio to Lloyd below 1" in finding.check
    assert "Paper: all 4 by T = 20 (double scale only eventually)" in finding.report
    every = _shift_final([0.9] + [0.5] * len(SHIFTS), [0.9] + [0.5] * len(SHIFTS))
    assert shift_finding(every, 20, _samples(every)).verdict == "reproduced"
    lost = _shift_final([2.0] * 5, [2.0] * 5)
    finding = shift_finding(lost, 20, _samples(lost))
    assert finding.verdict == "not reproduced" and "4 lost" in finding.report


def test_a_shift_inside_the_noise_is_inconclusive_not_a_win():
    near = _shift_final([0.9] + [0.999] * len(SHIFTS), [0.9] + [0.5] * len(SHIFTS))
    finding = shift_finding(near, 20, _samples(near, spread=0.2))
    assert finding.verdict == "inconclusive" and "0 lost, 4 inconclusive" in finding.report


def test_shift_finding_reports_unshifted_ratios_and_drift():
    final = _shift_final([1.0, 1.5, 0.25, 1.0, 1.0], [2.0, 2.0, 2.0, 2.0, 2.0], na=3.0)
    lines = shift_finding(final, 6, _samples(final)).report.splitlines()
    assert lines[1] == "On the mean ratio over tasks (stricter): 0 of 4; 4 lost, 0 inconclusive"  # BN at 2
    assert lines[2] == ("Unshifted reference after T steps, median over seeds of the mean ratio to Lloyd: "
                        "OH:L2 1.00, BN:L2 2.00, NA:L2 3.00; geometric mean: OH:L2 1.00, BN:L2 2.00")
    # OH moves by a factor 1.5 and 0.25 under the first two shifts, beyond the noise; nothing else moves
    assert lines[3].startswith("Under a shift, relative to no shift, OH/BN's final geometric mean is lower in 1, "
                               "higher in 1, not separated in 6 of 8 (test, embedding) cases (unpaired 95% intervals "
                               f"over tasks); largest change {list(SHIFTS)[1]} OH: times 0.250 [")


def test_shift_finding_counts_the_mean_ratio_beside_the_papers_statistic():
    final = _shift_final([0.8] * 5, [0.8] * 5)
    samples = {key: FEW_BAD for key in _samples(final)}  # every shift: a few bad tasks
    samples[(list(SHIFTS)[0], "bn")] = 0.8 * _samples(final)[(list(SHIFTS)[0], "bn")]  # uniformly good
    finding = shift_finding(final, 20, samples)
    assert finding.verdict == "reproduced"  # the geometric mean: below 1 under every shift
    lines = finding.report.splitlines()
    assert lines[0].startswith("OH and BN beat Lloyd after 20 steps under 4 of 4 shifts on the paper's statistic "
                               "(geometric mean over tasks): 4 of 4 (")
    assert lines[1] == "On the mean ratio over tasks (stricter): 0 of 4; 4 lost, 0 inconclusive"
    assert ", 0 of 4 on the mean ratio;" in finding.value


def _matrix(values, families=FAMILIES):
    return pd.DataFrame(values, index=list(families), columns=list(families))


def test_family_summary_and_finding():
    values = np.full((5, 5), 0.5)
    values[:, 1] = 3.0  # cauchy-trained column
    values[1, :] = 2.0  # cauchy test row
    matrix = _matrix(values)
    noise = 0.02 * np.random.default_rng(0).standard_normal((3, 64))
    samples = {(train, test, scheme): matrix.loc[test, train] * (0.5 if scheme == "bn" else 1) + noise
               for train in FAMILIES for test in FAMILIES for scheme in ("oh", "bn")}
    summary = family_summary({"oh": matrix, "bn": matrix * 0.5, "na": matrix * 9}, samples)
    assert summary.index.tolist() == ["OH:L2", "BN:L2"]
    oh = summary.loc["OH:L2"]
    assert oh.cauchy_trained_median_ratio == 3.0
    assert oh.other_trained_mean_ratio == pytest.approx((0.5 * 16 + 2.0 * 4) / 20)
    assert oh.cauchy_test_row_ratio == 2.0 and oh.block_4x4_cells_beating_lloyd == 16
    assert oh.block_4x4_cells_inconclusive == 0 and oh.block_4x4_cells_beating_lloyd_mean_ratio == 16
    finding = family_finding(summary, 20, samples)
    assert finding.verdict == "reproduced"
    assert finding.value == ("32 of 32 OH/BN cells of the non-cauchy 4x4 block below Lloyd after 20 steps on the "
                             "paper's statistic (geometric mean over tasks, 95% intervals; 32 below, 0 above, 0 "
                             "inconclusive), 32 of 32 on the mean ratio; cauchy-trained layers above Lloyd in 9 of 10 "
                             "cells and worse than the other layer in 32 of 40 paired comparisons")
    assert "the geometric mean ratio to Lloyd below 1" in finding.check
    lines = finding.report.splitlines()
    assert "medians OH:L2 3.000, BN:L2 1.500" in lines[0]
    # BN's cauchy cell of the cauchy column is at 1.0, and on cauchy tasks every layer is at the same value
    assert lines[0].endswith("above Lloyd in 9 of 10 (test family, embedding) cells (0 below, 9 above, 1 "
                             "inconclusive; on the mean ratio 9 above); worse than the layer trained on the other "
                             "family, paired on the same tasks, in 32 of 40 (0 better, 32 worse, 8 inconclusive)")
    # OH's cauchy row is at 2.0 (above Lloyd), BN's at 1.0 (inside the noise)
    assert lines[1].endswith("above Lloyd in 4 of 8 (training family, embedding) cells (0 below, 4 above, "
                             "4 inconclusive; on the mean ratio 4 above)")
    assert lines[2] == ("Lower-right 4x4 block on the paper's statistic (geometric mean over tasks), 95% intervals: "
                        "32 of 32 (OH + BN) cells below Lloyd after 20 steps (32 below, 0 above, 0 inconclusive) -> "
                        "reproduced; on the mean ratio (stricter): 32 of 32 (32 below, 0 above, 0 inconclusive)")
    above = {key: value + 1 for key, value in samples.items()}
    assert family_finding(summary, 20, above).verdict == "not reproduced"
    samples[("normal", "gumbel", "bn")] = 1.0 + noise  # one cell inside the noise
    assert family_finding(summary, 20, samples).verdict == "partly"
    # a few bad tasks in two block cells: below Lloyd on the paper's statistic, not on the mean ratio
    samples[("normal", "gumbel", "bn")] = samples[("gumbel", "laplace", "oh")] = _few_bad(noise.shape)
    finding = family_finding(summary, 20, samples)
    assert finding.verdict == "reproduced" and ", 30 of 32 on the mean ratio;" in finding.value
    assert finding.report.splitlines()[2].endswith("on the mean ratio (stricter): 30 of 32 (30 below, 2 above, "
                                                   "0 inconclusive)")
    # a cauchy-trained cell with a few bad tasks: above Lloyd on the mean ratio, below on the geometric mean
    samples[("cauchy", "normal", "oh")] = _few_bad(noise.shape)
    lines = family_finding(summary, 20, samples).report.splitlines()
    assert "(1 below, 8 above, 1 inconclusive; on the mean ratio 9 above)" in lines[0]


def test_family_summary_counts_block_cells_on_their_intervals_not_their_medians():
    values = np.full((5, 5), 0.5)
    values[:, 1] = 3.0  # cauchy-trained column
    matrix = _matrix(values)
    spread = np.random.default_rng(2).standard_normal((2, 64))
    samples = {(train, test, scheme): matrix.loc[test, train] + 0.02 * spread
               for train in FAMILIES for test in FAMILIES for scheme in ("oh", "bn")}
    # two OH cells whose median is below 1 but whose tasks straddle it: not counted as beating Lloyd
    samples[("normal", "gumbel", "oh")] = 0.98 * np.exp(0.5 * spread)
    samples[("gumbel", "normal", "oh")] = 0.95 * np.exp(0.5 * spread)
    matrix_oh = matrix.copy()
    matrix_oh.loc["gumbel", "normal"], matrix_oh.loc["normal", "gumbel"] = 0.98, 0.95
    summary = family_summary({"oh": matrix_oh, "bn": matrix}, samples)
    assert (matrix_oh.drop(index="cauchy", columns="cauchy") < 1).to_numpy().sum() == 16  # the medians say 16
    assert summary.loc["OH:L2"].block_4x4_cells_beating_lloyd == 14
    assert summary.loc["OH:L2"].block_4x4_cells_inconclusive == 2
    assert summary.loc["BN:L2"].block_4x4_cells_beating_lloyd == 16
    # a few bad tasks: below on the paper's statistic, not on the mean ratio (counted beside)
    samples[("normal", "normal", "bn")] = _few_bad(spread.shape)
    bn = family_summary({"oh": matrix_oh, "bn": matrix}, samples).loc["BN:L2"]
    assert (bn.block_4x4_cells_beating_lloyd, bn.block_4x4_cells_beating_lloyd_mean_ratio) == (16, 15)
    # the count is the one family_finding decides on
    finding = family_finding(summary, 20, samples)
    assert finding.value.startswith(f"{int(summary.block_4x4_cells_beating_lloyd.sum())} of 32 OH/BN cells")
    del samples[("normal", "gumbel", "bn")]
    with pytest.raises(ValueError, match="samples lacks 1 .*non-cauchy block.*'normal', 'gumbel', 'bn'"):
        family_summary({"oh": matrix, "bn": matrix}, samples)


def test_family_finding_refuses_incomplete_samples():
    matrix = _matrix(np.full((5, 5), 0.5))
    noise = 0.02 * np.random.default_rng(0).standard_normal((2, 16))
    samples = {(train, test, scheme): 0.5 + noise
               for train in FAMILIES for test in FAMILIES for scheme in ("oh", "bn")}
    summary = family_summary({"oh": matrix, "bn": matrix}, samples)
    del samples[("cauchy", "normal", "bn")]
    with pytest.raises(ValueError, match="samples lacks 1 .*'cauchy', 'normal', 'bn'"):
        family_finding(summary, 20, samples)
    no_cauchy = [f for f in FAMILIES if f != "cauchy"]
    with pytest.raises(ValueError, match="families must include 'cauchy'"):
        family_finding(summary, 20, samples, families=no_cauchy)


def test_point_counts():
    sizes = get_profile("quick").chapter("section4")
    assert point_counts(sizes, [0.5, 1, 2, 4]) == [16, 32, 64, 128]
    assert point_counts(sizes, [0.01]) == [sizes.k]


def test_length_finding():
    final = pd.DataFrame({"oh": [0.5, 0.8, 0.9], "bn": [0.6, 0.7, 1.0], "na": 5.0},
                         index=["n=8", "n=16", "n=32"])
    noise = 0.02 * np.random.default_rng(1).standard_normal((2, 64))
    samples = {(row, scheme): final.loc[row, scheme] + noise for row in final.index for scheme in ("oh", "bn")}
    finding = length_finding(final, [8, 16, 32], 16, 6, samples)
    assert finding.verdict == "partly"  # BN at n=32 sits on 1: inconclusive
    assert finding.value == ("OH/BN below Lloyd in 5 of 6 (n, embedding) cases on the paper's statistic (geometric "
                             "mean over tasks, 95% intervals; 5 below, 0 above, 1 inconclusive), 5 of 6 on the mean "
                             "ratio, n = 8 to 32 for training n = 16")
    assert "the geometric mean ratio to Lloyd below 1" in finding.check
    assert finding.report.splitlines()[1] == "On the mean ratio over tasks (stricter): 5 of 6 (5 below, 0 above, " \
                                             "1 inconclusive)"
    # from the training length n=16: OH 0.8 -> 0.5 (n=8) and 0.9 (n=32), BN 0.7 -> 0.6 and 1.0, all beyond the
    # noise; the largest factor is OH's 0.5 / 0.8
    assert finding.report.splitlines()[-1].startswith(
        "Relative to the training length (n=16), OH/BN's final geometric mean is lower in 2, higher in 2, not "
        "separated in 0 of 4 (test, embedding) cases (unpaired 95% intervals over tasks); largest change n=8 OH: "
        "times 0.62")
    # a few bad tasks at n=8 for OH: still below on the paper's statistic, not on the mean ratio
    bad = {**samples, ("n=8", "oh"): _few_bad(noise.shape)}
    finding = length_finding(final, [8, 16, 32], 16, 6, bad)
    assert finding.verdict == "partly" and ", 4 of 6 on the mean ratio," in finding.value
    assert "5 below, 0 above, 1 inconclusive" in finding.value
    same = {key: final.loc["n=16", key[1]] + noise for key in samples}  # every length like the training one
    assert "lower in 0, higher in 0, not separated in 4 of 4" in length_finding(final, [8, 16, 32], 16, 6,
                                                                                 same).report
    assert "Relative to the training length" not in length_finding(final, [8, 16, 32], 12, 6, samples).report
    only = length_finding(final.loc[["n=16"]], [16], 16, 6, {k: v for k, v in samples.items() if k[0] == "n=16"})
    assert "Relative to the training length" not in only.report  # nothing to compare with
    halved = {key: value * 0.5 for key, value in samples.items()}
    assert length_finding(final[["oh", "bn"]] * 0.5, [8, 16, 32], 16, 6, halved).verdict == "reproduced"
    with pytest.raises(ValueError, match="points"):
        length_finding(final, [8, 16], 16, 6, samples)


def test_evaluate_with_samples_is_evaluate_models_plus_the_per_task_ratios_behind_it():
    import torch

    from kmtrf_core import ClusterTransformer, sample_tasks
    from kmtrf_core.book.ch11_generalization import evaluate_with_samples
    from kmtrf_core.book.heldout import task_ratios
    from kmtrf_core.evaluate import center_trajectory, evaluate_models

    models = {s: ClusterTransformer(2, 3, s, generator=torch.Generator().manual_seed(i), ensemble=2)
              for i, s in enumerate(("oh", "bn", "na"))}
    tests = {"a": sample_tasks(5, 24, 2, 3, generator=1), "b": sample_tasks(5, 24, 2, 3, generator=2)}
    table, samples = evaluate_with_samples(models, tests, steps=3, chunk=4)
    assert table.equals(evaluate_models(models, tests, steps=3, chunk=4))
    assert sorted(samples) == [("a", "bn"), ("a", "oh"), ("b", "bn"), ("b", "oh")]
    X, C = tests["b"]
    expected = task_ratios({"oh": center_trajectory(models["oh"], X, C, 3, chunk=4)}, X, C)["oh"][3]
    np.testing.assert_array_equal(samples[("b", "oh")], expected)
    assert samples[("b", "oh")].shape == (2, 5)
    with pytest.raises(ValueError, match="not among the models"):
        evaluate_with_samples(models, tests, steps=1, sampled=("gc",))
    with pytest.raises(ValueError, match="must be a pair"):
        evaluate_with_samples(models, {"a": tests["a"][0]}, steps=1)


class _FamilyGroup:
    """Stands in for the catalog's ``section4_families`` group: fixed layers, no training."""

    def __init__(self, models, base):
        self.models, self.base = models, base

    def run(self, family, scheme, omega):
        assert omega == "l2"
        return type("Run", (), {"model": self.models[(family, scheme)]})()


def test_family_generalization_returns_the_per_task_ratios_of_its_own_trajectories():
    from types import SimpleNamespace

    import torch

    from kmtrf_core import ClusterTransformer
    from kmtrf_core.book.ch11_generalization import family_generalization
    from kmtrf_core.book.heldout import task_ratios
    from kmtrf_core.evaluate import center_trajectory
    from kmtrf_core.tasks import family_tasks

    families, schemes = ("normal", "cauchy"), ("oh", "bn")
    models = {(f, s): ClusterTransformer(2, 3, s, generator=torch.Generator().manual_seed(i), ensemble=2)
              for i, (f, s) in enumerate((f, s) for f in families for s in schemes)}
    catalog = {"section4_families": _FamilyGroup(models, SimpleNamespace(n=24, d=2, k=3, scale=1.0))}
    table = family_generalization(catalog, schemes=schemes, families=families, tasks=4, steps=2)
    with_samples, samples = family_generalization(catalog, schemes=schemes, families=families, tasks=4, steps=2,
                                                  sampled=("bn",))
    assert with_samples.equals(table)
    assert sorted(samples) == sorted((train, test, "bn") for train in families for test in families)
    X, C = family_tasks(4, 24, 2, 3, families=families, generator=30_000, scale=1.0)["cauchy"]
    expected = task_ratios({"m": center_trajectory(models[("normal", "bn")], X, C, 2, chunk=64)}, X, C)["m"][2]
    np.testing.assert_array_equal(samples[("normal", "cauchy", "bn")], expected)
    assert samples[("normal", "cauchy", "bn")].shape == (2, 4)
    with pytest.raises(ValueError, match="sampled"):
        family_generalization(catalog, schemes=schemes, families=families, tasks=4, steps=2, sampled=("na",))
    with pytest.raises(ValueError, match="modes"):
        family_generalization(catalog, schemes=schemes, families=families, tasks=4, steps=2, sampled=("bn",),
                              modes=("reembed", "naive"))


def test_the_largest_change_skips_a_case_where_both_tests_diverged():
    final = pd.DataFrame({"oh": [0.9, 0.9], "bn": [0.9, 0.5]}, index=["n=16", "n=64"])
    noise = 0.02 * np.random.default_rng(0).standard_normal((2, 64))
    samples = {(row, s): final.loc[row, s] + noise for row in final.index for s in ("oh", "bn")}
    samples[("n=16", "oh")][0, 0] = np.inf  # OH diverged on one task of each test, on different seeds:
    samples[("n=64", "oh")][1, 0] = np.inf  # no difference between the two tests' statistics (NaN)
    line = length_finding(final, [16, 64], 16, 20, samples).report.splitlines()[-1]
    assert "largest change n=64 BN: times 0.55" in line and "undefined" not in line
