"""Chapter 13 (``book/13_cauchy.ipynb``): why training on Cauchy tasks fails (Figures 4 and 5).

The layers are the catalog's (group ``section4_families``), the loss surfaces
the paper room's (:func:`~kmtrf_core.landscape.loss_surface`). This module
reads them:

* :func:`family_convergence`, :func:`settling_ranges`, :func:`own_family_ratios`,
  :func:`family_training_finding`: Figure 4 and the claim ``cauchy_fails`` (decided on held-out
  tasks of each layer's own family, on 95% intervals; whether cauchy's curves settle first is read on
  the ranges over seeds);
* :func:`gap_samples`, :func:`gap_finding`: Figure 5 and the claim ``cauchy_gap`` (on an interval over tasks);
* :func:`smoothing_margins`, :func:`margin_report`: where the smoothing gap comes from, per family;
  :func:`margin_samples`, :func:`cauchy_stands_out`: whether cauchy tasks stand out there, on 95%
  intervals over tasks (the paper's hypothesis, measured).
"""

from __future__ import annotations

import math

import numpy as np  # noqa: F401  (the doctests use it)
import pandas as pd
import torch

from ..attention import sqdist
from ..evaluate import relative_loss
from ..lloyd import kmeans_objective
from ..objectives import OMEGAS, smoothing_gap, sparsemax_is_tight
from ..tasks import FAMILIES, family_tasks  # noqa: F401  (family_tasks: the doctests)
from ..training import convergence_summary
from ..validation import check_choice, check_points_centers, check_table
from .claims import Finding
from .heldout import eval_tasks
from .uncertainty import combine, compare, point_value, range_ahead, range_text, ratio_interval, seed_range, tally

__all__ = ["cauchy_stands_out", "family_convergence", "family_training_finding", "gap_finding", "gap_samples",
           "margin_report", "margin_samples", "own_family_ratios", "settling_ranges", "smoothing_margins"]


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


def settling_ranges(history, fraction: float = 0.9) -> pd.DataFrame:
    """Per configuration, the earliest and the latest seed to settle (Figure 4, chapter 13).

    A run settles at its first validation step with ``fraction`` of its total improvement of the
    relative validation loss (``steps_to_converge`` of
    :func:`~kmtrf_core.training.convergence_summary`, read per seed). A seed that never improved
    counts as never settling, ``inf``.

    Parameters
    ----------
    history : pandas.DataFrame
        From :func:`trained_layers` with families, schemes, omegas and seeds.
    fraction : float
        Share of the total improvement that counts as settled.

    Returns
    -------
    pandas.DataFrame
        Indexed by ``(family, scheme, omega)``; columns ``earliest``, ``latest`` (steps) and
        ``seeds``; ``attrs["fraction"]`` is ``fraction``.

    Examples
    --------
    >>> history = pd.DataFrame({"family": "cauchy", "scheme": "bn", "omega": "l2",
    ...     "seed": [0, 0, 0, 1, 1, 1], "step": [0, 1, 2] * 2, "train_loss": [np.nan, 2.0, 1.0] * 2,
    ...     "val_relative_loss": [2.0, 1.0, 0.9, 2.0, 1.9, 1.8]})
    >>> settling_ranges(history).to_dict("records")
    [{'earliest': 1.0, 'latest': 2.0, 'seeds': 2}]
    """
    by = ("family", "scheme", "omega", "seed")
    steps = convergence_summary(history, by=by, fraction=fraction)["steps_to_converge"]
    earliest, latest = seed_range(steps, never=math.inf)
    seeds = steps.groupby(level=list(by[:-1])).size()
    table = pd.DataFrame({"earliest": earliest, "latest": latest, "seeds": seeds})
    table.attrs["fraction"] = fraction  # for the report's words
    return table


