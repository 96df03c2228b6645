"""Chapter 9 (``book/09_training.ipynb``): Figure 2, the Appendix F ablations and their verdicts.

The training loop is the training room's (:mod:`kmtrf_core.training`) and the
runs are the catalog's (:mod:`kmtrf_core.book.catalog`); this module reads them:

* :func:`ablation`: one catalog group over one more field, its figure
  (:func:`~kmtrf_core.book.plotting.six_curve_figure`), its convergence table
  and its time, as an :class:`Ablation`;
* :func:`figure2_claims`: the claims of Section 3 about Figure 2, each with a
  verdict on intervals over held-out tasks (:func:`figure2_samples`) or, for
  convergence speed, a margin in steps;
* :func:`learned_step_finding`, :func:`convergence_finding`: the verdicts of
  the claims ``learned_step`` and ``oh_faster_convergence``;
* :func:`stability_table`, :func:`stability_totals`: how many runs of each of
  the chapter's groups diverged, and whether they clipped their gradients; the
  totals over distinct runs.

The chapter's section on the plateau reads :mod:`kmtrf_core.book.ch09_plateau`.
"""

from __future__ import annotations

import dataclasses
import html
import math
from dataclasses import dataclass

import matplotlib.pyplot as plt  # noqa: F401  (the doctests close their figures)
import numpy as np  # noqa: F401  (the doctests)
import pandas as pd

import torch

from ..evaluate import center_trajectory
from ..lloyd import kmeans_objective, lloyd
from ..objectives import smoothed_kmeans_loss
from ..training import TrainConfig, convergence_summary  # noqa: F401  (TrainConfig: the doctests)
from ..training.runs import cache_key
from ..validation import check_int, check_table
from .claims import Finding
from .comparisons import MARGIN, below_finding
from .groups import SIX_CURVES, RunGroup, Runs
from .plotting import six_curve_figure
from .timing import Stopwatch, timed
from .uncertainty import combine, compare, point_value, range_ahead, range_text, seed_range

