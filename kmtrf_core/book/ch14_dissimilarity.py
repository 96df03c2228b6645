"""Chapter 14 (``book/14_dissimilarity.ipynb``): task dissimilarities by EMD (Figures 9 and 19).

The distances are the paper room's (:mod:`kmtrf_core.dissimilarity`); the
train-family x test-family table is chapter 11's
(:func:`~kmtrf_core.book.ch11_generalization.family_generalization`). This module holds:

* :func:`family_emd`, :class:`EmdResult`: the pairwise EMD between fresh tasks of every family;
* :func:`emd_finding`, :func:`block_draws`, :func:`distance_quantiles`: Figure 9 and the claim
  ``emd_structure`` (on a 95% interval over tasks resampled within families);
* :func:`lowest_distances`: which family's squared distances lie lowest, on 95% intervals over tasks;
* :func:`transfer_correlation`, :func:`emd_transfer_finding`: do dissimilar
  families transfer worse? (the claim ``emd_predicts_transfer``).
"""

from __future__ import annotations

from itertools import combinations, permutations
from typing import NamedTuple

import numpy as np
import pandas as pd
import torch  # noqa: F401  (the doctests use it)

from ..dissimilarity import block_labels, distance_samples, emd_matrix
from ..evaluate import family_matrix
from ..tasks import FAMILIES, family_tasks
from ..training import TrainConfig
from ..validation import check_int, check_table
from .claims import Finding, verdict
from .groups import PAPER_SCHEMES
from .heldout import geometric_matrix
from .plotting import l2_label
from .timing import timed
from .uncertainty import INTERVAL_LEVEL, RESAMPLES, combine, compare, draws_interval

__all__ = ["EmdResult", "block_draws", "distance_quantiles", "emd_finding", "emd_transfer_finding", "family_emd",
           "lowest_distances", "transfer_correlation"]


class EmdResult(NamedTuple):
    """What :func:`family_emd` returns.

    * ``D``: ``(N, N)`` pairwise EMD between the tasks;
    * ``labels``: the family of each task (blocks in family order);
    * ``samples``: ``(N, n k)`` each task's sorted squared distances;
    * ``seconds``: wall-clock time of the EMD matrix alone.

    >>> result = EmdResult(np.zeros((2, 2)), ["normal", "cauchy"], np.zeros((2, 6)), 0.01)
    >>> result.D.shape, result.labels
    ((2, 2), ['normal', 'cauchy'])
    """

    D: np.ndarray
    labels: list
    samples: np.ndarray
    seconds: float


def family_emd(base: TrainConfig, tasks_per_family: int, seed: int,
               families=FAMILIES) -> EmdResult:
    """Figures 9 and 19: pairwise EMD between fresh tasks of every family (chapter 14).

    ``tasks_per_family`` tasks per family with the base config's ``n, d, k,
    scale`` drawn from ``seed``; each task is described by its point-to-center
    squared distances (:func:`~kmtrf_core.dissimilarity.distance_samples`) and
    compared by :func:`~kmtrf_core.dissimilarity.emd_matrix`, which is timed.

    Parameters
    ----------
    base : TrainConfig
        The Section 4 base config (only ``n, d, k, scale`` are read).
    tasks_per_family : int
    seed : int
        Seed of the tasks.
    families : sequence of str
        The families, in block order.

    Returns
    -------
    EmdResult

    Examples
    --------
    >>> base = TrainConfig(d=2, k=3, n=10)
    >>> result = family_emd(base, 2, seed=0, families=("normal", "cauchy"))
    >>> result.D.shape, result.labels, result.samples.shape
    ((4, 4), ['normal', 'normal', 'cauchy', 'cauchy'], (4, 30))
    """
    tasks = family_tasks(tasks_per_family, base.n, base.d, base.k, families=tuple(families),
                         generator=seed, scale=base.scale)
    samples = np.concatenate([distance_samples(X, C) for X, C in tasks.values()])
    with timed() as clock:
        D = emd_matrix(samples)
    return EmdResult(D, block_labels(tasks), samples, clock.seconds)


