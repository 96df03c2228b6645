"""Independent training runs in parallel, on ``dask.distributed``.

Runs of the book's catalog and of a sweep do not interact, so each is one
task: a worker trains it through the run cache
(:func:`~kmtrf_core.training.train_cached`) and the caller loads the result
from there (:func:`train_many`; :func:`parallel_sweep` is
:func:`~kmtrf_core.training.sweep` with its missing runs trained this way).

* By default a ``LocalCluster`` with one single-threaded worker process per
  core: at the book's sizes one torch thread per process beats two threads in
  one process (a step at n = 128 took 10.5 ms on one thread and 16.0 ms on
  two).
* With a scheduler address (``scheduler=`` or ``$KMTRF_SCHEDULER``), the same
  tasks go to an existing cluster; the cache directory must then be one that
  every worker can reach (``$KMTRF_CACHE`` on a shared file system). Dask
  ships tasks as pickles, so a cluster trusts whoever can submit to it; see
  the README for TLS (``distributed.security.Security``).
* Every cache entry is written atomically with a checksum, so a worker that
  dies loses only its run: Dask reschedules the task (``retries``), and a run
  that still fails is reported in the result table, never half-written.
"""

from __future__ import annotations

import contextlib
import os
import time

import pandas as pd
import torch
from tqdm.auto import tqdm

from .checkpoints import load_file
from .config import TrainConfig, TrainingDiverged, check_config
from .runs import cache_dir, cache_key, cached_path, grid_configs, sweep, train_cached

__all__ = ["SCHEDULER_VAR", "dask_client", "expected_cost", "parallel_sweep", "train_many"]

SCHEDULER_VAR = "KMTRF_SCHEDULER"
"""The environment variable that names a Dask scheduler address (``tcp://host:8786``)."""


UNSET_MALLOC = "distributed.nanny.pre-spawn-environ.MALLOC_TRIM_THRESHOLD_"
"""The Dask setting that the local cluster unsets (see :func:`dask_client`)."""


@contextlib.contextmanager

