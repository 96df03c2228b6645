"""TransformerKMeans as a drop-in for scikit-learn's KMeans: the same code, run against both, must agree.

Each test is a habit of code that uses ``KMeans`` (defaults, seeds, warm starts, pipelines, grid
search, pickling, warnings, error messages) run once with ``KMeans`` and once with
``TransformerKMeans`` in its place.
"""

from __future__ import annotations

import inspect
import pickle
import re
import warnings

import numpy as np
import pytest
from sklearn.cluster import KMeans
from sklearn.datasets import make_blobs
from sklearn.exceptions import ConvergenceWarning, NotFittedError
from sklearn.model_selection import GridSearchCV
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler

from kmtrf_core import TransformerKMeans
from kmtrf_core.estimator import fused

BOTH = [KMeans, TransformerKMeans]


@pytest.fixture(autouse=True, params=["fused pass", "torch pass"])
def _pass(request, monkeypatch):
    """Every test runs twice: with the fused numba pass (the CPU default) and with the torch pass (GPUs)."""
    if request.param == "torch pass":
        monkeypatch.setattr(fused, "AVAILABLE", False)
    elif not fused.AVAILABLE:
        pytest.skip("numba is not installed: the fused pass is not used here")


def _data(seed=0, n=600, d=4, k=5, dtype=np.float64):
    X, _ = make_blobs(n, n_features=d, centers=k, cluster_std=2.0, random_state=seed)
    return X.astype(dtype)


def _same_fit(ours, ref, rtol=1e-10):
    np.testing.assert_array_equal(ours.labels_, ref.labels_)
    np.testing.assert_allclose(ours.cluster_centers_, ref.cluster_centers_, rtol=rtol, atol=rtol)
    assert ours.inertia_ == pytest.approx(ref.inertia_, rel=rtol)
    assert ours.n_iter_ == ref.n_iter_


def test_the_shared_parameters_have_kmeans_defaults():
    ours = inspect.signature(TransformerKMeans).parameters
    for name, parameter in inspect.signature(KMeans).parameters.items():
        assert name in ours, name
        assert ours[name].default == parameter.default, name


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("init", ["k-means++", "random"])
def test_default_fits_equal_kmeans(seed, init):
    X = _data(seed)
    ref = KMeans(5, init=init, random_state=seed).fit(X)  # n_init="auto": 1 for k-means++, 10 for random
    ours = TransformerKMeans(5, init=init, random_state=seed).fit(X)
    _same_fit(ours, ref)
    Y = _data(seed + 10)
    np.testing.assert_array_equal(ours.predict(Y), ref.predict(Y))
    np.testing.assert_allclose(ours.transform(Y), ref.transform(Y), rtol=1e-10)
    np.testing.assert_allclose(ours.fit_transform(X), ref.fit_transform(X), rtol=1e-10)
    assert ours.score(Y) == pytest.approx(ref.score(Y), rel=1e-10)


def test_float32_fits_equal_kmeans():
    X = _data(3, dtype=np.float32)
    ref = KMeans(5, random_state=3).fit(X)
    ours = TransformerKMeans(5, random_state=3).fit(X)
    assert ours.cluster_centers_.dtype == ref.cluster_centers_.dtype == np.float32
    np.testing.assert_array_equal(ours.labels_, ref.labels_)
    np.testing.assert_allclose(ours.cluster_centers_, ref.cluster_centers_, rtol=1e-5, atol=1e-5)


def test_a_callable_init_is_called_as_kmeans_calls_it():
    X = _data(4)
    seen = {}

    def init(data, n_clusters, random_state):
        seen.setdefault("means", []).append(data.mean(axis=0))
        return data[random_state.choice(len(data), n_clusters, replace=False)]

    ref = KMeans(5, init=init, n_init=3, random_state=0).fit(X)
    ours = TransformerKMeans(5, init=init, n_init=3, random_state=0).fit(X)
    _same_fit(ours, ref)
    assert np.allclose(seen["means"], 0.0)  # both hand the centered data to the callable


def test_a_warm_start_from_the_fitted_centers():
    X = _data(5)
    first = KMeans(5, random_state=0, max_iter=3).fit(X)
    for estimator in BOTH:
        warm = estimator(5, init=first.cluster_centers_, n_init=1).fit(X)
        assert warm.inertia_ <= first.inertia_ * (1 + 1e-12)
    _same_fit(TransformerKMeans(5, init=first.cluster_centers_).fit(X), KMeans(5, init=first.cluster_centers_).fit(X))


