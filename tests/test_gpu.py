"""Checks that need a CUDA device: skipped elsewhere (CI has no GPU), and the skip says so.

Run them where a GPU is lent: ``.venv/bin/python -m pytest tests/test_gpu.py -v -rs``.
They cover what differs on a GPU: the construction's exactness with CUDA's kernels, a training run
replayed from its seed, a resume, and a training step that never waits for the host (the condition
for capturing it as one CUDA graph).
"""

from __future__ import annotations

import dataclasses

import numpy as np

import pytest
import torch

from kmtrf_core import ClusterTransformer, has_empty_cluster, lloyd, sample_tasks
from kmtrf_core.training import TrainConfig, train
from kmtrf_core.training.config import initial_layer
from kmtrf_core.training.loop import task_generators, training_step

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(),
                                reason="no CUDA device on this machine: the GPU checks run where one is lent")

CUDA = "cuda"
SMALL = TrainConfig(d=4, k=6, n=64, steps=40, batch=8, val_tasks=16, val_every=10, seeds=(0, 1), device=CUDA)


@pytest.mark.parametrize("dtype,tolerance", [(torch.float64, 1e-12), (torch.float32, 1e-5)])
@pytest.mark.parametrize("scheme", ["bn", "oh"])
def test_construction_is_lloyd_on_cuda(scheme, dtype, tolerance):
    X, C = sample_tasks(64, 128, 8, 10, generator=3, dtype=dtype, device=CUDA)
    model = ClusterTransformer.from_lloyd(8, 10, scheme, dtype=dtype, device=CUDA)
    with torch.no_grad():
        out = model(X, C, steps=3)
    expected = lloyd(X, C, steps=3)
    keep = ~has_empty_cluster(X, C, 3)  # an empty cluster follows the code rule, not Lloyd's
    assert keep.float().mean() > 0.8
    assert (out[keep] - expected[keep]).abs().max().item() <= tolerance


def test_a_training_run_replays_from_its_seed():
    _, first = train(SMALL)
    _, second = train(SMALL)
    a, b = first.drop(columns="wall_time"), second.drop(columns="wall_time")
    assert a[["step", "seed"]].equals(b[["step", "seed"]])
    torch.testing.assert_close(torch.tensor(a.train_loss.to_numpy()), torch.tensor(b.train_loss.to_numpy()),
                               rtol=1e-5, atol=1e-6, equal_nan=True)


