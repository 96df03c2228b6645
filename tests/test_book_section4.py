"""The Section 4 experiments shared by chapters 10, 11, 13 and 14: kmtrf_core.book.section4."""

import math

import numpy as np
import pandas as pd
import pytest
import torch
from scipy.stats import spearmanr

from kmtrf_core import ClusterTransformer, evaluate_models, sample_tasks
from kmtrf_core.book import PROFILES, VERDICTS, get_profile
from kmtrf_core.book.section4 import (
    OMEGAS,
    SCHEMES,
    Finding,
    base_config,
    cauchy_stands_out,
    distance_quantiles,
    emd_finding,
    family_convergence,
    family_emd,
    family_finding,
    family_summary,
    family_training_finding,
    gap_finding,
    l2_label,
    length_finding,
    margin_report,
    multistep_findings,
    multistep_summary,
    point_counts,
    ratio_table,
    scheme_layers,
    shift_finding,
    smoothing_margins,
    training_caption,
    transfer_correlation,
    transfer_finding,
)
from kmtrf_core.dissimilarity import block_labels, distance_samples, emd_matrix
from kmtrf_core.evaluate import family_matrix, final_ratios
from kmtrf_core.landscape import Landscape
from kmtrf_core.objectives import sparsemax_is_tight
from kmtrf_core.tasks import FAMILIES, SHIFTS, family_tasks
from kmtrf_core.training import TrainConfig, sweep
from kmtrf_core.training.runs import cache_key

TINY = TrainConfig(d=2, k=3, n=16, steps=2, batch=2, val_tasks=2, val_every=1, impl="direct")


# --- the shared setting -------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(PROFILES))
def test_base_config_is_the_chapters_config_so_runs_are_shared(name):
    profile = get_profile(name)
    sizes = profile.chapter("section4")
    config = base_config(profile)
    # what chapters 10 and 13 built (no omega) and chapters 11 and 14 built (omega="l2")
    for before in (TrainConfig.from_sizes(sizes), TrainConfig.from_sizes(sizes, omega="l2")):
        assert config == before
        assert cache_key(config) == cache_key(before)
    assert base_config(name) == config
    assert config.omega == "l2" and config.family == "normal" and config.seeds == tuple(sizes.seeds)
    assert base_config(profile, scheme="oh").scheme == "oh"


def test_base_config_defaults_to_the_profile_in_force(monkeypatch):
    monkeypatch.setenv("KMTRF_PROFILE", "quick")
    assert base_config() == base_config("quick")


def test_scheme_layers_picks_the_l2_layers():
    models = {(s, o): f"{s}-{o}" for s in SCHEMES for o in OMEGAS}
    assert scheme_layers(models) == {"oh": "oh-l2", "bn": "bn-l2", "na": "na-l2"}
    assert list(scheme_layers(models, schemes=("bn", "oh"), omega="ne")) == ["bn", "oh"]


def test_schemes_and_omegas():
    assert SCHEMES == ("oh", "bn", "na") and OMEGAS == ("ne", "l2")


def test_training_caption_and_labels():
    sizes = get_profile("book").chapter("section4")
    text = training_caption(sizes)
    for piece in (f"n={sizes.n}", f"d={sizes.d}", f"k={sizes.k}", f"tau={sizes.tau}",
                  f"from step {sizes.min_steps}, at most {sizes.steps}", f"seeds {sizes.seeds}"):
        assert piece in text
    assert [l2_label(s) for s in SCHEMES] == ["OH:L2", "BN:L2", "NA:L2"]
    assert l2_label(("lognormal", "na")) == "NA:L2"


def test_finding_prints_its_report():
    finding = Finding("v", "partly", "line one\nline two")
    assert str(finding) == "line one\nline two"
    with pytest.raises(AttributeError):
        finding.verdict = "reproduced"


# --- chapter 10 -------------------------------------------------------------------


def _step_table(models, mode_losses, lloyd_losses):
    """An evaluation-shaped table: model -> mode -> (members, steps) losses."""
    rows = []
    for model, modes in mode_losses.items():
        for mode, losses in modes.items():
            losses = np.asarray(losses, dtype=float)
            for member in range(losses.shape[0]):
                for step in range(losses.shape[1]):
                    loss, ref = losses[member, step], lloyd_losses[step]
                    rows.append(dict(model=model, member=member, test="normal", mode=mode,
                                     step=step, loss=loss, lloyd_loss=ref, ratio=loss / ref,
                                     diverged=float(not math.isfinite(loss))))
    return pd.DataFrame(rows)