def block_draws(D, labels, resamples: int = RESAMPLES, seed: int = 0) -> np.ndarray:
    """Bootstrap draws of the family-block mean EMDs, the tasks resampled within each family.

    Each draw picks every family's tasks again with replacement and recomputes
    :func:`~kmtrf_core.dissimilarity.block_summary` (off-diagonal pairs within a
    family). A task drawn twice is not paired with itself: within a family only
    pairs of distinct original tasks count, so repeats do not add zeros.

    Parameters
    ----------
    D : array ``(N, N)``
        The EMD matrix (zero diagonal), e.g. :attr:`EmdResult.D`.
    labels : sequence of length ``N``
        The family of each task; every family needs at least two tasks.
    resamples, seed : int
        Draws, and the seed of the resampling.

    Returns
    -------
    numpy.ndarray
        ``(resamples, F, F)``, families in order of first appearance.

    Examples
    --------
    >>> D = np.array([[0, 1, 5, 5], [1, 0, 5, 5], [5, 5, 0, 2], [5, 5, 2, 0]], dtype=float)
    >>> draws = block_draws(D, ["a", "a", "b", "b"], resamples=50)
    >>> draws.shape, np.unique(draws[:, 0, 0]).tolist(), np.unique(draws[:, 0, 1]).tolist()
    ((50, 2, 2), [1.0], [5.0])
    """
    D = np.asarray(D, dtype=np.float64)
    labels = list(labels)
    if D.ndim != 2 or D.shape[0] != D.shape[1] or len(labels) != D.shape[0]:
        raise ValueError(f"D must be a square matrix with one label per task, got shape {D.shape} and "
                         f"{len(labels)} labels")
    if not np.isfinite(D).all():
        raise ValueError("D must hold finite distances (no NaN or inf)")
    check_int(resamples, "resamples")
    families = list(dict.fromkeys(labels))
    members = [np.nonzero(np.asarray(labels, dtype=object) == family)[0] for family in families]
    if min(len(m) for m in members) < 2:
        raise ValueError("every family needs at least two tasks to resample pairs of distinct tasks")
    rng = np.random.default_rng(seed)
    counts = [_draw_counts(rng, len(m), resamples) for m in members]  # per family (R, m): times each task is drawn
    out = np.empty((resamples, len(families), len(families)))
    for i, (rows, a) in enumerate(zip(members, counts)):
        for j, (cols, b) in enumerate(zip(members, counts)):
            block = D[np.ix_(rows, cols)]
            if i == j:
                block = block * (1 - np.eye(len(rows)))  # a task with itself never counts
                pairs = a.sum(axis=1) ** 2 - (a ** 2).sum(axis=1)
            else:
                pairs = a.sum(axis=1) * b.sum(axis=1)
            out[:, i, j] = np.einsum("ri,ij,rj->r", a, block, b) / pairs
    return out


def _draw_counts(rng, m: int, resamples: int) -> np.ndarray:
    """How often each of ``m`` tasks is drawn, per resample; a draw of fewer than two distinct tasks (no pair
    to average) is drawn again."""
    counts = rng.multinomial(m, np.full(m, 1 / m), size=resamples)
    while (bad := np.nonzero((counts > 0).sum(axis=1) < 2)[0]).size:
        counts[bad] = rng.multinomial(m, np.full(m, 1 / m), size=bad.size)
    return counts.astype(float)


