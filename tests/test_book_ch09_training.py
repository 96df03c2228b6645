"""Chapter 9's figures, ablations, claim checks and verdicts (kmtrf_core.book.ch09_training)."""

import dataclasses
from pathlib import Path

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import pytest

from kmtrf_core import TrainConfig
from kmtrf_core.book import get_profile
from kmtrf_core.training.convergence import SMOOTHING
from kmtrf_core.book.ch09_training import (Ablation, ablation, convergence_finding, figure2_claims,
                                           stability_table, stability_totals)
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
        # the swept field with its values, not the base's (TINY has tau=1.0): the base only for the others
        assert caption == ("Figure 10; tau in [1.0, 0.1], n=12, k=3, d=2, seeds [0, 1], a fixed budget of 3 steps; "
                           "profile `x`")
        assert [ax.get_title() for ax in result.figure.axes[:2]] == ["tau = 1.0", "tau = 0.1"]
        label = ("final relative validation loss (Eq. 20: the layer's k-means loss over one Lloyd step's; "
                 "median over seeds) after 3 steps; rows: tau, columns: scheme, omega")
        assert result.label == label
        text = repr(result)
        assert text.startswith("4 configurations in ") and f"; diverged: 0\n{label}:\n\n" in text
        page = result._repr_html_()
        assert page.startswith("<p>4 configurations in ")
        assert "<p>final relative validation loss (Eq. 20: the layer&#x27;s k-means loss" in page
        assert page.index("after 3 steps") < page.index("<table")
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
    # every grid field with its values; the diverged run ended before the budget
    assert result.figure._suptitle.get_text().startswith("; tau in [0.1], lr in [0.01, 1000000.0], n=32, k=6, d=4,")
    assert "median over seeds) after " in result.label and "-20 steps; rows: tau, columns: scheme, lr" in result.label
    assert result.table.columns.tolist() == [("oh", 0.01), ("oh", 1e6)]


def test_stability_table_counts_every_group_and_its_clipping(cache):
    base = TrainConfig(d=4, k=6, n=32, steps=20, batch=4, val_tasks=4, val_every=5, scheme="oh", seeds=(0, 1))
    wild = RunGroup("wild", base, {"lr": [0.01, 1e6]}, "9", "test")
    clipped = RunGroup("clipped", dataclasses.replace(base, clip=1.0), {"scheme": ["oh", "bn"]}, "9", "test")
    table = stability_table({"wild": wild.runs(on_diverge="record"), "clipped": clipped.runs(on_diverge="record")})
    assert table.index.tolist() == ["wild", "clipped"]
    assert table.loc["wild"].to_dict() == {"runs": 2, "seeds": 2, "clipping": "off", "diverged": 1, "which": "[(1000000.0,)]"}
    assert table.loc["clipped"].to_dict() == {"runs": 2, "seeds": 2, "clipping": "1", "diverged": 0, "which": ""}
    assert table.diverged.sum() == 1 and table.runs.sum() == 4
    with pytest.raises(ValueError, match="groups"):
        stability_table({})
    with pytest.raises(ValueError, match=r"groups\['wild'\] must be a Runs"):
        stability_table({"wild": wild.runs(on_diverge="record").history})


def test_stability_totals_count_a_run_shared_by_groups_once(cache):
    base = TrainConfig(d=4, k=6, n=32, steps=20, batch=4, val_tasks=4, val_every=5, scheme="oh", seeds=(0, 1))
    wild = RunGroup("wild", base, {"lr": [0.01, 1e6]}, "9", "test")
    again = RunGroup("again", base, {"lr": [1e6]}, "9", "the diverging run of 'wild' again")
    clipped = RunGroup("clipped", dataclasses.replace(base, clip=1.0), {"scheme": ["oh", "bn"]}, "9", "test")
    groups = {name: group.runs(on_diverge="record") for name, group in
              (("wild", wild), ("again", again), ("clipped", clipped))}
    assert stability_table(groups).runs.sum() == 5 and stability_table(groups).diverged.sum() == 2
    assert stability_totals(groups) == {"runs": 4, "diverged": 1, "unclipped": 2, "unclipped_diverged": 1}
    with pytest.raises(ValueError, match="groups"):
        stability_totals({})


def test_ablation_needs_a_field_besides_the_curves(cache):
    with pytest.raises(ValueError, match="besides the curves"):
        ablation(RunGroup("demo", TINY, {"scheme": ["oh"], "omega": ["l2"]}, "9", "test"))