def test_multistep_summary_reads_step_one_and_the_last_step():
    lloyd = [10.0, 5.0, 4.0, 3.0]
    table = _step_table(None, {
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
])
def test_multistep_findings(improves, ratios, expected):
    models = ["OH:L2", "BN:L2", "NA:L2"]
    summary = pd.DataFrame({
        "model": models * 2, "mode": ["naive"] * 3 + ["reembed"] * 3,
        "improves_after_step1": [False, True, False] + improves,
        "ratio_to_lloyd_T": [40.0, 50.0, 60.0] + ratios,
        "diverged": [0.25, 0.0, 0.0, 0.0, 0.0, 0.0],
    })
    naive, reembed = multistep_findings(summary, 7)
    assert naive.verdict == "partly"
    assert naive.value == "2 of 3 configurations end worse after 7 steps than after step 1"
    assert "(1 overflow on some tasks)" in naive.report
    assert reembed.verdict == expected
    low, high = min(ratios[:2]), max(ratios[:2])  # NA is left out of (iii)
    assert reembed.value.endswith(f"after 7 steps {low:.2f} to {high:.2f}")
    assert reembed.report.count("\n") == 1


# --- chapter 11 -------------------------------------------------------------------


def test_ratio_table_first_and_last_step():
    table = _step_table(None, {"oh": {"reembed": [[4, 2, 1], [4, 4, 3]]},
                               "bn": {"reembed": [[4, 8, 8], [4, 8, 8]]}}, [4.0, 4.0, 4.0])
    out = ratio_table(table)
    assert list(out.columns) == ["ratio_step1", "ratio_step2"]
    assert out.loc[("normal", "oh")].tolist() == [0.75, 0.5]
    assert out.loc[("normal", "bn")].tolist() == [2.0, 2.0]
    assert ratio_table(table, by=["model"]).index.tolist() == ["bn", "oh"]


def _shift_final(oh, bn, na=1.0):
    index = ["no shift", *SHIFTS]
    return pd.DataFrame({"oh": oh, "bn": bn, "na": na}, index=index)


def test_shift_finding_counts_shifts_but_expects_double_scale_to_lose():
    assert "double scale" in SHIFTS
    all_but_double = [0.5 if s != "double scale" else 1.5 for s in SHIFTS]
    finding = shift_finding(_shift_final([0.9, *all_but_double], [0.9, *all_but_double]), 20)
    assert finding.verdict == "reproduced"
    assert finding.value.startswith("OH/BN beat Lloyd after 20 steps under 3 of 4 shifts")
    assert finding.value.endswith("final ratios 0.50 to 1.50")
    assert "Paper: 3 of 4 (all but double scale)" in finding.report
    # BN loses one of the expected shifts: partly
    bn = list(all_but_double)
    bn[[s for s in SHIFTS].index("half scale")] = 1.2
    assert shift_finding(_shift_final([0.9, *all_but_double], [0.9, *bn]), 20).verdict == "partly"
    lost = shift_finding(_shift_final([2.0] * 5, [2.0] * 5), 20)
    assert lost.verdict == "not reproduced" and "shifts. Paper" in lost.report


def test_shift_finding_reports_unshifted_ratios_and_drift():
    final = _shift_final([1.0, 1.5, 0.25, 1.0, 1.0], [2.0, 2.0, 2.0, 2.0, 2.0], na=3.0)
    lines = shift_finding(final, 6).report.splitlines()
    assert lines[1] == ("Unshifted reference, ratio to Lloyd after T steps: "
                        "OH:L2 1.00, BN:L2 2.00, NA:L2 3.00")
    assert lines[2].endswith(": 0.75")


def _matrix(values, families=FAMILIES):
    return pd.DataFrame(values, index=list(families), columns=list(families))