def own_family_ratios(group, tasks: int, seed: int = 28_000, schemes=("oh", "bn"), families=FAMILIES,
                      omega: str = "l2") -> dict:
    """Per task, each family's layer (L2 unless ``omega``) against one Lloyd step on fresh tasks of its family (Eq. 20).

    Parameters
    ----------
    group : RunGroup
        The catalog group ``section4_families``.
    tasks : int
        Held-out tasks per family (:func:`~kmtrf_core.book.heldout.eval_tasks`, from ``seed``).
    schemes, families : sequence of str
        The layers read.
    omega : {"l2", "ne"}
        Their regularized min (``"ne"`` reads a group that varies it, or the group ``cauchy_softmin``).

    Returns
    -------
    dict
        ``(family, scheme)`` -> float64 array ``(S, B)`` (seeds x tasks).

    Examples
    --------
    >>> import os, tempfile
    >>> from unittest import mock
    >>> from kmtrf_core.book.catalog import book_catalog
    >>> with tempfile.TemporaryDirectory() as folder, mock.patch.dict(os.environ, {"KMTRF_CACHE": folder}):
    ...     out = own_family_ratios(book_catalog("quick")["section4_families"], 3, schemes=("bn",),
    ...                             families=("normal",))
    >>> out[("normal", "bn")].shape
    (2, 3)
    """
    out, omega = {}, check_choice(omega, "omega", OMEGAS)
    for family in families:
        for scheme in schemes:
            run = group.run(family=family, scheme=scheme,
                            **({"omega": omega} if "omega" in group.grid else {}))
            if run.config.omega != omega:
                raise ValueError(f"group {group.name!r} trains omega={run.config.omega!r}, not {omega!r}")
            X, C = eval_tasks(run.config, tasks, seed=seed, family=family)
            ratios = relative_loss(run.model, X, C)
            out[(family, scheme)] = ratios.reshape(-1, tasks).double().cpu().numpy()
    return out