def _d_summary(d4, d16):
    """Figure 2(b)'s per-seed convergence summary from (BN, OH) steps at d = 4 and d = 16, the same for
    both seeds (L2; NE rows filled alike)."""
    index = pd.MultiIndex.from_product([[4, 16], ["bn", "na", "oh"], ["l2", "ne"], [0, 1]],
                                       names=["d", "scheme", "omega", "seed"])
    steps = []
    for bn, oh in (d4, d16):
        steps += [bn] * 4 + [3000.0] * 4 + [oh] * 4
    return pd.DataFrame({"steps_to_converge": steps}, index=index)


def _samples(level, ne_shift=0.1, loss_shift=0.5, spread=0.05, seed=0):
    """Per-task held-out values shaped like figure2_samples', around per-scheme ratio levels."""
    rng = np.random.default_rng(seed)
    out = {}
    for tau in (1.0, 0.1):
        for scheme in ("bn", "na", "oh"):
            for omega in ("l2", "ne"):
                shift = 0.0 if omega == "l2" else 1.0
                out[(tau, scheme, omega)] = {
                    "ratio": level[scheme] + shift * ne_shift + spread * rng.standard_normal((2, 128)),
                    "loss": 1.0 + shift * loss_shift + spread * rng.standard_normal((2, 128))}
    return out


def test_figure2_claims_reproduced_with_intervals_and_margins():
    claims = figure2_claims(_samples({"oh": 0.9, "bn": 0.93, "na": 1.2}), _d_summary((2700.0, 1800.0), (2000.0, 1900.0)),
                            taus=[1.0, 0.1], steps_margin=200)
    assert claims.columns.tolist() == ["claim (Section 3, Fig. 2)", "our numbers", "verdict"]
    assert claims.verdict.tolist() == ["reproduced"] * 6
    assert "95% CI; margin 0.01" in claims["our numbers"][1]  # every interval says its level and margin
    assert claims["claim (Section 3, Fig. 2)"][3].endswith("(tau=1.0, all embeddings)")
    assert claims["claim (Section 3, Fig. 2)"][5] == "the OH/BN difference in steps to 90% shrinks from d=4 to d=16 (L2)"
    assert claims["our numbers"][5] == ("d=4: OH 1800 vs BN 2700; d=16: OH 1900 vs BN 2000; "
                                        "BN - OH: 900 steps -> 100 steps (range over seeds; margin 200 steps)")
    # "OH converges faster than BN" is the ledger's oh_faster_convergence (the plateau table): no second verdict
    assert not claims["claim (Section 3, Fig. 2)"].str.contains("faster").any()


def test_figure2_claims_say_inconclusive_inside_the_noise_and_not_reproduced_beyond_it():
    # OH and BN at 1.0 +- noise: no interval is below 1; NA as good as them; NE as good as L2
    noisy = _samples({"oh": 1.0, "bn": 1.0, "na": 1.0}, ne_shift=0.0, loss_shift=0.0, spread=0.3)
    claims = figure2_claims(noisy, _d_summary((1850.0, 1800.0), (1900.0, 1800.0)), steps_margin=200)
    assert claims.verdict.tolist() == ["inconclusive"] * 6
    worse = _samples({"oh": 1.2, "bn": 1.3, "na": 0.9}, ne_shift=-0.1, loss_shift=-0.5)  # everything the other way
    claims = figure2_claims(worse, _d_summary((1800.0, 2700.0), (1800.0, 4000.0)), steps_margin=200)
    assert claims.verdict.tolist() == ["not reproduced"] * 6