def emd_finding(blocks, tasks_per_family: int, draws=None) -> Finding:
    """Figure 9: are cauchy tasks far from the others, which are close to each other? (chapter 14)

    Parameters
    ----------
    blocks : pandas.DataFrame
        Family-block mean EMDs, from :func:`~kmtrf_core.dissimilarity.block_summary`.
    tasks_per_family : int
        For the text.
    draws : numpy.ndarray, optional
        :func:`block_draws` of the same matrix (families in the order of ``blocks``). With them
        the verdict is decided on the 95% interval of the separation (below); without, on the
        point values.

    Returns
    -------
    Finding
        For the claim ``emd_structure``: reproduced when the separation, the mean EMD from
        cauchy to the others minus the larger of the mean within cauchy and the mean among the
        others, is above 0 (its whole interval, with ``draws``); not reproduced otherwise (with
        ``draws``: when the whole interval is below 0; inconclusive when it holds 0). The report
        names the family closest to cauchy on the block means; with ``draws`` it says whether
        that family is closer than every other family on the 95% interval of the gap to the next
        closest (drawn again with the tasks), else that the closest is not separated.

    Examples
    --------
    >>> families = ["normal", "cauchy", "laplace"]
    >>> blocks = pd.DataFrame([[0.1, 0.5, 0.2], [0.5, 0.1, 0.4], [0.2, 0.4, 0.1]],
    ...                       index=families, columns=families)
    >>> finding = emd_finding(blocks, 6)
    >>> finding.verdict, finding.report.splitlines()[1]
    ('reproduced', 'Closest family to cauchy on the block means (no interval): laplace (the paper: laplace).')
    """
    if "cauchy" not in blocks.index or len(blocks.index) < 3 or list(blocks.index) != list(blocks.columns):
        raise ValueError(f"blocks must be a square family table holding cauchy and at least two other families, "
                         f"got {list(blocks.index)}")
    others = [f for f in blocks.index if f != "cauchy"]
    within, to_others, among = _separation_parts(blocks.to_numpy()[None], list(blocks.index))
    separation = float(to_others[0] - max(within[0], among[0]))
    interval = ""
    closest = blocks.loc["cauchy", others].idxmin()
    closest_line = f"Closest family to cauchy on the block means (no interval): {closest} (the paper: laplace)."
    if draws is None:
        outcome = verdict(separation > 0)
    else:
        draws = np.asarray(draws, dtype=float)
        if draws.ndim != 3 or draws.shape[1:] != blocks.shape:
            raise ValueError(f"draws must be (R, {len(blocks)}, {len(blocks)}) block means, got shape {draws.shape}")
        w, t, a = _separation_parts(draws, list(blocks.index))
        low, high = draws_interval(t - np.maximum(w, a))
        outcome = "reproduced" if low > 0 else "not reproduced" if high < 0 else "inconclusive"
        interval = (f"; separation {separation:+.4f}, {INTERVAL_LEVEL:.0%} interval [{low:+.4f}, {high:+.4f}] "
                    f"over tasks resampled within families")
        closest_line = _closest_line(blocks, draws, closest, others)
    lines = [
        f"Mean EMD within cauchy {within[0]:.4f}, cauchy to the others {to_others[0]:.4f}, "
        f"among the {len(others)} others {among[0]:.4f}{interval}.",
        closest_line,
        f"Cauchy tasks are far from the rest, which are close to each other -> {outcome}",
    ]
    value = (f"mean EMD within cauchy {within[0]:.3g}, cauchy to others {to_others[0]:.3g}, "
             f"among the others {among[0]:.3g} ({tasks_per_family} tasks per family)")
    return Finding(value, outcome,
                   check="mean EMD from cauchy to the others above both the mean within cauchy and among the others"
                         + (", the 95% interval of the difference above 0" if draws is not None else ""),
                   report="\n".join(lines), uncertainty=interval.lstrip("; ") or None)


def _closest_line(blocks, draws: np.ndarray, closest: str, others: list) -> str:
    """The report's line on the family closest to cauchy: is it closer than the next, on the draws' interval?"""
    if len(others) < 2:
        return f"Closest family to cauchy: {closest}, the only other family (the paper: laplace)."
    families = list(blocks.index)
    c, i = families.index("cauchy"), families.index(closest)
    rest = [families.index(f) for f in others if f != closest]
    gap = blocks.iloc[c, rest].min() - blocks.iloc[c, i]  # the next closest family's EMD minus the closest's
    low, high = draws_interval(draws[:, c, rest].min(axis=1) - draws[:, c, i])
    interval = f"next closest minus {closest} {gap:+.4f}, {INTERVAL_LEVEL:.0%} interval [{low:+.4f}, {high:+.4f}]"
    if low > 0:
        return f"Closest family to cauchy: {closest} ({interval}; the paper: laplace)."
    return (f"Closest family to cauchy: not separated ({closest} on the block means, {interval}, not above 0; "
            f"the paper: laplace).")


def _separation_parts(means: np.ndarray, families: list) -> tuple:
    """From block means ``(R, F, F)``: within cauchy, cauchy to the others, among the others, each ``(R,)``."""
    c = families.index("cauchy")
    rest = [i for i in range(len(families)) if i != c]
    return (means[:, c, c], means[:, c, rest].mean(axis=1), means[:, rest][:, :, rest].mean(axis=(1, 2)))


