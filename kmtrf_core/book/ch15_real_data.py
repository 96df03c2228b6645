"""Chapter 15 (``book/15_real_data.ipynb``): real data sets clustered by Lloyd, KMeans and learned layers.

The chapter asks what a practitioner asks: on data the layer never
saw, does a learned step beat Lloyd's, from the same starts? And does a
broader training distribution (:data:`RECIPES`; the one tested, :data:`BROAD`, fixed
before looking) transfer better? Everything
here goes through :class:`~kmtrf_core.estimator.TransformerKMeans`; the
layers come from the book's catalog (groups ``realdata_<name>``, whose sizes
are :data:`~kmtrf_core.book.catalog.DATASET_SIZES`). :func:`realdata_findings`
turns the comparisons into the verdicts of the chapter's four claims.

Nothing is downloaded: the four data sets are bundled with scikit-learn.
"""

from __future__ import annotations

import time
import warnings
from typing import NamedTuple

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import torch  # noqa: F401  (the doctests use it)
from sklearn import datasets as sk_datasets
from sklearn.cluster import KMeans, kmeans_plusplus
from sklearn.exceptions import ConvergenceWarning
from sklearn.metrics import adjusted_rand_score, normalized_mutual_info_score

from ..estimator import TransformerKMeans
from ..evaluate import evaluate_models, final_ratios
from ..model import ClusterTransformer
from ..tasks import SHIFTS, shifted_tasks
from ..validation import check_choice, check_int
from .catalog import MIXED_FAMILIES
from .claims import Finding, verdict
from .comparisons import MARGIN
from .uncertainty import combine, compare, point_value, tally, versus_text

__all__ = ["BROAD", "DATASETS", "RECIPES", "Comparison", "RealData", "compare_methods", "load_dataset",
           "ratio_figure", "realdata_findings", "recipe_of", "shift_transfer", "start_ratios", "summary_table"]

DATASETS = {
    "iris": sk_datasets.load_iris,
    "wine": sk_datasets.load_wine,
    "breast_cancer": sk_datasets.load_breast_cancer,
    "digits": sk_datasets.load_digits,
}
"""Data sets bundled with scikit-learn: name -> loader."""

RECIPES = {
    "plain": dict(family="normal", anisotropic=False),
    "families+anisotropic": dict(family=MIXED_FAMILIES, anisotropic=True),
}
"""The training distributions of the chapter's layers: the paper's equally weighted normal mixtures
(``plain``), and the broad recipe, where each task is drawn from one of
:data:`~kmtrf_core.book.catalog.MIXED_FAMILIES` and each component gets its own spread per dimension.
The two single-factor recipes (families only, anisotropic only) are not trained: with one recipe tested,
fixed before looking, they would only be shown, and three seeds of each cost more than the book's
time budget allows."""


def recipe_of(config) -> str:
    """The :data:`RECIPES` name of a training config.

    >>> from kmtrf_core.training import TrainConfig
    >>> recipe_of(TrainConfig(family=MIXED_FAMILIES, anisotropic=True))
    'families+anisotropic'
    """
    for name, fields in RECIPES.items():
        if all(getattr(config, key) == value for key, value in fields.items()):
            return name
    raise ValueError(f"config matches no recipe: family={config.family!r}, anisotropic={config.anisotropic!r}")


class RealData(NamedTuple):
    """A data set scaled per feature into ``[0, 1]`` (as the training tasks are), with its classes.

    >>> data = RealData("toy", np.zeros((4, 2)), np.array([0, 0, 1, 1]), 2)
    >>> data.d, data.k
    (2, 2)
    """

    name: str
    X: np.ndarray
    y: np.ndarray
    k: int

    @property
    def d(self) -> int:
        return self.X.shape[1]


def load_dataset(name: str) -> RealData:
    """One of :data:`DATASETS`, min-max scaled per feature (a constant feature becomes 0); ``k`` = its classes.

    >>> data = load_dataset("iris")
    >>> data.X.shape, data.k, float(data.X.min()), float(data.X.max())
    ((150, 4), 3, 0.0, 1.0)
    """
    name = check_choice(name, "dataset", tuple(DATASETS))
    bunch = DATASETS[name]()
    X = np.asarray(bunch.data, dtype=np.float64)
    lo, span = X.min(axis=0), np.ptp(X, axis=0)
    X = (X - lo) / np.where(span > 0, span, 1.0)
    return RealData(name, X, np.asarray(bunch.target), int(len(np.unique(bunch.target))))