def test_figure2_speed_claims_read_the_range_over_seeds():
    samples = _samples({"oh": 0.9, "bn": 0.93, "na": 1.2})

    def per_seed(d4, d16):  # (BN, OH) per seed at d = 4 and d = 16
        rows = []
        for d, pair in ((4, d4), (16, d16)):
            for scheme, per in (("bn", pair[0]), ("na", (3000.0, 3000.0)), ("oh", pair[1])):
                for omega in ("l2", "ne"):
                    rows += [(d, scheme, omega, seed, step) for seed, step in enumerate(per)]
        return pd.DataFrame(rows, columns=["d", "scheme", "omega", "seed", "steps_to_converge"]).set_index(
            ["d", "scheme", "omega", "seed"])

    # medians 2200 vs 1500 at d=4 (gap 700), but the ranges 1900-2500 vs 1200-1800 put the gap anywhere
    # in [100, 1300]: it may be as small as d=16's 100, so the shrink is inconclusive
    claims = figure2_claims(samples, per_seed(((1900.0, 2500.0), (1200.0, 1800.0)), ((2000.0, 2000.0), (1900.0, 1900.0))),
                            steps_margin=200)
    assert len(claims) == 6
    assert claims["our numbers"][5] == ("d=4: OH 1200-1800 vs BN 1900-2500; d=16: OH 1900 vs BN 2000; "
                                        "BN - OH: [100, 1300] steps -> 100 steps (range over seeds; margin 200 steps)")
    assert claims.verdict[5] == "inconclusive"
    apart = figure2_claims(samples, per_seed(((2700.0, 2800.0), (1700.0, 1800.0)), ((2000.0, 2000.0), (1900.0, 1900.0))),
                           steps_margin=200)
    assert apart.verdict[5] == "reproduced"  # gap [900, 1100] -> 100
    # a seed that never converged: infinitely slow
    stuck = figure2_claims(samples, per_seed(((2700.0, 2800.0), (1700.0, float("nan"))), ((2000.0, 2000.0),
                                                                                        (1900.0, 1900.0))),
                           steps_margin=200)
    assert "d=4: OH 1700-never vs BN 2700-2800" in stuck["our numbers"][5]
    assert stuck.verdict[5] == "inconclusive"
    assert "BN - OH: [-inf, 1100] steps" in stuck["our numbers"][5]
    # no seed of BN converged at d=4: the gap there is unbounded, and no shrink can be measured
    never = figure2_claims(samples, _d_summary((float("nan"), 1800.0), (2000.0, 1900.0)), steps_margin=200)
    assert never["our numbers"][5].startswith("d=4: OH 1800 vs BN never; d=16: OH 1900 vs BN 2000; BN - OH: inf steps")
    assert never.verdict[5] == "inconclusive"
    # medians over seeds alone must not decide the order: refused
    medians = _d_summary((2700.0, 1800.0), (2000.0, 1900.0)).groupby(level=["d", "scheme", "omega"]).median()
    with pytest.raises(ValueError, match="one row per seed"):
        figure2_claims(samples, medians)


def test_figure2_best_of_reads_intervals_not_the_lowest_point():
    # L2 OH has the lowest point but swings by +-3 per task; L2 BN is a little higher and tight, below
    # every NE embedding: the best L2 layer beats the best NE layer, shown by BN, not by OH's point
    samples = _samples({"oh": 0.9, "bn": 0.93, "na": 1.2})
    swing = np.tile([3.0, -3.0], (2, 64))
    samples[(1.0, "oh", "l2")]["ratio"] = 0.8 + swing
    for scheme, level in (("oh", 1.0), ("bn", 1.0), ("na", 1.3)):
        samples[(1.0, scheme, "ne")]["ratio"] = level + 0.0 * swing
    samples[(1.0, "bn", "l2")]["ratio"] = 0.9 + 0.0 * swing
    claims = figure2_claims(samples, _d_summary((2700.0, 1800.0), (2000.0, 1900.0)), taus=[1.0, 0.1])
    assert claims.verdict[2] == "reproduced"
    text = claims["our numbers"][2]
    assert text.startswith("lowest points L2 (OH) 0.800, NE (OH) 1.000; L2 (BN) - NE (OH) -0.100")
    assert "L2 (BN) - NE (NA) -0.400" in text and "L2 (OH) -" not in text
    # with BN as noisy as OH no L2 embedding is below every NE one, and none of NE's is unbeaten
    samples[(1.0, "bn", "l2")]["ratio"] = 0.9 + swing
    claims = figure2_claims(samples, _d_summary((2700.0, 1800.0), (2000.0, 1900.0)), taus=[1.0, 0.1])
    assert claims.verdict[2] == "inconclusive"
    assert "L2 (OH) - NE (OH)" in claims["our numbers"][2]


def test_figure2_claims_name_missing_inputs():
    samples = _samples({"oh": 0.9, "bn": 0.93, "na": 1.2})
    d_summary = _d_summary((2700.0, 1800.0), (2000.0, 1900.0))
    with pytest.raises(ValueError, match=r"missing \[\(0\.1, 'na', 'ne'\)\]"):
        figure2_claims({key: value for key, value in samples.items() if key != (0.1, "na", "ne")}, d_summary)
    with pytest.raises(ValueError, match="missing"):
        figure2_claims({}, d_summary)
    with pytest.raises(ValueError, match="d_summary"):
        figure2_claims(samples, d_summary.rename(columns={"steps_to_converge": "steps"}))


