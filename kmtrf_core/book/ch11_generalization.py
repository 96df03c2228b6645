"""Chapter 11 (``book/11_generalization.ipynb``): the layers on shifted mixtures, other families, other ``n``.

Figures 7, 8/18 and 12 of Section 4. The layers are the catalog's Section 4 layers (groups ``section4_schemes``
and ``section4_families``); the tasks and the evaluation are the paper room's (:mod:`kmtrf_core.tasks`,
:func:`~kmtrf_core.evaluate.evaluate_models`). This module holds:

* :func:`scheme_layers`, :func:`family_generalization`: the layers, and the train-family x test-family evaluation
  behind Figures 8 and 18 (chapter 14 reads it too), with the per-task ratios for the verdicts' intervals;
* :func:`evaluate_with_samples`: :func:`~kmtrf_core.evaluate.evaluate_models`' table for Figures 7 and 12, with the
  same per-task ratios; :func:`ratio_table`: the median ratio to Lloyd after the first and the last step;
* :func:`cell_verdicts` (on the paper's statistic), :func:`shift_finding`,
  :func:`family_summary`, :func:`family_finding`, :func:`point_counts`, :func:`length_finding`: the
  readings and verdicts of ``shift_generalization``, ``family_generalization`` and ``length_generalization``.
"""

from __future__ import annotations

import pandas as pd

from ..evaluate import evaluate_models, final_ratios
from ..tasks import FAMILIES, SHIFTS, family_tasks
from ..validation import check_choice
from .claims import Finding
from .groups import PAPER_SCHEMES
from .heldout import geometric_matrix, task_ratios
from .plotting import l2_label
from .uncertainty import combine, compare, geometric_mean, geometric_text, tally

__all__ = ["cell_verdicts", "evaluate_with_samples", "family_finding", "family_generalization", "family_summary",
           "length_finding", "point_counts", "ratio_table", "scheme_layers", "shift_finding"]

_OH_BN = ["oh", "bn"]


def scheme_layers(models: dict, schemes=PAPER_SCHEMES, omega: str = "l2") -> dict:
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


