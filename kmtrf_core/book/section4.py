"""The Section 4 experiments that several chapters share (chapters 10, 11, 13 and 14).

Section 4 of the paper (and Figures 4 and 5 of Section 3) runs layers trained at one
setting, which the profile's ``section4`` sizes fix. The chapters on multi-step
clustering (10), generalization (11), the Cauchy problem (13) and task
dissimilarities (14) all get their layers from the same groups of the catalog
(:mod:`kmtrf_core.book.catalog`: ``section4_schemes``, ``section4_families``), whose
base config :func:`base_config` returns: the same config is the same cache key, so
the chapters share runs and show the same numbers for the same layer.

The rest turns the chapters' measured tables into the statements they print and the
values they record in the claims ledger (:class:`Finding`), so a verdict is computed
and worded here, once, and tested:

* chapter 10: :func:`multistep_summary`, :func:`multistep_findings`;
* chapter 11: :func:`ratio_table`, :func:`shift_finding`, :func:`family_summary`,
  :func:`family_finding`, :func:`point_counts`, :func:`length_finding`;
* chapter 13: :func:`family_convergence`, :func:`family_training_finding`,
  :func:`gap_finding`, :func:`smoothing_margins`, :func:`margin_report`,
  :func:`cauchy_stands_out`;
* chapter 14: :func:`family_emd`, :func:`emd_finding`, :func:`distance_quantiles`,
  :func:`transfer_correlation`, :func:`transfer_finding`.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np
import pandas as pd
import torch

from ..attention import sqdist
from ..dissimilarity import block_labels, distance_samples, emd_matrix
from ..evaluate import family_matrix, final_ratios
from ..lloyd import kmeans_objective
from ..objectives import smoothing_gap, sparsemax_is_tight
from ..tasks import FAMILIES, SHIFTS, family_tasks
from ..training import TrainConfig, convergence_summary
from .catalog import book_catalog
from .claims import verdict
from .plotting import run_label
from .profiles import Profile, get_profile
from .timing import timed

__all__ = [
    "OMEGAS",
    "SCHEMES",
    "EmdResult",
    "Finding",
    "base_config",
    "cauchy_stands_out",
    "distance_quantiles",
    "emd_finding",
    "family_convergence",
    "family_emd",
    "family_finding",
    "family_summary",
    "family_training_finding",
    "gap_finding",
    "l2_label",
    "length_finding",
    "margin_report",
    "multistep_findings",
    "multistep_summary",
    "point_counts",
    "ratio_table",
    "scheme_layers",
    "shift_finding",
    "smoothing_margins",
    "training_caption",
    "transfer_correlation",
    "transfer_finding",
]

SCHEMES = ("oh", "bn", "na")
"""The three token embeddings of Section 4, in the paper's order."""

OMEGAS = ("ne", "l2")
"""The two regularized mins, in the order of chapter 10's sweep."""

_OH_BN = ["oh", "bn"]


def _others(families=FAMILIES) -> list:
    """The families other than cauchy, in the given order."""
    return [family for family in families if family != "cauchy"]


# --- the shared setting -------------------------------------------------------------


def base_config(profile: Profile | str | None = None, **overrides) -> TrainConfig:
    """The Section 4 base config: the catalog's (:mod:`~kmtrf_core.book.catalog`), L2, the normal family.

    Every Section 4 chapter trains its layers from this config through the
    catalog's groups ``section4_schemes`` and ``section4_families``, so they
    share runs (chapters 10, 11, 13 and 14); chapter 14 also draws its tasks
    with these sizes.

    Parameters
    ----------
    profile : Profile or str, optional
        Default the profile in force (:func:`~kmtrf_core.book.profiles.get_profile`).
    **overrides
        Fields to change.

    Returns
    -------
    TrainConfig

    Examples
    --------
    >>> config = base_config("quick")
    >>> config.n, config.d, config.k, config.omega, config.family, config.seeds
    (32, 4, 4, 'l2', 'normal', (0, 1))
    >>> base_config("quick", scheme="oh").scheme
    'oh'
    """
    config = book_catalog(profile)["section4_schemes"].base
    return dataclasses.replace(config, **overrides) if overrides else config


def scheme_layers(models: dict, schemes=SCHEMES, omega: str = "l2") -> dict:
    """The L2 layer of each token embedding: ``scheme -> model`` (chapter 11).

    Parameters
    ----------
    models : dict
        From the catalog group ``section4_schemes``: ``(scheme, omega) -> model``.
    schemes : sequence of str
        Token embeddings, in the order wanted.
    omega : str
        The regularized min.

    Returns
    -------
    dict

    Examples
    --------
    >>> scheme_layers({("oh", "l2"): "a", ("bn", "l2"): "b", ("oh", "ne"): "c"}, schemes=("bn", "oh"))
    {'bn': 'b', 'oh': 'a'}
    """
    return {scheme: models[(scheme, omega)] for scheme in schemes}