__all__ = ["Ablation", "ablation", "convergence_finding", "figure2_claims", "figure2_samples", "learned_step_finding",
           "stability_table", "stability_totals"]


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
    label : str
        What the numbers of ``table`` are (shown above it): the final relative validation loss,
        median over seeds, after how many steps, and what its rows and columns are.

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
    >>> result.label.startswith("final relative validation loss"), result.label.split("median over seeds) ")[1]
    (True, 'after 2 steps; rows: tau, columns: scheme, omega')
    >>> plt.close(result.figure)
    """

    field: str
    history: pd.DataFrame
    summary: pd.DataFrame
    table: pd.DataFrame
    diverged: pd.Series
    figure: object
    clock: Stopwatch
    label: str = ""

    @property
    def line(self) -> str:
        """``"12 configurations in 44 s; diverged: 0"``."""
        return f"{len(self.diverged)} configurations in {self.clock}; diverged: {int(self.diverged.sum())}"

    def __repr__(self) -> str:
        return f"{self.line}\n{self.label}:\n\n{self.table.to_string()}"

    def _repr_html_(self) -> str:
        table = self.table._repr_html_() or self.table.to_html()
        return f"<p>{self.line}</p>\n<p>{html.escape(self.label)}:</p>\n{table}"


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
    # the grid's fields take the grid's values, not the base's: the base's sizes only for the others
    swept = [f"{name} in {list(group.grid[name])}" for name in group.grid if name not in SIX_CURVES]
    fixed = [f"{name}={getattr(base, name)}" for name in ("n", "k", "d", "tau") if name not in group.grid]
    with timed() as clock:
        history = group.runs(on_diverge="record").history
        caption = (f"{title}; {', '.join(swept + fixed)}, "
                   f"seeds {list(base.seeds)}, {group.rule}; {note}")
        figure = six_curve_figure(history, field, values, caption, window=window, by=tuple(curves))
        summary = convergence_summary(history, by=(field, *curves))
        diverged = history.groupby([field, *curves]).diverged.any()
    levels = list(range(1, 1 + len(curves)))
    table = summary["final_val_relative"].unstack(levels).round(3)
    trained = history.groupby([field, *curves]).step.max()  # a diverged run ends early
    after = range_text(trained.min(), trained.max())
    label = ("final relative validation loss (Eq. 20: the layer's k-means loss over one Lloyd step's; "
             f"median over seeds) after {after} steps; rows: {field}, columns: {', '.join(curves)}")
    return Ablation(field=field, history=history, summary=summary, table=table, diverged=diverged,
                    figure=figure, clock=clock, label=label)


FIGURE2_COLUMNS = ("claim (Section 3, Fig. 2)", "our numbers", "verdict")


def figure2_samples(group: RunGroup, X: torch.Tensor, C: torch.Tensor) -> dict:
    """Per held-out task, what every Figure 2(a) layer achieves: the inputs of :func:`figure2_claims`.

    Parameters
    ----------
    group : RunGroup
        The Figure 2(a) group (grid ``tau``, ``scheme``, ``omega``).
    X, C : torch.Tensor
        Held-out tasks ``(B, n, d)``, ``(B, k, d)`` (:func:`~kmtrf_core.book.heldout.eval_tasks`).

    Returns
    -------
    dict
        ``(tau, scheme, omega)`` -> ``{"ratio": (S, B), "loss": (S, B)}`` float64 arrays: the layer's
        k-means loss over one Lloyd step's (Eq. 20, per task), and its own smoothed training loss
        (Eq. 6 at its ``omega`` and ``tau``) over the same Lloyd loss, so that tasks of different
        spread weigh alike.

    Examples
    --------
    >>> import os, tempfile
    >>> from unittest import mock
    >>> from kmtrf_core.book.heldout import eval_tasks
    >>> base = TrainConfig(d=2, k=3, n=12, steps=2, batch=2, val_tasks=2, val_every=1, seeds=(0, 1))
    >>> group = RunGroup("demo", base, {"tau": [0.1], "scheme": ["oh"], "omega": ["ne", "l2"]}, "9", "a test")
    >>> with tempfile.TemporaryDirectory() as folder, mock.patch.dict(os.environ, {"KMTRF_CACHE": folder}):
    ...     samples = figure2_samples(group, *eval_tasks(base, 5))
    >>> sorted(samples), samples[(0.1, "oh", "l2")]["ratio"].shape
    ([(0.1, 'oh', 'l2'), (0.1, 'oh', 'ne')], (2, 5))
    """
    device = X.device
    # loaded (or trained, for a chapter opened alone) before the evaluation, which takes no gradients
    models = [(config, group.run(tau=config.tau, scheme=config.scheme, omega=config.omega).model.to(device))
              for config in group.configs()]
    with torch.no_grad():
        reference = kmeans_objective(X, lloyd(X, C))  # (B,)
        out = {}
        for config, model in models:
            # one step of the layer, in relative_loss's chunks of tasks; both readings use these centers
            centers = center_trajectory(model, X, C, 1)[1].reshape(-1, *C.shape)  # (S, B, k, d)
            points = X.expand(centers.shape[0], *X.shape).flatten(0, 1)
            flat = centers.flatten(0, 1)
            ratio = kmeans_objective(points, flat) / reference.repeat(centers.shape[0])  # Eq. 20 per task
            loss = smoothed_kmeans_loss(points, flat, config.omega, config.tau) / reference.repeat(centers.shape[0])
            out[(config.tau, config.scheme, config.omega)] = {
                "ratio": ratio.double().cpu().numpy().reshape(-1, X.shape[0]),
                "loss": loss.double().cpu().numpy().reshape(-1, X.shape[0])}
    return out


def figure2_claims(samples: dict, d_summary: pd.DataFrame, taus=None, margin: float = MARGIN,
                   steps_margin: int = 200) -> pd.DataFrame:
    """The claims of Section 3 about Figure 2, each with a verdict that states its uncertainty (chapter 9).

    One row per claim (six for two values of ``tau``). All but the last are decided on held-out
    tasks, on the 95% bootstrap interval over tasks and seeds (:mod:`~kmtrf_core.book.uncertainty`):
    at the smallest ``tau`` L2 beats one Lloyd step with OH and with BN (each interval below 1); NA
    does worse than both (paired differences beyond ``margin``); at the largest ``tau`` the best L2 layer generalizes better than the best NE
    layer (one L2 embedding below every NE embedding; which is lowest is never read off points); and,
    per ``tau``, L2 reaches a lower training loss than NE with every embedding. The last, on
    Figure 2(b)'s convergence speed (steps to 90% of the improvement): the OH/BN difference shrinks
    from the smallest ``d`` to the largest, by at least ``steps_margin`` steps over the whole range
    of seeds (a handful of seeds gives no interval; their range stands in for one). Whether OH
    converges faster than BN at all is not a row here: it is the ledger's claim
    ``oh_faster_convergence``, decided by :func:`convergence_finding` on the plateau table, so the
    chapter gives one verdict for it; the last row's numbers show the two ranges at each ``d``.

    Parameters
    ----------
    samples : dict
        :func:`figure2_samples` of the Figure 2(a) layers.
    d_summary : pandas.DataFrame
        :func:`~kmtrf_core.training.convergence_summary` of Figure 2(b) (``steps_to_converge``), by
        ``("d", "scheme", "omega", "seed")``, one row per seed: the speed row compares the ranges
        over seeds (the gap BN - OH over every pair of seeds, at each ``d``).
        Medians over seeds are refused: they alone would decide the order.
    taus : sequence, optional
        The order of the per-``tau`` rows; default the order of ``samples``.
    margin : float
        How far one ratio (or relative loss) must be below the other, beyond the noise.
    steps_margin : int
        How many steps faster counts as faster (at least the validation interval).

    Returns
    -------
    pandas.DataFrame
        Columns ``claim (Section 3, Fig. 2)``, ``our numbers`` (with the intervals) and ``verdict``
        (``reproduced``, ``partly``, ``not reproduced`` or ``inconclusive``).

    Examples
    --------
    >>> rng = np.random.default_rng(0)
    >>> noise = lambda: 0.05 * rng.standard_normal((2, 128))
    >>> index = pd.MultiIndex.from_product([[0.1, 1.0], ["bn", "na", "oh"], ["l2", "ne"]],
    ...                                    names=["tau", "scheme", "omega"])
    >>> level = {"oh": 0.9, "bn": 0.95, "na": 1.2}
    >>> samples = {(t, s, o): {"ratio": level[s] + (0.0 if o == "l2" else 0.1) + noise(),
    ...                        "loss": 1.0 + (0.0 if o == "l2" else 0.5) + noise()} for t, s, o in index}
    >>> per_seed = {4: {"bn": (1900.0, 2100.0), "oh": (1100.0, 1300.0)},  # steps to 90%, seeds 0 and 1
    ...             16: {"bn": (2700.0, 2900.0), "oh": (1100.0, 1300.0)}}
    >>> d_summary = pd.DataFrame(
    ...     [(d, s, o, seed, per_seed[d].get(s, (1500.0, 1500.0))[seed]) for d in (4, 16)
    ...      for s in ("bn", "na", "oh") for o in ("l2", "ne") for seed in (0, 1)],
    ...     columns=["d", "scheme", "omega", "seed", "steps_to_converge"]).set_index(["d", "scheme", "omega", "seed"])
    >>> claims = figure2_claims(samples, d_summary)
    >>> claims["verdict"].tolist()  # the gap grew from 600-1000 steps (d=4) to 1400-1800: no shrink
    ['reproduced', 'reproduced', 'reproduced', 'reproduced', 'reproduced', 'not reproduced']
    >>> claims.loc[0, "our numbers"].startswith("tau=0.1, ratio to one Lloyd step: OH 0.")
    True
    >>> claims.loc[5, "our numbers"]
    'd=4: OH 1100-1300 vs BN 1900-2100; d=16: OH 1100-1300 vs BN 2700-2900; BN - OH: [600, 1000] steps -> [1400, 1800] steps (range over seeds; margin 200 steps)'
    >>> figure2_claims(samples, d_summary.groupby(level=[0, 1, 2]).median())
    Traceback (most recent call last):
    ...
    ValueError: d_summary must have one row per seed (an index level 'seed'), got levels ['d', 'scheme', 'omega']: the speed row compares the ranges over seeds, not medians
    """
    taus = list(dict.fromkeys(tau for tau, _, _ in samples)) if taus is None else list(taus)
    missing = [(tau, scheme, omega) for tau in taus for scheme in ("oh", "bn", "na") for omega in ("l2", "ne")
               if (tau, scheme, omega) not in samples]
    if not taus or missing:
        raise ValueError(f"samples must hold every (tau, scheme, omega) of Figure 2(a); missing {missing[:4]}"
                         f"{' ...' if len(missing) > 4 else ''}")
    check_table(d_summary, "d_summary", ["steps_to_converge"])
    if "seed" not in d_summary.index.names:
        raise ValueError(f"d_summary must have one row per seed (an index level 'seed'), got levels "
                         f"{list(d_summary.index.names)}: the speed row compares the ranges over seeds, not medians")
    small_tau, big_tau = min(taus), max(taus)

    def ratio(tau, scheme, omega):
        return samples[(tau, scheme, omega)]["ratio"]

    rows = []
    beats = below_finding({"OH": ratio(small_tau, "oh", "l2"), "BN": ratio(small_tau, "bn", "l2")},
                          f"tau={small_tau}, ratio to one Lloyd step")
    rows.append(("L2 at the smallest tau beats one Lloyd step (OH and BN)", beats.value, beats.verdict))
    na = ratio(small_tau, "na", "l2")
    worse = {scheme.upper(): compare(ratio(small_tau, scheme, "l2"), na, margin) for scheme in ("oh", "bn")}
    rows.append(("NA does worse than OH/BN (L2, smallest tau)",
                 f"NA {point_value(na):.3f}; " + "; ".join(f"{label} - NA {c.text()}" for label, c in worse.items()),
                 combine(c.verdict for c in worse.values())))
    text, verdict = _best_below({s.upper(): ratio(big_tau, s, "l2") for s in ("oh", "bn", "na")},
                                {s.upper(): ratio(big_tau, s, "ne") for s in ("oh", "bn", "na")}, margin, ("L2", "NE"))
    rows.append((f"at tau={big_tau}, L2 generalizes better than NE (best of OH/BN/NA)", text, verdict))
    for tau in taus:
        lower = {scheme.upper(): compare(samples[(tau, scheme, "l2")]["loss"], samples[(tau, scheme, "ne")]["loss"],
                                         margin) for scheme in ("oh", "bn", "na")}
        rows.append((f"L2 reaches a lower training loss than NE (tau={tau}, all embeddings)",
                     "L2 - NE, over one Lloyd step's loss: " + "; ".join(f"{label} {c.text()}"
                                                                           for label, c in lower.items()),
                     combine(c.verdict for c in lower.values())))
    # the range over seeds (a seed that never converged is infinitely slow)
    first, last = seed_range(d_summary["steps_to_converge"], never=math.inf)
    ds = first.index.get_level_values(0)
    d_small, d_large = min(ds), max(ds)

    def steps(d, scheme):
        return float(first.loc[(d, scheme, "l2")]), float(last.loc[(d, scheme, "l2")])

    def gap(d):  # BN - OH over every pair of seeds
        (oh_first, oh_last), (bn_first, bn_last) = steps(d, "oh"), steps(d, "bn")
        return bn_first - oh_last, bn_last - oh_first

    def ranges(d):  # each embedding's range over seeds, for the row's numbers
        (oh_first, oh_last), (bn_first, bn_last) = steps(d, "oh"), steps(d, "bn")
        return f"d={d}: OH {range_text(oh_first, oh_last)} vs BN {range_text(bn_first, bn_last)}"

    # "OH converges faster than BN" is the ledger's oh_faster_convergence (convergence_finding on
    # the plateau table): no row here, so that the chapter gives that claim one verdict
    gap_small, gap_large = gap(d_small), gap(d_large)
    rows.append((f"the OH/BN difference in steps to 90% shrinks from d={d_small} to d={d_large} (L2)",
                 f"{ranges(d_small)}; {ranges(d_large)}; BN - OH: {_span(*gap_small)} steps -> "
                 f"{_span(*gap_large)} steps (range over seeds; margin {steps_margin} steps)",
                 _shrinks(gap_small, gap_large, steps_margin)))
    return pd.DataFrame(rows, columns=list(FIGURE2_COLUMNS))


def _best_below(a: dict, b: dict, margin: float, names: tuple) -> tuple[str, str]:
    """Is the best of the models ``a`` below the best of ``b`` (per-task values, lower is better)?

    Decided on the paired intervals of every pair, never on which point is lowest: ``"reproduced"``
    when one model of ``a`` is below every model of ``b`` by ``margin``, ``"not reproduced"`` when one
    model of ``b`` is not beaten by that margin by any model of ``a``, else ``"inconclusive"``. The
    text gives each side's lowest point and the intervals that decided (or, inconclusive, those of
    ``a``'s lowest point against every model of ``b``)."""
    pairs = {(x, y): compare(a[x], b[y], margin) for x in a for y in b}
    low_a, low_b = (min(side, key=lambda key: point_value(side[key])) for side in (a, b))
    winners = [x for x in a if all(pairs[(x, y)].verdict == "reproduced" for y in b)]
    blockers = [y for y in b if all(pairs[(x, y)].verdict == "not reproduced" for x in a)]
    if blockers:  # (a winner would beat every model of b, a blocker included: never both)
        verdict, shown = "not reproduced", [(x, blockers[0]) for x in a]
    else:
        x = min(winners, key=lambda key: point_value(a[key])) if winners else low_a
        verdict, shown = ("reproduced" if winners else "inconclusive"), [(x, y) for y in b]
    lowest = (f"lowest points {names[0]} ({low_a}) {point_value(a[low_a]):.3f}, {names[1]} ({low_b}) "
              f"{point_value(b[low_b]):.3f}")
    return lowest + "; " + "; ".join(f"{names[0]} ({x}) - {names[1]} ({y}) {pairs[(x, y)].text()}"
                                     for x, y in shown), verdict