class Comparison(NamedTuple):
    """What :func:`compare_methods` measured.

    * ``paths``: one row per (method, start, step): ``inertia`` (mean squared
      distance to the nearest center) and ``ratio`` (over Lloyd's at the same
      start and step);
    * ``finals``: one row per (method, start) after the last step: ``inertia``,
      ``clusters`` (distinct labels: a layer can merge clusters), ``ari``,
      ``nmi`` (against the known classes), ``seconds`` (the fit).

    >>> Comparison(pd.DataFrame(), pd.DataFrame())._fields
    ('paths', 'finals')
    """

    paths: pd.DataFrame
    finals: pd.DataFrame


def compare_methods(data: RealData, layers: dict, starts: int, steps: int, seed: int = 0,
                    init: str = "k-means++") -> Comparison:
    """Lloyd, each layer, and scikit-learn's KMeans from the same starts.

    Every start ``s`` draws initial centers with scikit-learn's k-means++
    (``random_state = seed + s``), or, with ``init="random"``, as ``k``
    distinct points of the data, the way the training tasks draw theirs
    (Appendix D); Lloyd (``TransformerKMeans(layer="lloyd")``)
    and each layer run ``steps`` steps from them (``tol = 0``), and
    ``KMeans(init=those centers, n_init=1)`` runs to its own convergence.
    ``lloyd_matches_kmeans`` in ``finals`` says whether our Lloyd, run to
    convergence from the same centers, gave KMeans's labels and centers
    (to 1e-10).

    Parameters
    ----------
    data : RealData
    layers : dict
        Label -> :class:`~kmtrf_core.model.ClusterTransformer` for ``(data.d, data.k)``,
        or -> a dict of :class:`~kmtrf_core.estimator.TransformerKMeans`
        arguments (for example ``dict(layer=wider, pad_to=13)``). An ensemble runs each of its
        members from every start (column ``member`` of the tables; 0 for everything else).
    starts : int
        Initial centers drawn.
    steps : int
        Steps of Lloyd and of each layer.
    seed : int
        The first start's seed.

    Returns
    -------
    Comparison

    Examples
    --------
    >>> from kmtrf_core.model import ClusterTransformer
    >>> data = load_dataset("iris")
    >>> out = compare_methods(data, {"construction": ClusterTransformer.from_lloyd(4, 3)}, starts=2, steps=3)
    >>> bool(np.allclose(out.paths[out.paths.method == "construction"].ratio, 1.0))
    True
    >>> bool(out.finals[out.finals.method == "KMeans"].lloyd_matches_kmeans.all())
    True
    """
    check_int(starts, "starts")
    check_int(steps, "steps")
    init_kind = check_choice(init, "init", ("k-means++", "random"))
    X, n = data.X, data.X.shape[0]
    paths, finals = [], []
    expanded = {}  # (label, member) -> TransformerKMeans options: an ensemble runs member by member
    for label, layer in layers.items():
        options = dict(layer) if isinstance(layer, dict) else dict(layer=layer)
        model = options.get("layer")
        if isinstance(model, ClusterTransformer) and model.ensemble:
            for member, single in enumerate(model.members()):
                expanded[(label, member)] = {**options, "layer": single}
        else:
            expanded[(label, 0)] = options

    def fit(estimator):
        start = time.perf_counter()
        with warnings.catch_warnings():  # a layer that merges clusters is counted in `clusters`, not warned about
            warnings.simplefilter("ignore", ConvergenceWarning)
            estimator.fit(X)
        return estimator, time.perf_counter() - start

    def path_of(estimator):
        path = np.asarray(estimator.inertia_path_) / n
        return np.concatenate([path, np.full(steps + 1 - len(path), path[-1])])  # Lloyd may stop early

    for s in range(starts):
        if init_kind == "k-means++":
            init = kmeans_plusplus(X, data.k, random_state=seed + s)[0]
        else:
            init = X[np.random.RandomState(seed + s).choice(n, data.k, replace=False)]
        lloyd, seconds = fit(TransformerKMeans(data.k, init=init, max_iter=steps, tol=0.0, empty="keep"))
        reference = path_of(lloyd)
        runs = {("Lloyd", 0): (lloyd, seconds)}
        for label, options in expanded.items():
            runs[label] = fit(TransformerKMeans(data.k, init=init, max_iter=steps, tol=0.0, **options))
        for (method, member), (estimator, seconds) in runs.items():
            path = path_of(estimator)
            paths += [dict(dataset=data.name, method=method, member=member, start=s, step=t, inertia=path[t],
                           ratio=path[t] / reference[t]) for t in range(steps + 1)]
            finals.append(dict(dataset=data.name, method=method, member=member, start=s, inertia=path[-1],
                               clusters=len(np.unique(estimator.labels_)),
                               ari=adjusted_rand_score(data.y, estimator.labels_),
                               nmi=normalized_mutual_info_score(data.y, estimator.labels_), seconds=seconds))
        sk, seconds = fit(KMeans(data.k, init=init, n_init=1, algorithm="lloyd"))
        ours = TransformerKMeans(data.k, init=init).fit(X)
        match = bool(np.array_equal(ours.labels_, sk.labels_)
                     and np.allclose(ours.cluster_centers_, sk.cluster_centers_, rtol=0, atol=1e-10))
        finals.append(dict(dataset=data.name, method="KMeans", member=0, start=s, inertia=sk.inertia_ / n,
                           clusters=len(np.unique(sk.labels_)),
                           ari=adjusted_rand_score(data.y, sk.labels_),
                           nmi=normalized_mutual_info_score(data.y, sk.labels_), seconds=seconds,
                           lloyd_matches_kmeans=match, kmeans_iterations=sk.n_iter_))
    return Comparison(pd.DataFrame(paths), pd.DataFrame(finals))