def family_generalization(catalog, schemes=PAPER_SCHEMES, families=FAMILIES, tasks: int = 64, steps: int = 20,
                          seed: int = 30_000, modes=("reembed",), sampled=None):
    """The L2 layer of every (training family, scheme) on fresh tasks of every family (Figures 8 and 18).

    The layers are the catalog's group ``section4_families`` (trained once,
    shared with chapters 13 and 14); the test tasks are ``tasks`` per family
    drawn from ``seed`` with the group's ``n, d, k, scale``.

    Parameters
    ----------
    catalog : Catalog
        :func:`~kmtrf_core.book.catalog.book_catalog` of the profile in force.
    schemes : sequence of str
        Token embeddings.
    families : sequence of str
        Training and test families.
    tasks : int
        Test tasks per family.
    steps : int
        Clustering steps ``T`` of the evaluation.
    seed : int
        Seed of the test tasks.
    modes : sequence of {"reembed", "naive"}
        Evaluation modes.
    sampled : sequence of str, optional
        Schemes whose per-task ratios to Lloyd after ``steps`` re-embedded
        steps are returned too, from the same trajectories as the table
        (:func:`evaluate_with_samples`): the samples behind the intervals of
        the chapter's verdicts.

    Returns
    -------
    table : pandas.DataFrame
        :func:`~kmtrf_core.evaluate.evaluate_models` with model labels
        ``(train_family, scheme)`` and tests named by family (see
        :func:`~kmtrf_core.evaluate.family_matrix`).
    samples : dict
        With ``sampled`` only: ``(train_family, test_family, scheme)`` ->
        float64 array ``(S, B)`` (seeds x tasks).

    Examples
    --------
    A tiny run, with the cache in a temporary folder (``$KMTRF_CACHE``):

    >>> import os, tempfile
    >>> from unittest import mock
    >>> from kmtrf_core.book.catalog import book_catalog
    >>> from kmtrf_core.evaluate import family_matrix
    >>> with tempfile.TemporaryDirectory() as folder, mock.patch.dict(os.environ, {"KMTRF_CACHE": folder}):
    ...     table = family_generalization(book_catalog("quick"), schemes=("bn",), families=("normal", "cauchy"),
    ...                                   tasks=2, steps=1)
    >>> sorted(table.model.unique()), family_matrix(table, "bn").shape
    ([('cauchy', 'bn'), ('normal', 'bn')], (2, 2))
    >>> with tempfile.TemporaryDirectory() as folder, mock.patch.dict(os.environ, {"KMTRF_CACHE": folder}):
    ...     table, samples = family_generalization(book_catalog("quick"), schemes=("bn",),
    ...                                            families=("normal", "cauchy"), tasks=3, steps=1, sampled=("bn",))
    >>> sorted(samples)[0], samples[("normal", "cauchy", "bn")].shape
    (('cauchy', 'cauchy', 'bn'), (2, 3))
    """
    group = catalog["section4_families"]
    base = group.base
    families, schemes = tuple(families), tuple(schemes)
    if sampled is not None:
        sampled = tuple(check_choice(scheme, "sampled", schemes) for scheme in sampled)
        if tuple(modes) != ("reembed",):
            raise ValueError(f"sampled needs modes=('reembed',) (its ratios are the re-embedded ones), got {modes!r}")
    models = {(family, scheme): group.run(family=family, scheme=scheme, omega="l2").model
              for family in families for scheme in schemes}
    tests = family_tasks(tasks, base.n, base.d, base.k, families=families, generator=seed, scale=base.scale)
    if sampled is None:
        return evaluate_models(models, tests, steps, modes=modes)
    table, per_task = evaluate_with_samples(models, tests, steps,
                                            sampled=[(family, scheme) for family in families for scheme in sampled])
    return table, {(train, test, scheme): values for (test, (train, scheme)), values in per_task.items()}


def evaluate_with_samples(models: dict, tests: dict, steps: int, sampled=("oh", "bn"), chunk: int = 64):
    """:func:`~kmtrf_core.evaluate.evaluate_models` (re-embedded steps), and per task the ratios behind it.

    One trajectory per model and test serves both the table (the figures) and the per-task
    ratios after ``steps`` steps of the ``sampled`` models (the intervals of the verdicts), so
    the samples are the very tasks the table averages.

    Parameters
    ----------
    models : dict
        Label -> layer, as for :func:`~kmtrf_core.evaluate.evaluate_models`.
    tests : dict
        Name -> ``(X, C)``.
    steps, chunk : int
        As for :func:`~kmtrf_core.evaluate.evaluate_models`.
    sampled : sequence
        The labels whose per-task ratios are returned.

    Returns
    -------
    table : pandas.DataFrame
        Equal to ``evaluate_models(models, tests, steps, chunk=chunk)``.
    samples : dict
        ``(test, label)`` -> float64 array ``(S, B)``: per task, the ratio to Lloyd after ``steps`` steps.

    Examples
    --------
    >>> import torch
    >>> from kmtrf_core import ClusterTransformer, sample_tasks
    >>> models = {s: ClusterTransformer(2, 3, s, generator=torch.Generator().manual_seed(0)) for s in ("oh", "bn")}
    >>> tests = {"t": sample_tasks(4, 20, 2, 3, generator=1)}
    >>> table, samples = evaluate_with_samples(models, tests, steps=2)
    >>> table.equals(evaluate_models(models, tests, steps=2)), samples[("t", "bn")].shape
    (True, (1, 4))
    """
    missing = [label for label in sampled if label not in models]
    if missing:
        raise ValueError(f"sampled names {missing}, which are not among the models {list(models)}")
    table, trajectories = evaluate_models(models, tests, steps, chunk=chunk, return_trajectories=True)
    samples = {}
    for test, (X, C) in tests.items():
        ratios = task_ratios({label: trajectories[(test, "reembed", label)] for label in sampled}, X, C)
        for label, values in ratios.items():
            samples[(test, label)] = values[steps]
    return table, samples