def training_caption(sizes) -> str:
    """The layers' sizes for a figure caption: ``n, d, k, tau``, the training budget and seeds.

    Used in the captions of Figures 4, 6, 7 and 18 (chapters 10, 11 and 13).

    Parameters
    ----------
    sizes : namespace
        A profile's ``section4`` sizes (``profile.chapter("section4")``).

    Returns
    -------
    str

    Examples
    --------
    >>> training_caption(get_profile("quick").chapter("section4"))
    'n=32, d=4, k=4, tau=0.1, trained until flat (from step 30, at most 40), seeds [0, 1]'
    >>> training_caption(get_profile("paper").chapter("section4")).split(", ")[4]
    '10000 training steps'
    """
    if getattr(sizes, "until_flat", None) is None:
        budget = f"{sizes.steps} training steps"
    else:
        budget = f"trained until flat (from step {sizes.min_steps}, at most {sizes.steps})"
    return f"n={sizes.n}, d={sizes.d}, k={sizes.k}, tau={sizes.tau}, {budget}, seeds {sizes.seeds}"


def l2_label(key) -> str:
    """Legend label of an L2 layer from its scheme or ``(family, scheme)`` key (chapter 11).

    Parameters
    ----------
    key : str or tuple
        A scheme, or a model label whose last entry is the scheme.

    Returns
    -------
    str
        :func:`~kmtrf_core.book.plotting.run_label` of ``(scheme, "l2")``.

    Examples
    --------
    >>> l2_label("oh"), l2_label(("cauchy", "bn"))
    ('OH:L2', 'BN:L2')
    """
    scheme = key[-1] if isinstance(key, tuple) else key
    return run_label((scheme, "l2"))


@dataclass(frozen=True)
class Finding:
    """A measured statement: what to record in the claims ledger and what to print.

    The verdict helpers of this module return it; a chapter prints it and
    passes ``value`` and ``verdict`` to ``record(claim_id, ...)``.

    Attributes
    ----------
    value : str
        The measured value in a few words, for :func:`~kmtrf_core.book.claims.record`.
    verdict : str
        One of :data:`~kmtrf_core.book.claims.VERDICTS`.
    report : str
        The lines a chapter prints: each check with its numbers and verdict.

    Examples
    --------
    >>> finding = Finding("2 of 3 cases", "partly", "2 of 3 cases beat Lloyd -> partly")
    >>> print(finding)
    2 of 3 cases beat Lloyd -> partly
    """

    value: str
    verdict: str
    report: str

    def __str__(self) -> str:
        return self.report


# --- chapter 10: multi-step clustering ----------------------------------------------


def multistep_summary(table, steps: int | None = None) -> pd.DataFrame:
    """Per model and mode, the loss after step 1 and after ``steps`` steps (Figure 6, chapter 10).

    Parameters
    ----------
    table : pandas.DataFrame
        From :func:`~kmtrf_core.evaluate.evaluate_models`, models labelled
        ``(scheme, omega)``.
    steps : int, optional
        The last step ``T``; default the last step in the table.

    Returns
    -------
    pandas.DataFrame
        One row per (model, mode): ``model`` (label), ``mode``, ``loss_step1``
        and ``loss_stepT`` (medians over members), ``improves_after_step1``,
        ``ratio_to_lloyd_T`` (median ratio to Lloyd at ``T``) and ``diverged``
        (fraction of diverged tasks at ``T``).

    Examples
    --------
    >>> table = pd.DataFrame({"model": [("bn", "l2")] * 4, "member": [0] * 4,
    ...     "test": "normal", "mode": ["naive", "naive", "reembed", "reembed"],
    ...     "step": [1, 2, 1, 2], "loss": [4.0, 8.0, 4.0, 2.0],
    ...     "lloyd_loss": [3.0, 2.5, 3.0, 2.5], "ratio": [4 / 3, 3.2, 4 / 3, 0.8],
    ...     "diverged": 0.0})
    >>> multistep_summary(table)[["model", "mode", "improves_after_step1",
    ...                           "ratio_to_lloyd_T"]].values.tolist()
    [['BN:L2', 'naive', False, 3.2], ['BN:L2', 'reembed', True, 0.8]]
    """
    steps = int(table.step.max()) if steps is None else steps
    ratios = final_ratios(table, step=steps).reset_index()
    rows = []
    for (model, mode), part in table.groupby(["model", "mode"], sort=False):
        wide = part.pivot_table(index="step", columns="member", values="loss", aggfunc="first")
        loss_1, loss_T = wide.loc[1].median(), wide.loc[steps].median()
        mine = ratios[(ratios.model == model) & (ratios["mode"] == mode)]
        rows.append(dict(model=run_label(model), mode=mode, loss_step1=loss_1, loss_stepT=loss_T,
                         improves_after_step1=bool(loss_T < loss_1),
                         ratio_to_lloyd_T=float(mine["median"].iloc[0]),
                         diverged=float(part[part.step == steps].diverged.mean())))
    return pd.DataFrame(rows)


