"""Chapter 13's readings and verdicts of Figures 4 and 5 (kmtrf_core.book.ch13_cauchy)."""

import dataclasses

import numpy as np
import pandas as pd
import pytest
import torch

from kmtrf_core import ClusterTransformer
from kmtrf_core.book.ch13_cauchy import (
    cauchy_stands_out,
    family_convergence,
    family_training_finding,
    gap_finding,
    margin_report,
    margin_samples,
    own_family_ratios,
    settling_ranges,
    smoothing_margins,
)
from kmtrf_core.landscape import Landscape
from kmtrf_core.objectives import sparsemax_is_tight
from kmtrf_core.tasks import FAMILIES, family_tasks


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
    noise = 0.02 * np.random.default_rng(0).standard_normal((3, 64))

    def samples(values):
        return {(family, scheme): value + noise for family, value in values.items() for scheme in ("oh", "bn")}

    held = samples(per_family.final_val_relative)
    # every family's runs settle between 20 and 40 steps, cauchy's too: no family ahead
    settling = _settling({family: (20.0, 40.0) for family in FAMILIES})
    finding = family_training_finding(per_family, 10, held, settling)
    assert finding.verdict == "reproduced"
    assert finding.value.startswith("held-out ratio to one Lloyd step, own family: cauchy OH 2.00")
    assert finding.value.endswith("cauchy worse in 8 of 8 (family, embedding) pairs on 95% intervals")
    assert finding.report.splitlines()[-1].endswith(
        "cauchy's runs at 20-40, the other families' at 20-40; every cauchy seed at least one validation "
        "interval ahead of every seed of the other family, per configuration and family: ahead in 0 of 8, "
        "behind in 0 -> inconclusive")
    # cauchy's last seed settles at 10, one interval before the others' first: ahead
    ahead = _settling({**{family: (20.0, 40.0) for family in FAMILIES}, "cauchy": (10.0, 10.0)})
    assert family_training_finding(per_family, 10, held, ahead).report.endswith("ahead in 8 of 8, behind in 0 -> "
                                                                                "reproduced")
    # closer than one interval (15 vs 20) is not ahead; a family that never settles is behind everything
    close = _settling({**{family: (20.0, 40.0) for family in FAMILIES}, "cauchy": (10.0, 15.0),
                       "gumbel": (30.0, np.inf)})
    assert family_training_finding(per_family, 10, held, close).report.endswith("ahead in 2 of 8, behind in 0 -> "
                                                                                "partly")
    late = _settling({**{family: (10.0, 20.0) for family in FAMILIES}, "cauchy": (30.0, np.inf)})
    assert family_training_finding(per_family, 10, held, late).report.endswith("ahead in 0 of 8, behind in 8 -> "
                                                                               "not reproduced")
    better = samples(per_family.final_val_relative.replace(2.0, 1.1))  # cauchy ties gumbel, beats the rest
    tied = family_training_finding(per_family, 10, better, settling)
    assert tied.verdict == "partly"
    lines = tied.report.splitlines()  # the counts and every pair's interval are printed, not only the verdict
    assert lines[1].endswith(": 4 of 8 (2 better, 2 inconclusive) -> partly")  # worse than normal and laplace
    assert lines[2].startswith("Other family - cauchy, per (family, embedding): normal OH -0.100 [")
    assert lines[2].count("(95% CI; margin 0)") == 8
    best = samples(per_family.final_val_relative.replace(2.0, 0.5))
    assert family_training_finding(per_family, 10, best, settling).verdict == "not reproduced"
    with pytest.raises(ValueError, match="latest"):
        family_training_finding(per_family, 10, held, settling.drop(columns="latest"))


def _settling(ranges: dict) -> pd.DataFrame:
    """A settling table from ``family -> (earliest, latest)``, the same for OH and BN (L2)."""
    index = pd.MultiIndex.from_tuples([(family, scheme, "l2") for family in ranges for scheme in ("oh", "bn")],
                                      names=["family", "scheme", "omega"])
    values = [ranges[family] for family, _, _ in index]
    return pd.DataFrame(values, index=index, columns=["earliest", "latest"]).assign(seeds=2)


