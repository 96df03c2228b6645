"""k-means++ with its passes on a torch device (kmtrf_core.estimator.seeding) against scikit-learn's."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from sklearn.cluster import KMeans
from sklearn.cluster import kmeans_plusplus as sklearn_kmeans_plusplus

from kmtrf_core import TransformerKMeans
from kmtrf_core.estimator import fused
from kmtrf_core.estimator.seeding import kmeans_plusplus


def _data(seed: int, n: int = 1200, d: int = 4, dtype=np.float64):
    rng = np.random.default_rng(seed)
    X = np.concatenate([rng.normal(loc=rng.uniform(-8, 8, size=d), size=(n // 6, d)) for _ in range(6)])
    return (X - X.mean(axis=0)).astype(dtype)


@pytest.mark.parametrize("weighted", [False, True])
@pytest.mark.parametrize("seed", range(6))
def test_float64_picks_what_scikit_learn_picks(seed, weighted):
    rng = np.random.default_rng(100 + seed)
    X = _data(seed, n=int(rng.integers(60, 2400)), d=int(rng.integers(1, 9)))
    k = int(rng.integers(1, 25))
    w = rng.uniform(0, 3, size=len(X)) if weighted else None
    expected_centers, expected = sklearn_kmeans_plusplus(X, k, sample_weight=w, random_state=seed)
    centers, indices = kmeans_plusplus(torch.from_numpy(X), k, seed, sample_weight=w, chunk=int(rng.integers(5, 700)))
    np.testing.assert_array_equal(indices, expected)
    np.testing.assert_array_equal(centers.numpy(), expected_centers)


def test_chunks_and_given_norms_change_nothing():
    X = torch.from_numpy(_data(1))
    whole = kmeans_plusplus(X, 9, 3, chunk=10**6)[1]
    parts = kmeans_plusplus(X, 9, 3, chunk=17, x_squared_norms=(X * X).sum(1))[1]
    np.testing.assert_array_equal(whole, parts)


def test_local_trials_and_weights_are_honoured():
    X = _data(2)
    w = np.ones(len(X))
    w[::2] = 0.0  # points of weight 0 are never drawn
    for trials in (1, 2, 7):
        indices = kmeans_plusplus(torch.from_numpy(X), 12, 0, sample_weight=w, n_local_trials=trials)[1]
        assert (indices % 2 == 1).all() and len(set(indices.tolist())) == 12
        expected = sklearn_kmeans_plusplus(X, 12, sample_weight=w, random_state=0, n_local_trials=trials)[1]
        np.testing.assert_array_equal(indices, expected)


def test_float32_picks_rows_of_the_data_and_repeats_itself():
    X = torch.from_numpy(_data(3, dtype=np.float32))
    centers, indices = kmeans_plusplus(X, 10, 5)
    assert centers.dtype == torch.float32 and len(set(indices.tolist())) == 10
    torch.testing.assert_close(centers, X[torch.from_numpy(indices)], rtol=0, atol=0)
    np.testing.assert_array_equal(indices, kmeans_plusplus(X, 10, 5)[1])


def test_the_seeding_spreads_centers_as_well_as_scikit_learn():
    # the potential after seeding (the k-means objective of the seeds), over twenty seeds: same distribution
    X = _data(4, dtype=np.float32)
    ours = [KMeans(12, init=kmeans_plusplus(torch.from_numpy(X), 12, s)[0].numpy(), n_init=1, max_iter=1).fit(X)
            .inertia_ for s in range(20)]
    theirs = [KMeans(12, init="k-means++", n_init=1, max_iter=1, random_state=s).fit(X).inertia_ for s in range(20)]
    assert np.median(ours) <= 1.1 * np.median(theirs)


@pytest.mark.parametrize("torch_pass", [False, True])
def test_streamed_fit_seeds_on_the_device_and_equals_kmeans(monkeypatch, torch_pass):
    # stream=True runs the device seeding (the path a GPU takes) on the CPU
    if torch_pass:
        monkeypatch.setattr(fused, "AVAILABLE", False)
    X = _data(5, n=3000, d=5)
    calls = []
    original = kmeans_plusplus

    def spy(*args, **kwargs):
        calls.append(1)
        return original(*args, **kwargs)

    monkeypatch.setattr("kmtrf_core.estimator.seeding.kmeans_plusplus", spy)
    ref = KMeans(7, random_state=11, n_init=3).fit(X)
    ours = TransformerKMeans(7, random_state=11, n_init=3, chunk_size=256, stream=True).fit(X)
    assert len(calls) == 3
    np.testing.assert_array_equal(ours.labels_, ref.labels_)
    np.testing.assert_allclose(ours.cluster_centers_, ref.cluster_centers_, rtol=1e-12, atol=1e-12)
    assert ours.n_iter_ == ref.n_iter_


@pytest.mark.parametrize("call,match", [
    (lambda X: kmeans_plusplus(X.numpy(), 3), "floating"),
    (lambda X: kmeans_plusplus(X[:, 0], 3), "floating"),
    (lambda X: kmeans_plusplus(X.long(), 3), "floating"),
    (lambda X: kmeans_plusplus(X[:2], 3), "n_samples=2 should be >= n_clusters=3"),
    (lambda X: kmeans_plusplus(X, 0), "n_clusters must be >= 1"),
    (lambda X: kmeans_plusplus(X, 3, n_local_trials=0), "n_local_trials"),
    (lambda X: kmeans_plusplus(X, 3, sample_weight=np.ones(5)), "sample_weight.shape"),
    (lambda X: kmeans_plusplus(X, 3, sample_weight=np.full(len(X), np.nan)), "finite and non-negative"),
    (lambda X: kmeans_plusplus(X, 3, sample_weight=-np.ones(len(X))), "finite and non-negative"),
    (lambda X: kmeans_plusplus(X, 3, sample_weight=np.zeros(len(X))), "not all zero"),
    (lambda X: kmeans_plusplus(torch.where(X > 1, torch.nan, X), 3), "X holds NaN or inf"),
    (lambda X: kmeans_plusplus(X * 1e200, 1), "overflow"),
])
def test_mistakes_are_named(call, match):
    with pytest.raises(ValueError, match=match):
        call(torch.from_numpy(_data(0, n=40)))