def family_training_finding(per_family, val_every: int, samples: dict, settling: pd.DataFrame,
                            softmin: dict | None = None) -> Finding:
    """Figure 4: does cauchy's layer do worst, and does its validation curve settle first? (chapter 13)

    The verdict: for OH and BN, the cauchy layer's ratio to one Lloyd step on held-out cauchy tasks
    is above every other family's layer's on that family's tasks, each difference's 95% interval
    above 0 (unpaired: different tasks; :func:`~kmtrf_core.book.uncertainty.compare`). With
    ``softmin``, the same question of the softmin (NE) layers, cauchy against normal (the control),
    joins it (:func:`~kmtrf_core.book.uncertainty.combine`: "partly" when one loss shows the failure).

    The report adds the paper's other observation, that cauchy's curves settle fast: per
    configuration (embedding, regularized min) and other family, whether every cauchy seed settles
    at least one validation interval before every seed of the other family
    (:func:`~kmtrf_core.book.uncertainty.range_ahead` on :func:`settling_ranges`). It is a line of
    the report, not part of the verdict.

    Parameters
    ----------
    per_family : pandas.DataFrame
        From :func:`family_convergence` (the medians of the validation curves, for the report).
    val_every : int
        The validation interval in steps (the resolution of the speed check, and its margin).
    samples : dict
        From :func:`own_family_ratios`: ``(family, scheme)`` -> ``(S, B)``.
    settling : pandas.DataFrame
        From :func:`settling_ranges`.
    softmin : dict, optional
        ``(family, scheme)`` -> ``(S, B)`` of the NE layers for ``"normal"`` and ``"cauchy"``
        (:func:`own_family_ratios` with ``omega="ne"``; the released code trains NE only).

    Returns
    -------
    Finding
        For the claim ``cauchy_fails``; the report adds the validation medians and the speed check.

    Examples
    --------
    >>> families = ["normal", "cauchy", "gumbel"]
    >>> per_family = pd.DataFrame({"final_val_relative": [0.9, 1.5, 0.8],
    ...     "steps_to_converge": [20.0, 10.0, 30.0]}, index=families)
    >>> noise = 0.02 * np.random.default_rng(0).standard_normal((2, 64))
    >>> samples = {(f, s): per_family.final_val_relative[f] + noise for f in families for s in ("oh", "bn")}
    >>> settling = pd.DataFrame({"earliest": [20.0, 10.0, 20.0], "latest": [40.0, 10.0, 30.0], "seeds": 2},
    ...     index=pd.MultiIndex.from_product([families, ["bn"], ["l2"]], names=["family", "scheme", "omega"]))
    >>> finding = family_training_finding(per_family, 10, samples, settling)
    >>> finding.verdict, finding.value.split(";")[0]
    ('reproduced', 'held-out ratio to one Lloyd step, own family: cauchy OH 1.501, BN 1.501')
    >>> finding.report.splitlines()[-1].split(": ")[-1]
    'ahead in 2 of 2, behind in 0 -> reproduced'
    >>> ne = {(f, s): per_family.final_val_relative[f] + noise for f in ("normal", "cauchy") for s in ("oh", "bn")}
    >>> samples.update({("cauchy", s): 0.7 + noise for s in ("oh", "bn")})  # L2: cauchy's layer the best
    >>> finding = family_training_finding(per_family, 10, samples, settling, softmin=ne)
    >>> finding.verdict, finding.report.splitlines()[-1]
    ('partly', 'L2: not reproduced; NE: reproduced -> partly')
    """
    check_table(settling.reset_index(), "settling", ["family", "scheme", "omega", "earliest", "latest"])
    others = [f for f in per_family.index if f != "cauchy"]
    schemes = sorted({scheme for _, scheme in samples}, key=["oh", "bn", "na"].index)
    outcomes = {(other, scheme): compare(samples[(other, scheme)], samples[("cauchy", scheme)], paired=False)
                for other in others for scheme in schemes}
    held = {key: point_value(values) for key, values in samples.items()}
    outcome = combine(c.verdict for c in outcomes.values())
    won = sum(c.verdict == "reproduced" for c in outcomes.values())
    better = sum(c.verdict == "not reproduced" for c in outcomes.values())  # cauchy's layer below the other's
    val = per_family.final_val_relative
    cauchy_val, best_other, worst_other = val["cauchy"], val[others].min(), val[others].max()
    cauchy_text = ", ".join(f"{scheme.upper()} {held[('cauchy', scheme)]:.3f}" for scheme in schemes)
    other_values = [held[(other, scheme)] for other in others for scheme in schemes]
    lines = [
        f"Held-out ratio to one Lloyd step on the layer's own family: cauchy {cauchy_text}; the other "
        f"families {min(other_values):.3f} to {max(other_values):.3f}.",
        f"Cauchy's layer worse than each other family's (OH, BN; 95% intervals, unpaired): {won} of "
        f"{len(outcomes)} ({better} better, {len(outcomes) - won - better} inconclusive) -> {outcome}",
        "Other family - cauchy, per (family, embedding): "
        + "; ".join(f"{other} {scheme.upper()} {c.text()}" for (other, scheme), c in outcomes.items()),
        f"Median final relative validation loss (training curves): cauchy {cauchy_val:.2f}, other families "
        f"{best_other:.2f} to {worst_other:.2f}.",
        _settling_line(settling, others, val_every),
    ]
    value = (f"held-out ratio to one Lloyd step, own family: cauchy {cauchy_text}; others "
             f"{min(other_values):.3f} to {max(other_values):.3f}; cauchy worse in {won} of {len(outcomes)} "
             f"(family, embedding) pairs on 95% intervals")
    check = ("cauchy's layer above every other family's layer on held-out tasks of its own family, OH and BN, each "
             "95% interval of the difference above 0")
    uncertainty = [f"{other}:{scheme} - cauchy {c.text()}" for (other, scheme), c in outcomes.items()]
    if softmin is not None:
        if missing := [(f, s) for f in ("normal", "cauchy") for s in schemes if (f, s) not in softmin]:
            raise ValueError(f"softmin lacks the NE layers {missing}")
        ne = {scheme: compare(softmin[("normal", scheme)], softmin[("cauchy", scheme)], paired=False)
              for scheme in schemes}
        above = [compare(softmin[("cauchy", scheme)], 1.0).verdict for scheme in schemes]
        l2, ne_outcome = outcome, combine(c.verdict for c in ne.values())
        outcome, count = combine([l2, ne_outcome]), sum(c.verdict == "reproduced" for c in ne.values())
        ne_text = "; ".join(f"{family} " + ", ".join(f"{s.upper()} {point_value(softmin[(family, s)]):.3f}"
                                                     for s in schemes) for family in ("cauchy", "normal"))
        counts = tally((c.verdict for c in ne.values()), "worse", "better")
        ne_counts = (f"cauchy worse than normal in {count} of {len(ne)} ({counts}), above one Lloyd step in "
                     f"{above.count('not reproduced')} of {len(above)}")
        lines += [f"Softmin (NE), the released code's loss, held-out ratio to one Lloyd step: {ne_text}; "
                  f"{ne_counts} (95% intervals) -> {ne_outcome}", f"L2: {l2}; NE: {ne_outcome} -> {outcome}"]
        value += f". NE: {ne_text}; {ne_counts} (95% intervals)"
        check += "; with the softmin (NE), cauchy's layer above the normal one the same way (both losses: reproduced)"
        uncertainty += [f"NE normal:{scheme} - cauchy {c.text()}" for scheme, c in ne.items()]
    return Finding(value, outcome, check=check, report="\n".join(lines), uncertainty="; ".join(uncertainty))