def test_family_summary_and_finding():
    values = np.full((5, 5), 0.5)
    values[:, 1] = 3.0  # cauchy-trained column
    values[1, :] = 2.0  # cauchy test row
    matrix = _matrix(values)
    summary = family_summary({"oh": matrix, "bn": matrix * 0.5, "na": matrix * 9})
    assert summary.index.tolist() == ["OH:L2", "BN:L2"]
    oh = summary.loc["OH:L2"]
    assert oh.cauchy_trained_median_ratio == 3.0
    assert oh.other_trained_median_ratio == pytest.approx((0.5 * 16 + 2.0 * 4) / 20)
    assert oh.cauchy_test_row_ratio == 2.0 and oh.block_4x4_cells_beating_lloyd == 16
    finding = family_finding(summary, 20)
    assert finding.verdict == "reproduced"
    assert finding.value == ("32 of 32 OH/BN cells of the non-cauchy 4x4 block beat Lloyd after "
                             "20 steps; cauchy-trained layers worse than the others: True")
    lines = finding.report.splitlines()
    assert lines[0].endswith("True -> reproduced")
    assert lines[1].endswith("False -> not reproduced")  # BN's cauchy row is at 1.0
    assert family_finding(summary.assign(block_4x4_cells_beating_lloyd=0), 20).verdict == (
        "not reproduced")


def test_point_counts():
    sizes = get_profile("quick").chapter("section4")
    assert point_counts(sizes, [0.5, 1, 2, 4]) == [16, 32, 64, 128]
    assert point_counts(sizes, [0.01]) == [sizes.k]


def test_length_finding():
    final = pd.DataFrame({"oh": [0.5, 0.8, 0.9], "bn": [0.6, 0.7, 1.0], "na": 5.0},
                         index=["n=8", "n=16", "n=32"])
    finding = length_finding(final, [8, 16, 32], 16, 6)
    assert finding.verdict == "partly"
    assert finding.value == ("OH/BN beat Lloyd in 5 of 6 (n, embedding) cases, n = 8 to 32 for "
                             "training n = 16")
    assert "varies by a factor 2.00" in finding.report
    assert length_finding(final[["oh", "bn"]] * 0.5, [8, 16, 32], 16, 6).verdict == "reproduced"
    with pytest.raises(ValueError, match="points"):
        length_finding(final, [8, 16], 16, 6)


# --- chapter 13 -------------------------------------------------------------------


def test_family_convergence_medians_over_configurations():
    rows = []
    for family, finals in (("normal", (0.8, 1.0)), ("cauchy", (1.9, 2.1))):
        for scheme, final in zip(("oh", "bn"), finals):
            for step, val in zip((0, 10, 20), (3.0, final + 0.01, final)):
                rows.append(dict(family=family, scheme=scheme, omega="l2", seed=0, step=step,
                                 train_loss=np.nan if step == 0 else 1.0, val_relative_loss=val))
    table = family_convergence(pd.DataFrame(rows), families=["normal", "cauchy"])
    assert table.index.tolist() == ["normal", "cauchy"]
    assert table.final_val_relative.tolist() == pytest.approx([0.9, 2.0])
    assert table.steps_to_converge.tolist() == [10.0, 10.0]


def test_family_training_finding():
    per_family = pd.DataFrame({"final_val_relative": [1.0, 2.0, 1.1, 0.9, 1.2],
                               "steps_to_converge": [20.0, 20.0, 30.0, 40.0, 20.0]},
                              index=list(FAMILIES))
    finding = family_training_finding(per_family, 10)
    assert finding.verdict == "reproduced"
    assert finding.value == ("median final relative validation loss: cauchy 2.00, others "
                             "0.90 to 1.20")
    assert finding.report.endswith("-> not reproduced (a tie at this validation interval)")
    faster = per_family.assign(steps_to_converge=[20.0, 10.0, 30.0, 40.0, 20.0])
    assert family_training_finding(faster, 10).report.endswith("steps) -> reproduced")
    better = per_family.assign(final_val_relative=[1.0, 1.1, 1.1, 0.9, 1.2])
    assert family_training_finding(better, 10).verdict == "not reproduced"


def _landscape(gap, kmeans=10.0):
    k = np.full((3, 3), kmeans)
    return Landscape(np.linspace(-1, 1, 3), np.linspace(-1, 1, 3), k + gap, k, ({}, {}), "l2", 0.1)


@pytest.mark.parametrize("cauchy, expected", [(5.0, "reproduced"), (4.99, "partly"),
                                              (0.5, "not reproduced")])