def summary_table(comparisons, step: int | None = None) -> pd.DataFrame:
    """Per data set and method: the median over starts of the ratio to Lloyd at ``step`` (default: the last).

    Also the medians of the final ``inertia``, ``clusters``, ``ari``, ``nmi`` and ``seconds``.

    >>> from kmtrf_core.model import ClusterTransformer
    >>> out = compare_methods(load_dataset("iris"), {"c": ClusterTransformer.from_lloyd(4, 3)}, 2, 2)
    >>> float(summary_table([out]).loc[("iris", "c"), "ratio_step1"])
    1.0
    """
    comparisons = list(comparisons)
    paths = pd.concat([c.paths for c in comparisons], ignore_index=True)
    finals = pd.concat([c.finals for c in comparisons], ignore_index=True)
    last = int(paths.step.max()) if step is None else check_int(step, "step", minimum=0)
    ratio = lambda t: paths[paths.step == t].groupby(["dataset", "method"]).ratio.median()  # noqa: E731
    table = pd.DataFrame({"ratio_step1": ratio(1), f"ratio_step{last}": ratio(last)})
    medians = finals.groupby(["dataset", "method"])[["inertia", "clusters", "ari", "nmi", "seconds"]].median()
    return table.join(medians, how="outer").round(4)


def shift_transfer(layers: dict, d: int, k: int, n: int, tasks: int, steps: int, seed: int = 50_000):
    """Each layer against Lloyd on synthetic tasks at ``(d, k)``: the training distribution and the shifts of Fig. 7.

    Returns the median over tasks' mean ratio to Lloyd (:func:`~kmtrf_core.evaluate.final_ratios`)
    after 1 and after ``steps`` re-embedded steps, one row per (layer, test).

    >>> from kmtrf_core.model import ClusterTransformer
    >>> table = shift_transfer({"c": ClusterTransformer.from_lloyd(2, 3, dtype=torch.float32)}, 2, 3, 16, 4, 2)
    >>> sorted(set(table.test)) == sorted(["normal", *SHIFTS])
    True
    """
    tests = {"normal": shifted_tasks(None, tasks, n, d, k, generator=seed)}
    for i, shift in enumerate(SHIFTS):
        tests[shift] = shifted_tasks(shift, tasks, n, d, k, generator=seed + 1 + i)
    table = evaluate_models(layers, tests, steps=steps)
    first = final_ratios(table, step=1)["median"].rename("ratio_step1")
    last = final_ratios(table, step=steps)["median"].rename(f"ratio_step{steps}")
    return pd.concat([first, last], axis=1).reset_index().drop(columns="mode")