def distance_quantiles(samples, labels, quantiles=(0.1, 0.5, 0.9),
                       families=FAMILIES) -> pd.DataFrame:
    """Quantiles of all point-to-center squared distances of each family's tasks (chapter 14).

    Parameters
    ----------
    samples : numpy.ndarray
        ``(N, m)``, one row of distances per task (:attr:`EmdResult.samples`).
    labels : sequence of str
        The family of each row.
    quantiles : sequence of float
    families : sequence of str
        The rows of the result.

    Returns
    -------
    pandas.DataFrame
        Rows families, columns the quantiles named ``"10%"``, ``"median"``, ...

    Examples
    --------
    >>> samples = np.array([[0.0, 1.0, 2.0], [3.0, 4.0, 5.0]])
    >>> distance_quantiles(samples, ["a", "b"], families=["a", "b"]).values.tolist()
    [[0.2, 1.0, 1.8], [3.2, 4.0, 4.8]]
    """
    labels = np.asarray(labels)
    names = ["median" if q == 0.5 else f"{100 * q:g}%" for q in quantiles]
    return pd.DataFrame({family: np.quantile(samples[labels == family], list(quantiles))
                         for family in families}, index=names).T


def lowest_distances(samples, labels, families=FAMILIES) -> tuple[str | None, str]:
    """Does one family's tasks have the lowest squared distances? On 95% intervals over tasks (chapter 14).

    Each task is read by the median of its point-to-center squared distances; the family whose mean
    over tasks of these medians is lowest is then compared with every other family, unpaired since
    the tasks differ (:func:`~kmtrf_core.book.uncertainty.compare` with ``paired=False``).

    Parameters
    ----------
    samples : numpy.ndarray
        ``(N, m)``, one row of distances per task (:attr:`EmdResult.samples`).
    labels : sequence of str
        The family of each row.
    families : sequence of str
        The families compared (each with at least two tasks).

    Returns
    -------
    (str or None, str)
        The lowest family, or ``None`` when the intervals do not separate it from every other, and a
        line that says whether every interval of the point-lowest family's difference to another
        family lies below 0 (``-> yes``) or not (``-> inconclusive``, naming it as not separated).

    Examples
    --------
    >>> rng = np.random.default_rng(0)
    >>> samples = np.concatenate([rng.random((8, 30)), 0.1 * rng.random((8, 30))])
    >>> family, line = lowest_distances(samples, ["normal"] * 8 + ["cauchy"] * 8, ["normal", "cauchy"])
    >>> family, line.split("): ")[-1]
    ('cauchy', '1 of 1 -> yes')
    """
    samples, labels = np.asarray(samples, dtype=float), np.asarray(labels)
    if samples.ndim != 2 or len(labels) != len(samples):
        raise ValueError(f"samples must be (N, m) with one label per row, got shape {samples.shape} and "
                         f"{len(labels)} labels")
    if not np.isfinite(samples).all():
        raise ValueError("samples must be finite squared distances")
    families = list(families)
    medians = {family: np.median(samples[labels == family], axis=1) for family in families}
    if len(families) < 2 or min(len(values) for values in medians.values()) < 2:
        raise ValueError(f"families must be at least two families with two tasks each in labels, got {families}")
    means = {family: values.mean() for family, values in medians.items()}
    lowest = min(means, key=means.get)
    others = [family for family in families if family != lowest]
    outcomes = {other: compare(medians[lowest], medians[other], paired=False) for other in others}
    below = sum(c.verdict == "reproduced" for c in outcomes.values())
    apart = max(outcomes, key=lambda other: outcomes[other].high)  # the least separated
    separated = below == len(others)
    name = lowest if separated else f"not separated ({lowest} lowest on the point values)"
    line = (f"Lowest median squared distance per task: {name} (mean over tasks {means[lowest]:.3g}; the other "
            f"families {min(means[o] for o in others):.3g} to {max(means[o] for o in others):.3g}); "
            f"{lowest} minus the least separated, {apart}: {outcomes[apart].text()}. Below every other family on 95% "
            f"intervals over tasks (unpaired): {below} of {len(others)} -> {'yes' if separated else 'inconclusive'}")
    return (lowest if separated else None), line


