"""Chapter 9 (``book/09_training.ipynb``), section "The plateau": the plateau of training, measured.

At lr 0.01 the relative validation loss (Eq. 20) can sit on a plateau above
one Lloyd step before it drops below it; whether it does, and for how long, is
what this module measures (:func:`drop_table`), not something it assumes. The
book's stop rule (:mod:`kmtrf_core.training.convergence`) cannot end a run on
the plateau, however long it lasts: it stops a run only once it beats one
Lloyd step, and a run still above trains to its cap. The paper does not
discuss the plateau. Here we read, at every validation step of a run
kept with ``TrainConfig.snapshots``, what the layer does on fixed probe tasks:

* ``nearest_share``: the share of points whose strongest attention to the
  centers (the first attention of Eq. 4, points -> centers) goes to their
  nearest center, the assignment step of Lloyd (Theorem 2.1);
* ``point_entropy``: the entropy of those attention rows divided by
  ``log k`` (1: uniform over the centers, 0: one center);
* ``center_entropy``: the entropy of the third attention (centers -> points)
  divided by ``log n``;
* ``qk_points``, ``qk_centers``: the Frobenius norm of ``Q^T K`` of those two
  attentions, the scale of the learned query-key products (an effective
  inverse temperature);
* ``v_points``, ``v_centers``: the norms of their value projections.

:func:`drop_table` then reads, from the catalog's plateau groups, the first
validation step below one Lloyd step as d, k, n, tau, lr and gamma change: of
the median curve over seeds, and of the earliest and the latest seed.
:func:`drop_story` reads each change against the base on the range over seeds
(earlier or later only beyond a margin in steps, else inconclusive), never on
the median curves alone.
"""

from __future__ import annotations

import dataclasses
import math

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import torch

from ..lloyd import assign
from ..model import ClusterTransformer
from ..training.checkpoints import load_weights
from ..training.config import layer_for
from ..training.convergence import flattening
from ..validation import check_int, check_table
from .plotting import SCHEME_COLORS
from .uncertainty import range_ahead, range_text, seed_range

__all__ = ["READINGS", "drop_story", "drop_table", "layer_readings", "plateau_figure", "plateau_story", "plateau_summary",
           "plateau_trace"]

READINGS = {
    "nearest_share": "strongest point->center attention on the nearest center",
    "point_entropy": "entropy of point->center attention / log k",
    "center_entropy": "entropy of center->point attention / log n",
    "qk_points": "|Q^T K| of point->center attention",
    "qk_centers": "|Q^T K| of center->point attention",
    "v_points": "|V| of point->center attention",
    "v_centers": "|V| of center->point attention",
}
"""The readings of :func:`layer_readings`, with what each measures."""


def _entropy(weights: torch.Tensor, keys: int) -> torch.Tensor:
    """Mean normalized entropy of attention rows ``(..., B, q, keys)`` -> ``(...)``."""
    plogp = torch.where(weights > 0, weights * weights.clamp_min(1e-30).log(), torch.zeros_like(weights))
    return (-plogp.sum(-1) / math.log(keys)).mean(dim=(-1, -2))