def _settling_line(settling: pd.DataFrame, others: list, val_every: int) -> str:
    """The report's line on whether cauchy's validation curves settle first (ranges over seeds)."""
    table = settling[["earliest", "latest"]].astype(float)
    families = table.index.get_level_values("family")
    configurations = table.loc[families == "cauchy"].droplevel("family").index
    outcomes = [range_ahead(tuple(table.loc[("cauchy", *config)]), tuple(table.loc[(other, *config)]), val_every)
                for config in configurations for other in others if (other, *config) in table.index]
    if not outcomes:
        return "Cauchy's validation curve settles first: no configuration trained on cauchy and another family."
    cauchy = table.loc[families == "cauchy"]
    rest = table.loc[families.isin(others)]
    ahead, behind = outcomes.count("reproduced"), outcomes.count("not reproduced")
    fraction = settling.attrs.get("fraction", 0.9)
    return (f"Cauchy's validation curve settles first (first validation step with {fraction:.0%} of its "
            f"improvement, validation every {val_every} steps): cauchy's runs at "
            f"{range_text(cauchy.earliest.min(), cauchy.latest.max())}, the other families' at "
            f"{range_text(rest.earliest.min(), rest.latest.max())}; every cauchy seed at least one validation "
            f"interval ahead of every seed of the other family, per configuration and family: ahead in "
            f"{ahead} of {len(outcomes)}, behind in {behind} -> {combine(outcomes)}")


def gap_samples(model, X: torch.Tensor, C: torch.Tensor, surface) -> np.ndarray:
    """Per task, the smoothing gap (smoothed minus k-means loss) at the surface's point of largest mean gap.

    The surface's gap at a grid point is the mean over its tasks of these values; they are the samples
    of :func:`gap_finding`'s interval. They are read from the surface where
    :func:`~kmtrf_core.landscape.loss_surface` kept them, otherwise computed by running the layer moved
    to that point again.

    Parameters
    ----------
    model : ClusterTransformer
        The single layer at the origin of ``surface``.
    X, C : torch.Tensor
        The surface's tasks.
    surface : Landscape
        From :func:`~kmtrf_core.landscape.loss_surface` on ``model``, ``X``, ``C``.

    Returns
    -------
    numpy.ndarray
        ``(B,)``.

    Examples
    --------
    >>> from kmtrf_core.landscape import loss_surface
    >>> from kmtrf_core.model import ClusterTransformer
    >>> model = ClusterTransformer(2, 3, "bn", generator=torch.Generator().manual_seed(0))
    >>> X, C = family_tasks(5, 20, 2, 3, families=("normal",), generator=1)["normal"]
    >>> surface = loss_surface(model, X, C, [-1.0, 0.0, 1.0], [0.0, 1.0], generator=0)
    >>> per_task = gap_samples(model, X, C, surface)
    >>> per_task.shape, bool(abs(per_task.mean() - surface.gap.max()) < 1e-5 * max(1.0, surface.gap.max()))
    ((5,), True)
    >>> import dataclasses
    >>> again = gap_samples(model, X, C, dataclasses.replace(surface, smoothed_tasks=None, kmeans_tasks=None))
    >>> bool(np.allclose(again, per_task, rtol=1e-4, atol=1e-6))
    True
    """
    i, j = np.unravel_index(int(np.argmax(surface.gap)), surface.gap.shape)
    if surface.smoothed_tasks is not None and surface.kmeans_tasks is not None:
        # loss_surface kept them: the very values whose mean is the surface's gap there
        return surface.smoothed_tasks[i, j] - surface.kmeans_tasks[i, j]
    # a surface without per-task values: run the layer at that point again
    a, b = float(surface.alphas[i]), float(surface.betas[j])
    layer = model.like()
    base = model.state_dict()
    first, second = surface.directions
    layer.load_state_dict(dict(base, **{name: base[name] + a * first[name] + b * second[name]
                                        for name in ("Q", "K", "V")}))
    with torch.no_grad():
        centers = layer(X, C)
        return smoothing_gap(X, centers, surface.omega, surface.tau).sum(dim=-1).double().cpu().numpy()


