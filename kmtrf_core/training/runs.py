"""Runs of the training loop: the on-disk cache of trained runs, sweeps, and their summaries.

A run is one :class:`~kmtrf_core.training.TrainConfig` trained by
:func:`~kmtrf_core.training.train`. :func:`train_cached` stores it under a key
made of the config and of the code that training actually executes, found by
following the imports of the training loop through the package
(:func:`training_code_fingerprint`); no list of modules is kept by hand.
:func:`sweep` trains a grid of configs into one tidy history
(:func:`tidy_history`); :func:`~kmtrf_core.training.executor.parallel_sweep`
is the same sweep with the missing runs trained on Dask first.
"""

from __future__ import annotations

import ast
import dataclasses
import functools
import hashlib
import itertools
import json
import math
import os
from pathlib import Path

import numpy as np
import pandas as pd
import torch
from tqdm.auto import tqdm

from ..device import resolve_device
from ..validation import check_choice, check_number, check_table
from .checkpoints import (atomic_save, load_file, load_weights, remove_stale_temporaries, weights_of,
                          writable_folder)
from .config import HISTORY_COLUMNS, TrainConfig, TrainingDiverged, check_config, layer_for
from .loop import train

__all__ = [
    "cache_dir",
    "cache_key",
    "cached_path",
    "convergence_summary",
    "grid_configs",
    "sweep",
    "tidy_history",
    "train_cached",
    "training_code_fingerprint",
    "training_modules",
]

SWEEP_COLUMNS = ("d", "k", "n", "scheme", "omega", "tau", "gamma", "lr", "clip")

_PACKAGE = Path(__file__).resolve().parent.parent
_LOOP_MODULE = "kmtrf_core.training.loop"


def cache_dir(path=None) -> Path:
    """Where :func:`train_cached` keeps trained runs: ``path``, else ``$KMTRF_CACHE``, else ``~/.cache/kmtrf``.

    Parameters
    ----------
    path : str or os.PathLike, optional
        An explicit folder, returned as is.

    Returns
    -------
    pathlib.Path
        The folder (not created here).

    Examples
    --------
    >>> cache_dir("runs/cache").as_posix()
    'runs/cache'
    >>> from unittest import mock
    >>> with mock.patch.dict(os.environ, {"KMTRF_CACHE": "/tmp/kmtrf-cache"}):
    ...     print(cache_dir().as_posix())
    /tmp/kmtrf-cache
    """
    if path is not None:
        return Path(path)
    return Path(os.environ.get("KMTRF_CACHE") or Path.home() / ".cache" / "kmtrf")


def cache_key(config: TrainConfig) -> str:
    """The name of a run in the cache: a hash of the config (without ``device``) and of the training code.

    >>> a, b = TrainConfig(d=2, k=3, n=16), TrainConfig(d=2, k=3, n=16, device="cpu")
    >>> cache_key(a) == cache_key(b), cache_key(a) == cache_key(TrainConfig(d=3, k=3, n=16)), len(cache_key(a))
    (True, False, 24)
    """
    digest = hashlib.sha256()
    wanted = {key: value for key, value in config.to_dict().items() if key != "device"}
    digest.update(json.dumps(wanted, sort_keys=True).encode())
    digest.update(training_code_fingerprint().encode())
    return digest.hexdigest()[:24]


def cached_path(config: TrainConfig, directory=None) -> Path:
    """The file of ``config``'s entry in the run cache (it may not exist yet).

    >>> cached_path(TrainConfig(d=2, k=3, n=16), "cache").name.startswith("run-")
    True
    """
    return cache_dir(directory) / f"run-{cache_key(config)}.pt"


def _module_path(name: str) -> Path | None:
    """The source file of a ``kmtrf_core`` module (or package ``__init__``), None outside the package."""
    parts = name.split(".")
    if parts[0] != "kmtrf_core":
        return None
    base = _PACKAGE.joinpath(*parts[1:])
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


