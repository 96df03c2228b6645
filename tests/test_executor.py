"""Parallel runs on dask.distributed equal serial runs (kmtrf_core.training.executor)."""

import pandas as pd
import pytest
import torch

from kmtrf_core.training import TrainConfig, sweep
from kmtrf_core.training.executor import dask_client, parallel_sweep, train_many
from kmtrf_core.training.runs import cached_path

BASE = TrainConfig(d=2, k=3, n=16, steps=12, batch=4, val_tasks=4, val_every=4, seeds=(0, 1), impl="direct")
GRID = {"scheme": ["oh", "bn"], "tau": [1.0, 0.1]}


@pytest.fixture(scope="module")
def client():
    with dask_client(workers=2) as client:
        yield client


@pytest.fixture
def one_thread():
    """The workers' setting, so that float rounding is the same; the thread count is restored after."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.mark.slow
def test_a_sweep_on_two_workers_equals_the_serial_sweep(tmp_path, monkeypatch, client, one_thread):
    monkeypatch.setenv("KMTRF_CACHE", str(tmp_path / "parallel"))
    models, history = parallel_sweep(BASE, GRID, client=client)
    assert len(list((tmp_path / "parallel").glob("run-*.pt"))) == 4
    monkeypatch.setenv("KMTRF_CACHE", str(tmp_path / "serial"))
    serial_models, serial_history = sweep(BASE, GRID)
    assert list(models) == list(serial_models)
    for key in models:
        for name in ("Q", "K", "V"):
            assert torch.equal(getattr(models[key], name), getattr(serial_models[key], name)), key
    pd.testing.assert_frame_equal(history.drop(columns="wall_time"), serial_history.drop(columns="wall_time"))


@pytest.mark.slow
def test_train_many_reports_cached_trained_and_diverged(tmp_path, client):
    good = BASE
    bad = TrainConfig(d=4, k=6, n=32, scheme="oh", lr=1e6, steps=20, batch=4, val_tasks=4, val_every=5)
    table = train_many([good, bad, good], client=client, directory=tmp_path)
    assert table.status.tolist() == ["trained", "diverged"]  # the duplicate is trained once
    assert table.steps.tolist()[0] == 12
    assert cached_path(bad, tmp_path).exists()  # a divergence is remembered, not retried
    again = train_many([good, bad], client=client, directory=tmp_path)
    assert again.status.tolist() == ["cached", "cached"]


def _worker_environment():
    import os

    return {name: os.environ.get(name) for name in ("MALLOC_TRIM_THRESHOLD_", "OMP_NUM_THREADS")}


def test_the_local_workers_run_without_dasks_malloc_trim_threshold(client):
    # Dask's default MALLOC_TRIM_THRESHOLD_=65536 made every training step about twice as slow
    assert client.submit(_worker_environment, pure=False).result() == {"MALLOC_TRIM_THRESHOLD_": None,
                                                                        "OMP_NUM_THREADS": "1"}
