"""Chapter 14's EMD readings and verdicts (kmtrf_core.book.ch14_dissimilarity)."""

import numpy as np
import pandas as pd
import pytest
import torch
from scipy.stats import spearmanr

from kmtrf_core import ClusterTransformer, evaluate_models
from kmtrf_core.book import VERDICTS
from kmtrf_core.book.ch14_dissimilarity import (
    block_draws,
    distance_quantiles,
    emd_finding,
    emd_transfer_finding,
    family_emd,
    lowest_distances,
    transfer_correlation,
)
from kmtrf_core.dissimilarity import block_labels, block_summary, distance_samples, emd_matrix
from kmtrf_core.evaluate import family_matrix
from kmtrf_core.tasks import FAMILIES, family_tasks
from kmtrf_core.training import TrainConfig


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
    assert "Closest family to cauchy on the block means (no interval): lognormal (the paper: laplace)." \
        in finding.report
    blocks.loc["cauchy", "cauchy"] = 0.9
    assert emd_finding(blocks, 16).verdict == "not reproduced"


def _emd_tasks(cauchy_far: float, spread: float, m: int = 8, seed: int = 0):
    """An EMD matrix of 1-D tasks: four families near 0, cauchy at ``cauchy_far``, each task jittered by
    ``spread``."""
    rng = np.random.default_rng(seed)
    centers = [cauchy_far if family == "cauchy" else 0.0 for family in FAMILIES for _ in range(m)]
    points = np.asarray(centers) + spread * rng.standard_normal(len(centers))
    D = np.abs(points[:, None] - points[None, :])
    labels = [family for family in FAMILIES for _ in range(m)]
    return D, labels


def test_block_draws_resample_tasks_within_families():
    D, labels = _emd_tasks(1.0, 0.3)
    draws = block_draws(D, labels, resamples=3000, seed=1)
    blocks = block_summary(D, labels).to_numpy()
    assert draws.shape == (3000, 5, 5) and np.isfinite(draws).all()
    np.testing.assert_allclose(draws.mean(axis=0), blocks, rtol=0.05)  # the bootstrap centres on the table
    np.testing.assert_allclose(draws, np.swapaxes(draws, 1, 2))
    np.testing.assert_array_equal(draws, block_draws(D, labels, resamples=3000, seed=1))
    # two tasks a family: a draw keeps both (one task twice has no pair), so the within mean is exact
    two = block_draws(D[:2, :2], ["a", "a"], resamples=20)
    np.testing.assert_array_equal(two[:, 0, 0], D[0, 1])
    with pytest.raises(ValueError, match="two tasks"):
        block_draws(D[:3, :3], ["a", "a", "b"])
    with pytest.raises(ValueError, match="one label per task"):
        block_draws(D, labels[:-1])
    broken = D.copy()
    broken[0, 1] = np.nan
    with pytest.raises(ValueError, match="finite"):
        block_draws(broken, labels)


@pytest.mark.parametrize("far, spread, expected", [(3.0, 0.2, "reproduced"), (0.5, 0.6, "inconclusive"),
                                                   (0.0, 1.0, "not reproduced")])
def test_emd_finding_on_intervals(far, spread, expected):
    D, labels = _emd_tasks(far, spread, m=16)
    blocks = block_summary(D, labels)
    if expected == "not reproduced":  # cauchy's tasks spread far apart from each other, the rest tight
        rng = np.random.default_rng(3)
        points = np.where(np.asarray(labels) == "cauchy", 4 * rng.standard_normal(len(labels)),
                          0.05 * rng.standard_normal(len(labels)))
        D = np.abs(points[:, None] - points[None, :])
        blocks = block_summary(D, labels)
    finding = emd_finding(blocks, 16, draws=block_draws(D, labels))
    assert finding.verdict == expected
    # the four families near 0 are the same distribution: the closest to cauchy is not separated
    assert "Closest family to cauchy: not separated (" in finding.report
    assert "95% interval [" in finding.uncertainty and "separation" in finding.report
    with pytest.raises(ValueError, match="draws"):
        emd_finding(blocks, 16, draws=np.zeros((10, 4, 4)))
    with pytest.raises(ValueError, match="cauchy"):
        emd_finding(blocks.drop(index="cauchy", columns="cauchy"), 16)


