"""Checkpoint files of training runs: atomic writes, the weights of a layer, and loading with checks.

A checkpoint holds the config (as a dict), the step, the weights (``Q, K, V``
and any feedforward block), Adam's state, the task generators' states, the
history rows, the snapshots and the wall time;
:func:`~kmtrf_core.training.train` writes one and resumes from one, and the run
cache (:mod:`kmtrf_core.training.runs`) stores its entries the same way.

The file format is ours, so that a file can neither lie nor run code:

* a first line ``kmtrf-checkpoint 1 <sha256 of the payload>``, then the
  payload, which is ``torch.save`` of plain data (dicts, lists, numbers,
  strings, tensors);
* :func:`load_file` checks the checksum before anything is unpickled, and
  unpickles with ``torch.load(..., weights_only=True)``, which builds only
  tensors and plain containers and never calls what a pickle names;
* a truncated, damaged or foreign file raises :class:`CorruptFileError`
  (a ``ValueError``) naming the file and what to do.
"""

from __future__ import annotations

import hashlib
import io
import os
import tempfile
from glob import escape as glob_escape
from pathlib import Path

import torch

from ..model import ClusterTransformer
from .config import TrainConfig

__all__ = ["CorruptFileError", "atomic_save", "load_checkpoint", "load_file", "load_weights",
           "remove_stale_temporaries", "weights_of", "writable_folder"]

MAGIC = b"kmtrf-checkpoint 1 "


class CorruptFileError(ValueError):
    """A checkpoint or cache file that is truncated, damaged, foreign, or would need code to load.

    >>> err = CorruptFileError("runs/x.pt", "truncated")
    >>> isinstance(err, ValueError), err.path
    (True, 'runs/x.pt')
    """

    def __init__(self, path, problem: str):
        super().__init__(f"{path}: {problem}; delete the file and run again (a cached run is then retrained)")
        self.path = str(path)


def weights_of(model: ClusterTransformer) -> dict:
    """A copy of the trained tensors of a layer (or ensemble), detached, on the CPU.

    ``Q, K, V`` and, for a layer with a feedforward block, ``F1, b1, F2, b2``
    (:meth:`~kmtrf_core.model.ClusterTransformer.parameter_names`).

    >>> model = ClusterTransformer(2, 3)
    >>> {name: tuple(w.shape) for name, w in weights_of(model).items()}
    {'Q': (4, 4, 4), 'K': (4, 4, 4), 'V': (4, 4, 4)}
    """
    state = model.state_dict()
    # a copy: on the CPU .cpu() is the live parameter, which later steps would change
    return {name: state[name].detach().cpu().clone() for name in model.parameter_names()}