def multistep_findings(summary, steps: int) -> tuple[Finding, Finding]:
    """Figure 6's three statements, measured on :func:`multistep_summary` (chapter 10).

    (i) naive iteration ends worse after ``steps`` steps than after step 1 for
    every configuration; (ii) re-embedding keeps improving after step 1; (iii)
    OH/BN with re-embedding beat Lloyd at ``steps`` (ratio below 1). NA models
    are labelled ``NA...``.

    Returns
    -------
    naive : Finding
        Statement (i), for the claim ``multistep_naive``.
    reembed : Finding
        Statements (ii) and (iii), for ``multistep_reembed``: ``"partly"``
        unless both have the same verdict.

    Examples
    --------
    >>> summary = pd.DataFrame({"model": ["OH:L2", "NA:L2"] * 2,
    ...     "mode": ["naive"] * 2 + ["reembed"] * 2,
    ...     "improves_after_step1": [False, False, True, True],
    ...     "ratio_to_lloyd_T": [50.0, 60.0, 0.9, 1.2], "diverged": [0.5, 0.0, 0.0, 0.0]})
    >>> naive, reembed = multistep_findings(summary, 20)
    >>> naive.value, naive.verdict
    ('2 of 2 configurations end worse after 20 steps than after step 1', 'reproduced')
    >>> print(reembed)
    (ii) re-embedding: 2 of 2 configurations keep improving after step 1 -> reproduced
    (iii) OH/BN with re-embedding beat Lloyd at T=20 in 1 of 1 configurations (median ratio to
    Lloyd 0.90 to 0.90) -> reproduced
    """
    naive = summary[summary["mode"] == "naive"]
    reembed = summary[summary["mode"] == "reembed"]
    worse_naive = int((~naive.improves_after_step1).sum())
    better = int(reembed.improves_after_step1.sum())
    oh_bn = reembed[~reembed.model.str.startswith("NA")]
    beats = int((oh_bn.ratio_to_lloyd_T < 1).sum())
    low, high = oh_bn.ratio_to_lloyd_T.min(), oh_bn.ratio_to_lloyd_T.max()
    v_naive = verdict(worse_naive, len(naive))
    v_improve, v_beat = verdict(better, len(reembed)), verdict(beats, len(oh_bn))
    overflow = int((naive.diverged > 0).sum())
    naive_text = (f"{worse_naive} of {len(naive)} configurations end worse after {steps} steps "
                  f"than after step 1")
    naive_finding = Finding(
        naive_text, v_naive,
        f"(i) naive iteration: {naive_text} ({overflow} overflow on some tasks) -> {v_naive}")
    report = (f"(ii) re-embedding: {better} of {len(reembed)} configurations keep improving "
              f"after step 1 -> {v_improve}\n"
              f"(iii) OH/BN with re-embedding beat Lloyd at T={steps} in {beats} of {len(oh_bn)} "
              f"configurations (median ratio to Lloyd {low:.2f} to {high:.2f}) -> {v_beat}")
    reembed_finding = Finding(
        f"{better} of {len(reembed)} keep improving; OH/BN loss / Lloyd's after {steps} steps "
        f"{low:.2f} to {high:.2f}",
        v_improve if v_improve == v_beat else "partly", report)
    return naive_finding, reembed_finding


# --- chapter 11: generalization -----------------------------------------------------


def ratio_table(table, by=("test", "model")) -> pd.DataFrame:
    """Median ratio to Lloyd after the first and after the last step, per group (chapter 11).

    Parameters
    ----------
    table : pandas.DataFrame
        From :func:`~kmtrf_core.evaluate.evaluate_models`.
    by : sequence of str
        Columns that define a group.

    Returns
    -------
    pandas.DataFrame
        Indexed by ``by``; columns ``ratio_step1`` and ``ratio_step<T>`` with
        ``T`` the table's last step (medians over members, from
        :func:`~kmtrf_core.evaluate.final_ratios`).

    Examples
    --------
    >>> table = pd.DataFrame({"model": "oh", "member": [0, 1] * 2, "test": "normal",
    ...     "mode": "reembed", "step": [1, 1, 5, 5], "ratio": [2.0, 4.0, 0.5, 1.5],
    ...     "diverged": 0.0})
    >>> ratio_table(table).reset_index().values.tolist()
    [['normal', 'oh', 3.0, 1.0]]
    >>> list(ratio_table(table).columns)
    ['ratio_step1', 'ratio_step5']
    """
    by = list(by)
    last = int(table.step.max())
    first = final_ratios(table, by=by, step=1)["median"].rename("ratio_step1")
    final = final_ratios(table, by=by)["median"].rename(f"ratio_step{last}")
    return pd.concat([first, final], axis=1)