def test_settling_ranges_reads_each_seed():
    rows = []
    # seed 0 settles at step 10, seed 1 at 20 (90% of its improvement), seed 2 never improves
    for seed, curve in enumerate(([3.0, 1.0, 1.0], [3.0, 2.0, 1.0], [1.0, 1.0, 1.0])):
        for step, val in zip((0, 10, 20), curve):
            rows.append(dict(family="cauchy", scheme="bn", omega="l2", seed=seed, step=step,
                             train_loss=np.nan if step == 0 else 1.0, val_relative_loss=val))
    history = pd.DataFrame(rows)
    table = settling_ranges(history[history.seed < 2])
    assert table.loc[("cauchy", "bn", "l2")].tolist() == [10.0, 20.0, 2]
    table = settling_ranges(history)
    assert table.loc[("cauchy", "bn", "l2")].tolist() == [10.0, np.inf, 3]  # a seed never settles: inf
    assert settling_ranges(history[history.seed == 2]).earliest.tolist() == [np.inf]
    half = settling_ranges(history[history.seed < 2], fraction=0.5)  # seed 1 made half its improvement at 10
    assert half.loc[("cauchy", "bn", "l2")].tolist() == [10.0, 10.0, 2] and half.attrs["fraction"] == 0.5
    with pytest.raises(ValueError, match=r"lacks the column\(s\) \['seed'\] "):  # named once
        settling_ranges(history.drop(columns="seed"))


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
    assert "measured factor " in finding.report and "(one value, no interval;" in finding.report
    assert "Cauchy's gap is an order of magnitude larger" not in finding.report


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


def test_margin_report_reads_the_initial_centers():
    margins = _margins([0.7, 0.2, 0.6, 0.6, 0.6], [0.25, 0.03, 0.13, 0.2, 0.15])
    text = margin_report(margins)
    assert text.splitlines()[0].endswith("normal 0.70, cauchy 0.20, gumbel 0.60, laplace 0.60, "
                                         "lognormal 0.60.")
    assert "Lowest" not in text  # a ranking of point values is not a verdict: cauchy_stands_out decides
    assert text.splitlines()[1] == ("Median margin between the two nearest centers: cauchy 0.03, "
                                    "other families 0.13 to 0.25 (tau = 0.1).")


def test_margin_samples_are_the_per_task_values():
    tests = family_tasks(4, 24, 2, 4, families=("normal", "cauchy"), generator=5, dtype=torch.float64)
    samples = margin_samples(tests, tau=0.1)
    assert samples.index.tolist() == [(f, t) for f in ("normal", "cauchy") for t in range(4)]
    X, C = tests["cauchy"]
    two = ((X[:, :, None, :] - C[:, None, :, :]) ** 2).sum(-1).sort(dim=-1).values[..., :2]
    margin = two[..., 1] - two[..., 0]  # (B, n)
    np.testing.assert_allclose(samples.loc["cauchy", "exact_fraction"], (margin >= 0.1).double().mean(dim=1))
    np.testing.assert_allclose(samples.loc["cauchy", "median_margin"], margin.median(dim=1).values)
    # a larger tau makes exact smoothing rarer, the margins stay
    wider = margin_samples(tests, tau=1.0)
    assert (wider.exact_fraction <= samples.exact_fraction).all()
    np.testing.assert_allclose(wider.median_margin, samples.median_margin)
    with pytest.raises(ValueError, match="tests"):
        margin_samples({})
    with pytest.raises(ValueError, match=r"tests\['cauchy'\]: C must hold k >= 2"):
        margin_samples({"cauchy": (X, C[:, :1])})
    with pytest.raises(ValueError, match=r"tests\['cauchy'\]: X must"):
        margin_samples({"cauchy": (X[0], C)})


def _samples(exact, margin, tasks=64, seed=0):
    """Per-task margin samples, one family per (exact, margin) level in FAMILIES' order, with noise."""
    rng = np.random.default_rng(seed)
    frames = {f: pd.DataFrame({"exact_fraction": e + 0.05 * rng.standard_normal(tasks),
                               "median_margin": m + 0.01 * rng.standard_normal(tasks)})
              for f, e, m in zip(FAMILIES, exact, margin)}
    return pd.concat(frames, names=["family", "task"])