def layer_readings(model: ClusterTransformer, X: torch.Tensor, C: torch.Tensor) -> pd.DataFrame:
    """The readings of :data:`READINGS` for a layer (or each member of an ensemble) on tasks ``(X, C)``.

    Parameters
    ----------
    model : ClusterTransformer
        A layer or an ensemble.
    X : torch.Tensor
        Points ``(B, n, d)``.
    C : torch.Tensor
        Initial centers ``(B, k, d)``.

    Returns
    -------
    pandas.DataFrame
        One row per ensemble member (``member`` column), one column per reading.

    Examples
    --------
    >>> g = torch.Generator().manual_seed(0)
    >>> X, C = torch.rand(4, 30, 2, generator=g), torch.rand(4, 3, 2, generator=g)
    >>> exact = ClusterTransformer.from_lloyd(2, 3, "oh", gamma=1e4, dtype=torch.float32)
    >>> readings = layer_readings(exact, X, C)
    >>> round(float(readings.nearest_share[0]), 3), bool(readings.point_entropy[0] < 0.01)
    (1.0, True)
    """
    S = model.ensemble
    with torch.no_grad():
        Xp, Cp = model.prepare_tasks(X, C)
        trace: dict = {}
        model.layer(*model.embed(Xp, Cp), trace=trace)
        to_centers, to_points = trace["weights_1"], trace["weights_3"]  # ((S,) B, n, k), ((S,) B, k, n)
        nearest = assign(X, C)  # (B, n)
        share = (to_centers.argmax(-1) == nearest).to(X.dtype).mean(dim=(-1, -2))
        Q, K, V = model.Q, model.K, model.V  # ((S,) 4, m, m)
        qk = (Q.transpose(-1, -2) @ K).flatten(-2).norm(dim=-1)  # ((S,) 4)
        v = V.flatten(-2).norm(dim=-1)
        columns = dict(nearest_share=share, point_entropy=_entropy(to_centers, model.k),
                       center_entropy=_entropy(to_points, X.shape[-2]), qk_points=qk[..., 0],
                       qk_centers=qk[..., 2], v_points=v[..., 0], v_centers=v[..., 2])
    table = pd.DataFrame({name: value.reshape(-1).cpu().numpy() for name, value in columns.items()})
    table.insert(0, "member", range(S or 1))
    return table


def plateau_trace(config, history, X: torch.Tensor, C: torch.Tensor) -> pd.DataFrame:
    """:func:`layer_readings` at every kept snapshot of a run, beside its relative validation loss.

    Parameters
    ----------
    config : TrainConfig
        The run's config (``snapshots=True``).
    history : pandas.DataFrame
        Its history, with ``history.attrs["snapshots"]`` (as
        :func:`~kmtrf_core.training.train_cached` returns it).
    X, C : torch.Tensor
        Probe tasks ``(B, n, d)`` and ``(B, k, d)``.

    Returns
    -------
    pandas.DataFrame
        Columns ``step``, ``seed``, ``val_relative_loss`` and the readings.

    Examples
    --------
    >>> from kmtrf_core.training import TrainConfig, train
    >>> config = TrainConfig(d=2, k=3, n=16, steps=4, batch=2, val_tasks=2, val_every=2, seeds=(0, 1),
    ...                      snapshots=True)
    >>> _, history = train(config)
    >>> trace = plateau_trace(config, history, torch.rand(3, 16, 2), torch.rand(3, 3, 2))
    >>> sorted(trace.step.unique().tolist()), sorted(trace.seed.unique().tolist())
    ([0, 2, 4], [0, 1])
    """
    snapshots = history.attrs.get("snapshots")
    if not snapshots:
        raise ValueError("history has no snapshots: train with TrainConfig(snapshots=True)")
    model = layer_for(dataclasses.replace(config, impl="direct"), device=X.device)
    validation = history.dropna(subset=["val_relative_loss"]).set_index(["step", "seed"]).val_relative_loss
    frames = []
    for step, weights in snapshots:
        readings = layer_readings(load_weights(model, weights), X, C)
        readings.insert(0, "seed", [config.seeds[i] for i in readings.member])
        readings.insert(0, "step", step)
        frames.append(readings.drop(columns="member"))
    trace = pd.concat(frames, ignore_index=True)
    trace.insert(2, "val_relative_loss", [validation.get((s, seed), np.nan) for s, seed in zip(trace.step, trace.seed)])
    return trace


