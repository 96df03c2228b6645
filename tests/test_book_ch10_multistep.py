"""Chapter 10's readings and verdicts of Figure 6 (kmtrf_core.book.ch10_multistep)."""

import math

import numpy as np
import pandas as pd
import pytest
import torch

from kmtrf_core.book.ch10_multistep import multistep_findings, multistep_summary, step_changes
from kmtrf_core.evaluate import final_ratios
from kmtrf_core.lloyd import kmeans_objective, lloyd_trajectory
from kmtrf_core.tasks import sample_tasks


def test_multistep_summary_reads_step_one_and_the_last_step(step_table):
    lloyd = [10.0, 5.0, 4.0, 3.0]
    table = step_table({
        ("oh", "l2"): {"naive": [[10, 6, 9, 12], [10, 7, 8, 20]],
                       "reembed": [[10, 6, 4, 2], [10, 7, 5, 4]]},
        ("na", "ne"): {"naive": [[10, 8, 9, math.inf], [10, 8, 9, 10]],
                       "reembed": [[10, 8, 7, 6], [10, 8, 7, 6.6]]},
    }, lloyd)
    summary = multistep_summary(table)
    assert summary.model.tolist() == ["OH:L2", "OH:L2", "NA:NE", "NA:NE"]
    assert summary["mode"].tolist() == ["naive", "reembed"] * 2
    row = summary.iloc[1]
    assert row.loss_step1 == 6.5 and row.loss_stepT == 3.0
    assert "improves_after_step1" not in summary  # no per-task changes: no verdict from the medians
    assert row.ratio_to_lloyd_T == pytest.approx(1.0)
    assert summary.iloc[2].diverged == 0.5 and summary.iloc[0].diverged == 0.0
    # an earlier step as T
    assert multistep_summary(table, steps=2).iloc[1].loss_stepT == 4.5
    ratios = final_ratios(table)["median"]
    for row in summary.itertuples():
        model = ("oh", "l2") if row.model == "OH:L2" else ("na", "ne")
        assert row.ratio_to_lloyd_T == ratios[(model, "normal", row.mode)]



def test_multistep_summary_decides_improvement_on_the_paired_interval(step_table):
    lloyd = [10.0, 5.0, 4.0, 3.0]
    # the medians of the table would say OH improves and NA does not: the per-task changes decide
    table = step_table({("oh", "l2"): {"naive": [[10, 6, 9, 12]] * 2, "reembed": [[10, 6, 4, 2]] * 2},
                        ("na", "ne"): {"naive": [[10, 8, 9, 10]] * 2, "reembed": [[10, 8, 7, 6]] * 2}}, lloyd)
    noise = 0.05 * np.random.default_rng(2).standard_normal((2, 2, 256))
    changes = {("naive", "OH:L2"): (1 + noise[0], 3 + noise[1]),           # worse: no
               ("reembed", "OH:L2"): (1 + noise[0], 0.99 + noise[1]),       # noisy, around -margin: inconclusive
               ("naive", "NA:NE"): (1 + noise[0], 0.9 + noise[0]),          # exactly 0.1 lower: yes
               ("reembed", "NA:NE"): (1 + noise[0], 0.995 + noise[0])}      # exactly 0.005 lower, margin 0.01: no
    summary = multistep_summary(table, changes=changes)
    assert summary.improves_after_step1.tolist() == ["no", "inconclusive", "yes", "no"]
    assert summary.stepT_minus_step1.iloc[2] == "-0.100 [-0.100, -0.100] (95% CI; margin 0.01)"
    assert "95% CI; margin 0.01" in summary.stepT_minus_step1.iloc[1]
    # a larger margin turns the 0.1 improvement into "no", a zero margin the 0.005 one into "yes"
    assert multistep_summary(table, changes=changes, margin=0.2).improves_after_step1.iloc[2] == "no"
    assert multistep_summary(table, changes=changes, margin=0.0).improves_after_step1.iloc[3] == "yes"
    # a diverged task (inf after T) is never an improvement
    blown = {key: (first, last.copy()) for key, (first, last) in changes.items()}
    blown[("naive", "NA:NE")][1][0, 5] = math.inf
    assert multistep_summary(table, changes=blown).improves_after_step1.iloc[2] == "no"
    with pytest.raises(ValueError, match="changes must hold"):
        multistep_summary(table, changes={key: value for key, value in changes.items() if key[1] == "OH:L2"})
    with pytest.raises(ValueError, match="steps must be the table's last step 3"):
        multistep_summary(table, steps=2, changes=changes)
    assert multistep_summary(table, steps=3, changes=changes).improves_after_step1.iloc[2] == "yes"


