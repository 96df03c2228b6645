"""Chapter 10 (``book/10_multistep.ipynb``): a one-step layer used for many steps (Figure 6, Appendix C).

The trajectories are the paper room's (:func:`~kmtrf_core.evaluate.center_trajectory`,
:func:`~kmtrf_core.evaluate.evaluate_models`); the layers are the catalog's
Section 4 layers (group ``section4_schemes``). This module reads the table:

* :func:`multistep_summary`: per layer and mode, the loss after step 1 and after ``T``;
* :func:`multistep_findings`: the verdicts of ``multistep_naive`` and ``multistep_reembed``.
"""

from __future__ import annotations

import pandas as pd

from ..evaluate import final_ratios
from .claims import Finding, below_finding, verdict
from .plotting import run_label

__all__ = ["multistep_findings", "multistep_summary"]


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


def multistep_findings(summary, steps: int, samples: dict) -> tuple[Finding, Finding]:
    """Figure 6's three statements, measured on :func:`multistep_summary` (chapter 10).

    (i) naive iteration ends worse after ``steps`` steps than after step 1 for
    every configuration; (ii) re-embedding keeps improving after step 1; (iii)
    OH/BN with re-embedding beat Lloyd at ``steps``: each one's 95% interval of
    the ratio to Lloyd over tasks and seeds entirely below 1
    (:func:`~kmtrf_core.book.claims.below_finding`). NA models are labelled ``NA...``.

    Parameters
    ----------
    summary : pandas.DataFrame
        :func:`multistep_summary`.
    steps : int
        ``T``.
    samples : dict
        OH/BN model label (``"OH:L2"``) -> per-task ratios to Lloyd after ``T``
        re-embedded steps ``(S, B)`` (:func:`~kmtrf_core.book.heldout.task_ratios`).

    Returns
    -------
    naive : Finding
        Statement (i), for the claim ``multistep_naive``.
    reembed : Finding
        Statements (ii) and (iii), for ``multistep_reembed``: ``"partly"``
        unless both have the same verdict.

    Examples
    --------
    >>> import numpy as np
    >>> summary = pd.DataFrame({"model": ["OH:L2", "NA:L2"] * 2,
    ...     "mode": ["naive"] * 2 + ["reembed"] * 2,
    ...     "improves_after_step1": [False, False, True, True],
    ...     "ratio_to_lloyd_T": [50.0, 60.0, 0.9, 1.2], "diverged": [0.5, 0.0, 0.0, 0.0]})
    >>> samples = {"OH:L2": 0.9 + 0.02 * np.random.default_rng(0).standard_normal((2, 64))}
    >>> naive, reembed = multistep_findings(summary, 20, samples)
    >>> naive.value, naive.verdict
    ('2 of 2 configurations end worse after 20 steps than after step 1', 'reproduced')
    >>> print(reembed.report.splitlines()[0])
    (ii) re-embedding: 2 of 2 configurations keep improving after step 1 -> reproduced
    >>> reembed.verdict
    'reproduced'
    """
    naive = summary[summary["mode"] == "naive"]
    reembed = summary[summary["mode"] == "reembed"]
    worse_naive = int((~naive.improves_after_step1).sum())
    better = int(reembed.improves_after_step1.sum())
    beat = below_finding(samples, f"OH/BN loss / Lloyd's after {steps} re-embedded steps")
    v_naive = verdict(worse_naive, len(naive))
    v_improve, v_beat = verdict(better, len(reembed)), beat.verdict
    overflow = int((naive.diverged > 0).sum())
    naive_text = (f"{worse_naive} of {len(naive)} configurations end worse after {steps} steps "
                  f"than after step 1")
    naive_finding = Finding(
        naive_text, v_naive, check="every configuration ends worse after T naive steps than after step 1",
        report=f"(i) naive iteration: {naive_text} ({overflow} overflow on some tasks) -> {v_naive}")
    report = (f"(ii) re-embedding: {better} of {len(reembed)} configurations keep improving "
              f"after step 1 -> {v_improve}\n"
              f"(iii) OH/BN with re-embedding beat Lloyd at T={steps}: {beat.report}")
    reembed_finding = Finding(
        f"{better} of {len(reembed)} keep improving; {beat.value}",
        v_improve if v_improve == v_beat else "partly",
        check="every configuration keeps improving after step 1 with re-embedding, and OH/BN end below Lloyd "
              "(95% interval below 1)",
        report=report, uncertainty=beat.uncertainty)
    return naive_finding, reembed_finding