def _shrinks(small: tuple, large: tuple, margin: int) -> str:
    """Whether ``|gap|`` over the range ``large`` is below its values over ``small`` by ``margin`` or more
    (``"reproduced"``), above them by that much (``"not reproduced"``), or neither."""
    if not all(math.isfinite(value) for value in (*small, *large)):
        return "inconclusive"

    def magnitudes(lo, hi):  # the least and the largest |x| for x in [lo, hi]
        return (0.0 if lo <= 0 <= hi else min(abs(lo), abs(hi))), max(abs(lo), abs(hi))

    (small_lo, small_hi), (large_lo, large_hi) = magnitudes(*small), magnitudes(*large)
    if small_lo - large_hi >= margin:
        return "reproduced"
    return "not reproduced" if large_lo - small_hi >= margin else "inconclusive"


def _span(lo: float, hi: float) -> str:
    """A gap in steps, or its range over seeds; unbounded where a seed never converged."""
    def bound(value):
        return f"{value:.0f}" if math.isfinite(value) else ("-inf" if value < 0 else "inf")

    return bound(lo) if lo == hi else f"[{bound(lo)}, {bound(hi)}]"


def learned_step_finding(samples: dict, report: pd.DataFrame, tau: float) -> Finding:
    """Section 3: at ``tau``, do the trained OH and BN layers (L2) beat one Lloyd step on held-out tasks?

    Each embedding is judged on the 95% interval of its ratio to Lloyd over held-out tasks and
    seeds (:func:`~kmtrf_core.book.comparisons.below_finding`): below 1 only when the whole interval is.

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

    Read on the plateau table (:func:`~kmtrf_core.book.ch09_plateau.drop_table`), seed by seed: per
    row, OH is faster when every OH seed's first validation step below one Lloyd step comes at least
    ``margin`` steps before every BN seed's (a seed that never gets there counts as infinitely late),
    slower when every BN seed comes that far before every OH seed, and the row is inconclusive
    when the two ranges over seeds come closer than ``margin`` or overlap, or when no seed of
    either drops. Comparing the ranges, not the median curves, keeps the spread over seeds in
    the verdict. The verdict combines the rows (:func:`~kmtrf_core.book.uncertainty.combine`).

    Parameters
    ----------
    drops : pandas.DataFrame
        The plateau table, with columns ``("earliest_seed", scheme)`` and ``("latest_seed", scheme)``
        for the schemes OH and BN.
    margin : int
        Steps (at least the validation interval: a drop is only seen at validation steps).

    Returns
    -------
    Finding
        For the claim ``oh_faster_convergence``.

    Examples
    --------
    >>> nan = float("nan")
    >>> columns = pd.MultiIndex.from_product([["earliest_seed", "latest_seed"], ["BN", "OH"]])
    >>> drops = pd.DataFrame([[2100.0, 1300.0, 2500.0, 1600.0], [1700.0, 1600.0, 2000.0, 1800.0],
    ...                       [3000.0, 900.0, nan, 1000.0]], index=["base", "d=8", "lr=0.03"], columns=columns)
    >>> finding = convergence_finding(drops, margin=200)
    >>> finding.verdict, finding.value
    ('partly', 'first step below one Lloyd step, range over seeds, OH vs BN: base 1300-1600 vs 2100-2500; d=8 1600-1800 vs 1700-2000; lr=0.03 900-1000 vs 3000-never (margin 200 steps)')
    >>> finding.report
    'OH faster in 2 of 3 configurations, 1 inconclusive (the ranges over seeds within 200 steps or overlapping, or neither drops) -> partly'
    """
    check_table(drops, "drops", [(column, scheme) for column in ("earliest_seed", "latest_seed")
                                 for scheme in ("OH", "BN")])
    check_int(margin, "margin")
    outcomes, parts = [], []
    for label, row in drops.iterrows():
        oh_first, oh_last, bn_first, bn_last = (
            math.inf if math.isnan(value) else float(value)
            for value in (row[("earliest_seed", "OH")], row[("latest_seed", "OH")],
                          row[("earliest_seed", "BN")], row[("latest_seed", "BN")]))
        outcomes.append(range_ahead((oh_first, oh_last), (bn_first, bn_last), margin))
        parts.append(f"{label} {range_text(oh_first, oh_last)} vs {range_text(bn_first, bn_last)}")
    overall = combine(outcomes)
    faster, slower, open_ = (outcomes.count(v) for v in ("reproduced", "not reproduced", "inconclusive"))
    tail = ", ".join(t for t in (f"{slower} slower" if slower else "",
                                 f"{open_} inconclusive (the ranges over seeds within {margin} steps or "
                                 "overlapping, or neither drops)" if open_ else "")
                     if t)
    return Finding(f"first step below one Lloyd step, range over seeds, OH vs BN: {'; '.join(parts)} "
                   f"(margin {margin} steps)", overall,
                   check=f"in every configuration of the plateau table, every OH seed below one Lloyd step at "
                         f"least {margin} steps before every BN seed",
                   report=f"OH faster in {faster} of {len(outcomes)} configurations"
                          + (f", {tail}" if tail else "") + f" -> {overall}")


