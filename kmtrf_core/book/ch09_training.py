"""Chapter 9 (``book/09_training.ipynb``): Figure 2, the Appendix F ablations and their verdicts.

The training loop is the training room's (:mod:`kmtrf_core.training`) and the
runs are the catalog's (:mod:`kmtrf_core.book.catalog`); this module reads them:

* :func:`ablation`: one catalog group over one more field, its figure
  (:func:`~kmtrf_core.book.plotting.six_curve_figure`), its convergence table
  and its time, as an :class:`Ablation`;
* :func:`figure2_claims`: the claims of Section 3 about Figure 2, checked
  against two convergence summaries (a :func:`~kmtrf_core.book.claims.claims_table`);
* :func:`learned_step_finding`, :func:`convergence_finding`: the verdicts of
  the claims ``learned_step`` and ``oh_faster_convergence``.

The chapter's section on the plateau reads :mod:`kmtrf_core.book.ch09_plateau`.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

import matplotlib.pyplot as plt  # noqa: F401  (the doctests close their figures)
import numpy as np
import pandas as pd

from ..training import TrainConfig, convergence_summary  # noqa: F401  (TrainConfig: the doctests)
from ..validation import check_int, check_table
from .claims import Finding, below_finding, claims_table
from .groups import SIX_CURVES, RunGroup
from .plotting import six_curve_figure
from .timing import Stopwatch, timed
from .uncertainty import combine

__all__ = ["Ablation", "ablation", "convergence_finding", "figure2_claims", "learned_step_finding"]


@dataclass
class Ablation:
    """What :func:`ablation` returns; shows as its summary line and its table in a notebook.

    Attributes
    ----------
    field : str
        The swept :class:`~kmtrf_core.training.TrainConfig` field.
    history : pandas.DataFrame
        The sweep's tidy history (with ``diverged``).
    summary : pandas.DataFrame
        :func:`~kmtrf_core.training.convergence_summary` by ``field`` and the curve columns.
    table : pandas.DataFrame
        The final relative validation loss, one row per value of ``field``,
        one column per curve, rounded to 3 digits.
    diverged : pandas.Series
        Per configuration, whether any of its seeds diverged.
    figure : matplotlib.figure.Figure
        The :func:`six_curve_figure` of the sweep.
    clock : Stopwatch
        How long the sweep, the figure and the summary took.

    Examples
    --------
    >>> import os, tempfile
    >>> from unittest import mock
    >>> base = TrainConfig(d=2, k=3, n=12, steps=2, batch=2, val_tasks=2, val_every=1)
    >>> group = RunGroup("demo", base, {"tau": [1.0], "scheme": ["bn"], "omega": ["l2"]}, "9", "a test")
    >>> with tempfile.TemporaryDirectory() as folder, mock.patch.dict(os.environ, {"KMTRF_CACHE": folder}):
    ...     result = ablation(group)
    >>> result.line.startswith("1 configurations in"), list(result.table.index)
    (True, [1.0])
    >>> plt.close(result.figure)
    """

    field: str
    history: pd.DataFrame
    summary: pd.DataFrame
    table: pd.DataFrame
    diverged: pd.Series
    figure: object
    clock: Stopwatch

    @property
    def line(self) -> str:
        """``"12 configurations in 44 s; diverged: 0"``."""
        return f"{len(self.diverged)} configurations in {self.clock}; diverged: {int(self.diverged.sum())}"

    def __repr__(self) -> str:
        return f"{self.line}\n\n{self.table.to_string()}"

    def _repr_html_(self) -> str:
        table = self.table._repr_html_() or self.table.to_html()
        return f"<p>{self.line}</p>\n{table}"


def ablation(group: RunGroup, *, title: str = "", window: int = 10, note: str = "") -> Ablation:
    """One catalog group over one more field, with the six curves: its figure and summary (Appendix F; chapter 9).

    The group's runs (:meth:`~kmtrf_core.book.catalog.RunGroup.runs`, a
    divergence recorded instead of stopping); their :func:`six_curve_figure`
    with one panel per value of the group's swept field, captioned with
    ``title``, the sizes, the budget rule and ``note``; their
    :func:`~kmtrf_core.training.convergence_summary`; all timed with
    :func:`~kmtrf_core.book.timing.timed`.

    Parameters
    ----------
    group : RunGroup
        From :func:`~kmtrf_core.book.catalog.book_catalog`, e.g. ``catalog["ablation_tau"]``.
    title : str
        The start of the caption, e.g. ``"Figure 10"``.
    window : int
        Running-mean window of the training loss.
    note : str
        The end of the caption, e.g. the profile's ``describe()``.

    Returns
    -------
    Ablation
        The figure is drawn but not shown: a chapter calls ``plt.show()``.

    Examples
    --------
    >>> import os, tempfile
    >>> from unittest import mock
    >>> base = TrainConfig(d=2, k=3, n=12, steps=2, batch=2, val_tasks=2, val_every=1)
    >>> group = RunGroup("demo", base, {"tau": [1.0, 0.1], "scheme": ["oh", "bn"]}, "9", "a test")
    >>> with tempfile.TemporaryDirectory() as folder, mock.patch.dict(os.environ, {"KMTRF_CACHE": folder}):
    ...     result = ablation(group)
    >>> result.table.columns.tolist(), result.table.index.tolist()
    (['bn', 'oh'], [0.1, 1.0])
    >>> result.line.startswith("4 configurations in "), result.line.endswith("; diverged: 0")
    (True, True)
    >>> plt.close(result.figure)
    """
    field = group.field
    if field in SIX_CURVES:
        raise ValueError(f"group {group.name!r} varies only {sorted(group.grid)}: an ablation needs a field "
                         "besides the curves (scheme, omega)")
    values = group.grid[field]
    curves = [name for name in group.grid if name != field]
    base = group.base
    with timed() as clock:
        history = group.runs(on_diverge="record").history
        caption = (f"{title}; n={base.n}, k={base.k}, d={base.d}, tau={base.tau}, "
                   f"seeds {list(base.seeds)}, {group.rule}; {note}")
        figure = six_curve_figure(history, field, values, caption, window=window, by=tuple(curves))
        summary = convergence_summary(history, by=(field, *curves))
        diverged = history.groupby([field, *curves]).diverged.any()
    levels = list(range(1, 1 + len(curves)))
    table = summary["final_val_relative"].unstack(levels).round(3)
    return Ablation(field=field, history=history, summary=summary, table=table, diverged=diverged,
                    figure=figure, clock=clock)


FIGURE2_COLUMNS = ("claim (Section 3, Fig. 2)", "our numbers", "holds here")


def figure2_claims(tau_summary: pd.DataFrame, d_summary: pd.DataFrame, taus=None) -> pd.DataFrame:
    """The claims of Section 3 about Figure 2, checked on two convergence summaries (chapter 9).

    Seven rows: at the smallest ``tau``, L2 beats one Lloyd step with OH and
    with BN, and NA does worse than both; at the largest ``tau`` L2
    generalizes better than NE; L2 reaches a lower training loss than NE at
    every ``tau``; at the smallest ``d`` OH converges in fewer steps than BN
    (L2), and the difference shrinks at the largest ``d``.

    Parameters
    ----------
    tau_summary : pandas.DataFrame
        :func:`~kmtrf_core.training.convergence_summary` of Figure 2(a), by
        ``("tau", "scheme", "omega")`` with schemes ``oh, bn, na`` and omegas ``ne, l2``.
    d_summary : pandas.DataFrame
        The same for Figure 2(b), by ``("d", "scheme", "omega")``.
    taus : sequence, optional
        The order of the per-``tau`` rows; default the summary's order.

    Returns
    -------
    pandas.DataFrame
        Columns ``claim (Section 3, Fig. 2)``, ``our numbers`` and
        ``holds here`` (bool), one row per claim.

    Examples
    --------
    >>> index = pd.MultiIndex.from_product([[0.1, 1.0], ["bn", "na", "oh"], ["l2", "ne"]],
    ...                                    names=["tau", "scheme", "omega"])
    >>> tau_summary = pd.DataFrame({"final_val_relative": np.linspace(0.8, 1.3, 12),
    ...                             "final_train_loss": [1.0, 2.0] * 6}, index=index)
    >>> d_summary = pd.DataFrame({"steps_to_converge": [20.0] * 6 + [10.0] * 6},
    ...                          index=index.set_names("d", level=0).set_levels([4, 16], level=0))
    >>> claims = figure2_claims(tau_summary, d_summary)
    >>> claims["holds here"].tolist()
    [True, False, True, True, True, False, False]
    >>> claims.loc[0, "our numbers"]
    'tau=0.1: OH 0.982, BN 0.800'
    """
    final = tau_summary["final_val_relative"]
    train_loss = tau_summary["final_train_loss"]
    taus = list(dict.fromkeys(tau_summary.index.get_level_values(0))) if taus is None else list(taus)
    small_tau, big_tau = min(taus), max(taus)
    oh, bn = final.loc[(small_tau, "oh", "l2")], final.loc[(small_tau, "bn", "l2")]
    na = final.loc[(small_tau, "na", "l2")]
    rows = [
        ("L2 at the smallest tau beats one Lloyd step (OH and BN)",
         f"tau={small_tau}: OH {oh:.3f}, BN {bn:.3f}", oh < 1 and bn < 1),
        ("NA does worse than OH/BN (L2, smallest tau)", f"NA {na:.3f}", na > max(oh, bn)),
    ]
    ne_big = final.loc[(big_tau, slice(None), "ne")].min()
    l2_big = final.loc[(big_tau, slice(None), "l2")].min()
    rows.append((f"at tau={big_tau}, L2 generalizes better than NE (best of OH/BN/NA)",
                 f"L2 {l2_big:.3f} vs NE {ne_big:.3f}", l2_big < ne_big))
    for tau in taus:
        l2 = train_loss.loc[(tau, slice(None), "l2")].to_numpy()
        ne = train_loss.loc[(tau, slice(None), "ne")].to_numpy()
        rows.append((f"L2 reaches a lower training loss than NE (tau={tau}, all embeddings)",
                     f"L2 {np.round(l2, 3).tolist()} vs NE {np.round(ne, 3).tolist()}",
                     (l2 < ne).all()))
    speed = d_summary["steps_to_converge"]
    ds = d_summary.index.get_level_values(0)
    d_small, d_large = min(ds), max(ds)
    oh_small, bn_small = speed.loc[(d_small, "oh", "l2")], speed.loc[(d_small, "bn", "l2")]
    gap_small = bn_small - oh_small
    gap_large = speed.loc[(d_large, "bn", "l2")] - speed.loc[(d_large, "oh", "l2")]
    rows.append((f"OH converges faster than BN at d={d_small} (L2, steps to 90%)",
                 f"OH {oh_small:.0f} vs BN {bn_small:.0f}", gap_small > 0))
    rows.append((f"the OH/BN difference shrinks from d={d_small} to d={d_large}",
                 f"BN - OH: {gap_small:.0f} steps -> {gap_large:.0f} steps",
                 abs(gap_large) < abs(gap_small)))
    return claims_table(rows, columns=FIGURE2_COLUMNS, index=False)


def learned_step_finding(samples: dict, report: pd.DataFrame, tau: float) -> Finding:
    """Section 3: at ``tau``, do the trained OH and BN layers (L2) beat one Lloyd step on held-out tasks?

    Each embedding is judged on the 95% interval of its ratio to Lloyd over held-out tasks and
    seeds (:func:`~kmtrf_core.book.claims.below_finding`): below 1 only when the whole interval is.

    Parameters
    ----------
    samples : dict
        ``"oh"`` / ``"bn"`` -> per-task ratios to one Lloyd step ``(S, B)``
        (:func:`~kmtrf_core.evaluate.relative_loss` of the Figure 2(a) layers on held-out tasks).
    report : pandas.DataFrame
        :meth:`~kmtrf_core.book.groups.RunGroup.report` of the Figure 2(a) runs (steps trained, why stopped).
    tau : float
        The penalty read (the smallest of Figure 2(a)).

    Returns
    -------
    Finding
        For the claim ``learned_step``: one check per embedding.

    Examples
    --------
    >>> index = pd.MultiIndex.from_tuples([(0.1, "oh", "l2"), (0.1, "bn", "l2")], names=["tau", "scheme", "omega"])
    >>> report = pd.DataFrame({"steps": [3100, 5000], "stopped": ["beat Lloyd, flat", "cap"]}, index=index)
    >>> noise = 0.05 * np.random.default_rng(0).standard_normal((3, 128))
    >>> finding = learned_step_finding({"oh": 0.92 + noise, "bn": 1.03 + noise}, report, 0.1)
    >>> finding.verdict, finding.budget
    ('partly', 'OH 3100 steps (beat Lloyd, flat), BN 5000 steps (cap)')
    >>> finding.value.split(":")[0]
    'held-out ratio to one Lloyd step, L2, tau = 0.1'
    """
    budget = ", ".join(f"{s.upper()} {int(report.loc[(tau, s, 'l2'), 'steps'])} steps"
                       + (f" ({report.loc[(tau, s, 'l2'), 'stopped']})" if "stopped" in report else "")
                       for s in ("oh", "bn"))
    finding = below_finding({"OH": samples["oh"], "BN": samples["bn"]},
                            f"held-out ratio to one Lloyd step, L2, tau = {tau}")
    return dataclasses.replace(finding, report=f"trained: {budget}; {finding.report}", budget=budget)


def convergence_finding(drops: pd.DataFrame, margin: int) -> Finding:
    """Section 3: does OH leave the plateau (beat one Lloyd step) earlier than BN, in every configuration?

    Read on the plateau table (:func:`~kmtrf_core.book.ch09_plateau.drop_table`): per row, OH is
    faster when its first validation step below one Lloyd step comes at least ``margin`` steps
    before BN's (or BN never gets there), slower when it comes ``margin`` or more after, and the row
    is inconclusive in between or when neither drops. The verdict combines the rows
    (:func:`~kmtrf_core.book.uncertainty.combine`).

    Parameters
    ----------
    drops : pandas.DataFrame
        The plateau table, with columns ``("below_lloyd_at", "OH")`` and ``("below_lloyd_at", "BN")``.
    margin : int
        Steps (at least the validation interval: a drop is only seen at validation steps).

    Returns
    -------
    Finding
        For the claim ``oh_faster_convergence``.

    Examples
    --------
    >>> columns = pd.MultiIndex.from_product([["below_lloyd_at"], ["BN", "OH"]])
    >>> drops = pd.DataFrame([[2700.0, 1800.0], [2000.0, 1900.0], [float("nan"), 3000.0]],
    ...                      index=["base", "d=8", "lr=0.03"], columns=columns)
    >>> finding = convergence_finding(drops, margin=200)
    >>> finding.verdict, finding.value
    ('partly', 'first step below one Lloyd step, OH vs BN: base 1800 vs 2700; d=8 1900 vs 2000; lr=0.03 3000 vs never (margin 200 steps)')
    >>> finding.report
    'OH faster in 2 of 3 configurations, 1 inconclusive (within 200 steps or neither drops) -> partly'
    """
    check_table(drops, "drops", [("below_lloyd_at", "OH"), ("below_lloyd_at", "BN")])
    check_int(margin, "margin")
    outcomes, parts = [], []
    for label, row in drops.iterrows():
        oh, bn = row[("below_lloyd_at", "OH")], row[("below_lloyd_at", "BN")]
        if math.isnan(oh) and math.isnan(bn):
            outcome = "inconclusive"
        elif math.isnan(bn) or (not math.isnan(oh) and bn - oh >= margin):
            outcome = "reproduced"
        elif math.isnan(oh) or oh - bn >= margin:
            outcome = "not reproduced"
        else:
            outcome = "inconclusive"
        outcomes.append(outcome)
        parts.append(f"{label} {_step(oh)} vs {_step(bn)}")
    overall = combine(outcomes)
    faster, slower, open_ = (outcomes.count(v) for v in ("reproduced", "not reproduced", "inconclusive"))
    tail = ", ".join(t for t in (f"{slower} slower" if slower else "",
                                 f"{open_} inconclusive (within {margin} steps or neither drops)" if open_ else "")
                     if t)
    return Finding(f"first step below one Lloyd step, OH vs BN: {'; '.join(parts)} (margin {margin} steps)", overall,
                   check=f"in every configuration of the plateau table, OH below one Lloyd step at least {margin} "
                         "steps before BN",
                   report=f"OH faster in {faster} of {len(outcomes)} configurations"
                          + (f", {tail}" if tail else "") + f" -> {overall}")


def _step(value) -> str:
    return "never" if math.isnan(value) else f"{value:.0f}"