def cell_verdicts(samples: dict, threshold: float = 1.0, statistic: str = "geometric") -> dict:
    """Each cell's verdict on "below ``threshold``" (one Lloyd step), on its 95% interval over tasks and seeds.

    ``samples``: cell -> per-task ratios ``(S, B)``; returns cell -> ``"reproduced"`` (interval
    below), ``"not reproduced"`` (above) or ``"inconclusive"`` (:func:`~kmtrf_core.book.uncertainty.compare`).
    ``statistic``: ``"geometric"``, the paper's (its Figures 7, 8/18 and 12 plot the mean log loss, per
    its released ``plot_eval_ood_gen.py``), or ``"arithmetic"`` (the mean ratio, which a few bad tasks dominate).

    >>> import numpy as np
    >>> noise = 0.02 * np.random.default_rng(0).standard_normal(128)
    >>> cell_verdicts({"a": 0.8 + noise, "b": 1.2 + noise, "c": 1.0 + noise})
    {'a': 'reproduced', 'b': 'not reproduced', 'c': 'inconclusive'}
    >>> bad = {"d": np.r_[np.full(180, 0.6), np.full(20, 10.0)]}  # 1 task in 10 at ten times Lloyd's loss
    >>> cell_verdicts(bad), cell_verdicts(bad, statistic="arithmetic")
    ({'d': 'reproduced'}, {'d': 'not reproduced'})
    """
    return {cell: compare(values, threshold, statistic=statistic).verdict for cell, values in samples.items()}


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