def dask_client(scheduler=None, workers: int | None = None):
    """A ``distributed.Client``: to ``scheduler`` (or ``$KMTRF_SCHEDULER``), else to a new ``LocalCluster``.

    The local cluster has ``workers`` processes (default: one per core), one
    thread each, its dashboard on a free port, and no ``MALLOC_TRIM_THRESHOLD_``
    (Dask sets one by default, which slows training about twofold); it is closed on exit. A script that uses it needs the
    ``if __name__ == "__main__":`` guard (the workers are spawned processes).

    Parameters
    ----------
    scheduler : str, optional
        A scheduler address.
    workers : int, optional
        Worker processes of the local cluster.

    Yields
    ------
    distributed.Client

    Examples
    --------
    >>> with dask_client(workers=1) as client:  # doctest: +SKIP
    ...     client.submit(sum, [1, 2]).result()
    3
    """
    # dask.distributed takes about a second to import; only parallel runs pay for it
    import dask  # its config, for the same reason
    from distributed import Client, LocalCluster

    scheduler = scheduler or os.environ.get(SCHEDULER_VAR)
    if scheduler:
        with Client(scheduler) as client:
            yield client
        return
    workers = workers or os.cpu_count() or 1
    env = {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    # Dask's nanny starts workers with MALLOC_TRIM_THRESHOLD_=65536; any fixed value turns off glibc's
    # adaptive mmap threshold, and training (many small tensors) then ran 2.2x slower per step
    # (52 vs 24 ms at the book's Figure 2 size, bench/README.md); unset it for our workers
    with dask.config.set({UNSET_MALLOC: None}), \
            LocalCluster(n_workers=workers, threads_per_worker=1, processes=True, dashboard_address=":0",
                         env=env) as cluster, Client(cluster) as client:
        yield client


def _run(config: TrainConfig, directory: str) -> dict:
    """One task on a worker: train ``config`` into the cache at ``directory`` unless it is there."""
    torch.set_num_threads(1)
    start = time.perf_counter()
    status = "trained"
    try:
        _, history = train_cached(config, directory=directory)
    except TrainingDiverged as err:
        status, history = "diverged", err.history
    steps = int(history.step.max()) if history is not None and len(history) else 0
    return dict(status=status, steps=steps, seconds=time.perf_counter() - start)


def expected_cost(config: TrainConfig) -> int:
    """A rough relative cost of training ``config`` to its cap, to start the longest runs first.

    Steps times the work of one step: each seed and each unrolled step adds a layer application,
    and wider embeddings cost more (measured on a CPU: a 3-seed step at ``d = 64`` takes about four
    times one at ``d = 4``).

    >>> small = TrainConfig(d=4, k=6, n=64, steps=5000)
    >>> expected_cost(small) < expected_cost(TrainConfig(d=64, k=10, n=64, steps=5000, seeds=(0, 1, 2)))
    True
    >>> expected_cost(small) < expected_cost(TrainConfig(d=4, k=6, n=64, steps=10000))
    True
    """
    per_step = (1 + 2 * len(config.seeds)) * config.unroll * (1 + config.d / 16) * config.n * config.batch
    return int(config.steps * per_step // 1000)


def train_many(configs, *, client=None, scheduler=None, workers: int | None = None, directory=None,
               retries: int = 2, progress: bool = False) -> pd.DataFrame:
    """Train every config that the run cache lacks, as parallel Dask tasks; report each.

    Parameters
    ----------
    configs : sequence of TrainConfig
        Duplicates (same cache key) are trained once.
    client : distributed.Client, optional
        Where to run; default a :func:`dask_client` made from ``scheduler`` and ``workers``.
    scheduler : str, optional
        A scheduler address (else ``$KMTRF_SCHEDULER``, else a local cluster).
    workers : int, optional
        Processes of the local cluster (default: one per core).
    directory : path, optional
        The cache folder (default :func:`~kmtrf_core.training.cache_dir`); it
        must be reachable by every worker.
    retries : int
        How often a task lost with its worker is run again.
    progress : bool
        A progress bar over the runs.

    Raises
    ------
    CorruptFileError
        For a cache entry that fails its checksum (naming the file).

    Returns
    -------
    pandas.DataFrame
        One row per distinct config, in order: ``key``, ``status``
        (``"cached"``, ``"trained"``, ``"diverged"`` or ``"failed: ..."``),
        ``steps`` and ``seconds`` (of training; 0 for a cached run).

    Examples
    --------
    Two runs on a local cluster of two workers (skipped here: starting the
    cluster takes seconds; ``tests/test_executor.py`` runs it):

    >>> import tempfile
    >>> configs = [TrainConfig(d=2, k=3, n=16, steps=2, batch=2, val_tasks=2, val_every=1, scheme=s)
    ...            for s in ("oh", "bn")]
    >>> with tempfile.TemporaryDirectory() as folder:  # doctest: +SKIP
    ...     table = train_many(configs, workers=2, directory=folder)
    ...     print(table.status.tolist())
    ['trained', 'trained']
    """
    configs = [check_config(config) for config in configs]
    directory = str(cache_dir(directory).resolve())
    unique = {}
    for config in configs:
        unique.setdefault(cache_key(config), config)
    rows = {key: dict(key=key, status="cached", steps=0, seconds=0.0) for key in unique}
    missing = {key: config for key, config in unique.items() if not _usable(config, directory)}
    if missing:
        with contextlib.ExitStack() as stack:
            if client is None:
                client = stack.enter_context(dask_client(scheduler, workers))
            # dask.distributed is imported by dask_client (or by the caller who made the client)
            from distributed import as_completed

            # longest first, so that no long run is left for the end: submitted in that order (the first
            # ones go straight to idle workers) and with that priority (Dask starts the highest first)
            order = sorted(missing.items(), key=lambda item: -expected_cost(item[1]))
            futures = {client.submit(_run, config, directory, key=f"kmtrf-run-{key}", retries=retries,
                                     pure=False, priority=expected_cost(config)): key
                       for key, config in order}
            bar = tqdm(total=len(futures), disable=not progress, desc="runs", unit="run")
            for future in as_completed(futures):
                key = futures[future]
                try:
                    rows[key].update(future.result())
                except Exception as err:  # a run that failed on every try is reported, not fatal
                    rows[key]["status"] = f"failed: {type(err).__name__}: {err}"
                bar.update()
            bar.close()
    return pd.DataFrame(list(rows.values()))


def _usable(config: TrainConfig, directory: str) -> bool:
    """Whether the cache holds an entry for ``config``; a damaged one raises :class:`CorruptFileError`."""
    path = cached_path(config, directory)
    if not path.exists():
        return False
    load_file(path)
    return True


def parallel_sweep(base: TrainConfig, grid: dict, *, client=None, scheduler=None, workers: int | None = None,
                   on_diverge: str = "raise", progress: bool = False):
    """:func:`~kmtrf_core.training.sweep` through the run cache, its missing runs trained first as Dask tasks.

    The runs the cache lacks go to :func:`train_many` (on ``client``, on
    the cluster at ``scheduler``, or on a local cluster of ``workers``
    processes); the sweep then loads every run from the cache, so the result
    equals the serial sweep's.

    Parameters
    ----------
    base, grid, on_diverge, progress
        As for :func:`~kmtrf_core.training.sweep`.
    client, scheduler, workers
        As for :func:`train_many`.

    Returns
    -------
    (models, history)
        As from :func:`~kmtrf_core.training.sweep`.

    Examples
    --------
    Four runs on a local cluster of two workers (skipped here: starting the
    cluster takes seconds; ``tests/test_executor.py`` runs it):

    >>> base = TrainConfig(d=2, k=3, n=16, steps=2, batch=2, val_tasks=2, val_every=1)
    >>> models, history = parallel_sweep(base, {"scheme": ["oh", "bn"], "tau": [1.0, 0.1]},
    ...                                  workers=2)  # doctest: +SKIP
    >>> len(models)  # doctest: +SKIP
    4
    """
    train_many(list(grid_configs(base, grid).values()), client=client, scheduler=scheduler, workers=workers,
               progress=progress)
    return sweep(base, grid, on_diverge=on_diverge, progress=progress, cache=True)
