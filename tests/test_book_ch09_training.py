"""Chapter 9's figures, ablations, claim checks and verdicts (kmtrf_core.book.ch09_training)."""

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import pytest

from kmtrf_core import TrainConfig
from kmtrf_core.book.ch09_training import Ablation, ablation, convergence_finding, figure2_claims
from kmtrf_core.book.groups import SIX_CURVES, RunGroup
from kmtrf_core.book.plotting import (
    SCHEME_COLORS,
    six_curve_figure,
)
from kmtrf_core.book.timing import Stopwatch

TINY = TrainConfig(d=2, k=3, n=12, steps=3, batch=2, val_tasks=2, val_every=1, seeds=(0, 1))


def _history(panel_col="tau", values=(1.0, 0.1)):
    rows = []
    for value in values:
        for scheme in SIX_CURVES["scheme"]:
            for omega in SIX_CURVES["omega"]:
                for seed in (0, 1):
                    for step in range(3):
                        rows.append({panel_col: value, "scheme": scheme, "omega": omega, "seed": seed,
                                     "step": step, "wall_time": 0.01 * step * (1 + seed),
                                     "train_loss": np.nan if step == 0 else 2.0 / step,
                                     "val_relative_loss": 1.2 - 0.1 * step})
    return pd.DataFrame(rows)


def test_six_curve_figure_panels_curves_and_colors():
    fig = six_curve_figure(_history(), "tau", [1.0, 0.1], "caption", window=2)
    try:
        top, bottom = fig.axes[:2], fig.axes[2:]
        assert [ax.get_title() for ax in top] == ["tau = 1.0", "tau = 0.1"]
        assert all(ax.get_yscale() == "log" for ax in top)
        assert fig._suptitle.get_text() == "caption"
        lines = {line.get_label(): line.get_color() for line in bottom[0].get_lines()}
        assert set(lines) == {"OH:NE", "OH:L2", "BN:NE", "BN:L2", "NA:NE", "NA:L2", "1 Lloyd step"}
        assert all(lines[label] == SCHEME_COLORS[label] for label in lines if ":" in label)
        assert bottom[-1].get_legend() is not None and bottom[0].get_legend() is None
        assert top[0].get_shared_x_axes().joined(top[0], bottom[1])
    finally:
        plt.close(fig)


def test_six_curve_figure_wall_time_panels_do_not_share_x():
    fig = six_curve_figure(_history("n", (32, 64)), "n", [32, 64], "t", x="wall_time")
    try:
        assert not fig.axes[0].get_shared_x_axes().joined(fig.axes[0], fig.axes[1])
        assert fig.axes[2].get_xlabel() == "wall time (s)"
    finally:
        plt.close(fig)
    with pytest.raises(ValueError):
        six_curve_figure(_history(), "tau", [], "t")


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("KMTRF_CACHE", str(tmp_path))
    return tmp_path


def test_ablation_sweeps_summarizes_and_times(cache):
    group = RunGroup("demo", TINY, {"tau": [1.0, 0.1], "scheme": ["oh", "bn"], "omega": ["l2"]}, "9", "test")
    result = ablation(group, title="Figure 10", window=2, note="profile `x`")
    try:
        assert isinstance(result, Ablation) and isinstance(result.clock, Stopwatch)
        assert result.clock.seconds > 0
        assert sorted(result.history.tau.unique()) == [0.1, 1.0]
        assert len(result.diverged) == 4 and not result.diverged.any()
        assert result.table.index.tolist() == [0.1, 1.0]
        assert result.table.columns.tolist() == [("bn", "l2"), ("oh", "l2")]
        expected = result.summary["final_val_relative"].unstack([1, 2]).round(3)
        pd.testing.assert_frame_equal(result.table, expected)
        caption = result.figure._suptitle.get_text()
        assert caption == ("Figure 10; n=12, k=3, d=2, tau=0.1, seeds [0, 1], a fixed budget of 3 steps; "
                           "profile `x`")
        assert [ax.get_title() for ax in result.figure.axes[:2]] == ["tau = 1.0", "tau = 0.1"]
        text = repr(result)
        assert text.startswith("4 configurations in ") and "; diverged: 0\n\n" in text
        assert result._repr_html_().startswith("<p>4 configurations in ")
        assert len(list(cache.glob("run-*.pt"))) == 4  # through the run cache
    finally:
        plt.close(result.figure)


def test_ablation_records_a_real_divergence_instead_of_stopping(cache):
    base = TrainConfig(d=4, k=6, n=32, steps=20, batch=4, val_tasks=4, val_every=5, scheme="oh")
    group = RunGroup("demo", base, {"tau": [0.1], "scheme": ["oh"], "lr": [0.01, 1e6]}, "9", "test")
    result = ablation(group)
    plt.close(result.figure)
    assert result.diverged.tolist() == [False, True]  # (0.1, oh, 0.01), (0.1, oh, 1e6)
    assert result.line.endswith("; diverged: 1")
    assert result.table.columns.tolist() == [("oh", 0.01), ("oh", 1e6)]