def shift_finding(final, steps: int, samples: dict, shifts=SHIFTS) -> Finding:
    """Figure 7: do OH and BN beat Lloyd after ``steps`` steps under every shift? (chapter 11)

    The paper (Section 4) reads all four panels as wins by ``T = 20``: the doubled scale only after
    starting behind Lloyd, so every shift is checked at the last step. A shift counts as a win when
    the 95% interval over tasks and seeds of both OH's and BN's geometric mean ratio to Lloyd (the
    paper's statistic, :func:`cell_verdicts`) is below 1, as a loss when either is entirely above,
    and as inconclusive otherwise; the same count on the mean ratio is reported beside it.

    Parameters
    ----------
    final : pandas.DataFrame
        Median ratio to Lloyd after ``steps`` steps: rows the tests (``"no
        shift"`` and each shift), columns the schemes ``oh, bn, na`` (for the report).
    steps : int
        ``T``, for the text.
    samples : dict
        ``(shift, scheme)`` -> per-task ratios to Lloyd after ``steps`` steps ``(S, B)`` for
        ``scheme`` in ``oh``, ``bn`` and every shift and ``"no shift"`` (the reference of the
        report's changes) (:func:`~kmtrf_core.book.heldout.task_ratios`).
    shifts : sequence of str
        The shifted tests (default :data:`~kmtrf_core.tasks.SHIFTS`).

    Returns
    -------
    Finding
        For the claim ``shift_generalization``; the report adds the unshifted
        ratios and how the shifts move OH's and BN's ratios (:func:`_change_line`).

    Examples
    --------
    >>> import numpy as np
    >>> final = pd.DataFrame({"oh": [0.8, 0.7, 1.2], "bn": [0.9, 0.8, 1.1], "na": 1.5},
    ...                      index=["no shift", "half scale", "double scale"])
    >>> noise = 0.02 * np.random.default_rng(0).standard_normal((2, 128))
    >>> samples = {(shift, s): final.loc[shift, s] + noise for shift in final.index for s in ("oh", "bn")}
    >>> finding = shift_finding(final, 20, samples, shifts=["half scale", "double scale"])
    >>> print(finding.verdict, finding.report.splitlines()[0])  # doctest: +NORMALIZE_WHITESPACE
    partly OH and BN beat Lloyd after 20 steps under 1 of 2 shifts on the paper's statistic (geometric
    mean over tasks): 1 of 2 (half scale); 1 lost, 0 inconclusive. Paper: all 2 by T = 20 (double
    scale only eventually) -> partly
    """
    shifts = list(shifts)
    geo, mean = ({name: _both(samples, name, statistic) for name in shifts}
                 for statistic in ("geometric", "arithmetic"))
    outcome, (wins, mean_wins) = combine(geo.values()), (list(v.values()).count("reproduced") for v in (geo, mean))
    means = [geometric_mean(samples[(name, scheme)]) for name in shifts for scheme in _OH_BN]
    value = (f"OH/BN beat Lloyd after {steps} steps under {wins} of {len(shifts)} shifts on the paper's "
             f"statistic (geometric mean over tasks, 95% intervals), {mean_wins} of {len(shifts)} on the mean "
             f"ratio; geometric means {min(means):.2f} to {max(means):.2f}")
    unshifted = final.loc["no shift", list(PAPER_SCHEMES)]
    lines = [
        f"OH and BN beat Lloyd after {steps} steps under {wins} of {len(shifts)} shifts on the paper's "
        f"statistic (geometric mean over tasks): {_won_text(geo)}. Paper: all {len(shifts)} by T = 20 (double scale "
        f"only eventually) -> {outcome}",
        f"On the mean ratio over tasks (stricter): {_won_text(mean)}",
        "Unshifted reference after T steps, median over seeds of the mean ratio to Lloyd: "
        + ", ".join(f"{l2_label(scheme)} {unshifted[scheme]:.2f}" for scheme in PAPER_SCHEMES) + "; geometric mean: "
        + ", ".join(f"{l2_label(scheme)} {geometric_mean(samples[('no shift', scheme)]):.2f}" for scheme in _OH_BN),
        _change_line(samples, shifts, "no shift", "Under a shift, relative to no shift, OH/BN's final geometric mean"),
    ]
    return Finding(value, outcome, check=f"OH and BN below Lloyd after {steps} steps under every shift on the "
                                         "paper's statistic (Figure 7's mean log loss): each 95% interval over tasks "
                                         "and seeds of the geometric mean ratio to Lloyd below 1",
                   report="\n".join(lines))


def _both(samples: dict, name: str, statistic: str) -> str:
    """``name``'s verdict for OH and BN together: a win when both are below 1, a loss when either is above."""
    verdicts = list(cell_verdicts({scheme: samples[(name, scheme)] for scheme in _OH_BN}, statistic=statistic).values())
    return ("reproduced" if all(v == "reproduced" for v in verdicts)
            else "not reproduced" if "not reproduced" in verdicts else "inconclusive")


def _won_text(outcomes: dict) -> str:
    """``"1 of 4 (anisotropic); 1 lost, 2 inconclusive"``."""
    won = [name for name, v in outcomes.items() if v == "reproduced"]
    return (f"{len(won)} of {len(outcomes)}" + (f" ({', '.join(won)})" if won else "") + "; "
            + tally(outcomes.values(), None, "lost"))


def _change_line(samples: dict, tests, reference: str, label: str) -> str:
    """How OH's and BN's final ratios move from the ``reference`` test to each of ``tests``, in one line.

    Each (test, embedding) case is the unpaired 95% interval (the tests are drawn apart) of the
    quotient of the two tests' geometric mean ratios; it is lower or higher only when that excludes 1."""
    if not tests:
        raise ValueError(f"tests must name at least one test besides {reference!r}")
    changes = {(test, scheme): compare(samples[(test, scheme)], samples[(reference, scheme)], paired=False,
                                       statistic="geometric")
               for test in tests for scheme in _OH_BN}
    lower = sum(c.verdict == "reproduced" for c in changes.values())
    higher = sum(c.verdict == "not reproduced" for c in changes.values())
    finite = {key: c for key, c in changes.items() if not pd.isna(c.difference)} or changes  # NaN: both diverged
    (test, scheme), largest = max(finite.items(), key=lambda item: abs(item[1].difference))
    return (f"{label} is lower in {lower}, higher in {higher}, not separated in {len(changes) - lower - higher} "
            f"of {len(changes)} (test, embedding) cases (unpaired 95% intervals over tasks); largest change "
            f"{test} {scheme.upper()}: {geometric_text(largest, label='times')}")