def plateau_figure(traces: dict, caption: str, readings=("nearest_share", "point_entropy", "center_entropy",
                                                          "qk_points", "qk_centers")):
    """The relative validation loss and the readings against the step (log axis), one curve per run.

    Parameters
    ----------
    traces : dict
        Label (e.g. ``"OH"``) -> :func:`plateau_trace` table.
    caption : str
        The figure's title.
    readings : sequence of str
        Which readings get a panel.

    Returns
    -------
    matplotlib.figure.Figure
        Median over seeds with the range as a ribbon; a dotted vertical line
        per run where its median first falls below one Lloyd step.

    Examples
    --------
    >>> trace = pd.DataFrame({"step": [0, 100, 200], "seed": 0, "val_relative_loss": [1.8, 0.9, 0.9],
    ...                       "nearest_share": [0.3, 0.9, 0.9]})
    >>> fig = plateau_figure({"OH": trace}, "a test", readings=("nearest_share",))
    >>> [ax.get_title() for ax in fig.axes][:2]
    ['relative validation loss (Eq. 20)', 'strongest point->center attention on the nearest center']
    >>> plt.close(fig)
    """
    names = ["val_relative_loss", *readings]
    fig, axes = plt.subplots(2, math.ceil(len(names) / 2), figsize=(4.2 * math.ceil(len(names) / 2), 6.4),
                             squeeze=False, sharex=True)
    axes = axes.ravel()
    for label, trace in traces.items():
        color = SCHEME_COLORS.get(f"{label}:L2", SCHEME_COLORS.get(label))
        grouped = trace.groupby("step")
        drop = grouped.val_relative_loss.median()
        below = drop[drop < 1.0]
        for ax, name in zip(axes, names):
            median = grouped[name].median()
            ax.plot(median.index, median.to_numpy(), color=color, label=label)
            ax.fill_between(median.index, grouped[name].min(), grouped[name].max(), color=color, alpha=0.2)
            if len(below):
                ax.axvline(below.index[0], color=color, ls=":", lw=1)
    for ax, name in zip(axes, names):
        ax.set_title(READINGS.get(name, "relative validation loss (Eq. 20)"), fontsize=8)
        ax.set_xscale("symlog", linthresh=100)
        ax.set_xlabel("step")
    axes[0].axhline(1.0, color="black", ls=":", lw=1, label="1 Lloyd step")
    axes[0].legend(fontsize=7)
    for ax in axes[len(names):]:
        ax.set_visible(False)
    fig.suptitle(caption, fontsize=9)
    fig.tight_layout()
    return fig


def drop_table(base_history, variations: dict, base_label: str = "base") -> pd.DataFrame:
    """Where the plateau ends, per configuration and embedding: the first step below one Lloyd step.

    Parameters
    ----------
    base_history : pandas.DataFrame
        The base runs (``scheme`` and ``seed`` columns; OH and BN).
    variations : dict
        Label (``"d=8"``) -> history of the runs that change one field.
    base_label : str
        The label of the base row.

    Returns
    -------
    pandas.DataFrame
        One row per configuration; per scheme the first validation step
        below 1 of the median curve over seeds (``below_lloyd_at``; NaN:
        never), the same step of the seed that got there first
        (``earliest_seed``; NaN: no seed did) and last (``latest_seed``; NaN:
        some seed never did), the steps trained and the final value.

    Examples
    --------
    >>> def run(scheme, seed, values):
    ...     return pd.DataFrame({"scheme": scheme, "seed": seed, "step": [0, 100, 200, 300],
    ...                          "val_relative_loss": values})
    >>> base = pd.concat([run("oh", 0, [1.7, 0.9, 0.9, 0.9]), run("oh", 1, [1.7, 1.6, 0.95, 0.9]),
    ...                   run("bn", 0, [1.7, 1.6, 1.5, 0.95]), run("bn", 1, [1.7, 1.6, 1.5, 1.4])])
    >>> drop_table(base, {}).loc["base"].unstack().loc[["below_lloyd_at", "earliest_seed", "latest_seed"]]
    scheme             BN     OH
    below_lloyd_at    NaN  200.0
    earliest_seed   300.0  100.0
    latest_seed       NaN  200.0
    """
    rows = {}
    for label, history in {base_label: base_history, **variations}.items():
        check_table(history, f"the history of {label!r}", ["scheme", "seed", "step", "val_relative_loss"])
        table = flattening(history, by=["scheme"])
        table["earliest_seed"], table["latest_seed"] = seed_range(
            flattening(history, by=["scheme", "seed"])["below_lloyd_at"])
        table.index = table.index.str.upper()
        rows[label] = table[["below_lloyd_at", "earliest_seed", "latest_seed", "steps", "final"]].unstack()
    return pd.DataFrame(rows).T.round(3)