def shift_finding(final, steps: int, shifts=SHIFTS) -> Finding:
    """Figure 7: do OH and BN beat Lloyd under each shift but the doubled scale? (chapter 11)

    Parameters
    ----------
    final : pandas.DataFrame
        Median ratio to Lloyd after ``steps`` steps: rows the tests (``"no
        shift"`` and each shift), columns the schemes ``oh, bn, na``.
    steps : int
        ``T``, for the text.
    shifts : sequence of str
        The shifted tests (default :data:`~kmtrf_core.tasks.SHIFTS`).

    Returns
    -------
    Finding
        For the claim ``shift_generalization``; the report adds the unshifted
        ratios and the largest change of a final ratio under a shift.

    Examples
    --------
    >>> final = pd.DataFrame({"oh": [0.8, 0.7, 1.2], "bn": [0.9, 0.8, 1.1], "na": 1.5},
    ...                      index=["no shift", "half scale", "double scale"])
    >>> finding = shift_finding(final, 20, shifts=["half scale", "double scale"])
    >>> finding.verdict, finding.value
    ('reproduced', 'OH/BN beat Lloyd after 20 steps under 1 of 2 shifts; final ratios 0.70 to 1.20')
    >>> print(finding.report.splitlines()[0])
    OH and BN beat Lloyd after 20 steps under 1 of 2 shifts (half scale). Paper: 1 of 2 (all but
    double scale) -> reproduced
    """
    shifts = list(shifts)
    wins = {name: bool((final.loc[name, _OH_BN] < 1).all()) for name in shifts}
    won = [name for name, ok in wins.items() if ok]
    expected = [name for name in shifts if name != "double scale"]
    outcome = verdict(sum(wins[name] for name in expected), len(expected))
    shifted = final.loc[shifts, _OH_BN]
    value = (f"OH/BN beat Lloyd after {steps} steps under {len(won)} of {len(shifts)} shifts; "
             f"final ratios {shifted.min().min():.2f} to {shifted.max().max():.2f}")
    unshifted = final.loc["no shift", list(SCHEMES)]
    drift = (final.loc[shifts] - final.loc["no shift"]).abs().max().max()
    lines = [
        f"OH and BN beat Lloyd after {steps} steps under {len(won)} of {len(shifts)} shifts"
        + (f" ({', '.join(won)})" if won else "")
        + f". Paper: {len(expected)} of {len(shifts)} (all but double scale) -> {outcome}",
        "Unshifted reference, ratio to Lloyd after T steps: "
        + ", ".join(f"{l2_label(scheme)} {unshifted[scheme]:.2f}" for scheme in SCHEMES),
        f"Largest change of a final ratio under a shift, relative to no shift: {drift:.2f}",
    ]
    return Finding(value, outcome, "\n".join(lines))


def family_summary(matrices: dict) -> pd.DataFrame:
    """Figure 8's three readings, per embedding, from the train x test family matrices (chapter 11).

    Parameters
    ----------
    matrices : dict
        ``scheme -> matrix`` from :func:`~kmtrf_core.evaluate.family_matrix`
        (rows test families, columns training families); read for OH and BN.

    Returns
    -------
    pandas.DataFrame
        Indexed by embedding label; columns ``cauchy_trained_median_ratio``
        (median of the cauchy column), ``other_trained_median_ratio`` (the
        mean over all cells of the other columns), ``cauchy_test_row_ratio``
        (median of the cauchy row outside the cauchy column) and
        ``block_4x4_cells_beating_lloyd`` (cells below 1 among non-cauchy
        training and test families).

    Examples
    --------
    >>> families = ["normal", "cauchy", "gumbel"]
    >>> M = pd.DataFrame([[0.5, 2.0, 0.8], [3.0, 4.0, 1.5], [0.9, 2.5, 1.1]],
    ...                  index=families, columns=families)
    >>> family_summary({"oh": M, "bn": M}).loc["OH:L2"].tolist()
    [2.5, 1.3, 2.25, 3.0]
    """
    rows = []
    for scheme in _OH_BN:
        matrix = matrices[scheme]
        others = _others(matrix.columns)
        rows.append(dict(
            embedding=l2_label(scheme),
            cauchy_trained_median_ratio=float(matrix["cauchy"].median()),
            other_trained_median_ratio=float(matrix[others].to_numpy().ravel().mean()),
            cauchy_test_row_ratio=float(matrix.loc["cauchy", others].median()),
            block_4x4_cells_beating_lloyd=int((matrix.loc[others, others] < 1).to_numpy().sum()),
        ))
    return pd.DataFrame(rows).set_index("embedding")