def stability_table(groups: dict) -> pd.DataFrame:
    """Per group of runs: how many runs it has, whether they clip their gradients, and how many diverged.

    Parameters
    ----------
    groups : dict
        Group name -> its :class:`~kmtrf_core.book.groups.Runs`, loaded with
        ``on_diverge="record"`` so that a diverged run is counted instead of raised.

    Returns
    -------
    pandas.DataFrame
        One row per group: ``runs`` (configurations; each trains its seeds together), ``seeds``,
        ``clipping`` (``"off"`` or the clipping norms), ``diverged`` (runs whose loss became NaN or
        infinite) and ``which`` (their grid values).

    Examples
    --------
    >>> from kmtrf_core.book.groups import Run
    >>> config = TrainConfig(d=2, k=3, n=16, seeds=(0, 1))
    >>> group = RunGroup("demo", config, {"scheme": ["oh", "bn"]}, "9", "a test")
    >>> runs = Runs(group, {("oh",): Run(config, None, pd.DataFrame({"step": [0]}), RuntimeError("nan")),
    ...                     ("bn",): Run(dataclasses.replace(config, scheme="bn"), None, pd.DataFrame({"step": [0]}))})
    >>> stability_table({"demo": runs}).loc["demo"].to_dict()
    {'runs': 2, 'seeds': 2, 'clipping': 'off', 'diverged': 1, 'which': "[('oh',)]"}
    """
    _check_groups(groups)
    rows = {}
    for name, runs in groups.items():
        configs = [run.config for run in runs.values()]
        clips = sorted({"off" if config.clip is None else f"{config.clip:g}" for config in configs})
        diverged = [key for key, run in runs.items() if run.diverged is not None]
        rows[name] = dict(runs=len(configs), seeds=max((len(config.seeds) for config in configs), default=0),
                          clipping=", ".join(clips), diverged=len(diverged),
                          which=str(diverged) if diverged else "")
    return pd.DataFrame.from_dict(rows, orient="index").rename_axis("group")