def load_weights(model: ClusterTransformer, weights: dict) -> ClusterTransformer:
    """Put saved trained tensors (as from :func:`weights_of`) into ``model`` (moved to its device); returns it.

    Raises ``ValueError`` when ``weights`` lacks a tensor the model has or holds one it has not
    (for example a layer with a feedforward block and one without).

    >>> a, b = ClusterTransformer(2, 3), ClusterTransformer(2, 3)
    >>> bool(torch.equal(load_weights(b, weights_of(a)).Q, a.Q))
    True
    >>> load_weights(ClusterTransformer(2, 3, ffn=4), weights_of(a))
    Traceback (most recent call last):
    ...
    ValueError: weights lack ['F1', 'F2', 'b1', 'b2'] and hold [] beyond this layer's tensors
    """
    names = model.parameter_names()
    if not isinstance(weights, dict):
        raise ValueError(f"weights must be a dict of tensors, got {type(weights).__name__}")
    missing, extra = sorted(set(names) - set(weights)), sorted(set(weights) - set(names))
    if missing or extra:
        raise ValueError(f"weights lack {missing} and hold {extra} beyond this layer's tensors")
    model.load_state_dict(dict(model.state_dict(), **{name: weights[name] for name in names}))
    return model


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def atomic_save(obj, path) -> None:
    """Write plain data ``obj`` with its checksum to a temporary file beside ``path``, then rename it into place.

    A reader never sees a half-written file: a crash leaves the old file (or
    none). The file gets the mode a new file gets (the umask), not the
    temporary file's 0600. :func:`load_file` reads it back.

    >>> import tempfile
    >>> with tempfile.TemporaryDirectory() as folder:
    ...     atomic_save({"step": 3}, Path(folder) / "sub" / "state.pt")
    ...     load_file(Path(folder) / "sub" / "state.pt")["step"], sorted(p.name for p in Path(folder, "sub").iterdir())
    (3, ['state.pt'])
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    buffer = io.BytesIO()
    torch.save(obj, buffer)
    payload = buffer.getvalue()
    header = MAGIC + hashlib.sha256(payload).hexdigest().encode() + b"\n"
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name, suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as file:
            file.write(header + payload)
            file.flush()
            os.fsync(file.fileno())
        os.chmod(tmp, 0o666 & ~_umask())
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)


def remove_stale_temporaries(path) -> list:
    """Delete the temporary files that an :func:`atomic_save` of ``path`` left behind when it was killed.

    Called when a run starts (:func:`~kmtrf_core.training.train` with a
    checkpoint, :func:`~kmtrf_core.training.train_cached`), so a killed run's
    ``<name>XXXX.tmp`` files do not pile up. Only temporaries of this one file
    are touched.

    >>> import tempfile
    >>> with tempfile.TemporaryDirectory() as folder:
    ...     _ = Path(folder, "checkpoint.ptab12.tmp").write_bytes(b"half")
    ...     _ = Path(folder, "other.ptcd34.tmp").write_bytes(b"not ours")
    ...     removed = remove_stale_temporaries(Path(folder) / "checkpoint.pt")
    ...     [p.name for p in removed], sorted(p.name for p in Path(folder).iterdir())
    (['checkpoint.ptab12.tmp'], ['other.ptcd34.tmp'])
    """
    path = Path(path)
    if not path.parent.is_dir():
        return []
    stale = [p for p in path.parent.glob(f"{glob_escape(path.name)}*.tmp") if p.is_file()]
    for p in stale:
        p.unlink(missing_ok=True)
    return stale


def load_file(path, map_location="cpu"):
    """Read a file written by :func:`atomic_save`: checksum first, then tensors and plain data only.

    Parameters
    ----------
    path : str or os.PathLike
    map_location : torch.device or str
        Where the tensors go.

    Returns
    -------
    object
        What was saved.

    Raises
    ------
    FileNotFoundError
        When there is no such file.
    CorruptFileError
        When the file is not one of ours, is truncated or damaged (the
        checksum differs), or its payload names anything but tensors and
        plain containers (``weights_only=True`` refuses it; nothing runs).

    Examples
    --------
    >>> import tempfile
    >>> with tempfile.TemporaryDirectory() as folder:
    ...     path = Path(folder) / "state.pt"
    ...     atomic_save({"w": torch.ones(2)}, path)
    ...     data = path.read_bytes()
    ...     _ = path.write_bytes(data[:-5])
    ...     try:
    ...         load_file(path)
    ...     except CorruptFileError as err:
    ...         print(str(err).split(": ", 1)[1])
    fails its SHA-256 checksum (truncated or damaged); delete the file and run again (a cached run is then retrained)
    """
    path = Path(path)
    data = path.read_bytes()
    line, newline, payload = data.partition(b"\n")
    if not line.startswith(MAGIC) or not newline:
        raise CorruptFileError(path, "is not a kmtrf_core checkpoint (no header line; written by another "
                                     "program or an older kmtrf_core)")
    if hashlib.sha256(payload).hexdigest().encode() != line[len(MAGIC):]:
        raise CorruptFileError(path, "fails its SHA-256 checksum (truncated or damaged)")
    try:
        return torch.load(io.BytesIO(payload), map_location=map_location, weights_only=True)
    except Exception as err:  # weights_only refuses anything that would run code
        raise CorruptFileError(path, f"holds more than tensors and plain data, refused unread ({type(err).__name__})") from None


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
        ``config`` (as a dict), ``step``, ``weights`` (:func:`weights_of`: ``{"Q", "K", "V"}`` and a block's tensors
        on the CPU), ``optimizer`` (Adam's state dict), ``task_generators``
        (their states), ``history`` (rows), ``snapshots`` (``(step, weights)``
        pairs, empty unless ``config.snapshots``) and ``wall_time``.

    Raises
    ------
    FileNotFoundError
        When there is no such file.
    CorruptFileError
        When the file is truncated, damaged or not a checkpoint (:func:`load_file`).
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
    state = load_file(path)
    if config is not None:
        saved, wanted = state["config"], config.to_dict()
        differ = [key for key in wanted if key not in TrainConfig.RESUMABLE and saved.get(key) != wanted[key]]
        if differ:
            details = ", ".join(f"{key}: checkpoint {saved.get(key)!r} vs config {wanted[key]!r}" for key in differ)
            raise ValueError(f"checkpoint {path} does not match the config ({details})")
        if state["step"] > config.steps:
            raise ValueError(f"checkpoint {path} is at step {state['step']}, beyond config.steps={config.steps}")
    return state


def writable_folder(folder) -> Path:
    """``folder``, created if missing, once a file was written in it and removed; ``OSError`` when it cannot be.

    The check before training (the training CLI's ``--out``, the run cache of
    :func:`~kmtrf_core.training.train_cached`), so that a folder that cannot
    take the result stops a run before it trains, not after.

    >>> import tempfile
    >>> with tempfile.TemporaryDirectory() as parent:
    ...     folder = writable_folder(Path(parent) / "runs")
    ...     folder.is_dir(), list(folder.iterdir())
    (True, [])
    """
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    probe = folder / f".kmtrf-write-check-{os.getpid()}"
    probe.write_bytes(b"")
    probe.unlink()
    return folder