NOISE = 0.05 * np.random.default_rng(0).standard_normal((2, 256))


def _changes(naive: dict, reembed: dict) -> dict:
    """``(mode, label) -> (after step 1, after T)`` from ``label -> (step-1 level, step-T level)`` plus noise."""
    return {(mode, label): (first + NOISE, last + NOISE)
            for mode, levels in (("naive", naive), ("reembed", reembed)) for label, (first, last) in levels.items()}


@pytest.mark.parametrize("reembed_last, ratios, expected", [
    ([0.8, 0.7, 1.1], [0.9, 0.8, 2.0], "reproduced"),
    ([0.8, 0.7, 1.3], [0.9, 0.8, 2.0], "partly"),   # NA's step T above its step 1
    ([1.3, 1.4, 1.3], [1.5, 2.0, 0.5], "not reproduced"),
    ([0.8, 0.7, 1.1], [1.5, 2.0, 0.5], "partly"),
    ([0.8, 0.7, 1.1], [1.0, 0.8, 2.0], "partly"),  # OH at 1 +- 0.004: inconclusive, not a win
    ([0.995, 0.7, 1.1], [0.9, 0.8, 2.0], "partly"),  # OH improves by less than the margin: not a win
    # none keeps improving, OH and BN at Lloyd inside the noise: nothing holds, so not "partly"
    ([1.3, 1.4, 1.3], [1.0, 1.0, 2.0], "not reproduced"),
])
def test_multistep_findings(reembed_last, ratios, expected):
    models = ["OH:L2", "BN:L2", "NA:L2"]
    # naive: OH overflows on one task and BN ends better than its step 1; NA ends worse
    naive = {"OH:L2": (1.0, 40.0), "BN:L2": (1.0, 0.9), "NA:L2": (1.2, 60.0)}
    changes = _changes(naive, {model: (1.0 if model != "NA:L2" else 1.2, last)
                               for model, last in zip(models, reembed_last)})
    changes[("naive", "OH:L2")][1][0, 3] = math.inf
    samples = {"OH:L2": ratios[0] + NOISE, "BN:L2": ratios[1] + NOISE}  # NA is left out of (iii)
    naive, reembed = multistep_findings(changes, 7, samples)
    assert naive.verdict == "partly"
    assert naive.value == ("2 of 3 configurations end worse after 7 steps than after step 1 (95% intervals, "
                           "margin 0.01)")
    assert "(1 overflow on some tasks)" in naive.report
    assert "OH:L2 step 1 - step T -inf" in naive.uncertainty
    assert reembed.verdict == expected
    assert "95% CI" in reembed.value and "NA" not in reembed.value
    assert reembed.report.count("\n") == 1
    assert reembed.uncertainty.count("step T - step 1") == 3


def test_multistep_findings_inside_the_noise_is_inconclusive():
    # step T within 0.005 of step 1 on noisy tasks: neither worse (naive) nor improving (re-embedding)
    # by the margin of 0.01, the interval holding -0.01
    first, last = 0.05 * np.random.default_rng(1).standard_normal((2, 2, 256))
    changes = {("naive", "OH:L2"): (1.0 + first, 1.005 + last), ("reembed", "OH:L2"): (1.0 + first, 0.995 + last)}
    naive, reembed = multistep_findings(changes, 5, {"OH:L2": 0.9 + NOISE})
    assert naive.verdict == "inconclusive"
    assert reembed.verdict == "partly"  # (ii) inconclusive, (iii) reproduced
    assert reembed.report.startswith("(ii) re-embedding: 0 of 1 configurations keep improving")
    # exactly paired (no noise in the difference): 0.005 is decidedly less than the margin
    exact = {("naive", "OH:L2"): (1.0 + NOISE, 1.005 + NOISE), ("reembed", "OH:L2"): (1.0 + NOISE, 0.995 + NOISE)}
    naive, reembed = multistep_findings(exact, 5, {"OH:L2": 0.9 + NOISE})
    assert naive.verdict == "not reproduced"
    assert reembed.report.splitlines()[0].endswith("-> not reproduced")
    with pytest.raises(ValueError, match="naive"):
        multistep_findings({key: value for key, value in changes.items() if key[0] == "reembed"}, 5,
                           {"OH:L2": 0.9 + NOISE})