def test_cauchy_stands_out_on_intervals_over_tasks():
    answer, report = cauchy_stands_out(_samples([0.7, 0.2, 0.6, 0.6, 0.6], [0.25, 0.03, 0.13, 0.2, 0.15]))
    assert answer == "yes"
    assert report.splitlines()[-1].endswith("cauchy lower in 8 of 8 comparisons, higher in 0 -> yes")
    assert len(report.splitlines()) == 1 + 8 + 1 and "95% CI; margin 0" in report
    assert "median margin between the two nearest centers, cauchy - gumbel: " in report
    # a family with smaller margins than cauchy: no
    answer, report = cauchy_stands_out(_samples([0.7, 0.2, 0.6, 0.6, 0.6], [0.25, 0.03, 0.01, 0.2, 0.15]))
    assert answer == "no" and report.endswith("higher in 1 -> no")
    # a family with as few exact points as cauchy: the point values differ (0.2 vs 0.215) but the intervals
    # over 64 noisy tasks overlap: inconclusive, not yes
    point = _samples([0.7, 0.2, 0.215, 0.6, 0.6], [0.25, 0.03, 0.13, 0.2, 0.15])
    assert point.loc["cauchy", "exact_fraction"].mean() < point.loc["gumbel", "exact_fraction"].mean()
    answer, report = cauchy_stands_out(point)
    assert answer == "inconclusive" and report.endswith("lower in 7 of 8 comparisons, higher in 0 -> inconclusive")
    # the same gap with many noiseless tasks separates
    exact = _samples([0.7, 0.2, 0.215, 0.6, 0.6], [0.25, 0.03, 0.13, 0.2, 0.15], tasks=4096)
    exact["exact_fraction"] = exact.groupby(level="family").exact_fraction.transform("mean")
    exact.loc["gumbel", "exact_fraction"] = exact.loc["cauchy", "exact_fraction"].to_numpy() + 0.015
    assert cauchy_stands_out(exact)[0] == "yes"
    with pytest.raises(ValueError, match="cauchy"):
        cauchy_stands_out(point.drop(index="cauchy", level="family"))
    with pytest.raises(ValueError, match="samples"):
        cauchy_stands_out(point.drop(columns="median_margin"))


@pytest.mark.parametrize("cauchy, expected", [(8.0, "reproduced"), (3.0, "partly"), (0.25, "not reproduced"),
                                              (0.5, "inconclusive")])
def test_gap_finding_on_the_interval_of_the_factor(cauchy, expected):
    rng = np.random.default_rng(0)
    normal = 0.5 + 0.05 * rng.standard_normal(64)
    samples = {"normal": normal, "cauchy": cauchy * (1 + 0.1 * rng.standard_normal(64))}  # factor 16, 6, 0.5, 1
    finding = gap_finding({"normal": _landscape(0.5), "cauchy": _landscape(cauchy)}, samples)
    assert finding.verdict == expected
    assert "(95% CI over tasks)" in finding.value and finding.uncertainty.startswith("factor ")
    assert finding.value.count("factor") == 1  # the factor once, with its interval
    # the last line sets the paper's claim beside the measured interval, not as a finding of its own
    last = finding.report.splitlines()[-1]
    assert last.startswith("Paper: cauchy's gap an order of magnitude larger (a factor of 10 or more, Figure 5); "
                           f"measured {finding.uncertainty}; ")
    assert last.endswith(f" -> {expected}")


# the softmin (NE) layers: the released code's loss, cauchy against normal (the control)

NE_NOISE = 0.02 * np.random.default_rng(0).standard_normal((2, 64))


def _ne_samples(cauchy, normal):
    out = {("cauchy", s): value + NE_NOISE for s, value in zip(("oh", "bn"), cauchy)}
    out.update({("normal", s): value + NE_NOISE for s, value in zip(("oh", "bn"), normal)})
    return out


def _l2_inputs(cauchy_l2):
    families = ["normal", "cauchy", "gumbel"]
    per_family = pd.DataFrame({"final_val_relative": [0.9, cauchy_l2, 0.9], "steps_to_converge": 10.0},
                              index=families)
    samples = {(f, s): per_family.final_val_relative[f] + NE_NOISE for f in families for s in ("oh", "bn")}
    settling = pd.DataFrame({"earliest": 10.0, "latest": 20.0, "seeds": 2}, index=pd.MultiIndex.from_product(
        [families, ["oh", "bn"], ["l2"]], names=["family", "scheme", "omega"]))
    return per_family, samples, settling