def gap_finding(gaps: dict, samples: dict | None = None) -> Finding:
    """Figure 5: is the largest smoothing gap for cauchy ten times that for normal? (chapter 13)

    Without ``samples``: ``"reproduced"`` for a factor of 10 or more, ``"partly"`` for a factor
    above 1, else ``"not reproduced"``. With ``samples`` (per-task gaps at each surface's largest
    point, :func:`gap_samples`), decided on the 95% interval of the factor
    (:func:`~kmtrf_core.book.uncertainty.ratio_interval`): reproduced when it lies at or above 10,
    partly when above 1, not reproduced when at or below 1, inconclusive otherwise.

    Parameters
    ----------
    gaps : dict
        ``"normal"`` and ``"cauchy"`` -> :class:`~kmtrf_core.landscape.Landscape`.
    samples : dict, optional
        ``"normal"`` and ``"cauchy"`` -> per-task gaps ``(B,)``.

    Returns
    -------
    Finding
        For the claim ``cauchy_gap``; the report adds the gaps relative to the
        k-means loss, and its last line sets the paper's claim (a factor of 10
        or more) beside the measured factor and its interval.

    Examples
    --------
    >>> from kmtrf_core.landscape import Landscape
    >>> def surface(gap):
    ...     kmeans = np.full((2, 2), 10.0)
    ...     return Landscape(np.zeros(2), np.zeros(2), kmeans + gap, kmeans, ({}, {}), "l2", 0.1)
    >>> finding = gap_finding({"normal": surface(0.2), "cauchy": surface(3.0)})
    >>> finding.value, finding.verdict
    ('largest gap on the plane: normal 0.2, cauchy 3 (factor 15.0)', 'reproduced')
    >>> print(finding.report.splitlines()[-1])  # doctest: +NORMALIZE_WHITESPACE
    Paper: cauchy's gap an order of magnitude larger (a factor of 10 or more, Figure 5);
    measured factor 15.0 (one value, no interval; reproduced at 10 or more, partly above 1) -> reproduced
    """
    normal, cauchy = gaps["normal"].gap.max(), gaps["cauchy"].gap.max()
    relative = {family: (surface.gap / surface.kmeans).max() for family, surface in gaps.items()}
    value = f"largest gap on the plane: normal {normal:.3g}, cauchy {cauchy:.3g}"
    uncertainty = None
    if samples is None:
        outcome = ("reproduced" if cauchy >= 10 * normal
                   else "partly" if cauchy > normal else "not reproduced")
        measured = f"factor {cauchy / normal:.1f} (one value, no interval; reproduced at 10 or more, partly above 1)"
        value += f" (factor {cauchy / normal:.1f})"
    else:
        factor, low, high = ratio_interval(samples["cauchy"], samples["normal"])
        outcome = ("reproduced" if low >= 10 else "partly" if low > 1 else "not reproduced" if high <= 1
                   else "inconclusive")
        uncertainty = f"factor {factor:.1f} [{low:.1f}, {high:.1f}] (95% CI over tasks)"
        measured = f"{uncertainty}; reproduced when the interval lies at or above 10, partly when above 1"
        value += f"; {uncertainty}"
    lines = [
        f"Largest gap on the plane: normal {normal:.3g}, cauchy {cauchy:.3g}; the paper (Figure 5): "
        f"at most about 0.5 vs above 5.",
        f"Largest gap relative to the k-means loss: normal {relative['normal']:.3g}, "
        f"cauchy {relative['cauchy']:.3g}.",
        f"Paper: cauchy's gap an order of magnitude larger (a factor of 10 or more, Figure 5); measured "
        f"{measured} -> {outcome}",
    ]
    return Finding(value, outcome, check="cauchy's largest gap at least 10 times normal's, on the 95% interval of "
                                         "the factor when there are per-task samples (above 1: partly)",
                   report="\n".join(lines), uncertainty=uncertainty)


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
            tight, margin, nearest = _margins(X, centers, tau, family)
            gap = smoothing_gap(X, centers, "l2", tau).sum(dim=1)
            rows.append(dict(family=family, centers=where,
                             exact_fraction=tight.float().mean().item(),
                             median_margin=margin.median().item(),
                             median_nearest_sqdist=nearest.median().item(),
                             gap_share=(gap / kmeans_objective(X, centers)).median().item()))
    return pd.DataFrame(rows).set_index(["family", "centers"])