def family_finding(summary, steps: int, families=FAMILIES) -> Finding:
    """Figure 8: the cauchy column, the cauchy row, and the non-cauchy block (chapter 11).

    Parameters
    ----------
    summary : pandas.DataFrame
        From :func:`family_summary`.
    steps : int
        ``T``, for the text.
    families : sequence of str
        The families of the matrices (for the number of block cells).

    Returns
    -------
    Finding
        For the claim ``family_generalization``, whose verdict is that of the
        block; the report gives all three checks.

    Examples
    --------
    >>> summary = pd.DataFrame({"cauchy_trained_median_ratio": [3.0, 4.0],
    ...     "other_trained_median_ratio": [0.8, 0.9], "cauchy_test_row_ratio": [1.5, 2.0],
    ...     "block_4x4_cells_beating_lloyd": [16, 14]}, index=["OH:L2", "BN:L2"])
    >>> finding = family_finding(summary, 20)
    >>> finding.verdict, finding.report.splitlines()[-1]
    ('partly', 'Lower-right 4x4 block: 30 of 32 (OH + BN) cells beat Lloyd after 20 steps -> partly')
    """
    others = _others(families)
    cells = len(summary) * len(others) ** 2
    side = f"{len(others)}x{len(others)}"
    column_worse = bool((summary.cauchy_trained_median_ratio
                         > summary.other_trained_median_ratio).all())
    row_loses = bool((summary.cauchy_test_row_ratio > 1).all())
    wins = int(summary.block_4x4_cells_beating_lloyd.sum())
    outcome = verdict(wins, cells)
    lines = [
        f"Cauchy-trained layers worse than the others on median: {column_worse} "
        f"-> {verdict(column_worse)}",
        f"On cauchy tasks, layers trained elsewhere lose to Lloyd: {row_loses} "
        f"-> {verdict(row_loses)}",
        f"Lower-right {side} block: {wins} of {cells} (OH + BN) cells beat Lloyd after {steps} "
        f"steps -> {outcome}",
    ]
    value = (f"{wins} of {cells} OH/BN cells of the non-cauchy {side} block beat Lloyd after "
             f"{steps} steps; cauchy-trained layers worse than the others: {column_worse}")
    return Finding(value, outcome, "\n".join(lines))


def point_counts(sizes, factors) -> list:
    """Numbers of points for Figure 12: ``factor * n`` rounded, at least ``k`` (chapter 11).

    Parameters
    ----------
    sizes : namespace
        With the training ``n`` and ``k`` (the ``section4`` sizes).
    factors : sequence of float
        Multiples of ``n`` (the profile's ``length_factors``).

    Returns
    -------
    list of int

    Examples
    --------
    >>> point_counts(get_profile("quick").chapter("section4"), [0.1, 0.5, 1, 2, 4])
    [4, 16, 32, 64, 128]
    """
    return [max(sizes.k, int(round(factor * sizes.n))) for factor in factors]


def length_finding(final, points, train_n: int, steps: int) -> Finding:
    """Figure 12: do OH and BN beat Lloyd at every number of points? (chapter 11)

    Parameters
    ----------
    final : pandas.DataFrame
        Median ratio to Lloyd after ``steps`` steps: one row per number of
        points, columns the schemes.
    points : sequence of int
        The numbers of points of the rows, in order (:func:`point_counts`).
    train_n : int
        Points per training task.
    steps : int
        ``T``, for the text.

    Returns
    -------
    Finding
        For the claim ``length_generalization``; the report adds the factor by
        which the final OH/BN ratios vary across ``n``.

    Examples
    --------
    >>> final = pd.DataFrame({"oh": [0.8, 0.9], "bn": [1.2, 0.6]}, index=["n=16", "n=64"])
    >>> finding = length_finding(final, [16, 64], 32, 20)
    >>> finding.value, finding.verdict
    ('OH/BN beat Lloyd in 3 of 4 (n, embedding) cases, n = 16 to 64 for training n = 32', 'partly')
    >>> print(finding.report.splitlines()[-1])
    Across n, the final ratio of OH/BN varies by a factor 2.00 (1 = the same at every n).
    """
    points = list(points)
    if len(points) != len(final):
        raise ValueError(f"points has {len(points)} entries for {len(final)} rows of final")
    beat = [(test, scheme) for test in final.index for scheme in _OH_BN
            if final.loc[test, scheme] < 1]
    cases = len(_OH_BN) * len(points)
    spread = float(final[_OH_BN].max().max() / final[_OH_BN].min().min())
    outcome = verdict(len(beat), cases)
    lines = [
        f"OH/BN beat Lloyd after {steps} steps in {len(beat)} of {cases} (n, embedding) cases; "
        f"paper: all -> {outcome}",
        f"Across n, the final ratio of OH/BN varies by a factor {spread:.2f} "
        f"(1 = the same at every n).",
    ]
    value = (f"OH/BN beat Lloyd in {len(beat)} of {cases} (n, embedding) cases, "
             f"n = {points[0]} to {points[-1]} for training n = {train_n}")
    return Finding(value, outcome, "\n".join(lines))


