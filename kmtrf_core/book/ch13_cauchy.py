"""Chapter 13 (``book/13_cauchy.ipynb``): why training on Cauchy tasks fails (Figures 4 and 5).

The layers are the catalog's (group ``section4_families``), the loss surfaces
the paper room's (:func:`~kmtrf_core.landscape.loss_surface`). This module
reads them:

* :func:`family_convergence`, :func:`family_training_finding`: Figure 4 and the claim ``cauchy_fails``;
* :func:`gap_finding`: Figure 5 and the claim ``cauchy_gap``;
* :func:`smoothing_margins`, :func:`margin_report`, :func:`cauchy_stands_out`:
  where the smoothing gap comes from, per family (the paper's hypothesis, measured).
"""

from __future__ import annotations

import numpy as np  # noqa: F401  (the doctests use it)
import pandas as pd
import torch

from ..attention import sqdist
from ..lloyd import kmeans_objective
from ..objectives import smoothing_gap, sparsemax_is_tight
from ..tasks import FAMILIES, family_tasks  # noqa: F401  (family_tasks: the doctests)
from ..training import convergence_summary
from .claims import Finding, verdict

__all__ = ["cauchy_stands_out", "family_convergence", "family_training_finding", "gap_finding", "margin_report",
           "smoothing_margins"]


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
    others = [f for f in per_family.index if f != "cauchy"]
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
    return Finding(value, verdict(worst), check="cauchy's final relative validation loss above every other family's",
                   report="\n".join(lines))


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
    return Finding(value, outcome, check="cauchy's largest gap at least 10 times normal's (above 1: partly)",
                   report="\n".join(lines))


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
    others = [f for f in initial.index if f != "cauchy"]
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
    others = [f for f in initial.index if f != "cauchy"]
    return bool(initial.exact_fraction.idxmin() == "cauchy"
                and initial.loc["cauchy", "median_margin"]
                < initial.loc[others, "median_margin"].min())
