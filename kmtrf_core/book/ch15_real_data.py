"""Chapter 15 (``book/15_real_data.ipynb``): real data sets clustered by Lloyd, KMeans and learned layers.

The chapter asks what a practitioner asks: on data the layer never
saw, does a learned step beat Lloyd's, from the same starts? And does a
broader training distribution (:data:`RECIPES`) transfer better? Everything
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
from ..tasks import SHIFTS, shifted_tasks
from ..validation import check_choice, check_int
from .catalog import MIXED_FAMILIES
from .claims import Finding, verdict

__all__ = ["DATASETS", "RECIPES", "Comparison", "RealData", "compare_methods", "findings", "load_dataset",
           "ratio_figure", "realdata_findings", "recipe_of", "shift_transfer", "summary_table"]

DATASETS = {
    "iris": sk_datasets.load_iris,
    "wine": sk_datasets.load_wine,
    "breast_cancer": sk_datasets.load_breast_cancer,
    "digits": sk_datasets.load_digits,
}
"""Data sets bundled with scikit-learn: name -> loader."""

RECIPES = {
    "plain": dict(family="normal", anisotropic=False),
    "families": dict(family=MIXED_FAMILIES, anisotropic=False),
    "anisotropic": dict(family="normal", anisotropic=True),
    "families+anisotropic": dict(family=MIXED_FAMILIES, anisotropic=True),
}
"""Training distributions, a 2 x 2 design: the paper's normal mixtures (``plain``); each task drawn from
one of :data:`~kmtrf_core.book.catalog.MIXED_FAMILIES`; per-dimension component spreads
(``anisotropic``); both."""


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
        arguments (for example ``dict(layer=wider, pad_to=13)``).
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
        lloyd, seconds = fit(TransformerKMeans(data.k, init=init, max_iter=steps, tol=0.0))
        reference = path_of(lloyd)
        runs = {"Lloyd": (lloyd, seconds)}
        for label, layer in layers.items():
            options = layer if isinstance(layer, dict) else dict(layer=layer)
            runs[label] = fit(TransformerKMeans(data.k, init=init, max_iter=steps, tol=0.0, **options))
        for method, (estimator, seconds) in runs.items():
            path = path_of(estimator)
            paths += [dict(dataset=data.name, method=method, start=s, step=t, inertia=path[t],
                           ratio=path[t] / reference[t]) for t in range(steps + 1)]
            finals.append(dict(dataset=data.name, method=method, start=s, inertia=path[-1],
                               clusters=len(np.unique(estimator.labels_)),
                               ari=adjusted_rand_score(data.y, estimator.labels_),
                               nmi=normalized_mutual_info_score(data.y, estimator.labels_), seconds=seconds))
        sk, seconds = fit(KMeans(data.k, init=init, n_init=1, algorithm="lloyd"))
        ours = TransformerKMeans(data.k, init=init).fit(X)
        match = bool(np.array_equal(ours.labels_, sk.labels_)
                     and np.allclose(ours.cluster_centers_, sk.cluster_centers_, rtol=0, atol=1e-10))
        finals.append(dict(dataset=data.name, method="KMeans", start=s, inertia=sk.inertia_ / n,
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


def findings(summary: pd.DataFrame, steps: int) -> dict:
    """Counts over data sets for the chapter's verdicts, from :func:`summary_table`.

    ``plain_first``/``plain_last``: data sets where the plain layer's median
    ratio to Lloyd is below 1 after the first / the last step; ``broad_better``:
    where some broader recipe has a lower ratio than plain after the last
    step; ``best``: the best recipe per data set at the last step.

    >>> table = pd.DataFrame({"ratio_step1": [0.9, 1.0, 1.2, 1.1], "ratio_step5": [1.1, 1.0, 1.05, 1.2]},
    ...                      index=pd.MultiIndex.from_tuples([("a", "plain"), ("a", "Lloyd"), ("b", "plain"),
    ...                                                       ("b", "families")], names=["dataset", "method"]))
    >>> out = findings(table, 5)
    >>> out["plain_first"], out["plain_last"], out["broad_better"], out["datasets"]
    (1, 0, 0, 2)
    """
    last = f"ratio_step{steps}"
    rows = summary.reset_index()
    layers = rows[rows.method.isin(list(RECIPES))]
    plain = layers[layers.method == "plain"].set_index("dataset")
    broad = layers[layers.method != "plain"]
    best_broad = broad.groupby("dataset")[last].min()
    best = layers.loc[layers.groupby("dataset")[last].idxmin()].set_index("dataset").method
    return dict(
        datasets=len(plain),
        plain_first=int((plain.ratio_step1 < 1).sum()),
        plain_last=int((plain[last] < 1).sum()),
        broad_better=int(sum(best_broad.get(name, np.inf) < plain.loc[name, last] for name in plain.index)),
        best=best.to_dict(),
    )


def realdata_findings(summary: pd.DataFrame, random_summary: pd.DataFrame, finals: pd.DataFrame, steps: int,
                      starts: int) -> dict:
    """The verdicts of chapter 15's four claims, from the k-means++ and the random-start comparisons.

    Parameters
    ----------
    summary, random_summary : pandas.DataFrame
        :func:`summary_table` of the comparisons from k-means++ starts and from random starts.
    finals : pandas.DataFrame
        The k-means++ comparisons' ``finals`` (with ``lloyd_matches_kmeans`` on the KMeans rows).
    steps : int
        ``T``, the last step compared.
    starts : int
        Starts per data set, for the text.

    Returns
    -------
    dict
        Claim id -> :class:`~kmtrf_core.book.claims.Finding` for ``estimator_equals_kmeans``,
        ``realdata_first_step``, ``realdata_many_steps`` (whose report gives the counts per kind
        of start) and ``recipe_transfers`` (whose report names the best recipe per data set).

    Examples
    --------
    >>> index = pd.MultiIndex.from_tuples([("a", "plain"), ("a", "families"), ("b", "plain"), ("b", "families")],
    ...                                   names=["dataset", "method"])
    >>> summary = pd.DataFrame({"ratio_step1": [0.9, 1.1, 1.2, 1.0], "ratio_step5": [1.1, 1.0, 1.3, 1.4]},
    ...                        index=index)
    >>> finals = pd.DataFrame({"dataset": ["a", "b"], "lloyd_matches_kmeans": [True, True]})
    >>> out = realdata_findings(summary, summary, finals, 5, 3)
    >>> {claim: finding.verdict for claim, finding in out.items()}
    {'estimator_equals_kmeans': 'reproduced', 'realdata_first_step': 'partly', 'realdata_many_steps': 'not reproduced', 'recipe_transfers': 'partly'}
    """
    found, found_random = findings(summary, steps), findings(random_summary, steps)
    matches = finals.dropna(subset=["lloyd_matches_kmeans"])
    equal = matches.groupby("dataset").lloyd_matches_kmeans.all()
    n_sets = found["datasets"]
    counts = "\n".join(
        f"{kind} starts: plain layer ahead of Lloyd after step 1 on {f['plain_first']} of {n_sets} data sets, "
        f"after step {steps} on {f['plain_last']}" for kind, f in (("k-means++", found), ("random", found_random)))
    broad = (f"a broader recipe beats plain after step {steps} on {found['broad_better']} of {n_sets} data sets; "
             f"best recipe per data set: {found['best']}")
    return {
        "estimator_equals_kmeans": Finding(
            f"{int(equal.sum())} of {len(equal)} data sets: same labels and centers (1e-10) as KMeans from all "
            f"{starts} shared starts", verdict(int(equal.sum()), len(equal)),
            check="the same labels and centers as KMeans from every start, on every data set"),
        "realdata_first_step": Finding(
            f"plain layer ahead of Lloyd's first step (median over starts) on {found['plain_first']} of {n_sets} "
            f"data sets from k-means++ starts, {found_random['plain_first']} of {n_sets} from random starts",
            verdict(found["plain_first"] + found_random["plain_first"], 2 * n_sets),
            check="median ratio to Lloyd below 1 after step 1, every data set and kind of start", report=counts),
        "realdata_many_steps": Finding(
            f"plain layer ahead of Lloyd after {steps} steps on {found['plain_last']} of {n_sets} data sets "
            f"(k-means++ starts), {found_random['plain_last']} (random)",
            verdict(found["plain_last"] + found_random["plain_last"], 2 * n_sets),
            check=f"median ratio to Lloyd below 1 after step {steps}, every data set and kind of start",
            report=counts),
        "recipe_transfers": Finding(
            f"a broader recipe beats plain after {steps} steps on {found['broad_better']} of {n_sets} data sets; "
            f"best: {found['best']}", verdict(found["broad_better"], n_sets),
            check=f"some broader recipe below plain after step {steps}, every data set", report=broad),
    }