# --- chapter 13: the Cauchy problem -------------------------------------------------


def family_convergence(history, families=FAMILIES) -> pd.DataFrame:
    """Per training family, the median over configurations of the final relative
    validation loss and of the steps to converge (Figure 4, chapter 13).

    Parameters
    ----------
    history : pandas.DataFrame
        From :func:`trained_layers` with families, schemes and omegas.
    families : sequence of str
        The families, in the order of the rows.

    Returns
    -------
    pandas.DataFrame
        Indexed by family; columns ``final_val_relative`` and
        ``steps_to_converge`` (medians of
        :func:`~kmtrf_core.training.convergence_summary`).

    Examples
    --------
    >>> history = pd.DataFrame({"family": ["normal"] * 3 + ["cauchy"] * 3, "scheme": "bn",
    ...     "omega": "l2", "seed": 0, "step": [0, 1, 2] * 2, "train_loss": [np.nan, 2.0, 1.0] * 2,
    ...     "val_relative_loss": [2.0, 1.0, 0.9, 2.0, 1.9, 1.8]})
    >>> family_convergence(history, ["normal", "cauchy"]).values.tolist()
    [[0.9, 1.0], [1.8, 2.0]]
    """
    summary = convergence_summary(history, by=("family", "scheme", "omega"))
    columns = ["final_val_relative", "steps_to_converge"]
    return summary.groupby("family")[columns].median().loc[list(families)]


def family_training_finding(per_family, val_every: int) -> Finding:
    """Figure 4: does cauchy validate worst, and does its validation curve settle first? (chapter 13)

    Parameters
    ----------
    per_family : pandas.DataFrame
        From :func:`family_convergence`.
    val_every : int
        The validation interval in steps (the resolution of the speed check).

    Returns
    -------
    Finding
        For the claim ``cauchy_fails`` (cauchy validates worst); the report
        adds the speed check.

    Examples
    --------
    >>> per_family = pd.DataFrame({"final_val_relative": [0.9, 1.5, 0.8],
    ...     "steps_to_converge": [20.0, 10.0, 30.0]}, index=["normal", "cauchy", "gumbel"])
    >>> finding = family_training_finding(per_family, 10)
    >>> finding.value, finding.verdict
    ('median final relative validation loss: cauchy 1.50, others 0.80 to 0.90', 'reproduced')
    """
    others = _others(per_family.index)
    val = per_family.final_val_relative
    cauchy_val, best_other, worst_other = val["cauchy"], val[others].min(), val[others].max()
    worst = bool(cauchy_val > worst_other)
    cauchy_steps = per_family.loc["cauchy", "steps_to_converge"]
    other_steps = per_family.loc[others, "steps_to_converge"].min()
    fast = bool(cauchy_steps < other_steps)
    tie = " (a tie at this validation interval)" if cauchy_steps == other_steps else ""
    lines = [
        f"Median final relative validation loss: cauchy {cauchy_val:.2f}, other families "
        f"{best_other:.2f} to {worst_other:.2f}.",
        f"Cauchy validates worst of the five families -> {verdict(worst)}",
        f"Cauchy's validation curve settles first (median {cauchy_steps:.0f} steps to 90% of its "
        f"improvement vs {other_steps:.0f} or more for the others; validation every {val_every} "
        f"steps) -> {verdict(fast)}{tie}",
    ]
    value = (f"median final relative validation loss: cauchy {cauchy_val:.2f}, others "
             f"{best_other:.2f} to {worst_other:.2f}")
    return Finding(value, verdict(worst), "\n".join(lines))