def ratio_figure(comparisons, caption: str):
    """One panel per data set: the median over starts of each method's objective over Lloyd's, per step.

    Below 1 the method is ahead of Lloyd at that step, from the same start.

    >>> from kmtrf_core.model import ClusterTransformer
    >>> out = compare_methods(load_dataset("iris"), {"c": ClusterTransformer.from_lloyd(4, 3)}, 2, 2)
    >>> fig = ratio_figure([out], "a test")
    >>> [ax.get_title() for ax in fig.axes]
    ['iris']
    >>> plt.close(fig)
    """

    comparisons = list(comparisons)
    fig, axes = plt.subplots(1, len(comparisons), figsize=(3.4 * len(comparisons), 3.3), squeeze=False)
    for ax, comparison in zip(axes[0], comparisons):
        paths = comparison.paths
        for method, part in paths.groupby("method", sort=False):
            median = part.groupby("step").ratio.median()
            ax.plot(median.index, median.values, marker="o", markersize=3, label=method,
                    color="black" if method == "Lloyd" else None, linestyle="--" if method == "Lloyd" else "-")
        name = paths.dataset.iloc[0]
        ax.set_title(name, fontsize=9)
        ax.set_xlabel("step")
        ax.set_yscale("log")
    axes[0][0].set_ylabel("k-means objective / Lloyd's (median over starts)")
    axes[0][-1].legend(fontsize=7)
    fig.suptitle(caption, fontsize=8)
    fig.tight_layout()
    return fig


BROAD = "families+anisotropic"
"""The broader recipe that ``recipe_transfers`` tests against ``plain``, fixed before looking at any result
(the broadest of :data:`RECIPES`); the other two recipes are shown, not tested."""


def start_ratios(comparisons, method: str, step: int) -> dict:
    """Per data set, the ratio to Lloyd of ``method`` at ``step`` from every start: the samples of the intervals.

    Parameters
    ----------
    comparisons : sequence of Comparison
        From :func:`compare_methods` (one per data set).
    method : str
        A method label of the comparisons.
    step : int
        The step read.

    Returns
    -------
    dict
        Data set -> float64 array ``(members, starts)``, in the order of the members and the starts
        (paired across methods: the same starts; members pair by index, which is the training seed for
        two layers of one catalog group, since a group's runs share their seeds).

    >>> from kmtrf_core.model import ClusterTransformer
    >>> out = compare_methods(load_dataset("iris"), {"c": ClusterTransformer.from_lloyd(4, 3)}, 3, 2)
    >>> start_ratios([out], "c", 1)["iris"].round(6).tolist()
    [[1.0, 1.0, 1.0]]
    """
    out = {}
    for comparison in comparisons:
        paths = comparison.paths
        part = paths[(paths.method == method) & (paths.step == step)]
        if part.empty:
            raise ValueError(f"no method {method!r} at step {step} in the comparison")
        table = part.pivot(index="member", columns="start", values="ratio").sort_index().sort_index(axis=1)
        out[str(part.dataset.iloc[0])] = table.to_numpy(dtype=float)
    return out


def _counted(outcomes: dict) -> str:
    verdicts = [c.verdict for c in outcomes.values()]
    return (f"{verdicts.count('reproduced')} of {len(verdicts)} (95% intervals over starts and training seeds; "
            f"{tally(verdicts, None, 'not')})")