def family_summary(matrices: dict, samples: dict) -> pd.DataFrame:
    """Figure 8's three readings, per embedding, from the train x test family matrices (chapter 11).

    The medians and the mean describe the matrices; the count of block cells beating Lloyd is decided
    cell by cell on the 95% interval over tasks and seeds (:func:`cell_verdicts`, also on the mean
    ratio), the same decision as :func:`family_finding`'s, never on a median alone.

    Parameters
    ----------
    matrices : dict
        ``scheme -> matrix`` (rows test families, columns training families) from :func:`geometric_matrix`
        or :func:`~kmtrf_core.evaluate.family_matrix` (median mean ratios); read for OH and BN.
    samples : dict
        ``(train_family, test_family, scheme) -> (S, B)`` per-task ratios to Lloyd
        (:func:`family_generalization` with ``sampled``), for OH and BN and every
        pair of non-cauchy families of the matrices.

    Returns
    -------
    pandas.DataFrame
        Indexed by embedding label; columns ``cauchy_trained_median_ratio``
        (median of the cauchy column), ``other_trained_mean_ratio`` (the
        mean over all cells of the other columns), ``cauchy_test_row_ratio``
        (median of the cauchy row outside the cauchy column),
        ``block_4x4_cells_beating_lloyd`` (cells among non-cauchy training and
        test families whose 95% interval of the geometric mean ratio is below 1),
        ``block_4x4_cells_inconclusive`` (those whose interval contains 1) and
        ``block_4x4_cells_beating_lloyd_mean_ratio`` (the first count on the mean ratio).

    Examples
    --------
    >>> import numpy as np
    >>> families = ["normal", "cauchy", "gumbel"]
    >>> M = pd.DataFrame([[0.5, 2.0, 0.8], [3.0, 4.0, 1.5], [0.9, 2.5, 1.1]],
    ...                  index=families, columns=families)
    >>> noise = 0.02 * np.random.default_rng(0).standard_normal((2, 64))
    >>> samples = {(train, test, s): M.loc[test, train] + noise for train in families for test in families
    ...            for s in ("oh", "bn")}
    >>> samples[("normal", "gumbel", "oh")] = 1.0 + noise  # median 0.9, interval across 1
    >>> samples[("gumbel", "gumbel", "oh")] = np.r_[np.full(58, 0.6), np.full(6, 10.0)]  # a few bad tasks
    >>> family_summary({"oh": M, "bn": M}, samples).loc["OH:L2"].tolist()
    [2.5, 1.3, 2.25, 3.0, 1.0, 2.0]
    """
    rows = []
    for scheme in _OH_BN:
        matrix = matrices[scheme]
        others = [f for f in matrix.columns if f != "cauchy"]
        block = [(train, test, scheme) for train in others for test in others]
        missing = [key for key in block if key not in samples]
        if missing:
            raise ValueError(f"samples lacks {len(missing)} (train family, test family, scheme) cells of the "
                             f"non-cauchy block, e.g. {missing[0]}")
        cells = list(cell_verdicts({key: samples[key] for key in block}).values())
        mean = list(cell_verdicts({key: samples[key] for key in block}, statistic="arithmetic").values())
        rows.append(dict(
            embedding=l2_label(scheme),
            cauchy_trained_median_ratio=float(matrix["cauchy"].median()),
            other_trained_mean_ratio=float(matrix[others].to_numpy().ravel().mean()),
            cauchy_test_row_ratio=float(matrix.loc["cauchy", others].median()),
            block_4x4_cells_beating_lloyd=cells.count("reproduced"),
            block_4x4_cells_inconclusive=cells.count("inconclusive"),
            block_4x4_cells_beating_lloyd_mean_ratio=mean.count("reproduced"),
        ))
    return pd.DataFrame(rows).set_index("embedding")