def test_step_changes_are_in_units_of_one_lloyd_step():
    X, C = sample_tasks(6, 24, 2, 3, generator=3, dtype=torch.float64)
    reference = lloyd_trajectory(X, C, 4)
    lloyd_loss = kmeans_objective(X.expand(5, *X.shape).reshape(-1, *X.shape[1:]),
                                  reference.centers.reshape(-1, *C.shape[1:])).view(5, -1)
    stay = C.expand(5, *C.shape)  # a "layer" that never moves the centers
    two = torch.stack([reference.centers, stay], dim=1)  # two members: Lloyd and standing still
    out = step_changes({("normal", "reembed", ("oh", "l2")): two,
                        ("normal", "naive", ("oh", "l2")): reference.centers}, X, C)
    assert sorted(out) == [("naive", "OH:L2"), ("reembed", "OH:L2")]
    first, last = out[("reembed", "OH:L2")]
    assert first.shape == last.shape == (2, 6)
    expected_lloyd = (lloyd_loss[4] / lloyd_loss[1]).numpy()
    np.testing.assert_allclose(first[0], 1.0, rtol=1e-12)
    np.testing.assert_allclose(last[0], expected_lloyd, rtol=1e-12)
    start = (kmeans_objective(X, C) / lloyd_loss[1]).numpy()
    np.testing.assert_allclose(first[1], start, rtol=1e-12)
    np.testing.assert_allclose(last[1], start, rtol=1e-12)
    assert out[("naive", "OH:L2")][0].shape == (1, 6)
    # overflowed centers: inf at that task
    blown = reference.centers.clone()
    blown[4, 2] = math.inf
    _, last = step_changes({("normal", "naive", ("na", "ne")): blown}, X, C)[("naive", "NA:NE")]
    assert math.isinf(last[0, 2]) and np.isfinite(np.delete(last[0], 2)).all()
    with pytest.raises(ValueError, match="distinct"):  # two labels that read the same
        step_changes({("normal", "naive", ("oh", "l2")): blown, ("normal", "naive", ("OH", "L2")): blown}, X, C)
    with pytest.raises(ValueError, match="centers"):
        step_changes({("normal", "naive", ("oh", "l2")): blown[:, :, :2]}, X, C)
    for bad, match in (({}, "non-empty"), ({("a", "naive", "x"): blown, ("b", "naive", "x"): blown}, "one test"),
                       ({("normal", "naive", ("oh", "l2")): reference.centers[:1]}, "steps")):
        with pytest.raises(ValueError, match=match):
            step_changes(bad, X, C)


def test_multistep_findings_decide_iii_on_the_papers_statistic_and_report_the_mean_ratio_beside():
    # OH: 1 task in 10 at ten times Lloyd's loss, the rest at 0.6: mean ratio 1.54 (not below 1), geometric
    # mean 0.795 (below 1, what Figure 6's mean log loss shows); BN: a diverged task, a loss on either statistic
    changes = _changes({"OH:L2": (1.0, 40.0)}, {"OH:L2": (1.0, 0.7)})
    few_bad = np.tile(np.r_[np.full(230, 0.6), np.full(26, 10.0)], (2, 1))
    naive, reembed = multistep_findings(changes, 20, {"OH:L2": few_bad})
    assert reembed.verdict == "reproduced"
    line = reembed.report.splitlines()[1]
    assert line.startswith("(iii) OH/BN with re-embedding beat Lloyd at T=20 on the paper's statistic (geometric "
                           "mean over tasks): 1 of 1 below 1 (95% intervals) -> reproduced; on the mean ratio "
                           "(stricter): 0 of 1 below 1 (0 below, 1 above, 0 inconclusive)")
    assert "geometric mean over tasks: OH:L2 0.7" in reembed.value
    assert "on the mean ratio 0 of 1 below 1" in reembed.value
    assert "paper's statistic" in reembed.check and "geometric mean over tasks" in reembed.check
    assert "OH:L2 mean ratio - 1 +0.5" in reembed.uncertainty
    blown = NOISE + 0.8
    blown[0, 9] = math.inf
    _, reembed = multistep_findings(changes, 20, {"OH:L2": few_bad, "BN:L2": blown})
    assert reembed.verdict == "partly"  # (ii) holds, (iii) partly: BN's diverged task
    assert "1 of 2 below 1 (95% intervals), 1 not -> partly" in reembed.report