def _imported_modules(name: str, path: Path) -> set:
    """The ``kmtrf_core`` modules that the source of module ``name`` imports (absolute or relative)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                anchor = package.split(".")
                anchor = anchor[: len(anchor) - node.level + 1]
                base = ".".join(anchor + ([node.module] if node.module else []))
            else:
                base = node.module or ""
            found.add(base)
            found.update(f"{base}.{alias.name}" for alias in node.names)  # "from . import x" names a module
    return {module for module in found if _module_path(module) is not None}


def training_modules(root: str = _LOOP_MODULE) -> list:
    """Every ``kmtrf_core`` module that ``root`` reaches through its imports, sorted by name.

    >>> modules = training_modules()
    >>> {"kmtrf_core.model", "kmtrf_core.objectives", "kmtrf_core.training.loop"} <= set(modules)
    True
    >>> "kmtrf_core.book.plotting" in modules
    False
    """
    seen, todo = set(), [root]
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        todo.extend(_imported_modules(name, _module_path(name)) - seen)
    return sorted(seen)


@functools.lru_cache(maxsize=1)
def training_code_fingerprint() -> str:
    """The code of every module the training loop reaches (:func:`training_modules`), without its prose.

    Docstrings, the documentation strings of attributes, and comments are left out.

    Read and parsed once per process: the code that runs is the code that was imported.
    """
    return "\n".join(f"{name}\n{_code_fingerprint(_module_path(name).read_text())}" for name in training_modules())


def _code_fingerprint(source: str) -> str:
    """The module's syntax tree without its prose: editing it or comments keeps cached runs valid.

    Prose is every statement that is a string literal alone: docstrings, and the documentation strings
    under module and class attributes (``PATIENCE = 2000`` then ``\"\"\"Steps ...\"\"\"``), which
    Python evaluates and discards."""
    tree = ast.parse(source)
    for node in ast.walk(tree):
        for field in ("body", "orelse", "finalbody"):
            body = getattr(node, field, None)
            if isinstance(body, list) and body and isinstance(body[0], ast.stmt):
                kept = [statement for statement in body if not _is_prose(statement)]
                setattr(node, field, kept or [ast.Pass()])
    return ast.dump(tree, include_attributes=False)


def _is_prose(statement: ast.stmt) -> bool:
    """A statement that is only a string literal (a docstring or an attribute's documentation)."""
    return (isinstance(statement, ast.Expr) and isinstance(statement.value, ast.Constant)
            and isinstance(statement.value.value, str))


def train_cached(config: TrainConfig, *, directory=None, refresh: bool = False, progress: bool = False,
                 graph: bool = False):
    """:func:`~kmtrf_core.training.train`, remembered on disk: a second call with the same config loads the result.

    The key is the config (without ``device``) and the code of every module
    that training runs through (:func:`training_code_fingerprint`), so
    editing the model, the tasks, the loss or the loop retrains. Several
    chapters share the book's layers this way without training them twice.
    A run that diverges is remembered too: loading it raises the same
    :class:`~kmtrf_core.training.TrainingDiverged`, with its history.
    Entries are written atomically with a checksum
    (:func:`~kmtrf_core.training.checkpoints.atomic_save`), so parallel
    writers (:func:`~kmtrf_core.training.executor.train_many`) never leave a
    half-written one.

    Parameters
    ----------
    config : TrainConfig
    directory : path, optional
        The cache folder (default :func:`cache_dir`).
    refresh : bool
        Train again and overwrite the cached run.
    progress : bool
        A progress bar over the steps, when it trains.
    graph : bool
        Train with the step replayed as one CUDA graph (:func:`~kmtrf_core.training.train`'s
        ``graph``); like the device, it is not part of the key.

    Returns
    -------
    (model, history) as from :func:`~kmtrf_core.training.train`; the model is in eval mode on
    the config's device (or the default device).

    Raises
    ------
    TrainingDiverged
        For a run that diverged (now or when it was cached).
    CorruptFileError
        For a cache entry that is truncated or damaged, naming the file.
    ValueError
        For a cache folder that cannot be written, before training (not after).

    Examples
    --------
    >>> import tempfile
    >>> cfg = TrainConfig(d=2, k=3, n=16, steps=2, batch=2, val_tasks=2, val_every=1)
    >>> with tempfile.TemporaryDirectory() as folder:
    ...     first, _ = train_cached(cfg, directory=folder)
    ...     again, _ = train_cached(cfg, directory=folder)
    >>> torch.equal(first.Q, again.Q)
    True
    """
    check_config(config)
    path = cached_path(config, directory)
    device = resolve_device(config.device)
    if path.exists() and not refresh:
        state = load_file(path, map_location=device)
        history = pd.DataFrame(state["history"], columns=list(HISTORY_COLUMNS))
        if state.get("diverged"):
            step, seed, message = state["diverged"]
            raise TrainingDiverged(message, step=step, seed=seed, history=history)
        model = layer_for(config, device=device)
        load_weights(model, state["weights"])
        if config.snapshots:
            history.attrs["snapshots"] = state["snapshots"]
        return model.eval(), history
    remove_stale_temporaries(path)
    try:  # refused before training, not after: a run whose cache cannot take it would train for nothing
        writable_folder(path.parent)
    except OSError as err:
        raise ValueError(f"the run cache {os.fspath(path.parent)!r} cannot be written ({err.strerror or err}); set "
                         "KMTRF_CACHE to a folder you can write, or pass directory=") from None
    try:
        model, history = train(config, progress=progress, graph=graph)
    except TrainingDiverged as err:
        atomic_save({"config": config.to_dict(), "diverged": (err.step, err.seed, str(err)),
                     "history": _rows(err.history)}, path)
        raise
    atomic_save(
        {"config": config.to_dict(), "weights": weights_of(model), "history": _rows(history),
         "snapshots": history.attrs.get("snapshots", [])},
        path,
    )
    return model, history


def _rows(history) -> list:
    return [] if history is None else list(history.itertuples(index=False, name=None))


def sweep(base: TrainConfig, grid: dict, *, on_diverge: str = "raise", progress: bool = False, cache: bool = False):
    """Train every combination of ``grid`` values on top of ``base``; one tidy history for all.

    Parameters
    ----------
    base : TrainConfig
    grid : dict
        Field name -> list of values, e.g. ``{"scheme": ["oh", "bn"], "tau": [1.0, 0.1]}``.
    on_diverge : {"raise", "record"}
        ``"record"`` keeps the rows up to a divergence and marks the run
        (column ``diverged``) instead of stopping the sweep.
    progress : bool
        A progress bar over the runs.
    cache : bool
        Train through :func:`train_cached` (runs already on disk are loaded).

    Returns
    -------
    models : dict
        ``tuple(values in grid order) -> model`` (``None`` for a diverged run).
    history : pandas.DataFrame
        The histories of all runs, each made tidy by :func:`tidy_history`.

    Examples
    --------
    >>> base = TrainConfig(d=2, k=3, n=16, steps=2, batch=2, val_tasks=2, val_every=1)
    >>> models, hist = sweep(base, {"scheme": ["oh", "bn"]})
    >>> sorted(models), sorted(hist.scheme.unique())
    ([('bn',), ('oh',)], ['bn', 'oh'])
    """
    on_diverge = check_choice(on_diverge, "on_diverge", ("raise", "record"))
    configs = grid_configs(base, grid)
    models, frames = {}, []
    for values, config in tqdm(list(configs.items()), disable=not progress, desc="sweep"):
        try:
            model, hist = train_cached(config) if cache else train(config)
            diverged = False
        except TrainingDiverged as err:
            if on_diverge == "raise":
                raise
            model, hist, diverged = None, err.history, True
        models[values] = model
        frames.append(tidy_history(config, hist, grid, diverged=diverged))
    return models, pd.concat(frames, ignore_index=True)


def grid_configs(base: TrainConfig, grid: dict) -> dict:
    """Every combination of ``grid`` values on top of ``base``: ``tuple(values in grid order) -> config``.

    >>> configs = grid_configs(TrainConfig(d=2, k=3, n=16), {"scheme": ["oh", "bn"], "tau": [1.0]})
    >>> [(key, config.scheme, config.tau) for key, config in configs.items()]
    [(('oh', 1.0), 'oh', 1.0), (('bn', 1.0), 'bn', 1.0)]
    >>> grid_configs(TrainConfig(), {"colour": ["red"]})
    Traceback (most recent call last):
    ...
    ValueError: grid has fields TrainConfig does not: ['colour']
    """
    if not isinstance(grid, dict):
        raise ValueError(f"grid must be a dict field -> list of values, got {type(grid).__name__}")
    fields = {f.name for f in dataclasses.fields(TrainConfig)}
    unknown = [key for key in grid if key not in fields]
    if unknown:
        raise ValueError(f"grid has fields TrainConfig does not: {unknown}")
    names = list(grid)
    return {tuple(values): dataclasses.replace(base, **dict(zip(names, values)))
            for values in itertools.product(*(grid[name] for name in names))}


def tidy_history(config: TrainConfig, history, grid=(), *, diverged: bool = False) -> pd.DataFrame:
    """One run's history with the columns a sweep's table needs: ``diverged``, the main config fields, ``grid``'s.

    The main fields are ``d, k, n, scheme, omega, tau, gamma, lr, clip``; a
    tuple-valued field (a mixture of families) is written ``"a+b"``. The
    weight snapshots stay with the run: the copy has no ``attrs``, so tables
    of several runs can be concatenated.

    >>> history = pd.DataFrame({"step": [0, 1], "val_relative_loss": [1.5, 1.2]})
    >>> row = tidy_history(TrainConfig(d=2, k=3, n=16, family=("normal", "gumbel")), history, ["family"]).iloc[0]
    >>> bool(row.diverged), int(row.d), row.family
    (False, 2, 'normal+gumbel')
    """
    history = history.assign(diverged=diverged)
    history.attrs = {}  # concat cannot compare snapshot tensors
    for name in dict.fromkeys((*SWEEP_COLUMNS, *grid)):
        value = getattr(config, name)
        history[name] = [value if not isinstance(value, tuple) else "+".join(map(str, value))] * len(history)
    return history


def convergence_summary(history, by=("scheme", "omega"), fraction: float = 0.9):
    """Final losses and convergence speed of each group of runs, as medians over seeds (Figure 2).

    Per seed: the final relative validation loss (Eq. 20), the final training
    loss (mean of the last tenth of the steps), and the first validation step
    by which the validation loss has made ``fraction`` of its total
    improvement (NaN if it did not improve).

    Parameters
    ----------
    history : pandas.DataFrame
        From :func:`train` or :func:`sweep`, with the ``by`` columns.
    by : tuple of str
        Columns that define a group.
    fraction : float
        Share of the total improvement that counts as converged.

    Returns
    -------
    pandas.DataFrame
        Indexed by the ``by`` columns; columns ``final_val_relative``,
        ``final_train_loss``, ``steps_to_converge`` and ``seeds``.

    Examples
    --------
    >>> import pandas as pd
    >>> history = pd.DataFrame({"scheme": "bn", "omega": "l2", "seed": [0, 0, 0, 1, 1, 1], "step": [0, 1, 2] * 2,
    ...     "train_loss": [math.nan, 2.0, 1.0, math.nan, 3.0, 2.0],
    ...     "val_relative_loss": [1.2, 1.0, 0.9, 1.4, 1.1, 1.0]})
    >>> convergence_summary(history).round(3).to_dict("records")
    [{'final_val_relative': 0.95, 'final_train_loss': 1.5, 'steps_to_converge': 2.0, 'seeds': 2}]
    """
    by = [by] if isinstance(by, str) else list(by)
    check_table(history, "history", list(dict.fromkeys([*by, "seed", "step", "train_loss", "val_relative_loss"])))
    fraction = check_number(fraction, "fraction")
    if fraction > 1:
        raise ValueError(f"fraction must be at most 1, got {fraction!r}")
    rows = []
    for key, part in history.groupby(by):
        key = key if isinstance(key, tuple) else (key,)
        finals, trains, speeds = [], [], []
        for _, run in part.groupby("seed"):
            val = run.dropna(subset=["val_relative_loss"])
            if val.empty:
                raise ValueError(f"history has no validation loss for the runs {dict(zip(by, key))} of seed "
                                 f"{run.seed.iloc[0]!r}")
            v = val.val_relative_loss.to_numpy()
            steps = val.step.to_numpy()
            finals.append(v[-1])
            tl = run.dropna(subset=["train_loss"]).train_loss.to_numpy()
            trains.append(tl[-max(1, len(tl) // 10):].mean() if len(tl) else np.nan)
            target = v[0] - fraction * (v[0] - v[-1])
            reached = np.nonzero(v <= target)[0] if v[-1] < v[0] else np.array([], dtype=int)
            speeds.append(steps[reached[0]] if len(reached) else np.nan)
        rows.append(dict(zip(by, key), final_val_relative=float(np.median(finals)),
                         final_train_loss=float(np.median(trains)),
                         steps_to_converge=float(np.nanmedian(speeds)) if not np.all(np.isnan(speeds)) else np.nan,
                         seeds=len(finals)))
    return pd.DataFrame(rows).set_index(list(by))