def transfer_correlation(blocks, table, schemes=PAPER_SCHEMES, families=FAMILIES, samples=None) -> pd.DataFrame:
    """Do dissimilar families transfer worse? Spearman correlation per embedding, over unordered pairs (chapter 14).

    The EMD between two families is symmetric, so each unordered pair ``{a, b}`` is one
    observation: its block-mean EMD against the mean transfer penalty of the two directions,
    ``(log(M[b, a] / M[b, b]) + log(M[a, b] / M[a, a])) / 2`` of the family matrix ``M`` (a
    layer trained on one family against the one trained on the other, tested on the other's
    tasks). With ``samples``, ``M`` holds geometric means over tasks, the statistic of Figure 8
    and of chapter 11 (:func:`~kmtrf_core.book.heldout.geometric_matrix`); without,
    the mean ratios of ``table`` (:func:`~kmtrf_core.evaluate.family_matrix`). The p-value is a Mantel test: the share of all relabellings of the families (the
    rows and columns of the EMD matrix permuted together) whose correlation is at least the
    observed one, so it respects the pairs' dependence on shared families.

    Parameters
    ----------
    blocks : pandas.DataFrame
        Family-block mean EMDs (:func:`~kmtrf_core.dissimilarity.block_summary`).
    table : pandas.DataFrame or None
        From :func:`~kmtrf_core.book.ch11_generalization.family_generalization` (None with ``samples``).
    schemes, families : sequence of str
    samples : dict, optional
        Its per-task ratios (``sampled=schemes``): ``(train_family, test_family, scheme)`` -> ``(S, B)``.

    Returns
    -------
    pandas.DataFrame
        Indexed by embedding label; columns ``spearman_rho``, ``p_value`` (one-sided, exact over
        the ``len(families)!`` relabellings), ``p_lower`` (the other side: the share of relabellings
        whose correlation is at most the observed one), ``pairs`` (unordered family pairs),
        ``pairs_per_family`` (how many of them hold each family) and ``relabellings``.

    Examples
    --------
    >>> from kmtrf_core import ClusterTransformer, evaluate_models
    >>> families = ("normal", "cauchy", "gumbel")
    >>> tests = family_tasks(2, 20, 2, 3, families=families, generator=0)
    >>> generator = torch.Generator().manual_seed(0)
    >>> models = {(f, "bn"): ClusterTransformer(2, 3, "bn", generator=generator)
    ...           for f in families}
    >>> table = evaluate_models(models, tests, steps=2)
    >>> blocks = pd.DataFrame(np.arange(9.0).reshape(3, 3), index=families, columns=families)
    >>> corr = transfer_correlation(blocks, table, schemes=("bn",), families=families)
    >>> list(corr.index), corr[["pairs", "pairs_per_family", "relabellings"]].values.tolist()
    (['BN:L2'], [[3, 2, 6]])
    >>> ratios = {(a, b, "bn"): np.full((1, 4), 1.0 + (a != b) * (families.index(a) + families.index(b)))
    ...           for a in families for b in families}  # transfer worst between the families far apart
    >>> transfer_correlation(blocks, None, ("bn",), families, samples=ratios).spearman_rho.tolist()
    [1.0]
    """
    from scipy.stats import spearmanr  # scipy.stats takes a while to import: only here

    families = list(families)
    pairs = list(combinations(range(len(families)), 2))
    per_family = len(families) - 1  # every family is paired once with each of the others
    emd = blocks.loc[families, families].to_numpy(dtype=float)
    emd = (emd + emd.T) / 2  # block means are symmetric up to sampling; one value per pair

    def rho_of(order):
        return spearmanr([emd[order[i], order[j]] for i, j in pairs], penalty).statistic

    rows = []
    for scheme in schemes:
        matrix = (family_matrix(table, scheme) if samples is None  # rows: test family, columns: training
                  else geometric_matrix(samples, scheme, families)).loc[families, families]
        m = matrix.to_numpy(dtype=float)
        penalty = [(np.log(m[j, i] / m[j, j]) + np.log(m[i, j] / m[i, i])) / 2 for i, j in pairs]
        observed = rho_of(range(len(families)))
        null = [rho_of(order) for order in permutations(range(len(families)))]
        p_value = float(np.mean([r >= observed - 1e-12 for r in null]))
        p_lower = float(np.mean([r <= observed + 1e-12 for r in null]))
        rows.append(dict(embedding=l2_label(scheme), spearman_rho=observed, p_value=p_value, p_lower=p_lower,
                         pairs=len(pairs), pairs_per_family=per_family, relabellings=len(null)))
    return pd.DataFrame(rows).set_index("embedding")