def test_ablation_needs_a_field_besides_the_curves(cache):
    with pytest.raises(ValueError, match="besides the curves"):
        ablation(RunGroup("demo", TINY, {"scheme": ["oh"], "omega": ["l2"]}, "9", "test"))


def _summaries():
    """Convergence summaries shaped like chapter 9's, with the quick profile's baseline numbers."""
    index = pd.MultiIndex.from_product([[0.1, 1.0], ["bn", "na", "oh"], ["l2", "ne"]],
                                       names=["tau", "scheme", "omega"])
    tau_summary = pd.DataFrame({
        "final_val_relative": [1.967, 1.971, 1.934, 1.938, 1.893, 1.894,
                               1.953, 1.890, 1.935, 1.917, 1.896, 1.850],
        "final_train_loss": [6.879, 8.191, 7.060, 8.383, 6.847, 8.134,
                             10.923, 22.125, 11.043, 22.286, 10.888, 22.117],
    }, index=index)
    d_index = index.set_names("d", level=0).set_levels([4, 16], level=0)
    d_summary = pd.DataFrame({"steps_to_converge": [20.0, 20.0, 10.0, 10.0, 20.0, 20.0] + [15.0] * 6},
                             index=d_index)
    return tau_summary, d_summary


def test_figure2_claims_reproduces_the_quick_baseline_table():
    tau_summary, d_summary = _summaries()
    claims = figure2_claims(tau_summary, d_summary, taus=[1.0, 0.1])
    assert claims.columns.tolist() == ["claim (Section 3, Fig. 2)", "our numbers", "holds here"]
    assert claims["our numbers"].tolist() == [
        "tau=0.1: OH 1.893, BN 1.967",
        "NA 1.934",
        "L2 1.896 vs NE 1.850",
        "L2 [10.923, 11.043, 10.888] vs NE [22.125, 22.286, 22.117]",
        "L2 [6.879, 7.06, 6.847] vs NE [8.191, 8.383, 8.134]",
        "OH 20 vs BN 20",
        "BN - OH: 0 steps -> 0 steps",
    ]
    assert claims["holds here"].tolist() == [False, False, False, True, True, False, False]
    assert claims["claim (Section 3, Fig. 2)"][3].endswith("(tau=1.0, all embeddings)")


def test_figure2_claims_can_hold():
    tau_summary, d_summary = _summaries()
    tau_summary["final_val_relative"] = [0.8, 0.9, 1.1, 1.2, 0.7, 0.75] + [0.8, 0.9, 1.1, 1.2, 0.7, 0.75]
    d_summary["steps_to_converge"] = [40.0, 40.0, 50.0, 50.0, 20.0, 20.0] + [25.0, 25.0, 30.0, 30.0, 20.0, 20.0]
    claims = figure2_claims(tau_summary, d_summary)
    assert claims["holds here"].all()
    assert claims["our numbers"][0] == "tau=0.1: OH 0.700, BN 0.800"
    assert claims["our numbers"][6] == "BN - OH: 20 steps -> 5 steps"


def _drops(rows):
    columns = pd.MultiIndex.from_product([["below_lloyd_at"], ["BN", "OH"]])
    return pd.DataFrame([[bn, oh] for _, oh, bn in rows], index=[label for label, _, _ in rows], columns=columns)


def test_oh_faster_needs_every_configuration_and_a_margin():
    nan = float("nan")
    every = _drops([("base", 1800, 2700), ("d=8", 1500, 4200), ("lr=0.03", 900, nan)])
    assert convergence_finding(every, margin=200).verdict == "reproduced"
    within = _drops([("base", 1800, 1900), ("d=8", 1500, 1600)])
    assert convergence_finding(within, margin=200).verdict == "inconclusive"  # 100 steps: inside the margin
    assert convergence_finding(within, margin=100).verdict == "reproduced"
    slower = _drops([("base", 2700, 1800), ("d=8", nan, 3000)])
    finding = convergence_finding(slower, margin=200)
    assert finding.verdict == "not reproduced" and "d=8 never vs 3000" in finding.value
    mixed = _drops([("base", 1800, 2700), ("d=8", 2700, 1800), ("never", nan, nan)])
    finding = convergence_finding(mixed, margin=200)
    assert finding.verdict == "partly" and "1 slower, 1 inconclusive" in finding.report
    with pytest.raises(ValueError, match="margin"):
        convergence_finding(every, margin=0)