def plateau_summary(traces: dict, readings=("nearest_share", "point_entropy", "center_entropy", "qk_points",
                                            "qk_centers")) -> pd.DataFrame:
    """The readings of each run at four moments: start, mid-plateau, the drop, the end (medians over seeds).

    The drop is the first validation step where the median relative
    validation loss is below one Lloyd step; mid-plateau is the validation
    step nearest half of it. A run that never drops has NaN there.

    Parameters
    ----------
    traces : dict
        Label -> :func:`plateau_trace` table.
    readings : sequence of str
        The readings to show.

    Returns
    -------
    pandas.DataFrame
        Rows ``(label, moment)`` with the step and the readings.

    Examples
    --------
    >>> trace = pd.DataFrame({"step": [0, 100, 200, 300], "seed": 0,
    ...                       "val_relative_loss": [1.8, 1.7, 0.95, 0.9], "nearest_share": [0.3, 0.4, 0.9, 0.95]})
    >>> plateau_summary({"OH": trace}, readings=("nearest_share",)).loc["OH"].to_dict("index")["drop"]
    {'step': 200.0, 'val_relative_loss': 0.95, 'nearest_share': 0.9}
    """
    names = ["val_relative_loss", *readings]
    rows = {}
    for label, trace in traces.items():
        medians = trace.groupby("step")[names].median()
        below = medians.index[medians.val_relative_loss < 1.0]
        steps = medians.index.to_numpy()
        moments = {"start": steps[0], "end": steps[-1]}
        if len(below):
            drop = below[0]
            moments.update(plateau=steps[np.abs(steps - drop / 2).argmin()], drop=drop)
        for moment in ("start", "plateau", "drop", "end"):
            step = moments.get(moment)
            values = medians.loc[step] if step is not None else pd.Series(np.nan, index=names)
            rows[(label, moment)] = {"step": np.nan if step is None else float(step), **values.to_dict()}
    return pd.DataFrame.from_dict(rows, orient="index").rename_axis(["run", "moment"])


def plateau_story(moments: pd.DataFrame) -> str:
    """One line per run from :func:`plateau_summary`: where it dropped and how its readings moved.

    The drop is read off the median over seeds of the validation curve (a description of the
    curve, no interval); which runs drop earlier is decided seed by seed elsewhere (:func:`drop_table`).

    Examples
    --------
    >>> trace = pd.DataFrame({"step": [0, 100, 200, 300], "seed": 0, "val_relative_loss": [1.8, 1.7, 0.95, 0.9],
    ...                       "nearest_share": [0.3, 0.4, 0.9, 0.95], "point_entropy": [0.9, 0.8, 0.3, 0.2],
    ...                       "qk_points": [1.0, 1.5, 4.0, 5.0]})
    >>> flat = trace.assign(val_relative_loss=1.7)
    >>> readings = ("nearest_share", "point_entropy", "qk_points")
    >>> print(plateau_story(plateau_summary({"OH": trace, "BN": flat}, readings=readings)))
    OH: median validation curve below 1 at step 200. Mid-plateau (step 100) -> drop -> end: nearest-center share 0.40 -> 0.90 -> 0.95; point->center entropy 0.80 -> 0.30 -> 0.20; |Q^T K| (points->centers) 1.50 -> 4.00 -> 5.00.
      OH, from mid-plateau to the end: |Q^T K| (points->centers) grew 3.3x; the point->center entropy fell to 0.25 of its plateau value; at the end 5% of the points attend most to a center other than their nearest.
    BN: median validation curve not below 1 in 300 steps (1.70 at the end).
    """
    names = {"nearest_share": "nearest-center share", "point_entropy": "point->center entropy",
             "center_entropy": "center->point entropy", "qk_points": "|Q^T K| (points->centers)",
             "qk_centers": "|Q^T K| (centers->points)"}
    lines = []
    for run in dict.fromkeys(moments.index.get_level_values(0)):
        table = moments.loc[run]
        if np.isnan(table.loc["drop", "step"]):
            lines.append(f"{run}: median validation curve not below 1 in {table.loc['end', 'step']:.0f} steps "
                         f"({table.loc['end', 'val_relative_loss']:.2f} at the end).")
            continue
        parts = [f"{label} " + " -> ".join(f"{table.loc[moment, name]:.2f}" for moment in ("plateau", "drop", "end"))
                 for name, label in names.items() if name in table.columns]
        lines.append(f"{run}: median validation curve below 1 at step {table.loc['drop', 'step']:.0f}. Mid-plateau (step "
                     f"{table.loc['plateau', 'step']:.0f}) -> drop -> end: " + "; ".join(parts) + ".")
        lines.append(_plateau_to_end(run, table))
    return "\n".join(line for line in lines if line)