def margin_report(margins, tau: float = 0.1) -> str:
    """Two lines on :func:`smoothing_margins` at the initial centers (chapter 13).

    The fraction of exactly smoothed points per family, and the median margin
    of cauchy against the range of the other families: point values to read.
    Whether cauchy stands out is decided on intervals over tasks by
    :func:`cauchy_stands_out`.

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
    Fraction of points where L2 smoothing is exact at the initial centers: normal 0.70, cauchy 0.20.
    Median margin between the two nearest centers: cauchy 0.03, other families 0.25 to 0.25 (tau = 0.1).
    """
    initial = margins.xs("initial centers", level="centers")
    others = [f for f in initial.index if f != "cauchy"]
    margin = initial.median_margin
    return (
        "Fraction of points where L2 smoothing is exact at the initial centers: "
        + ", ".join(f"{family} {initial.loc[family, 'exact_fraction']:.2f}"
                    for family in initial.index)
        + ".\n"
        f"Median margin between the two nearest centers: cauchy {margin['cauchy']:.2g}, "
        f"other families {margin[others].min():.2g} to {margin[others].max():.2g} (tau = {tau})."
    )


def margin_samples(tests: dict, tau: float = 0.1) -> pd.DataFrame:
    """Per task, at its initial centers: the share of points where L2 smoothing is exact and the median margin.

    The per-task values behind the first rows of :func:`smoothing_margins` (chapter 13), the samples
    of :func:`cauchy_stands_out`'s intervals. The margin of a point is the difference of the squared
    distances to its two nearest centers; smoothing is exact where it is at least ``tau``.

    Parameters
    ----------
    tests : dict
        ``family -> (X, C)``, from :func:`~kmtrf_core.tasks.family_tasks`.
    tau : float
        Penalty of the L2-regularized min.

    Returns
    -------
    pandas.DataFrame
        Indexed by ``(family, task)``; columns ``exact_fraction`` and ``median_margin``.

    Examples
    --------
    >>> tests = family_tasks(3, 20, 2, 3, families=("normal", "cauchy"), generator=0)
    >>> samples = margin_samples(tests)
    >>> samples.shape, list(samples.index.names), bool(samples.exact_fraction.between(0, 1).all())
    ((6, 2), ['family', 'task'], True)
    """
    if not isinstance(tests, dict) or not tests:
        raise ValueError("tests must be a non-empty dict family -> (X, C)")
    frames = []
    for family, (X, C) in tests.items():
        tight, margin, _ = _margins(X, C, tau, family)
        frames.append(pd.DataFrame({
            "family": family, "task": range(X.shape[0]),
            "exact_fraction": tight.double().mean(dim=1).cpu().numpy(),
            "median_margin": margin.median(dim=1).values.double().cpu().numpy()}))
    return pd.concat(frames).set_index(["family", "task"])


