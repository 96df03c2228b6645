"""Chapter 10 (``book/10_multistep.ipynb``): a one-step layer used for many steps (Figure 6, Appendix C).

The trajectories are the paper room's (:func:`~kmtrf_core.evaluate.center_trajectory`,
:func:`~kmtrf_core.evaluate.evaluate_models`); the layers are the catalog's
Section 4 layers (group ``section4_schemes``). This module reads the table:

* :func:`multistep_summary`: per layer and mode, the loss after step 1 and after ``T``, and
  whether it keeps improving after step 1 (on a 95% interval);
* :func:`step_changes`: per task, the loss after step 1 and after ``T`` (the intervals);
* :func:`multistep_findings`: the verdicts of ``multistep_naive`` and ``multistep_reembed``.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import torch

from ..evaluate import final_ratios, lloyd_loss_trajectory, trajectory_losses
from ..tasks import sample_tasks  # noqa: F401  (the doctests)
from .claims import Finding
from .comparisons import MARGIN, below_finding
from .plotting import run_label
from .uncertainty import combine, compare, tally

__all__ = ["multistep_findings", "multistep_summary", "step_changes"]


def multistep_summary(table, steps: int | None = None, changes: dict | None = None,
                      margin: float = MARGIN) -> pd.DataFrame:
    """Per model and mode, the loss after step 1 and after ``steps`` steps (Figure 6, chapter 10).

    Parameters
    ----------
    table : pandas.DataFrame
        From :func:`~kmtrf_core.evaluate.evaluate_models`, models labelled
        ``(scheme, omega)``.
    steps : int, optional
        The last step ``T``; default the last step in the table.
    changes : dict, optional
        :func:`step_changes` of the same trajectories, ``(mode, label)`` ->
        ``(after step 1, after T)``: with them each row says whether the loss
        keeps improving after step 1, decided on the paired 95% interval over
        tasks and seeds (:func:`~kmtrf_core.book.uncertainty.compare`). They are
        read at the trajectories' last step, so ``steps`` must then be the
        table's last step.
    margin : float
        How much lower (in units of one Lloyd step's loss) the loss after ``T``
        must be to count as an improvement.

    Returns
    -------
    pandas.DataFrame
        One row per (model, mode): ``model`` (label), ``mode``, ``loss_step1``
        and ``loss_stepT`` (medians over members, for reading, not for a
        verdict), ``ratio_to_lloyd_T`` (median ratio to Lloyd at ``T``) and
        ``diverged`` (fraction of diverged tasks at ``T``). With ``changes``
        also ``stepT_minus_step1`` (the mean over tasks of the loss after ``T``
        minus the loss after step 1, with its 95% interval and the margin) and
        ``improves_after_step1``: ``"yes"`` when that interval lies entirely
        below ``-margin``, ``"no"`` when entirely above it, else
        ``"inconclusive"``.

    Examples
    --------
    >>> table = pd.DataFrame({"model": [("bn", "l2")] * 4, "member": [0] * 4,
    ...     "test": "normal", "mode": ["naive", "naive", "reembed", "reembed"],
    ...     "step": [1, 2, 1, 2], "loss": [4.0, 8.0, 4.0, 2.0],
    ...     "lloyd_loss": [3.0, 2.5, 3.0, 2.5], "ratio": [4 / 3, 3.2, 4 / 3, 0.8],
    ...     "diverged": 0.0})
    >>> multistep_summary(table)[["model", "mode", "ratio_to_lloyd_T"]].values.tolist()
    [['BN:L2', 'naive', 3.2], ['BN:L2', 'reembed', 0.8]]
    >>> noise = 0.05 * np.random.default_rng(0).standard_normal((1, 64))
    >>> changes = {("naive", "BN:L2"): (1 + noise, 2 + noise),
    ...            ("reembed", "BN:L2"): (1 + noise, 0.995 + noise[:, ::-1])}
    >>> multistep_summary(table, changes=changes).improves_after_step1.tolist()
    ['no', 'inconclusive']
    """
    last = int(table.step.max())
    if changes is not None and steps not in (None, last):
        raise ValueError(f"steps must be the table's last step {last} (or None) when changes are given, "
                         f"got {steps!r}")
    steps = last if steps is None else steps
    ratios = final_ratios(table, step=steps).reset_index()
    rows = []
    for (model, mode), part in table.groupby(["model", "mode"], sort=False):
        wide = part.pivot_table(index="step", columns="member", values="loss", aggfunc="first")
        mine = ratios[(ratios.model == model) & (ratios["mode"] == mode)]
        row = dict(model=run_label(model), mode=mode, loss_step1=wide.loc[1].median(),
                   loss_stepT=wide.loc[steps].median(), ratio_to_lloyd_T=float(mine["median"].iloc[0]),
                   diverged=float(part[part.step == steps].diverged.mean()))
        if changes is not None:
            if (mode, row["model"]) not in changes:
                raise ValueError(f"changes must hold every (mode, model label) of the table, missing "
                                 f"{(mode, row['model'])!r}")
            first, after_T = changes[(mode, row["model"])]
            outcome = compare(after_T, first, margin)  # paired: the same tasks and seeds
            row.update(stepT_minus_step1=outcome.text(), improves_after_step1=_ANSWERS[outcome.verdict])
        rows.append(row)
    return pd.DataFrame(rows)


_ANSWERS = {"reproduced": "yes", "not reproduced": "no", "inconclusive": "inconclusive"}


def step_changes(trajectories: dict, X: torch.Tensor, C: torch.Tensor) -> dict:
    """Per task, each trajectory's k-means loss after step 1 and after its last step (Figure 6, chapter 10).

    Both are in units of one Lloyd step's loss on the same task (the scale of Eq. 20), so a
    difference of 0.01 is 1% of what one Lloyd step leaves; the samples of
    :func:`multistep_findings`' intervals.

    Parameters
    ----------
    trajectories : dict
        ``(test, mode, label)`` -> centers ``(T + 1, (S,) B, k, d)`` from ``C``, as
        :func:`~kmtrf_core.evaluate.evaluate_models` returns them with ``return_trajectories``
        (one test).
    X, C : torch.Tensor
        That test's tasks.

    Returns
    -------
    dict
        ``(mode, model label)`` (``("naive", "OH:L2")``) -> ``(after_first, after_last)``, float64
        arrays ``(S, B)``; a task whose centers overflowed is ``inf``.

    Examples
    --------
    >>> from kmtrf_core.lloyd import lloyd_trajectory
    >>> X, C = sample_tasks(5, 20, 2, 3, generator=0, dtype=torch.float64)
    >>> first, last = step_changes({("normal", "reembed", ("bn", "l2")): lloyd_trajectory(X, C, 3).centers},
    ...                            X, C)[("reembed", "BN:L2")]
    >>> first.shape, bool(np.allclose(first, 1.0)), bool((last <= first + 1e-12).all())
    ((1, 5), True, True)
    """
    if not isinstance(trajectories, dict) or not trajectories:
        raise ValueError("trajectories must be a non-empty dict (test, mode, label) -> centers")
    keys = list(trajectories)
    if not all(isinstance(key, tuple) and len(key) == 3 for key in keys) or len({key[0] for key in keys}) != 1:
        raise ValueError(f"trajectories must be keyed (test, mode, label) for one test, got keys {keys[:3]!r}")
    labels = [(mode, run_label(label)) for _, mode, label in keys]
    if len(set(labels)) != len(labels):
        raise ValueError(f"trajectories must give distinct (mode, model label) pairs, got {labels}")
    for key, centers in trajectories.items():
        if not isinstance(centers, torch.Tensor) or centers.dim() not in (4, 5) or centers.shape[-3:] != C.shape:
            raise ValueError(f"trajectories[{key!r}] must be centers (T + 1, (S,) B, k, d) for tasks of shape "
                             f"{tuple(C.shape)}")
    steps = {trajectories[key].shape[0] - 1 for key in keys}
    if len(steps) != 1 or min(steps) < 1:
        raise ValueError(f"trajectories must all have the same number of steps, at least 1; got {sorted(steps)}")
    steps = steps.pop()
    lloyd_1 = lloyd_loss_trajectory(X, C, 1)[1].double().cpu().numpy()  # (B,): one Lloyd step's loss
    out = {}
    for key, label in zip(keys, labels):
        centers = trajectories[key]
        with torch.no_grad():
            losses = trajectory_losses(X, centers[[1, steps]].to(X.dtype))  # (2, (S,) B); overflow: inf
        losses = losses.double().cpu().numpy().reshape(2, -1, X.shape[0]) / lloyd_1
        out[label] = (losses[0], losses[1])
    return out


def multistep_findings(changes: dict, steps: int, samples: dict, margin: float = MARGIN) -> tuple[Finding, Finding]:
    """Figure 6's three statements, each decided on 95% intervals over tasks and seeds (chapter 10).

    (i) naive iteration ends worse after ``steps`` steps than after step 1 for
    every configuration; (ii) re-embedding keeps improving after step 1; both
    on the paired interval of the difference of :func:`step_changes`' losses, by
    at least ``margin`` of one Lloyd step's loss. (iii) OH/BN with re-embedding
    beat Lloyd at ``steps``: each one's 95% interval entirely below 1, decided on
    the paper's statistic, the geometric mean over tasks of the ratio to Lloyd
    (Figure 6 plots the mean log loss; :func:`~kmtrf_core.book.comparisons.below_finding`
    with ``statistic="geometric"``). The count on the mean ratio, which a few bad
    tasks can lift above 1, is reported beside it.

    Parameters
    ----------
    changes : dict
        :func:`step_changes`: ``(mode, label)`` -> ``(after step 1, after T)``, ``(S, B)`` each,
        for the modes ``"naive"`` and ``"reembed"``.
    steps : int
        ``T``.
    samples : dict
        OH/BN model label (``"OH:L2"``) -> per-task ratios to Lloyd after ``T``
        re-embedded steps ``(S, B)`` (:func:`~kmtrf_core.book.heldout.task_ratios`).
    margin : float
        How much worse (i) or better (ii) the last step must be, in units of one Lloyd step's loss.

    Returns
    -------
    naive : Finding
        Statement (i), for the claim ``multistep_naive``.
    reembed : Finding
        Statements (ii) and (iii), for ``multistep_reembed``: their two verdicts combined
        (:func:`~kmtrf_core.book.uncertainty.combine`).

    Examples
    --------
    >>> noise = 0.02 * np.random.default_rng(0).standard_normal((2, 64))
    >>> changes = {("naive", "OH:L2"): (1 + noise, 40 + noise), ("naive", "NA:L2"): (1 + noise, np.inf + noise),
    ...            ("reembed", "OH:L2"): (1 + noise, 0.7 + noise), ("reembed", "NA:L2"): (1.2 + noise, 0.9 + noise)}
    >>> naive, reembed = multistep_findings(changes, 20, {"OH:L2": 0.9 + noise})
    >>> naive.value, naive.verdict
    ('2 of 2 configurations end worse after 20 steps than after step 1 (95% intervals, margin 0.01)', 'reproduced')
    >>> print(reembed.report.splitlines()[0])
    (ii) re-embedding: 2 of 2 configurations keep improving after step 1 (95% intervals, margin 0.01) -> reproduced
    >>> reembed.verdict
    'reproduced'
    >>> print(reembed.report.splitlines()[1])  # doctest: +NORMALIZE_WHITESPACE
    (iii) OH/BN with re-embedding beat Lloyd at T=20 on the paper's statistic (geometric mean over tasks):
    1 of 1 below 1 (95% intervals) -> reproduced; on the mean ratio (stricter): 1 of 1 below 1 (1 below,
    0 above, 0 inconclusive)
    """
    modes = {mode for mode, _ in changes}
    if not {"naive", "reembed"} <= modes:
        raise ValueError(f"changes must hold the modes 'naive' and 'reembed', got {sorted(modes)}")
    worse = {label: compare(first, last, margin) for (mode, label), (first, last) in changes.items()
             if mode == "naive"}
    better = {label: compare(last, first, margin) for (mode, label), (first, last) in changes.items()
              if mode == "reembed"}
    beat = below_finding(samples, f"OH/BN loss / Lloyd's after {steps} re-embedded steps", statistic="geometric")
    mean = {label: compare(values, 1.0) for label, values in samples.items()}  # ours, stricter: beside
    on_mean = f"{_count(mean)} of {len(mean)} below 1 ({tally(c.verdict for c in mean.values())})"
    v_naive, v_improve, v_beat = combine(c.verdict for c in worse.values()), \
        combine(c.verdict for c in better.values()), beat.verdict
    overflow = sum(bool(np.isinf(last).any()) for (mode, _), (_, last) in changes.items() if mode == "naive")
    rule = f"(95% intervals, margin {margin:g})"
    naive_text = (f"{_count(worse)} of {len(worse)} configurations end worse after {steps} steps "
                  f"than after step 1 {rule}")
    naive_finding = Finding(
        naive_text, v_naive,
        check=f"every configuration's loss after T naive steps above its loss after step 1 by at least {margin:g} "
              "of one Lloyd step's loss, the 95% interval of the difference entirely above",
        report=f"(i) naive iteration: {naive_text} ({overflow} overflow on some tasks) -> {v_naive}",
        uncertainty="; ".join(f"{label} step 1 - step T {c.text()}" for label, c in worse.items()))
    improve_text = f"{_count(better)} of {len(better)} configurations keep improving after step 1 {rule}"
    report = (f"(ii) re-embedding: {improve_text} -> {v_improve}\n"
              f"(iii) OH/BN with re-embedding beat Lloyd at T={steps} on the paper's statistic (geometric mean "
              f"over tasks): {beat.report}; on the mean ratio (stricter): {on_mean}")
    reembed_finding = Finding(
        f"{_count(better)} of {len(better)} keep improving; {beat.value}; on the mean ratio {on_mean}",
        combine([v_improve, v_beat]),
        check=f"every configuration's loss after T re-embedded steps below its loss after step 1 by at least "
              f"{margin:g} of one Lloyd step's loss (95% interval), and OH/BN end below Lloyd on the paper's "
              "statistic, the geometric mean over tasks of the ratio to Lloyd (Figure 6's mean log loss; 95% "
              "interval below 1)",
        report=report,
        uncertainty="; ".join([f"{label} step T - step 1 {c.text()}" for label, c in better.items()]
                              + ([beat.uncertainty] if beat.uncertainty else [])
                              + [f"{label} mean ratio - 1 {c.text()}" for label, c in mean.items()]))
    return naive_finding, reembed_finding


def _count(outcomes: dict) -> int:
    return sum(c.verdict == "reproduced" for c in outcomes.values())