def test_a_resumed_run_equals_the_uninterrupted_one(tmp_path):
    full_model, full = train(SMALL)
    ckpt = tmp_path / "half.pt"
    train(dataclasses.replace(SMALL, steps=20), checkpoint=ckpt)
    resumed_model, resumed = train(SMALL, resume=ckpt)
    for p, q in zip(full_model.parameters(), resumed_model.parameters()):
        torch.testing.assert_close(p, q, rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(torch.tensor(full.val_relative_loss.to_numpy()),
                               torch.tensor(resumed.val_relative_loss.to_numpy()), rtol=1e-4, atol=1e-5,
                               equal_nan=True)



def test_a_chapter_evaluates_a_layer_trained_on_cuda(tmp_path, monkeypatch):
    """The book's path on a GPU: the run trains on CUDA, the chapter gets the layer on the CPU and evaluates it
    on held-out tasks made on the CPU (kmtrf_core.book.groups, kmtrf_core.book.heldout)."""
    from kmtrf_core.book.groups import RunGroup  # the book's plumbing, only in this test
    from kmtrf_core.book.heldout import eval_tasks, transfer_trajectories

    monkeypatch.setenv("KMTRF_CACHE", str(tmp_path))
    config = dataclasses.replace(SMALL, device=None)  # None: CUDA, as the catalog's configs leave it
    runs = RunGroup("gpu_chapter", config, {"scheme": ["bn"]}, "10", "a test").runs()
    model = runs.models[("bn",)]
    assert model.Q.device.type == "cpu"
    X, C = eval_tasks(config, 8)
    trajectories = transfer_trajectories({"bn": model}, X, C, 3)
    assert all(torch.isfinite(t).all() for t in trajectories.values())

def test_the_training_step_never_waits_for_the_host():
    model = initial_layer(SMALL, CUDA)
    optimizer = torch.optim.Adam(model.parameters(), lr=SMALL.lr)
    generators = task_generators(SMALL, CUDA)
    training_step(model, optimizer, SMALL, generators, 1)  # the first step allocates Adam's state
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        for step in range(2, 6):
            losses, ok = training_step(model, optimizer, SMALL, generators, step)
    finally:
        torch.cuda.set_sync_debug_mode("default")
    assert bool(ok.all()) and losses.shape == (2,)


@pytest.mark.parametrize("stream", [False, True])
def test_the_estimator_on_cuda_equals_kmeans_from_the_same_centers(stream):
    from sklearn.cluster import KMeans
    from sklearn.datasets import make_blobs

    from kmtrf_core import TransformerKMeans

    X, _ = make_blobs(200_000, n_features=32, centers=20, cluster_std=3.0, random_state=0)
    init = X[np.random.default_rng(0).choice(len(X), 20, replace=False)]
    ref = KMeans(20, init=init, n_init=1, max_iter=20, tol=0).fit(X)
    ours = TransformerKMeans(20, init=init, max_iter=20, tol=0, device=CUDA, stream=stream).fit(X)
    np.testing.assert_array_equal(ours.labels_, ref.labels_)
    np.testing.assert_allclose(ours.cluster_centers_, ref.cluster_centers_, rtol=1e-10, atol=1e-10)
    np.testing.assert_array_equal(ours.predict(X[:1000]), ref.predict(X[:1000]))


@pytest.mark.parametrize("stream", [False, True])
def test_the_estimator_seeds_on_cuda_what_kmeans_seeds(stream):
    from sklearn.cluster import KMeans
    from sklearn.datasets import make_blobs

    from kmtrf_core import TransformerKMeans

    X, _ = make_blobs(100_000, n_features=16, centers=30, cluster_std=2.0, random_state=1)
    ref = KMeans(30, random_state=4, n_init=2, max_iter=30, tol=0).fit(X)
    ours = TransformerKMeans(30, random_state=4, n_init=2, max_iter=30, tol=0, device=CUDA, stream=stream).fit(X)
    np.testing.assert_array_equal(ours.labels_, ref.labels_)
    np.testing.assert_allclose(ours.cluster_centers_, ref.cluster_centers_, rtol=1e-10, atol=1e-10)


def _curves(history):
    return (torch.tensor(history.train_loss.to_numpy()), torch.tensor(history.val_relative_loss.to_numpy()))


def test_the_graphed_step_equals_the_eager_step():
    # the same tasks and the same arithmetic; capturable Adam orders its bias correction differently
    _, eager = train(SMALL)
    _, graphed = train(SMALL, graph=True)
    assert eager[["step", "seed"]].equals(graphed[["step", "seed"]])
    for a, b in zip(_curves(eager), _curves(graphed)):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5, equal_nan=True)
    losses = graphed[graphed.seed == 0].train_loss.dropna().to_numpy()
    assert len(set(losses.tolist())) == len(losses)  # every replay drew new tasks


def test_a_graphed_run_replays_and_resumes_exactly(tmp_path):
    full_model, full = train(SMALL, graph=True)
    _, again = train(SMALL, graph=True)
    for a, b in zip(_curves(full), _curves(again)):
        torch.testing.assert_close(a, b, rtol=0, atol=0, equal_nan=True)
    ckpt = tmp_path / "half.pt"
    train(dataclasses.replace(SMALL, steps=20), checkpoint=ckpt, graph=True)
    resumed_model, resumed = train(SMALL, resume=ckpt, graph=True)
    for p, q in zip(full_model.parameters(), resumed_model.parameters()):
        torch.testing.assert_close(p, q, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(_curves(full)[1], _curves(resumed)[1], rtol=1e-5, atol=1e-6, equal_nan=True)
    # an eager checkpoint resumes under a graph, and a graphed one eagerly
    eager_ckpt = tmp_path / "eager.pt"
    train(dataclasses.replace(SMALL, steps=20), checkpoint=eager_ckpt)
    train(SMALL, resume=eager_ckpt, graph=True)
    train(SMALL, resume=ckpt)