def stability_totals(groups: dict) -> dict:
    """The totals of :func:`stability_table` over distinct runs: groups share configurations, so summing
    its ``runs`` column would count a shared run (and a shared divergence) once per group.

    Parameters
    ----------
    groups : dict
        As for :func:`stability_table`.

    Returns
    -------
    dict
        ``runs`` and ``diverged`` over distinct runs (by :func:`~kmtrf_core.training.runs.cache_key`),
        and ``unclipped`` and ``unclipped_diverged``, the same over the runs without clipping.

    Examples
    --------
    >>> from kmtrf_core.book.groups import Run
    >>> config = TrainConfig(d=2, k=3, n=16, seeds=(0, 1))
    >>> history = pd.DataFrame({"step": [0]})
    >>> one = Runs(RunGroup("a", config, {"scheme": ["oh"]}, "9", "a test"),
    ...            {("oh",): Run(config, None, history, RuntimeError("nan"))})
    >>> two = Runs(RunGroup("b", config, {"clip": [None, 1.0]}, "9", "the same run and a clipped one"),
    ...            {(None,): Run(config, None, history, RuntimeError("nan")),
    ...             (1.0,): Run(dataclasses.replace(config, clip=1.0), None, history)})
    >>> stability_table({"a": one, "b": two}).runs.sum(), stability_totals({"a": one, "b": two})
    (np.int64(3), {'runs': 2, 'diverged': 1, 'unclipped': 1, 'unclipped_diverged': 1})
    """
    _check_groups(groups)
    runs = {cache_key(run.config): run for group in groups.values() for run in group.values()}
    unclipped = [run for run in runs.values() if run.config.clip is None]
    return dict(runs=len(runs), diverged=sum(run.diverged is not None for run in runs.values()),
                unclipped=len(unclipped), unclipped_diverged=sum(run.diverged is not None for run in unclipped))


def _check_groups(groups: dict) -> None:
    """The input of :func:`stability_table` and :func:`stability_totals`: group name -> Runs."""
    if not groups:
        raise ValueError("groups must name at least one group of runs")
    for name, runs in groups.items():
        if not isinstance(runs, Runs):
            raise ValueError(f"groups[{name!r}] must be a Runs (RunGroup.runs(on_diverge='record')), "
                             f"got {type(runs).__name__}")