def test_gap_finding_thresholds(cauchy, expected):
    finding = gap_finding({"normal": _landscape(0.5), "cauchy": _landscape(cauchy)})
    assert finding.verdict == expected
    assert finding.value.startswith("largest gap on the plane: normal 0.5, cauchy ")
    assert f"cauchy {cauchy / 10:.3g}." in finding.report


def test_smoothing_margins_match_their_definitions():
    tests = family_tasks(3, 24, 2, 4, families=("normal", "cauchy"), generator=5,
                         dtype=torch.float64)
    layers = {family: ClusterTransformer.from_lloyd(2, 4) for family in tests}
    table = smoothing_margins(layers, tests, tau=0.1)
    assert table.index.tolist() == [(f, c) for f in ("normal", "cauchy")
                                    for c in ("initial centers", "after the layer")]
    X, C = tests["cauchy"]
    r = ((X[:, :, None, :] - C[:, None, :, :]) ** 2).sum(-1)
    two = r.sort(dim=-1).values[..., :2]
    row = table.loc[("cauchy", "initial centers")]
    assert row.exact_fraction == pytest.approx(sparsemax_is_tight(r, 0.1).float().mean().item())
    assert row.exact_fraction == pytest.approx(((two[..., 1] - two[..., 0]) >= 0.1)
                                               .double().mean().item())
    assert row.median_margin == pytest.approx((two[..., 1] - two[..., 0]).median().item())
    assert row.median_nearest_sqdist == pytest.approx(two[..., 0].median().item())
    assert (table.gap_share >= 0).all() and (table.exact_fraction <= 1).all()
    # a larger tau makes exact smoothing rarer
    assert (smoothing_margins(layers, tests, tau=1.0).exact_fraction
            <= table.exact_fraction + 1e-12).all()


def _margins(exact, margin):
    rows = [dict(family=f, centers=c, exact_fraction=e, median_margin=m)
            for f, e, m in zip(FAMILIES, exact, margin)
            for c in ("initial centers", "after the layer")]
    return pd.DataFrame(rows).set_index(["family", "centers"])


def test_margin_report_and_cauchy_stands_out():
    margins = _margins([0.7, 0.2, 0.6, 0.6, 0.6], [0.25, 0.03, 0.13, 0.2, 0.15])
    text = margin_report(margins)
    assert text.splitlines()[0].endswith("normal 0.70, cauchy 0.20, gumbel 0.60, laplace 0.60, "
                                         "lognormal 0.60. Lowest: cauchy.")
    assert text.splitlines()[1] == ("Median margin between the two nearest centers: cauchy 0.03, "
                                    "other families 0.13 to 0.25 (tau = 0.1).")
    assert cauchy_stands_out(margins)
    assert not cauchy_stands_out(_margins([0.7, 0.2, 0.6, 0.6, 0.6],
                                          [0.25, 0.03, 0.01, 0.2, 0.15]))
    assert not cauchy_stands_out(_margins([0.7, 0.2, 0.1, 0.6, 0.6],
                                          [0.25, 0.03, 0.13, 0.2, 0.15]))


# --- chapter 14 -------------------------------------------------------------------


def test_family_emd_is_emd_matrix_of_the_families_tasks():
    base = TrainConfig(d=3, k=4, n=12, scale=0.2)
    result = family_emd(base, 3, seed=11)
    tasks = family_tasks(3, 12, 3, 4, generator=11, scale=0.2)
    samples = np.concatenate([distance_samples(X, C) for X, C in tasks.values()])
    np.testing.assert_array_equal(result.samples, samples)
    np.testing.assert_array_equal(result.D, emd_matrix(samples))
    assert result.labels == block_labels(tasks) and len(result.labels) == 3 * len(FAMILIES)
    assert result.D.shape == (15, 15) and result.seconds >= 0.0
    np.testing.assert_allclose(result.D, result.D.T)
    assert np.allclose(np.diag(result.D), 0.0)