def _plateau_to_end(run: str, table: pd.DataFrame) -> str:
    """The second line of :func:`plateau_story` for a run that dropped: its readings, end against mid-plateau."""
    said = []
    for name, label in (("qk_points", "|Q^T K| (points->centers)"), ("qk_centers", "|Q^T K| (centers->points)")):
        if name in table.columns and table.loc["plateau", name] > 0:
            said.append(f"{label} grew {table.loc['end', name] / table.loc['plateau', name]:.1f}x")
    for name, label in (("point_entropy", "point->center"), ("center_entropy", "center->point")):
        if name in table.columns and table.loc["plateau", name] > 0:
            said.append(f"the {label} entropy fell to {table.loc['end', name] / table.loc['plateau', name]:.2f} "
                        "of its plateau value")
    if "nearest_share" in table.columns:
        said.append(f"at the end {1 - table.loc['end', 'nearest_share']:.0%} of the points attend most to a "
                    "center other than their nearest")
    return f"  {run}, from mid-plateau to the end: " + "; ".join(said) + "." if said else ""


def drop_story(drops: pd.DataFrame, base_values: dict, margin: int) -> str:
    """Each row of :func:`drop_table` read against the base row: did the change move the drop, and which way?

    Read seed by seed, as :func:`~kmtrf_core.book.ch09_training.convergence_finding` reads OH
    against BN: per embedding, a row's drop is *earlier* than the base's only when every seed
    of the row gets below one Lloyd step at least ``margin`` steps before every seed of the base
    (:func:`~kmtrf_core.book.uncertainty.range_ahead`; a seed that never gets there is infinitely
    late), *later* for the mirror image, and *inconclusive* when the two ranges over seeds come
    closer than ``margin`` or overlap. The median curves do not decide it: with a few seeds their
    spread is the only measure of the noise.

    Parameters
    ----------
    drops : pandas.DataFrame
        The table, base row first, the others labelled ``"field=value"``, with columns
        ``("earliest_seed", scheme)`` and ``("latest_seed", scheme)`` for OH and BN (and
        optionally ``("final", scheme)``).
    base_values : dict
        The base run's value of every field the rows change.
    margin : int
        Steps (at least the validation interval: a drop is only seen at validation steps).

    Returns
    -------
    str
        A first line with the rule, then one line per changed row: per embedding, its range
        over seeds against the base's, the verdict (earlier or later, with the range of the
        shift over every pair of seeds; inconclusive; never in either), its final relative
        validation loss against the base's, and the direction the two embeddings share, if any.

    Examples
    --------
    >>> nan = float("nan")
    >>> columns = pd.MultiIndex.from_product([["earliest_seed", "latest_seed", "final"], ["BN", "OH"]])
    >>> drops = pd.DataFrame([[2500.0, 1700.0, 2900.0, 1900.0, 0.93, 0.91],
    ...                       [3800.0, 2200.0, 4400.0, 2400.0, 0.96, 0.92],
    ...                       [nan, 1800.0, nan, 2100.0, 1.2, 0.97]], index=["base", "k=10", "n=32"],
    ...                      columns=columns)
    >>> print(drop_story(drops, {"k": 6, "n": 512}, margin=200))
    First validation step below one Lloyd step, range over seeds, against the base (margin 200 steps: earlier or later only when every seed of one is that far ahead of every seed of the other, else inconclusive):
    k=10 (larger than the base's 6): OH 2200-2400 vs base 1700-1900: later, by 300-700 steps; BN 3800-4400 vs base 2500-2900: later, by 900-1900 steps. Final: OH 0.92 (base 0.91), BN 0.96 (base 0.93). Later for both, BN by more.
    n=32 (smaller than the base's 512): OH 1800-2100 vs base 1700-1900: inconclusive; BN never vs base 2500-2900: later. Final: OH 0.97 (base 0.91), BN 1.20 (base 0.93). BN later, OH inconclusive.
    """
    check_table(drops, "drops", [(column, scheme) for column in ("earliest_seed", "latest_seed")
                                 for scheme in ("OH", "BN")])
    check_int(margin, "margin")
    base = drops.iloc[0]
    lines = [f"First validation step below one Lloyd step, range over seeds, against the base (margin {margin} "
             "steps: earlier or later only when every seed of one is that far ahead of every seed of the other, "
             "else inconclusive):"]
    for label, row in drops.iloc[1:].iterrows():
        field, _, value = str(label).partition("=")
        if field not in base_values:
            raise ValueError(f"base_values has no value for {field!r} (row {label!r})")
        try:
            new, old = float(value), float(base_values[field])
        except ValueError:
            raise ValueError(f"row {label!r} and base value {base_values[field]!r} must be numbers") from None
        direction = "larger than" if new > old else "smaller than" if new < old else "equal to"
        parts, moves = [], {}
        for scheme in ("OH", "BN"):
            text, moves[scheme] = _drop_move(_seed_steps(row, scheme), _seed_steps(base, scheme), margin)
            parts.append(f"{scheme} {text}")
        line = f"{label} ({direction} the base's {base_values[field]}): " + "; ".join(parts) + "."
        if ("final", "OH") in drops.columns:
            line += " Final: " + ", ".join(f"{scheme} {row[('final', scheme)]:.2f} (base {base[('final', scheme)]:.2f})"
                                           for scheme in ("OH", "BN")) + "."
        line += " " + _shared_move(moves, margin)
        lines.append(line)
    return "\n".join(lines)