def realdata_findings(comparisons, random_comparisons, finals: pd.DataFrame, steps: int, starts: int,
                      margin: float = MARGIN) -> dict:
    """The verdicts of chapter 15's four claims, decided on intervals over the shared starts and the seeds.

    Parameters
    ----------
    comparisons, random_comparisons : sequence of Comparison
        :func:`compare_methods` per data set, from k-means++ starts and from random starts.
    finals : pandas.DataFrame
        The k-means++ comparisons' ``finals`` (with ``lloyd_matches_kmeans`` on the KMeans rows).
    steps : int
        ``T``, the last step compared.
    starts : int
        Starts per data set, for the text.
    margin : float
        How much lower than plain's ratio :data:`BROAD`'s must be (paired over starts) to count.

    Returns
    -------
    dict
        Claim id -> :class:`~kmtrf_core.book.claims.Finding` for ``estimator_equals_kmeans``,
        ``realdata_first_step`` and ``realdata_many_steps`` (the plain layer below Lloyd per data set
        and kind of start, each 95% interval over starts below 1) and ``recipe_transfers``
        (:data:`BROAD` below plain by ``margin`` on every data set after ``T`` steps, k-means++ starts).

    Examples
    --------
    >>> from kmtrf_core.model import ClusterTransformer
    >>> data = load_dataset("iris")
    >>> layers = {"plain": ClusterTransformer.from_lloyd(4, 3), BROAD: ClusterTransformer.from_lloyd(4, 3)}
    >>> out = compare_methods(data, layers, 4, 2)
    >>> found = realdata_findings([out], [out], out.finals, 2, 4)
    >>> {claim: finding.verdict for claim, finding in found.items()}
    {'estimator_equals_kmeans': 'reproduced', 'realdata_first_step': 'inconclusive', 'realdata_many_steps': 'inconclusive', 'recipe_transfers': 'not reproduced'}
    """
    matches = finals.dropna(subset=["lloyd_matches_kmeans"])
    equal = matches.groupby("dataset").lloyd_matches_kmeans.all()
    kinds = {"k-means++": list(comparisons), "random": list(random_comparisons)}

    def ahead(step):
        outcomes, points = {}, {}
        for kind, found in kinds.items():
            for name, values in start_ratios(found, "plain", step).items():
                outcomes[(name, kind)] = compare(values, 1.0)
                points[(name, kind)] = point_value(values)
        return outcomes, points

    def finding(step, check):
        outcomes, points = ahead(step)
        outcome = combine(c.verdict for c in outcomes.values())
        lines = [f"{name}, {kind} starts: plain layer {points[(name, kind)]:.3f} of Lloyd after step {step} "
                 f"({c.text()} from 1) -> {c.verdict}" for (name, kind), c in outcomes.items()]
        value = (f"plain layer below Lloyd after step {step} (mean over {starts} starts, median over training seeds) in "
                 f"{_counted(outcomes)} (data set, kind of start) cases; means "
                 f"{min(points.values()):.3f} to {max(points.values()):.3f}")
        return Finding(value, outcome, check=check, report="\n".join(lines),
                       uncertainty="; ".join(f"{name}/{kind}: {c.text()}" for (name, kind), c in outcomes.items()))

    plain_last = start_ratios(kinds["k-means++"], "plain", steps)
    broad_last = start_ratios(kinds["k-means++"], BROAD, steps)
    recipes = {name: compare(broad_last[name], plain_last[name], margin) for name in plain_last}
    recipe_outcome = combine(c.verdict for c in recipes.values())
    recipe_lines = [f"{name}, after step {steps}: "
                    + versus_text(BROAD, broad_last[name], "plain", plain_last[name], c, "training seed")
                    + f" -> {c.verdict}" for name, c in recipes.items()]
    return {
        "estimator_equals_kmeans": Finding(
            f"{int(equal.sum())} of {len(equal)} data sets: same labels and centers (1e-10) as KMeans from all "
            f"{starts} shared starts", verdict(int(equal.sum()), len(equal)),
            check="the same labels and centers as KMeans from every start, on every data set"),
        "realdata_first_step": finding(
            1, "mean ratio to Lloyd over starts below 1 after step 1, its 95% interval below, every data set "
               "and kind of start"),
        "realdata_many_steps": finding(
            steps, f"mean ratio to Lloyd over starts below 1 after step {steps}, its 95% interval below, every "
                   "data set and kind of start"),
        "recipe_transfers": Finding(
            f"{BROAD} below plain by {margin:g} after {steps} steps (k-means++ starts, paired) on "
            f"{_counted(recipes)} data sets", recipe_outcome,
            check=f"{BROAD} (fixed before looking) below plain by at least {margin:g} on every data set, the 95% "
                  "interval over starts (paired) and training seeds of the difference on one side",
            report="\n".join(recipe_lines),
            uncertainty="; ".join(f"{name}: {c.text()}" for name, c in recipes.items())),
    }