def test_figure2_samples_read_every_layer_on_the_held_out_tasks(cache):
    from kmtrf_core.book.ch09_training import figure2_samples
    from kmtrf_core.book.heldout import eval_tasks
    from kmtrf_core.evaluate import relative_loss

    group = RunGroup("demo", TINY, {"tau": [1.0, 0.1], "scheme": ["oh", "bn"], "omega": ["ne", "l2"]}, "9", "test")
    X, C = eval_tasks(TINY, 6)
    samples = figure2_samples(group, X, C)
    assert set(samples) == {(t, s, o) for t in (1.0, 0.1) for s in ("oh", "bn") for o in ("ne", "l2")}
    run = group.run(tau=0.1, scheme="bn", omega="l2")
    ratio = samples[(0.1, "bn", "l2")]["ratio"]
    assert ratio.shape == (2, 6) and samples[(0.1, "bn", "l2")]["loss"].shape == (2, 6)
    np.testing.assert_allclose(ratio, relative_loss(run.model, X, C).double().numpy(), rtol=1e-6)
    assert np.isfinite(samples[(1.0, "oh", "ne")]["loss"]).all()


def _drops(rows):
    """A plateau table from ``(label, OH seeds' drops, BN seeds' drops)``; a seed's drop may be NaN (never)."""
    columns = pd.MultiIndex.from_product([["earliest_seed", "latest_seed"], ["BN", "OH"]])

    def ends(steps):
        steps = np.atleast_1d(np.asarray(steps, dtype=float))
        dropped = steps[~np.isnan(steps)]
        return (dropped.min() if dropped.size else np.nan), (np.nan if np.isnan(steps).any() else steps.max())

    table = []
    for _, oh, bn in rows:
        (oh_first, oh_last), (bn_first, bn_last) = ends(oh), ends(bn)
        table.append([bn_first, oh_first, bn_last, oh_last])
    return pd.DataFrame(table, index=[label for label, _, _ in rows], columns=columns)


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


def test_oh_faster_compares_every_seed_not_the_medians():
    nan = float("nan")
    # medians 1450 vs 1850 (400 apart), but OH's slow seed drops after BN's fast one: inconclusive
    overlap = _drops([("base", [1300, 1600], [1700, 2000])])
    finding = convergence_finding(overlap, margin=200)
    assert finding.verdict == "inconclusive" and "base 1300-1600 vs 1700-2000" in finding.value
    # every OH seed 200 steps before every BN seed: faster, exactly at the margin
    apart = _drops([("base", [1100, 1200], [1400, 1600])])
    assert convergence_finding(apart, margin=200).verdict == "reproduced"
    assert convergence_finding(apart, margin=201).verdict == "inconclusive"
    # an OH seed that never drops is later than any BN seed
    stuck = _drops([("base", [1100, nan], [1400, 1600])])
    finding = convergence_finding(stuck, margin=200)
    assert finding.verdict == "inconclusive" and "1100-never vs 1400-1600" in finding.value
    assert convergence_finding(_drops([("base", [3000, nan], [900, 1000])]), margin=200).verdict == "not reproduced"
    # a BN seed that never drops does not stop OH from being faster
    assert convergence_finding(_drops([("base", [900, 1000], [3000, nan])]), margin=200).verdict == "reproduced"
    with pytest.raises(ValueError, match="earliest_seed"):
        convergence_finding(pd.DataFrame({("below_lloyd_at", "OH"): [1.0], ("below_lloyd_at", "BN"): [2.0]}), 200)


def test_the_claims_page_states_the_book_profiles_stop_rule():
    """book/claims.md types the book profile's patience, first check and cap: they must be the profile's."""
    page = " ".join((Path(__file__).resolve().parent.parent / "book" / "claims.md").read_text().split())
    book = get_profile("book")
    for chapter in ("training", "section4", "realdata", "landscape"):  # every chapter that trains layers
        sizes = book.chapter(chapter)
        assert (f"averaged over the last {SMOOTHING} validations, beats one Lloyd step and its best value has "
                f"improved by less than {sizes.until_flat:.0%} over the last {sizes.patience} steps (the "
                f"patience), checked from step {sizes.min_steps} on; a run that never gets there trains to the "
                f"cap, {sizes.steps} steps" in page), chapter
    assert "longer than the plateaus" not in page