def family_finding(summary, steps: int, samples: dict, families=FAMILIES) -> Finding:
    """Figure 8: the cauchy column, the cauchy row, and the non-cauchy block (chapter 11).

    Each OH/BN cell of the non-cauchy block counts as beating Lloyd when its 95% interval over
    tasks and seeds of the geometric mean ratio to Lloyd is below 1 (:func:`cell_verdicts`); the verdict
    combines the cells (:func:`~kmtrf_core.book.uncertainty.combine`: all below -> reproduced, some -> partly).

    The paper's two other readings of Figure 8 go in the report, on intervals of the same statistic
    too: the cauchy column (each cauchy-trained cell against Lloyd, and against the layer trained on
    each other family on the same tasks and seeds, paired) and the cauchy row (each other family's
    layer on cauchy tasks against Lloyd). Counts on the mean ratio and the medians of ``summary``
    stand beside them.

    Parameters
    ----------
    summary : pandas.DataFrame
        From :func:`family_summary` (its medians and mean are quoted in the report).
    steps : int
        ``T``, for the text.
    samples : dict
        From :func:`family_generalization` with ``sampled``: ``(train_family, test_family, scheme)`` -> ``(S, B)``,
        for OH and BN and every pair of ``families``.
    families : sequence of str
        The families of the matrices (cauchy among them).

    Returns
    -------
    Finding
        For the claim ``family_generalization``, whose verdict is that of the
        block; the report gives all three readings.

    Examples
    --------
    >>> import numpy as np
    >>> summary = pd.DataFrame({"cauchy_trained_median_ratio": [3.0, 4.0],
    ...     "other_trained_mean_ratio": [0.8, 0.9], "cauchy_test_row_ratio": [1.5, 2.0],
    ...     "block_4x4_cells_beating_lloyd": [4, 3], "block_4x4_cells_inconclusive": [0, 1]},
    ...     index=["OH:L2", "BN:L2"])
    >>> noise = 0.02 * np.random.default_rng(0).standard_normal((2, 64))
    >>> fams = ("normal", "gumbel", "cauchy")
    >>> samples = {(a, b, s): 0.8 + noise for a in fams for b in fams for s in ("oh", "bn")}
    >>> samples.update({("cauchy", b, s): 3.0 + noise for b in fams for s in ("oh", "bn")})
    >>> samples[("gumbel", "normal", "bn")] = 1.0 + noise
    >>> finding = family_finding(summary, 20, samples, families=fams)
    >>> print(finding.verdict, finding.report.splitlines()[-1])  # doctest: +NORMALIZE_WHITESPACE
    partly Lower-right 2x2 block on the paper's statistic (geometric mean over tasks), 95% intervals:
    7 of 8 (OH + BN) cells below Lloyd after 20 steps (7 below, 0 above, 1 inconclusive) -> partly;
    on the mean ratio (stricter): 7 of 8 (7 below, 0 above, 1 inconclusive)
    >>> print(finding.report.splitlines()[0])  # doctest: +NORMALIZE_WHITESPACE
    Cauchy-trained layers (first column; medians OH:L2 3.000, BN:L2 4.000; the other columns' cells
    average 0.800 to 0.900): above Lloyd in 6 of 6 (test family, embedding) cells (0 below, 6 above,
    0 inconclusive; on the mean ratio 6 above); worse than the layer trained on the other family,
    paired on the same tasks, in 12 of 12 (0 better, 12 worse, 0 inconclusive)
    """
    others = [f for f in families if f != "cauchy"]
    if len(others) == len(families):
        raise ValueError(f"families must include 'cauchy' (the column and row of the readings), got {families!r}")
    wanted = [(train, test, scheme) for train in families for test in families for scheme in _OH_BN]
    missing = [key for key in wanted if key not in samples]
    if missing:
        raise ValueError(f"samples lacks {len(missing)} (train family, test family, scheme) cells, e.g. {missing[0]}")
    side = f"{len(others)}x{len(others)}"
    block = {key: samples[key] for key in wanted if key[0] in others and key[1] in others}
    cells, mean = cell_verdicts(block), cell_verdicts(block, statistic="arithmetic")
    wins, mean_wins = (sum(v == "reproduced" for v in c.values()) for c in (cells, mean))
    outcome = combine(cells.values())
    column = {(test, scheme): samples[("cauchy", test, scheme)] for test in families for scheme in _OH_BN}
    row = {(train, scheme): samples[(train, "cauchy", scheme)] for train in others for scheme in _OH_BN}
    column_mean, row_mean = (list(cell_verdicts(c, statistic="arithmetic").values()).count("not reproduced")
                             for c in (column, row))
    column, row = cell_verdicts(column), cell_verdicts(row)
    versus = [compare(samples[("cauchy", test, scheme)], samples[(other, test, scheme)], statistic="geometric").verdict
              for test in families for other in others for scheme in _OH_BN]
    column_above, worse, row_above = (list(v).count("not reproduced") for v in (column.values(), versus, row.values()))
    medians = ", ".join(f"{label} {value:.3f}" for label, value in summary.cauchy_trained_median_ratio.items())
    rows = ", ".join(f"{label} {value:.3f}" for label, value in summary.cauchy_test_row_ratio.items())
    lines = [
        f"Cauchy-trained layers (first column; medians {medians}; the other columns' cells average "
        f"{summary.other_trained_mean_ratio.min():.3f} to {summary.other_trained_mean_ratio.max():.3f}): "
        f"above Lloyd in {column_above} of {len(column)} (test family, embedding) cells ({tally(column.values())}; "
        f"on the mean ratio {column_mean} above); worse than the layer trained on the other family, paired on the "
        f"same tasks, in {worse} of {len(versus)} ({tally(versus, 'better', 'worse')})",
        f"On cauchy tasks, layers trained on the other families (first row; medians {rows}): above Lloyd in "
        f"{row_above} of {len(row)} (training family, embedding) cells ({tally(row.values())}; on the mean ratio "
        f"{row_mean} above)",
        f"Lower-right {side} block on the paper's statistic (geometric mean over tasks), 95% intervals: {wins} of "
        f"{len(cells)} (OH + BN) cells below Lloyd after {steps} steps ({tally(cells.values())}) -> {outcome}; on "
        f"the mean ratio (stricter): {mean_wins} of {len(mean)} ({tally(mean.values())})",
    ]
    value = (f"{wins} of {len(cells)} OH/BN cells of the non-cauchy {side} block below Lloyd after {steps} steps "
             f"on the paper's statistic (geometric mean over tasks, 95% intervals; {tally(cells.values())}), "
             f"{mean_wins} of {len(mean)} on the mean ratio; cauchy-trained layers above Lloyd in {column_above} of "
             f"{len(column)} cells and worse than the other layer in {worse} of {len(versus)} paired comparisons")
    return Finding(value, outcome, check=f"every OH/BN cell of the non-cauchy {side} block below Lloyd on the "
                                         "paper's statistic (Figure 8's mean log loss): its 95% interval over tasks "
                                         "and seeds of the geometric mean ratio to Lloyd below 1",
                   report="\n".join(lines), uncertainty=tally(cells.values()))


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
    >>> from kmtrf_core.book.profiles import get_profile
    >>> point_counts(get_profile("quick").chapter("section4"), [0.1, 0.5, 1, 2, 4])
    [4, 16, 32, 64, 128]
    """
    return [max(sizes.k, int(round(factor * sizes.n))) for factor in factors]


def length_finding(final, points, train_n: int, steps: int, samples: dict) -> Finding:
    """Figure 12: do OH and BN beat Lloyd at every number of points? (chapter 11)

    A case counts as beating Lloyd when its 95% interval over tasks and seeds of the paper's
    statistic, the geometric mean ratio to Lloyd, is below 1 (:func:`cell_verdicts`); the verdict
    combines the cases, and the count on the mean ratio is reported beside it.

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
    samples : dict
        ``(row of final, scheme)`` -> per-task ratios after ``steps`` steps ``(S, B)``, for OH and BN.

    Returns
    -------
    Finding
        For the claim ``length_generalization``; the report adds, where the training ``n`` is
        one of ``points``, how the other lengths move OH's and BN's ratios (:func:`_change_line`).

    Examples
    --------
    >>> import numpy as np
    >>> final = pd.DataFrame({"oh": [0.8, 0.9], "bn": [1.2, 0.6]}, index=["n=16", "n=64"])
    >>> noise = 0.02 * np.random.default_rng(0).standard_normal((2, 64))
    >>> samples = {(row, s): final.loc[row, s] + noise for row in final.index for s in ("oh", "bn")}
    >>> finding = length_finding(final, [16, 64], 16, 20, samples)
    >>> finding.value.split(" (geometric")[0], finding.verdict
    ("OH/BN below Lloyd in 3 of 4 (n, embedding) cases on the paper's statistic", 'partly')
    >>> print(finding.report.splitlines()[-1])  # doctest: +NORMALIZE_WHITESPACE
    Relative to the training length (n=16), OH/BN's final geometric mean is lower in 1, higher in 1,
    not separated in 0 of 2 (test, embedding) cases (unpaired 95% intervals over tasks); largest
    change n=64 BN: times 0.500 [0.495, 0.505] (95% CI; margin 0)
    """
    points = list(points)
    if len(points) != len(final):
        raise ValueError(f"points has {len(points)} entries for {len(final)} rows of final")
    cases = {(test, scheme): samples[(test, scheme)] for test in final.index for scheme in _OH_BN}
    cells, mean = cell_verdicts(cases), cell_verdicts(cases, statistic="arithmetic")
    beat, mean_beat = (sum(v == "reproduced" for v in c.values()) for c in (cells, mean))
    outcome = combine(cells.values())
    lines = [
        f"OH/BN below Lloyd after {steps} steps in {beat} of {len(cells)} (n, embedding) cases on the paper's "
        f"statistic (geometric mean over tasks), 95% intervals ({tally(cells.values())}); paper: all -> {outcome}",
        f"On the mean ratio over tasks (stricter): {mean_beat} of {len(mean)} ({tally(mean.values())})",
    ]
    if train_n in points and len(points) > 1:  # how the other lengths move the ratio from the training length
        reference = final.index[points.index(train_n)]
        lines.append(_change_line(samples, [row for row in final.index if row != reference], reference,
                                  f"Relative to the training length ({reference}), OH/BN's final geometric mean"))
    value = (f"OH/BN below Lloyd in {beat} of {len(cells)} (n, embedding) cases on the paper's statistic (geometric "
             f"mean over tasks, 95% intervals; {tally(cells.values())}), {mean_beat} of {len(mean)} on the mean "
             f"ratio, n = {points[0]} to {points[-1]} for training n = {train_n}")
    return Finding(value, outcome, check="OH and BN below Lloyd at every number of points on the paper's statistic "
                                         "(Figure 12's mean log loss): each 95% interval over tasks and seeds of the "
                                         "geometric mean ratio to Lloyd below 1", report="\n".join(lines),
                   uncertainty=tally(cells.values()))