def _seed_steps(row: pd.Series, scheme: str) -> tuple:
    """A plateau-table row's ``(earliest, latest)`` seed below one Lloyd step for ``scheme``; ``inf``: never."""
    return tuple(math.inf if math.isnan(value) else float(value)
                 for value in (row[("earliest_seed", scheme)], row[("latest_seed", scheme)]))


def _drop_move(new: tuple, base: tuple, margin: int) -> tuple:
    """One embedding's part of a :func:`drop_story` line, and its move: ``None`` (never in either run) or
    ``(verdict of new against base, (least, largest) shift new - base over every pair of seeds)``."""
    if math.isinf(new[0]) and math.isinf(base[0]):
        return "never below one Lloyd step, nor in the base", None
    verdict = range_ahead(new, base, margin)
    shift = (new[0] - base[1], new[1] - base[0])  # NaN (inf - inf) only where the verdict is inconclusive
    text = f"{range_text(*new)} vs base {range_text(*base)}: "
    if verdict == "inconclusive":
        return text + "inconclusive", (verdict, shift)
    word, (least, most) = ("earlier", (-shift[1], -shift[0])) if verdict == "reproduced" else ("later", shift)
    if math.isfinite(least):
        text += f"{word}, by " + (f"at least {least:.0f}" if not math.isfinite(most) else range_text(least, most))
        return text + " steps", (verdict, shift)
    return text + word, (verdict, shift)


def _shared_move(moves: dict, margin: int) -> str:
    """The end of a :func:`drop_story` line: the direction OH and BN share, and which moved by more."""
    oh, bn = moves["OH"], moves["BN"]
    if oh is None or bn is None:
        return "No direction to read (an embedding got below one Lloyd step in neither run)."
    words = {"reproduced": "earlier", "not reproduced": "later", "inconclusive": "inconclusive"}
    (oh_verdict, oh_shift), (bn_verdict, bn_shift) = oh, bn
    if oh_verdict == bn_verdict == "inconclusive":
        return "Inconclusive for both (no move beyond the margin)."
    if oh_verdict != bn_verdict:
        moved, other = ("OH", "BN") if oh_verdict != "inconclusive" else ("BN", "OH")
        first, second = (oh_verdict, bn_verdict) if moved == "OH" else (bn_verdict, oh_verdict)
        return f"{moved} {words[first]}, {other} {words[second]}."
    # both moved the same way: the one whose shift range is further out by the margin moved by more
    further = range_ahead(oh_shift, bn_shift, margin)  # "reproduced": OH's shift is below BN's
    if oh_verdict == "reproduced":  # earlier: the more negative shift moved by more
        more = {"reproduced": "OH", "not reproduced": "BN"}.get(further)
    else:
        more = {"reproduced": "BN", "not reproduced": "OH"}.get(further)
    how = f", {more} by more." if more else "; which by more is inconclusive."
    return f"{words[oh_verdict].capitalize()} for both{how}"