def gap_finding(gaps: dict) -> Finding:
    """Figure 5: is the largest smoothing gap for cauchy ten times that for normal? (chapter 13)

    ``"reproduced"`` for a factor of 10 or more, ``"partly"`` for a factor above
    1, else ``"not reproduced"``.

    Parameters
    ----------
    gaps : dict
        ``"normal"`` and ``"cauchy"`` -> :class:`~kmtrf_core.landscape.Landscape`.

    Returns
    -------
    Finding
        For the claim ``cauchy_gap``; the report adds the gaps relative to the
        k-means loss.

    Examples
    --------
    >>> from kmtrf_core.landscape import Landscape
    >>> def surface(gap):
    ...     kmeans = np.full((2, 2), 10.0)
    ...     return Landscape(np.zeros(2), np.zeros(2), kmeans + gap, kmeans, ({}, {}), "l2", 0.1)
    >>> finding = gap_finding({"normal": surface(0.2), "cauchy": surface(3.0)})
    >>> finding.value, finding.verdict
    ('largest gap on the plane: normal 0.2, cauchy 3 (factor 15.0)', 'reproduced')
    """
    normal, cauchy = gaps["normal"].gap.max(), gaps["cauchy"].gap.max()
    relative = {family: (surface.gap / surface.kmeans).max() for family, surface in gaps.items()}
    outcome = ("reproduced" if cauchy >= 10 * normal
               else "partly" if cauchy > normal else "not reproduced")
    value = (f"largest gap on the plane: normal {normal:.3g}, cauchy {cauchy:.3g} "
             f"(factor {cauchy / normal:.1f})")
    lines = [
        f"Largest gap on the plane: normal {normal:.3g}, cauchy {cauchy:.3g} "
        f"(factor {cauchy / normal:.1f}); the paper: at most about 0.5 vs above 5, "
        f"a factor of 10 or more.",
        f"Largest gap relative to the k-means loss: normal {relative['normal']:.3g}, "
        f"cauchy {relative['cauchy']:.3g}.",
        f"Cauchy's gap is an order of magnitude larger -> {outcome}",
    ]
    return Finding(value, outcome, "\n".join(lines))


def smoothing_margins(layers: dict, tests: dict, tau: float = 0.1) -> pd.DataFrame:
    """Where the L2 smoothing gap comes from, per family (chapter 13).

    For each family's tasks, at the initial centers and at the output of the
    layer trained on that family: the fraction of points where sparsemax
    smoothing is exact (the two nearest centers at least ``tau`` apart in
    squared distance), the median margin between the two nearest centers, the
    median squared distance to the nearest center, and the median over tasks of
    the gap as a share of the k-means loss.

    Parameters
    ----------
    layers : dict
        ``family -> model``, a single layer (e.g. the first seed,
        ``members()[0]``) trained on that family.
    tests : dict
        ``family -> (X, C)``, from :func:`~kmtrf_core.tasks.family_tasks`.
    tau : float
        Penalty of the L2-regularized min.

    Returns
    -------
    pandas.DataFrame
        Indexed by ``(family, centers)`` with ``centers`` in ``{"initial
        centers", "after the layer"}``; columns ``exact_fraction``,
        ``median_margin``, ``median_nearest_sqdist``, ``gap_share``.

    Examples
    --------
    >>> from kmtrf_core import ClusterTransformer
    >>> tests = family_tasks(2, 20, 2, 3, families=("normal",), generator=0,
    ...                      dtype=torch.float64)
    >>> layers = {"normal": ClusterTransformer.from_lloyd(2, 3)}
    >>> table = smoothing_margins(layers, tests)
    >>> list(table.index), list(table.columns)[:2]
    ([('normal', 'initial centers'), ('normal', 'after the layer')], ['exact_fraction', 'median_margin'])
    """
    rows = []
    for family, (X, C) in tests.items():
        with torch.no_grad():
            out = layers[family](X, C)
        for where, centers in (("initial centers", C), ("after the layer", out)):
            r = sqdist(X, centers)
            two = r.topk(2, dim=-1, largest=False).values
            gap = smoothing_gap(X, centers, "l2", tau).sum(dim=1)
            rows.append(dict(family=family, centers=where,
                             exact_fraction=sparsemax_is_tight(r, tau).float().mean().item(),
                             median_margin=(two[..., 1] - two[..., 0]).median().item(),
                             median_nearest_sqdist=two[..., 0].median().item(),
                             gap_share=(gap / kmeans_objective(X, centers)).median().item()))
    return pd.DataFrame(rows).set_index(["family", "centers"])


def margin_report(margins, tau: float = 0.1) -> str:
    """Two lines on :func:`smoothing_margins` at the initial centers (chapter 13).

    The fraction of exactly smoothed points per family (and the lowest), and
    the median margin of cauchy against the range of the other families.

    Parameters
    ----------
    margins : pandas.DataFrame
        From :func:`smoothing_margins`.
    tau : float
        The penalty the margins were measured against, for the text.

    Returns
    -------
    str

    Examples
    --------
    >>> margins = pd.DataFrame({"family": ["normal", "cauchy"], "centers": "initial centers",
    ...     "exact_fraction": [0.7, 0.2], "median_margin": [0.25, 0.03]}
    ...     ).set_index(["family", "centers"])
    >>> print(margin_report(margins))
    Fraction of points where L2 smoothing is exact at the initial centers: normal 0.70, cauchy
    0.20. Lowest: cauchy.
    Median margin between the two nearest centers: cauchy 0.03, other families 0.25 to 0.25 (tau =
    0.1).
    """
    initial = margins.xs("initial centers", level="centers")
    others = _others(initial.index)
    margin = initial.median_margin
    return (
        "Fraction of points where L2 smoothing is exact at the initial centers: "
        + ", ".join(f"{family} {initial.loc[family, 'exact_fraction']:.2f}"
                    for family in initial.index)
        + f". Lowest: {initial.exact_fraction.idxmin()}.\n"
        f"Median margin between the two nearest centers: cauchy {margin['cauchy']:.2g}, "
        f"other families {margin[others].min():.2g} to {margin[others].max():.2g} (tau = {tau})."
    )


