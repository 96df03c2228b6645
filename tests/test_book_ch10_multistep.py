"""Chapter 10's readings and verdicts of Figure 6 (kmtrf_core.book.ch10_multistep)."""

import math

import numpy as np
import pandas as pd
import pytest

from kmtrf_core.book.ch10_multistep import multistep_findings, multistep_summary
from kmtrf_core.evaluate import final_ratios


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
    assert row.loss_step1 == 6.5 and row.loss_stepT == 3.0 and row.improves_after_step1
    assert row.ratio_to_lloyd_T == pytest.approx(1.0)
    assert summary.iloc[2].diverged == 0.5 and summary.iloc[0].diverged == 0.0
    # an earlier step as T
    assert multistep_summary(table, steps=2).iloc[1].loss_stepT == 4.5
    ratios = final_ratios(table)["median"]
    for row in summary.itertuples():
        model = ("oh", "l2") if row.model == "OH:L2" else ("na", "ne")
        assert row.ratio_to_lloyd_T == ratios[(model, "normal", row.mode)]


@pytest.mark.parametrize("improves, ratios, expected", [
    ([True, True, True], [0.9, 0.8, 2.0], "reproduced"),
    ([True, True, False], [0.9, 0.8, 2.0], "partly"),
    ([False, False, False], [1.5, 2.0, 0.5], "not reproduced"),
    ([True, True, True], [1.5, 2.0, 0.5], "partly"),
    ([True, True, True], [1.0, 0.8, 2.0], "partly"),  # OH at 1 +- 0.004: inconclusive, not a win
])
def test_multistep_findings(improves, ratios, expected):
    models = ["OH:L2", "BN:L2", "NA:L2"]
    summary = pd.DataFrame({
        "model": models * 2, "mode": ["naive"] * 3 + ["reembed"] * 3,
        "improves_after_step1": [False, True, False] + improves,
        "ratio_to_lloyd_T": [40.0, 50.0, 60.0] + ratios,
        "diverged": [0.25, 0.0, 0.0, 0.0, 0.0, 0.0],
    })
    noise = 0.05 * np.random.default_rng(0).standard_normal((2, 256))
    samples = {"OH:L2": ratios[0] + noise, "BN:L2": ratios[1] + noise}  # NA is left out of (iii)
    naive, reembed = multistep_findings(summary, 7, samples)
    assert naive.verdict == "partly"
    assert naive.value == "2 of 3 configurations end worse after 7 steps than after step 1"
    assert "(1 overflow on some tasks)" in naive.report
    assert reembed.verdict == expected
    assert "95% CI" in reembed.value and "NA" not in reembed.value
    assert reembed.report.count("\n") == 1
