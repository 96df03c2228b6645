"""Checkpoint files of training runs: atomic writes, the weights of a layer, and loading with checks.

A checkpoint holds the config (as a dict), the step, the weights ``Q, K, V``,
Adam's state, the task generators' states, the history rows and the wall
time; :func:`~kmtrf_core.training.train` writes one and resumes from one, and the run
cache (:mod:`kmtrf_core.training.runs`) stores its entries the same way.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import torch

from ..model import ClusterTransformer
from .config import TrainConfig

__all__ = ["atomic_save", "load_checkpoint", "load_weights", "weights_of"]

WEIGHTS = ("Q", "K", "V")


def weights_of(model: ClusterTransformer) -> dict:
    """The projections ``{"Q", "K", "V"}`` of a layer (or ensemble), detached, on the CPU.

    >>> model = ClusterTransformer(2, 3)
    >>> {name: tuple(w.shape) for name, w in weights_of(model).items()}
    {'Q': (4, 4, 4), 'K': (4, 4, 4), 'V': (4, 4, 4)}
    """
    state = model.state_dict()
    return {name: state[name].detach().cpu() for name in WEIGHTS}


def load_weights(model: ClusterTransformer, weights: dict) -> ClusterTransformer:
    """Put saved projections ``{"Q", "K", "V"}`` into ``model`` (moved to its device); returns it.

    >>> a, b = ClusterTransformer(2, 3), ClusterTransformer(2, 3)
    >>> bool(torch.equal(load_weights(b, weights_of(a)).Q, a.Q))
    True
    """
    model.load_state_dict(dict(model.state_dict(), **{name: weights[name] for name in WEIGHTS}))
    return model


def atomic_save(obj, path) -> None:
    """Write ``obj`` with ``torch.save`` to a temporary file beside ``path``, then rename it into place.

    A reader never sees a half-written file: a crash leaves the old file (or none).

    >>> import tempfile
    >>> with tempfile.TemporaryDirectory() as folder:
    ...     atomic_save({"step": 3}, Path(folder) / "sub" / "state.pt")
    ...     torch.load(Path(folder) / "sub" / "state.pt")["step"], sorted(p.name for p in Path(folder, "sub").iterdir())
    (3, ['state.pt'])
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name, suffix=".tmp")
    os.close(fd)
    try:
        torch.save(obj, tmp)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)


def load_checkpoint(path, config: TrainConfig | None = None) -> dict:
    """Read a checkpoint written by :func:`~kmtrf_core.training.train`; with ``config``, check that it can resume into it.

    Parameters
    ----------
    path : str or os.PathLike
        The checkpoint file.
    config : TrainConfig, optional
        The config of the run that would resume from it.

    Returns
    -------
    dict
        ``config`` (as a dict), ``step``, ``weights`` (``{"Q", "K", "V"}``
        on the CPU), ``optimizer`` (Adam's state dict), ``task_generators``
        (their states), ``history`` (rows) and ``wall_time``.

    Raises
    ------
    ValueError
        When a field other than ``steps`` or ``device`` differs, naming the
        fields, or when the checkpoint is beyond ``config.steps``.

    Examples
    --------
    >>> import dataclasses, tempfile
    >>> from kmtrf_core.training import TrainConfig, train
    >>> cfg = TrainConfig(d=2, k=3, n=16, steps=2, batch=2, val_tasks=2, val_every=1)
    >>> with tempfile.TemporaryDirectory() as folder:
    ...     _ = train(cfg, checkpoint=f"{folder}/ckpt.pt")
    ...     state = load_checkpoint(f"{folder}/ckpt.pt", dataclasses.replace(cfg, steps=5))
    ...     try:
    ...         load_checkpoint(f"{folder}/ckpt.pt", dataclasses.replace(cfg, lr=0.1))
    ...     except ValueError as err:
    ...         print("lr: checkpoint 0.01 vs config 0.1" in str(err))
    True
    >>> state["step"], sorted(state["weights"])
    (2, ['K', 'Q', 'V'])
    """
    state = torch.load(path, map_location="cpu", weights_only=False)
    if config is not None:
        saved, wanted = state["config"], config.to_dict()
        differ = [key for key in wanted if key not in TrainConfig.RESUMABLE and saved.get(key) != wanted[key]]
        if differ:
            details = ", ".join(f"{key}: checkpoint {saved.get(key)!r} vs config {wanted[key]!r}" for key in differ)
            raise ValueError(f"checkpoint {path} does not match the config ({details})")
        if state["step"] > config.steps:
            raise ValueError(f"checkpoint {path} is at step {state['step']}, beyond config.steps={config.steps}")
    return state
