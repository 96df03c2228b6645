"""Chapter 14 (``book/14_dissimilarity.ipynb``): task dissimilarities by EMD (Figures 9 and 19).

The distances are the paper room's (:mod:`kmtrf_core.dissimilarity`); the
train-family x test-family table is chapter 11's
(:func:`~kmtrf_core.book.ch11_generalization.family_generalization`). This module holds:

* :func:`family_emd`, :class:`EmdResult`: the pairwise EMD between fresh tasks of every family;
* :func:`emd_finding`, :func:`distance_quantiles`: Figure 9 and the claim ``emd_structure``;
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
from .claims import Finding, verdict
from .groups import PAPER_SCHEMES
from .plotting import l2_label
from .timing import timed

__all__ = ["EmdResult", "distance_quantiles", "emd_finding", "emd_transfer_finding", "family_emd",
           "transfer_correlation"]


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


def emd_finding(blocks, tasks_per_family: int) -> Finding:
    """Figure 9: are cauchy tasks far from the others, which are close to each other? (chapter 14)

    Parameters
    ----------
    blocks : pandas.DataFrame
        Family-block mean EMDs, from :func:`~kmtrf_core.dissimilarity.block_summary`.
    tasks_per_family : int
        For the text.

    Returns
    -------
    Finding
        For the claim ``emd_structure``: reproduced when the mean EMD from
        cauchy to the others exceeds both the mean within cauchy and the mean
        among the others; the report names the family closest to cauchy.

    Examples
    --------
    >>> families = ["normal", "cauchy", "laplace"]
    >>> blocks = pd.DataFrame([[0.1, 0.5, 0.2], [0.5, 0.1, 0.4], [0.2, 0.4, 0.1]],
    ...                       index=families, columns=families)
    >>> finding = emd_finding(blocks, 6)
    >>> finding.verdict, finding.report.splitlines()[1]
    ('reproduced', 'Closest family to cauchy: laplace (the paper: laplace).')
    """
    others = [f for f in blocks.index if f != "cauchy"]
    within = blocks.loc["cauchy", "cauchy"]
    to_others = blocks.loc["cauchy", others].mean()
    among = blocks.loc[others, others].to_numpy().mean()
    separated = bool(to_others > max(within, among))
    lines = [
        f"Mean EMD within cauchy {within:.4f}, cauchy to the others {to_others:.4f}, "
        f"among the four others {among:.4f}.",
        f"Closest family to cauchy: {blocks.loc['cauchy', others].idxmin()} (the paper: laplace).",
        f"Cauchy tasks are far from the rest, which are close to each other -> "
        f"{verdict(separated)}",
    ]
    value = (f"mean EMD within cauchy {within:.3g}, cauchy to others {to_others:.3g}, "
             f"among the others {among:.3g} ({tasks_per_family} tasks per family)")
    return Finding(value, verdict(separated),
                   check="mean EMD from cauchy to the others above both the mean within cauchy and among the others",
                   report="\n".join(lines))


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


def transfer_correlation(blocks, table, schemes=PAPER_SCHEMES, families=FAMILIES) -> pd.DataFrame:
    """Do dissimilar families transfer worse? Spearman correlation per embedding, over unordered pairs (chapter 14).

    The EMD between two families is symmetric, so each unordered pair ``{a, b}`` is one
    observation: its block-mean EMD against the mean transfer penalty of the two directions,
    ``(log(M[b, a] / M[b, b]) + log(M[a, b] / M[a, a])) / 2`` of the family matrix ``M`` (a
    layer trained on one family against the one trained on the other, tested on the other's
    tasks). The p-value is a Mantel test: the share of all relabellings of the families (the
    rows and columns of the EMD matrix permuted together) whose correlation is at least the
    observed one, so it respects the pairs' dependence on shared families.

    Parameters
    ----------
    blocks : pandas.DataFrame
        Family-block mean EMDs (:func:`~kmtrf_core.dissimilarity.block_summary`).
    table : pandas.DataFrame
        From :func:`~kmtrf_core.book.ch11_generalization.family_generalization`.
    schemes, families : sequence of str

    Returns
    -------
    pandas.DataFrame
        Indexed by embedding label; columns ``spearman_rho``, ``p_value`` (one-sided, exact over
        the ``len(families)!`` relabellings) and ``pairs``.

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
    >>> list(corr.index), int(corr.pairs.iloc[0])
    (['BN:L2'], 3)
    """
    from scipy.stats import spearmanr  # scipy.stats takes a while to import: only here

    families = list(families)
    pairs = list(combinations(range(len(families)), 2))
    emd = blocks.loc[families, families].to_numpy(dtype=float)
    emd = (emd + emd.T) / 2  # block means are symmetric up to sampling; one value per pair

    def rho_of(order):
        return spearmanr([emd[order[i], order[j]] for i, j in pairs], penalty).statistic

    rows = []
    for scheme in schemes:
        matrix = family_matrix(table, scheme).loc[families, families]  # rows: test family, columns: training
        m = matrix.to_numpy(dtype=float)
        penalty = [(np.log(m[j, i] / m[j, j]) + np.log(m[i, j] / m[i, i])) / 2 for i, j in pairs]
        observed = rho_of(range(len(families)))
        null = [rho_of(order) for order in permutations(range(len(families)))]
        p_value = float(np.mean([r >= observed - 1e-12 for r in null]))
        rows.append(dict(embedding=l2_label(scheme), spearman_rho=observed, p_value=p_value, pairs=len(pairs)))
    return pd.DataFrame(rows).set_index("embedding")


def emd_transfer_finding(correlation) -> Finding:
    """Does the EMD line up with the transfer penalty? Verdict by significant positive rho (chapter 14).

    A positive but insignificant correlation is not evidence of alignment: the
    verdict counts the embeddings with ``rho > 0`` and ``p < 0.05``.

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
    >>> correlation = pd.DataFrame({"spearman_rho": [0.2, 0.6], "p_value": [0.4, 0.01],
    ...                             "pairs": 10}, index=["OH:L2", "BN:L2"])
    >>> finding = emd_transfer_finding(correlation)
    >>> finding.value, finding.verdict
    ('Spearman rho 0.20 to 0.60 over 10 unordered family pairs (Mantel test); significant at 5% for 1 of 2 embeddings', 'partly')
    """
    rho = correlation.spearman_rho
    positive = int((rho > 0).sum())
    significant = int(((rho > 0) & (correlation.p_value < 0.05)).sum())
    outcome = verdict(significant, len(correlation))
    pairs = int(correlation.pairs.max())
    report = (f"Rank correlation between family EMD and transfer penalty: positive for {positive} "
              f"of {len(correlation)} embeddings, significant at 5% for {significant} "
              f"(rho {rho.min():.2f} to {rho.max():.2f}) -> {outcome}")
    value = (f"Spearman rho {rho.min():.2f} to {rho.max():.2f} over {pairs} unordered family pairs (Mantel test); "
             f"significant at 5% for {significant} of {len(correlation)} embeddings")
    return Finding(value, outcome, check="a positive rank correlation, significant at 5%, for every embedding",
                   report=report)