@pytest.mark.parametrize("cauchy_l2, cauchy_ne, normal_ne, verdict", [
    (1.3, (1.3, 1.3), (0.9, 0.9), "reproduced"),          # both losses fail on cauchy
    (0.7, (1.3, 1.3), (0.9, 0.9), "partly"),              # NE fails, L2 does not
    (0.7, (0.8, 0.8), (0.9, 0.9), "not reproduced"),      # neither: cauchy's NE layer the better one
    (1.3, (1.3, 0.9), (0.9, 0.9), "partly"),              # BN's NE cauchy layer no worse than normal's
    (0.7, (0.9, 0.9), (0.9, 0.9), "not reproduced"),      # NE inside the noise: nothing shown
])
def test_family_training_finding_joins_the_softmin_layers(cauchy_l2, cauchy_ne, normal_ne, verdict):
    per_family, samples, settling = _l2_inputs(cauchy_l2)
    without = family_training_finding(per_family, 10, samples, settling)
    finding = family_training_finding(per_family, 10, samples, settling, softmin=_ne_samples(cauchy_ne, normal_ne))
    assert finding.verdict == verdict
    assert finding.value.startswith(without.value + ". NE: cauchy OH")
    assert finding.check.startswith(without.check + "; with the softmin (NE)")
    assert finding.uncertainty.startswith(without.uncertainty) and finding.uncertainty.count("NE normal:") == 2
    assert finding.report.splitlines()[-1].endswith(f"-> {verdict}")


def test_family_training_finding_counts_ne_cauchy_layers_above_lloyd():
    per_family, samples, settling = _l2_inputs(0.7)
    finding = family_training_finding(per_family, 10, samples, settling, softmin=_ne_samples((1.3, 0.95), (0.9, 0.9)))
    assert "above one Lloyd step in 1 of 2" in finding.value  # BN's 0.95 lies below 1 on its interval
    assert "cauchy worse than normal in 2 of 2 (2 worse, 0 better, 0 inconclusive)" in finding.value


def test_family_training_finding_refuses_missing_softmin_layers():
    per_family, samples, settling = _l2_inputs(1.3)
    ne = _ne_samples((1.3, 1.3), (0.9, 0.9))
    del ne[("normal", "bn")]
    with pytest.raises(ValueError, match=r"softmin lacks the NE layers \[\('normal', 'bn'\)\]"):
        family_training_finding(per_family, 10, samples, settling, softmin=ne)


def test_the_softmin_group_is_the_section4_setting_with_ne_on_cauchy_and_normal():
    from kmtrf_core.book.catalog import book_catalog  # the catalog, only here
    from kmtrf_core.training.runs import cached_path  # the cache files, to see shared runs

    for profile in ("quick", "book", "paper"):
        catalog = book_catalog(profile)
        group, families = catalog["cauchy_softmin"], catalog["section4_families"]
        configs = group.configs()
        assert {(c.family, c.scheme, c.omega) for c in configs} == {
            (f, s, "ne") for f in ("normal", "cauchy") for s in ("oh", "bn")}
        assert all(c == dataclasses.replace(families.base, family=c.family, scheme=c.scheme, omega="ne")
                   for c in configs)
        probe = catalog["cauchy_softmin_probe"]
        assert probe.probe and (probe.base.family, probe.base.scheme, probe.base.omega) == ("cauchy", "oh", "ne")
        assert probe.base.seeds == (families.base.seeds[-1],)  # the last seed, not the first
        shared = {cached_path(c).name for c in families.configs()} & {cached_path(c).name for c in configs}
        assert len(shared) == (4 if "ne" in families.grid.get("omega", ()) else 0), profile


@pytest.mark.slow
def test_own_family_ratios_reads_the_ne_layers_and_refuses_a_wrong_omega(tmp_path, monkeypatch):
    from kmtrf_core.book.catalog import book_catalog  # the catalog, only here

    monkeypatch.setenv("KMTRF_CACHE", str(tmp_path))
    group = book_catalog("quick")["cauchy_softmin"]
    out = own_family_ratios(group, 3, families=("cauchy",), schemes=("bn",), omega="NE")  # any case
    assert out[("cauchy", "bn")].shape == (len(group.base.seeds), 3)
    with pytest.raises(ValueError, match="trains omega='ne', not 'l2'"):
        own_family_ratios(group, 3, families=("cauchy",), schemes=("bn",))


def test_own_family_ratios_reads_omega_in_any_case_and_refuses_an_unknown_one():
    from kmtrf_core.book.catalog import book_catalog  # the catalog, only here

    group = book_catalog("quick")["cauchy_softmin"]
    with pytest.raises(ValueError, match="omega must be one of"):
        own_family_ratios(group, 3, families=("cauchy",), schemes=("bn",), omega="softmin")