def test_empty_clusters_are_relocated_as_kmeans_does():
    # more centers than the data can fill: several clusters run empty in the first iterations
    rng = np.random.default_rng(0)
    X = np.concatenate([rng.normal(0, 1, (40, 2)), rng.normal(8, 1, (40, 2))])
    init = np.concatenate([X[:3], [[100.0, 100.0], [-100.0, 50.0], [60.0, -90.0]]])
    ref = KMeans(6, init=init, n_init=1, max_iter=50).fit(X)
    ours = TransformerKMeans(6, init=init, max_iter=50).fit(X)
    _same_fit(ours, ref, rtol=1e-12)
    assert len(np.unique(ours.labels_)) == 6
    w = rng.random(len(X)) + 0.5
    ref = KMeans(6, init=init, n_init=1, max_iter=50).fit(X, sample_weight=w)
    ours = TransformerKMeans(6, init=init, max_iter=50).fit(X, sample_weight=w)
    _same_fit(ours, ref, rtol=1e-12)
    kept = TransformerKMeans(6, init=init, max_iter=50, empty="keep")
    with pytest.warns(ConvergenceWarning, match="Number of distinct clusters"):
        kept.fit(X)
    assert len(np.unique(kept.labels_)) < 6


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_a_center_is_at_distance_zero_from_itself(dtype):
    X = _data(6, dtype=dtype)
    km = TransformerKMeans(5, random_state=0).fit(X)
    assert np.all(np.diag(km.transform(km.cluster_centers_)) == 0.0)


def test_pipelines_grid_search_and_pickling():
    X = _data(7)
    grids = {}
    for estimator in BOTH:
        pipe = make_pipeline(StandardScaler(), estimator(random_state=0))
        search = GridSearchCV(pipe, {f"{estimator.__name__.lower()}__n_clusters": [3, 5, 7]}, cv=3).fit(X)
        grids[estimator] = (search.cv_results_["mean_test_score"], search.best_estimator_)
    np.testing.assert_allclose(grids[TransformerKMeans][0], grids[KMeans][0], rtol=1e-10)
    fitted = grids[TransformerKMeans][1]
    again = pickle.loads(pickle.dumps(fitted))
    np.testing.assert_array_equal(again.predict(X), fitted.predict(X))


def test_copy_x_false_restores_the_callers_array():
    X = _data(8)
    original = X.copy()
    ours = TransformerKMeans(5, random_state=0, copy_x=False).fit(X)
    np.testing.assert_allclose(X, original, rtol=0, atol=1e-12)
    _same_fit(ours, KMeans(5, random_state=0, copy_x=False).fit(original.copy()))


def test_verbose_prints_what_kmeans_prints(capsys):
    X = _data(9)
    outputs = []
    for estimator in BOTH:
        estimator(5, random_state=0, verbose=1, tol=0).fit(X)
        outputs.append(re.sub(r"[-+\d.e]+", "#", capsys.readouterr().out).splitlines())
    assert outputs[1] == outputs[0]


def _warnings_of(estimator, X, **params):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        estimator(**params).fit(X)
    return sorted((w.category.__name__, str(w.message).replace(estimator.__name__, "Estimator")) for w in caught
                  if w.category in (RuntimeWarning, ConvergenceWarning))


def test_the_same_warnings_in_the_same_situations():
    X = _data(10)
    for params in (dict(n_clusters=5, init=X[:5], n_init=3), dict(n_clusters=5, init=X[:5], n_init="auto")):
        assert _warnings_of(TransformerKMeans, X, **params) == _warnings_of(KMeans, X, **params)
    duplicates = np.repeat(X[:3], 10, axis=0)  # three distinct points, five clusters asked
    params = dict(n_clusters=5, random_state=0)
    assert _warnings_of(TransformerKMeans, duplicates, **params) == _warnings_of(KMeans, duplicates, **params)
    assert _warnings_of(KMeans, duplicates, **params)  # the situation does warn


MISTAKES = [
    ("centers of the wrong count", dict(n_clusters=3, init=np.zeros((2, 4))), "fit"),
    ("centers of the wrong width", dict(n_clusters=3, init=np.zeros((3, 2))), "fit"),
    ("centers with NaN", dict(n_clusters=3, init=np.full((3, 4), np.nan)), "fit"),
    ("more clusters than points", dict(n_clusters=1000), "fit"),
    ("n_init of 0", dict(n_clusters=3, n_init=0), "fit"),
    ("an unknown init", dict(n_clusters=3, init="kmeans++"), "fit"),
    ("an unknown algorithm", dict(n_clusters=3, algorithm="full"), "fit"),
    ("a negative tol", dict(n_clusters=3, tol=-1.0), "fit"),
    ("predict before fit", dict(n_clusters=3), "predict"),
    ("predict on other features", dict(n_clusters=3), "refit-predict"),
    ("sample weights of the wrong length", dict(n_clusters=3), "weights"),
]


def _message(estimator, params, action):
    X = _data(11)
    try:
        model = estimator(**params)
        if action == "fit":
            model.fit(X)
        elif action == "predict":
            model.predict(X)
        elif action == "refit-predict":
            model.fit(X).predict(X[:, :2])
        elif action == "weights":
            model.fit(X, sample_weight=np.ones(3))
    except (ValueError, NotFittedError) as error:
        return type(error).__name__, str(error).replace(estimator.__name__, "Estimator")
    return None


@pytest.mark.parametrize("what, params, action", MISTAKES, ids=[m[0] for m in MISTAKES])
def test_the_same_mistake_gets_kmeans_words(what, params, action):
    expected = _message(KMeans, params, action)
    assert expected is not None
    assert _message(TransformerKMeans, params, action) == expected