def test_emd_finding_names_the_closest_family_on_its_interval():
    rng = np.random.default_rng(4)
    where = {"normal": 0.0, "cauchy": 3.0, "gumbel": 0.1, "laplace": 1.5, "lognormal": 0.2}
    labels = [family for family in FAMILIES for _ in range(16)]
    points = np.array([where[family] for family in labels]) + 0.05 * rng.standard_normal(len(labels))
    D = np.abs(points[:, None] - points[None, :])
    blocks = block_summary(D, labels)
    finding = emd_finding(blocks, 16, draws=block_draws(D, labels))
    line = finding.report.splitlines()[1]
    assert line.startswith("Closest family to cauchy: laplace (next closest minus laplace +1.")
    assert "95% interval [+1." in line and line.endswith("; the paper: laplace).")
    # laplace and lognormal at the same place: the point values still pick one, the interval does not
    points[np.asarray(labels) == "laplace"] = points[np.asarray(labels) == "lognormal"] + 0.01
    D = np.abs(points[:, None] - points[None, :])
    finding = emd_finding(block_summary(D, labels), 16, draws=block_draws(D, labels))
    assert finding.report.splitlines()[1].startswith("Closest family to cauchy: not separated (laplace on the block ")


def test_lowest_distances_on_intervals_over_tasks():
    rng = np.random.default_rng(5)
    labels = [family for family in FAMILIES for _ in range(12)]
    level = {"normal": 1.0, "cauchy": 0.1, "gumbel": 1.0, "laplace": 0.8, "lognormal": 0.9}
    samples = np.stack([level[family] * rng.random(40) for family in labels])
    family, line = lowest_distances(samples, labels)
    assert family == "cauchy" and line.endswith("Below every other family on 95% intervals over tasks (unpaired): "
                                                "4 of 4 -> yes")
    assert "cauchy minus the least separated, laplace: " in line and "(95% CI; margin 0)" in line
    # cauchy's tasks barely below laplace's: lowest on the point values, not on the intervals
    level["cauchy"] = 0.79
    samples = np.stack([level[family] * rng.random(40) for family in labels])
    family, line = lowest_distances(samples, labels)
    means = {f: np.median(samples[np.asarray(labels) == f], axis=1).mean() for f in FAMILIES}
    assert family is None and line.endswith("-> inconclusive")
    lowest = min(means, key=means.get)  # named on its points, as not separated
    assert line.startswith(f"Lowest median squared distance per task: not separated ({lowest} lowest on the point "
                           "values)")
    with pytest.raises(ValueError, match="one label per row"):
        lowest_distances(samples, labels[:-1])
    with pytest.raises(ValueError, match="two tasks each"):
        lowest_distances(samples[:13], labels[:13])
    samples[3, 5] = np.nan
    with pytest.raises(ValueError, match="samples must be finite"):
        lowest_distances(samples, labels)


def test_distance_quantiles():
    rng = np.random.default_rng(0)
    samples = rng.random((6, 10))
    labels = ["normal", "normal", "cauchy", "cauchy", "gumbel", "gumbel"]
    table = distance_quantiles(samples, labels, families=["normal", "cauchy", "gumbel"])
    assert table.columns.tolist() == ["10%", "median", "90%"]
    np.testing.assert_allclose(table.loc["cauchy"], np.quantile(samples[2:4], [0.1, 0.5, 0.9]))
    quartile = distance_quantiles(samples, labels, quantiles=(0.25,), families=["gumbel"])
    assert quartile.columns.tolist() == ["25%"]


def _matrix(values, families=FAMILIES):
    return pd.DataFrame(values, index=list(families), columns=list(families))


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
    assert corr.pairs.tolist() == [10, 10]  # the unordered pairs of 5 families
    assert corr.pairs_per_family.tolist() == [4, 4] and corr.relabellings.tolist() == [120, 120]
    assert corr.spearman_rho.tolist() == pytest.approx([1.0, -1.0])
    assert corr.p_value.tolist() == pytest.approx([1 / 120, 1.0])  # exact Mantel test: 5! relabellings
    assert corr.p_lower.tolist() == pytest.approx([1.0, 1 / 120])  # the reversed layer: significantly negative
    finding = emd_transfer_finding(corr)
    assert finding.verdict == "partly"  # one reproduced, one not
    assert finding.value == ("Spearman rho -1.00 to 1.00 over 10 unordered family pairs (Mantel test); "
                             "significant at 5% for 1 of 2 embeddings, significantly negative for 1")
    assert emd_transfer_finding(corr.loc[["BN:L2"]]).verdict == "not reproduced"
    assert finding.report.splitlines()[1].startswith("Over 10 unordered family pairs, each family in 4 of them")
    assert finding.report.endswith("all 120 relabellings of the families, so the smallest possible is "
                                   "1/120 = 0.00833.")