def _margins(X, centers, tau: float, family: str) -> tuple:
    """Per point ``(B, n)``: whether L2 smoothing is exact, the margin between the two nearest centers
    (difference of their squared distances) and the squared distance to the nearest."""
    try:
        check_points_centers(X, centers, k_le_n=False)
    except ValueError as error:
        raise ValueError(f"tests[{family!r}]: {error}") from None
    r = sqdist(X, centers)
    two = r.topk(2, dim=-1, largest=False).values
    return sparsemax_is_tight(r, tau), two[..., 1] - two[..., 0], two[..., 0]


def cauchy_stands_out(samples) -> tuple[str, str]:
    """Do cauchy tasks have fewer exactly smoothed points and smaller margins than every other family?

    Decided on 95% intervals over tasks (chapter 13): for each other family and each of the two
    measures of :func:`margin_samples`, the mean over tasks of cauchy's value minus the other
    family's, unpaired since the families' tasks differ
    (:func:`~kmtrf_core.book.uncertainty.compare` with ``paired=False``). The measured side of the
    paper's hypothesis on the Cauchy problem.

    Parameters
    ----------
    samples : pandas.DataFrame
        From :func:`margin_samples`, holding cauchy and at least one other family.

    Returns
    -------
    (str, str)
        The answer: ``"yes"`` when every interval lies below 0 (cauchy lower on both measures than
        every other family), ``"no"`` when some interval lies above 0, else ``"inconclusive"``; and
        the report, one line per comparison and the answer.

    Examples
    --------
    >>> rng = np.random.default_rng(0)
    >>> def family(exact, margin):
    ...     return pd.DataFrame({"exact_fraction": exact + 0.05 * rng.standard_normal(64),
    ...                          "median_margin": margin + 0.01 * rng.standard_normal(64)})
    >>> samples = pd.concat({"normal": family(0.7, 0.25), "cauchy": family(0.2, 0.03)},
    ...                     names=["family", "task"])
    >>> answer, report = cauchy_stands_out(samples)
    >>> answer, report.splitlines()[-1].split("? ")[-1]
    ('yes', 'cauchy lower in 2 of 2 comparisons, higher in 0 -> yes')
    >>> samples = pd.concat({"normal": family(0.7, 0.25), "cauchy": family(0.69, 0.03)},
    ...                     names=["family", "task"])
    >>> cauchy_stands_out(samples)[0]
    'inconclusive'
    """
    check_table(samples.reset_index(), "samples", ["family", "exact_fraction", "median_margin"])
    families = list(dict.fromkeys(samples.index.get_level_values("family")))
    others = [f for f in families if f != "cauchy"]
    if "cauchy" not in families or not others:
        raise ValueError(f"samples must hold cauchy and at least one other family, got {families}")
    measures = {"exact_fraction": "share of points with exact smoothing",
                "median_margin": "median margin between the two nearest centers"}
    lines = ["Per task at the initial centers, cauchy minus each other family (mean over tasks; 95% intervals, "
             "unpaired: different tasks):"]
    verdicts = []
    for column, words in measures.items():
        cauchy = samples.loc["cauchy", column].to_numpy(dtype=float)
        for other in others:
            outcome = compare(cauchy, samples.loc[other, column].to_numpy(dtype=float), paired=False)
            verdicts.append(outcome.verdict)
            lines.append(f"  {words}, cauchy - {other}: {outcome.text()}")
    lower, higher = verdicts.count("reproduced"), verdicts.count("not reproduced")
    answer = "yes" if lower == len(verdicts) else "no" if higher else "inconclusive"
    lines.append(f"Do cauchy tasks have both fewer points with exact smoothing and smaller margins than every "
                 f"other family? cauchy lower in {lower} of {len(verdicts)} comparisons, higher in {higher} "
                 f"-> {answer}")
    return answer, "\n".join(lines)
