"""Chapter 13's readings and verdicts of Figures 4 and 5 (kmtrf_core.book.ch13_cauchy)."""

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
    finding = family_training_finding(per_family, 10, held)
    assert finding.verdict == "reproduced"
    assert finding.value.startswith("held-out ratio to one Lloyd step, own family: cauchy OH 2.00")
    assert finding.value.endswith("cauchy worse in 8 of 8 (family, embedding) pairs on 95% intervals")
    assert finding.report.endswith("-> not reproduced (a tie at this validation interval)")
    faster = per_family.assign(steps_to_converge=[20.0, 10.0, 30.0, 40.0, 20.0])
    assert family_training_finding(faster, 10, held).report.endswith("steps) -> reproduced")
    better = samples(per_family.final_val_relative.replace(2.0, 1.1))  # cauchy ties gumbel, beats the rest
    assert family_training_finding(per_family, 10, better).verdict == "partly"
    best = samples(per_family.final_val_relative.replace(2.0, 0.5))
    assert family_training_finding(per_family, 10, best).verdict == "not reproduced"


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


@pytest.mark.parametrize("cauchy, expected", [(8.0, "reproduced"), (3.0, "partly"), (0.25, "not reproduced"),
                                              (0.5, "inconclusive")])
def test_gap_finding_on_the_interval_of_the_factor(cauchy, expected):
    rng = np.random.default_rng(0)
    normal = 0.5 + 0.05 * rng.standard_normal(64)
    samples = {"normal": normal, "cauchy": cauchy * (1 + 0.1 * rng.standard_normal(64))}  # factor 16, 6, 0.5, 1
    finding = gap_finding({"normal": _landscape(0.5), "cauchy": _landscape(cauchy)}, samples)
    assert finding.verdict == expected
    assert "(95% CI over tasks)" in finding.value and finding.uncertainty.startswith("factor ")