def cauchy_stands_out(margins) -> bool:
    """Whether cauchy has both the fewest exactly smoothed points and the smallest margin.

    Read at the initial centers of :func:`smoothing_margins` (chapter 13): the
    measured side of the paper's hypothesis on the Cauchy problem.

    Parameters
    ----------
    margins : pandas.DataFrame
        From :func:`smoothing_margins`.

    Returns
    -------
    bool

    Examples
    --------
    >>> margins = pd.DataFrame({"family": ["normal", "cauchy"], "centers": "initial centers",
    ...     "exact_fraction": [0.7, 0.2], "median_margin": [0.25, 0.03]}
    ...     ).set_index(["family", "centers"])
    >>> cauchy_stands_out(margins)
    True
    """
    initial = margins.xs("initial centers", level="centers")
    others = _others(initial.index)
    return bool(initial.exact_fraction.idxmin() == "cauchy"
                and initial.loc["cauchy", "median_margin"]
                < initial.loc[others, "median_margin"].min())


# --- chapter 14: task dissimilarities -----------------------------------------------


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
        From :func:`base_config` (only ``n, d, k, scale`` are read).
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
    others = _others(blocks.index)
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
    return Finding(value, verdict(separated), "\n".join(lines))


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


def transfer_correlation(blocks, table, schemes=SCHEMES, families=FAMILIES) -> pd.DataFrame:
    """Do dissimilar families transfer worse? Spearman correlation per embedding (chapter 14).

    For each ordered pair (training family ``a``, test family ``b``), ``a !=
    b``: the block-mean EMD between ``a`` and ``b`` and the transfer penalty
    ``log(M[b, a] / M[b, b])`` of the family matrix ``M`` (the layer trained on
    ``a`` against the one trained on ``b``, both tested on ``b``).

    Parameters
    ----------
    blocks : pandas.DataFrame
        Family-block mean EMDs (:func:`~kmtrf_core.dissimilarity.block_summary`).
    table : pandas.DataFrame
        From :func:`~kmtrf_core.training.family_generalization`.
    schemes, families : sequence of str

    Returns
    -------
    pandas.DataFrame
        Indexed by embedding label; columns ``spearman_rho``, ``p_value`` and
        ``pairs``.

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
    (['BN:L2'], 6)
    """
    from scipy.stats import spearmanr  # scipy.stats takes a while to import: only here

    rows = []
    for scheme in schemes:
        matrix = family_matrix(table, scheme)  # rows: test family, columns: training family
        emd, penalty = [], []
        for a in families:
            for b in families:
                if a != b:
                    emd.append(blocks.loc[a, b])
                    penalty.append(np.log(matrix.loc[b, a] / matrix.loc[b, b]))
        rho, p_value = spearmanr(emd, penalty)
        rows.append(dict(embedding=l2_label(scheme), spearman_rho=rho, p_value=p_value,
                         pairs=len(emd)))
    return pd.DataFrame(rows).set_index("embedding")


def transfer_finding(correlation) -> Finding:
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
    ...                             "pairs": 20}, index=["OH:L2", "BN:L2"])
    >>> finding = transfer_finding(correlation)
    >>> finding.value, finding.verdict
    ('Spearman rho 0.20 to 0.60 over 20 family pairs; significant at 5% for 1 of 2 embeddings', 'partly')
    """
    rho = correlation.spearman_rho
    positive = int((rho > 0).sum())
    significant = int(((rho > 0) & (correlation.p_value < 0.05)).sum())
    outcome = verdict(significant, len(correlation))
    pairs = int(correlation.pairs.max())
    report = (f"Rank correlation between family EMD and transfer penalty: positive for {positive} "
              f"of {len(correlation)} embeddings, significant at 5% for {significant} "
              f"(rho {rho.min():.2f} to {rho.max():.2f}) -> {outcome}")
    value = (f"Spearman rho {rho.min():.2f} to {rho.max():.2f} over {pairs} family pairs; "
             f"significant at 5% for {significant} of {len(correlation)} embeddings")
    return Finding(value, outcome, report)