def emd_transfer_finding(correlation) -> Finding:
    """Does the EMD line up with the transfer penalty? Verdict per embedding by the Mantel test (chapter 14).

    An embedding reproduces the claim when its correlation is positive and significant at 5%
    (``rho > 0``, ``p_value < 0.05``), and fails it when the correlation is significantly
    negative (``p_lower < 0.05``: dissimilar families transfer *better*). Anything between is
    inside the noise, ``"inconclusive"``: with a handful of families a test of a handful of pairs
    misses real correlations often, and a miss is not evidence against the claim. The
    embeddings' verdicts are combined (:func:`~kmtrf_core.book.uncertainty.combine`).

    Parameters
    ----------
    correlation : pandas.DataFrame
        From :func:`transfer_correlation`.

    Returns
    -------
    Finding
        For the claim ``emd_predicts_transfer``.

    Examples
    --------
    >>> correlation = pd.DataFrame({"spearman_rho": [0.2, 0.6], "p_value": [0.4, 0.01], "p_lower": [0.7, 1.0],
    ...     "pairs": 10, "pairs_per_family": 4, "relabellings": 120}, index=["OH:L2", "BN:L2"])
    >>> finding = emd_transfer_finding(correlation)
    >>> finding.value, finding.verdict
    ('Spearman rho 0.20 to 0.60 over 10 unordered family pairs (Mantel test); significant at 5% for 1 of 2 embeddings, significantly negative for 0', 'partly')
    >>> print(finding.report.splitlines()[1])
    Over 10 unordered family pairs, each family in 4 of them (the pairs are not independent); p-values from the Mantel test over all 120 relabellings of the families, so the smallest possible is 1/120 = 0.00833.
    """
    check_table(correlation, "correlation", ["spearman_rho", "p_value", "pairs"])
    rho = correlation.spearman_rho
    positive = int((rho > 0).sum())
    aligned = (rho > 0) & (correlation.p_value < 0.05)
    # without the lower tail (a table from before it was kept) no embedding can fail, only stay undecided
    # (a NaN rho, from a constant or undefined penalty, is neither: every comparison with it is False)
    against = ((rho < 0) & (correlation.p_lower < 0.05)) if "p_lower" in correlation else pd.Series(False, index=rho.index)
    significant, negative = int(aligned.sum()), int(against.sum())
    outcome = combine("reproduced" if yes else "not reproduced" if no else "inconclusive"
                      for yes, no in zip(aligned, against))
    pairs = int(correlation.pairs.max())
    report = (f"Rank correlation between family EMD and transfer penalty: positive for {positive} "
              f"of {len(correlation)} embeddings, significant at 5% for {significant}, significantly negative "
              f"for {negative}, neither (inside the noise) for {len(correlation) - significant - negative} "
              f"(rho {rho.min():.2f} to {rho.max():.2f}) -> {outcome}")
    if {"pairs_per_family", "relabellings"} <= set(correlation.columns):
        relabellings, per_family = int(correlation.relabellings.max()), int(correlation.pairs_per_family.max())
        report += (f"\nOver {pairs} unordered family pairs, each family in {per_family} "
                   f"of them (the pairs are not independent); p-values from the Mantel test over all "
                   f"{relabellings} relabellings of the families, so the smallest possible is "
                   f"1/{relabellings} = {1 / relabellings:.3g}.")
    value = (f"Spearman rho {rho.min():.2f} to {rho.max():.2f} over {pairs} unordered family pairs (Mantel test); "
             f"significant at 5% for {significant} of {len(correlation)} embeddings, significantly negative for "
             f"{negative}")
    return Finding(value, outcome, check="a positive rank correlation, significant at 5% (Mantel test), for every "
                                         "embedding; a significantly negative one fails it, any other is inconclusive",
                   report=report)