def test_transfer_correlation_on_evaluated_layers():
    families = ("normal", "cauchy", "gumbel")
    tests = family_tasks(2, 16, 2, 3, families=families, generator=1)
    generator = torch.Generator().manual_seed(0)
    models = {(f, "bn"): ClusterTransformer(2, 3, "bn", generator=generator) for f in families}
    table = evaluate_models(models, tests, steps=2)
    blocks = _matrix(np.arange(9.0).reshape(3, 3), families)
    corr = transfer_correlation(blocks, table, schemes=("bn",), families=families)
    matrix = family_matrix(table, "bn")
    pairs = [(a, b) for i, a in enumerate(families) for b in families[i + 1:]]
    emd = [(blocks.loc[a, b] + blocks.loc[b, a]) / 2 for a, b in pairs]
    penalty = [(np.log(matrix.loc[b, a] / matrix.loc[b, b]) + np.log(matrix.loc[a, b] / matrix.loc[a, a])) / 2
               for a, b in pairs]
    assert corr.loc["BN:L2", "spearman_rho"] == pytest.approx(spearmanr(emd, penalty)[0])
    assert int(corr.loc["BN:L2", "pairs"]) == 3 and 0 < corr.loc["BN:L2", "p_value"] <= 1
    assert int(corr.loc["BN:L2", "pairs_per_family"]) == 2 and int(corr.loc["BN:L2", "relabellings"]) == 6


def test_transfer_finding_needs_significance():
    # positive but not significant: inside the noise, neither evidence for the claim nor against it
    corr = pd.DataFrame({"spearman_rho": [0.3, 0.4], "p_value": [0.2, 0.3], "pairs": 20},
                        index=["OH:L2", "BN:L2"])
    finding = emd_transfer_finding(corr)
    assert finding.verdict == "inconclusive"
    assert "positive for 2 of 2 embeddings, significant at 5% for 0, significantly negative for 0" in finding.report
    assert "neither (inside the noise) for 2" in finding.report
    assert "\n" not in finding.report  # no counts of pairs per family: no line about them
    assert finding.verdict in VERDICTS
    corr["p_lower"] = [0.9, 0.95]
    assert emd_transfer_finding(corr).verdict == "inconclusive"
    corr["spearman_rho"], corr["p_value"], corr["p_lower"] = [-0.8, 0.5], [1.0, 0.01], [0.01, 1.0]
    assert emd_transfer_finding(corr).verdict == "partly"
    corr["spearman_rho"], corr["p_value"] = [-0.8, 0.1], [1.0, 0.4]
    assert emd_transfer_finding(corr).verdict == "not reproduced"  # one against, one undecided
    with pytest.raises(ValueError, match="correlation"):
        emd_transfer_finding(corr.drop(columns="p_value"))
    # a NaN correlation (a constant or undefined penalty) has p_lower 0 from its comparisons: neither side
    corr["spearman_rho"], corr["p_value"], corr["p_lower"] = [float("nan"), 0.5], [0.0, 0.3], [0.0, 0.7]
    assert emd_transfer_finding(corr).verdict == "inconclusive"


def test_transfer_correlation_on_the_geometric_matrix_of_per_task_ratios():
    families = ["normal", "cauchy", "gumbel", "laplace"]
    rng = np.random.default_rng(3)
    samples = {(a, b, "bn"): np.exp(rng.normal(0.3 * (a != b) * (families.index(a) + families.index(b)), 0.5,
                                                (2, 16))) for a in families for b in families}
    samples[("normal", "cauchy", "bn")][0, 0] = 1e6  # one bad task: it moves the mean ratio, barely the geometric
    blocks = pd.DataFrame(rng.uniform(size=(4, 4)), index=families, columns=families)
    corr = transfer_correlation(blocks, None, ("bn",), families, samples=samples)
    geo = {key: np.exp(np.median(np.log(v).mean(axis=1))) for key, v in samples.items()}
    emd = (blocks.to_numpy() + blocks.to_numpy().T) / 2
    pairs = [(i, j) for i in range(4) for j in range(i + 1, 4)]
    penalty = [(np.log(geo[(families[i], families[j], "bn")] / geo[(families[j], families[j], "bn")])
                + np.log(geo[(families[j], families[i], "bn")] / geo[(families[i], families[i], "bn")])) / 2
               for i, j in pairs]
    expected = spearmanr([emd[i, j] for i, j in pairs], penalty).statistic
    assert corr.loc["BN:L2", "spearman_rho"] == pytest.approx(expected)