def test_emd_finding():
    blocks = _matrix(np.full((5, 5), 0.2))
    blocks.loc["cauchy", :] = blocks.loc[:, "cauchy"] = 0.5
    blocks.loc["cauchy", "cauchy"] = 0.1
    blocks.loc["cauchy", "lognormal"] = blocks.loc["lognormal", "cauchy"] = 0.4
    finding = emd_finding(blocks, 16)
    assert finding.verdict == "reproduced"
    assert finding.value == ("mean EMD within cauchy 0.1, cauchy to others 0.475, among the others "
                             "0.2 (16 tasks per family)")
    assert "Closest family to cauchy: lognormal (the paper: laplace)." in finding.report
    blocks.loc["cauchy", "cauchy"] = 0.9
    assert emd_finding(blocks, 16).verdict == "not reproduced"


def test_distance_quantiles():
    rng = np.random.default_rng(0)
    samples = rng.random((6, 10))
    labels = ["normal", "normal", "cauchy", "cauchy", "gumbel", "gumbel"]
    table = distance_quantiles(samples, labels, families=["normal", "cauchy", "gumbel"])
    assert table.columns.tolist() == ["10%", "median", "90%"]
    np.testing.assert_allclose(table.loc["cauchy"], np.quantile(samples[2:4], [0.1, 0.5, 0.9]))
    quartile = distance_quantiles(samples, labels, quantiles=(0.25,), families=["gumbel"])
    assert quartile.columns.tolist() == ["25%"]


def _family_table(matrices):
    """A family_generalization-shaped table whose family matrices are ``matrices``."""
    rows = []
    for scheme, matrix in matrices.items():
        for test in matrix.index:
            for train in matrix.columns:
                rows.append(dict(model=(train, scheme), member=0, test=test, mode="reembed",
                                 step=3, ratio=matrix.loc[test, train], diverged=0.0))
    return pd.DataFrame(rows)


def test_transfer_correlation_finds_a_monotone_penalty():
    rng = np.random.default_rng(3)
    emd = rng.random((5, 5))
    blocks = _matrix(emd)  # distinct values: no ties in the ranks
    diagonal = rng.random(5) + 0.5
    # M[b, a] = M[b, b] * exp(EMD(a, b)) for a != b: the penalty is the EMD itself
    exponent = blocks.to_numpy().T * (1 - np.eye(5))
    aligned = _matrix(diagonal[:, None] * np.exp(exponent))
    reversed_ = _matrix(diagonal[:, None] * np.exp(-exponent))
    table = _family_table({"oh": aligned, "bn": reversed_})
    assert family_matrix(table, "oh").to_numpy() == pytest.approx(aligned.to_numpy())
    corr = transfer_correlation(blocks, table, schemes=("oh", "bn"))
    assert corr.index.tolist() == ["OH:L2", "BN:L2"]
    assert corr.pairs.tolist() == [20, 20]
    assert corr.spearman_rho.tolist() == pytest.approx([1.0, -1.0])
    finding = transfer_finding(corr)
    assert finding.verdict == "partly"
    assert finding.value == ("Spearman rho -1.00 to 1.00 over 20 family pairs; significant at 5% "
                             "for 1 of 2 embeddings")


def test_transfer_correlation_on_evaluated_layers():
    families = ("normal", "cauchy", "gumbel")
    tests = family_tasks(2, 16, 2, 3, families=families, generator=1)
    generator = torch.Generator().manual_seed(0)
    models = {(f, "bn"): ClusterTransformer(2, 3, "bn", generator=generator) for f in families}
    table = evaluate_models(models, tests, steps=2)
    blocks = _matrix(np.arange(9.0).reshape(3, 3), families)
    corr = transfer_correlation(blocks, table, schemes=("bn",), families=families)
    matrix = family_matrix(table, "bn")
    emd = [blocks.loc[a, b] for a in families for b in families if a != b]
    penalty = [np.log(matrix.loc[b, a] / matrix.loc[b, b]) for a in families for b in families
               if a != b]
    assert corr.loc["BN:L2", "spearman_rho"] == pytest.approx(spearmanr(emd, penalty)[0])


def test_transfer_finding_needs_significance():
    corr = pd.DataFrame({"spearman_rho": [0.3, 0.4], "p_value": [0.2, 0.3], "pairs": 20},
                        index=["OH:L2", "BN:L2"])
    finding = transfer_finding(corr)
    assert finding.verdict == "not reproduced"
    assert "positive for 2 of 2 embeddings, significant at 5% for 0" in finding.report
    assert finding.verdict in VERDICTS
