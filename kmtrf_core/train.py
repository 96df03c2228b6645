"""Training the layer on a distribution of clustering tasks (Algorithm 1, Section 3, Appendix F).

Each step samples ``B`` tasks per seed (Appendix D), runs one layer, and takes
an Adam step on the mean smoothed k-means loss (Eq. 6). Several seeds train
together as one vectorized ensemble (:class:`~kmtrf_core.model.ClusterTransformer`
with ``ensemble=S``): every seed keeps its own initialization, its own task
stream and its own Adam state, so the result equals ``S`` separate runs up to
floating-point rounding, at a fraction of the cost.

The history is a tidy table, one row per (step, seed): the training loss, and
at validation steps the relative validation loss of Eq. 20 (the mean over
fixed held-out tasks of ``L(X, F(X, C)) / L(X, Lloyd(X, C))``), plus the wall
time. A non-finite loss stops the run with :class:`TrainingDiverged`.

Checkpoints hold the weights, the config, the history, the optimizer state and
the task generators' states, written atomically; resuming reproduces the
uninterrupted run.

Command line: ``python -m kmtrf_core.train --help``.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import hashlib
import json
import math
import os
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import torch

from ._checks import SCHEMES
from .lloyd import kmeans_objective, lloyd
from .model import ClusterTransformer
from .objectives import OMEGAS, smoothed_kmeans_loss
from .profiles import default_device
from .tasks import FAMILIES, sample_tasks

__all__ = [
    "TrainConfig",
    "TrainingDiverged",
    "train",
    "sweep",
    "convergence_summary",
    "relative_loss",
    "validation_tasks",
    "load_checkpoint",
    "train_cached",
    "cache_dir",
    "main",
]

HISTORY_COLUMNS = ("step", "seed", "train_loss", "val_relative_loss", "wall_time")
SWEEP_COLUMNS = ("d", "k", "n", "scheme", "omega", "tau", "gamma", "lr", "clip")


class TrainingDiverged(RuntimeError):
    """A training loss became NaN or infinite.

    Raised by :func:`train`; :func:`sweep` can record it instead
    (``on_diverge="record"``).

    Parameters
    ----------
    message : str
        What happened (the losses of all seeds at that step).
    step : int
        The optimization step whose loss was not finite.
    seed : int
        The first seed with a non-finite loss.
    history : pandas.DataFrame, optional
        The history rows up to the failure (same columns as :func:`train`'s).

    Examples
    --------
    >>> err = TrainingDiverged("non-finite training loss at step 7 for seed 1", step=7, seed=1)
    >>> isinstance(err, RuntimeError), err.step, err.seed, err.history is None
    (True, 7, 1, True)
    """

    def __init__(self, message: str, step: int, seed: int, history=None):
        super().__init__(message)
        self.step, self.seed, self.history = step, seed, history


@dataclass
class TrainConfig:
    """Everything that defines a training run (defaults: the paper's Section 3 / Appendix F setting).

    Parameters
    ----------
    d, k, n : int
        Dimension, clusters, points per task.
    scheme : {"oh", "bn", "na", "sc"}
        Token embedding.
    omega : {"ne", "l2"}
        Regularized min of the loss (softmin or sparsemax).
    tau : float
        Its penalty.
    gamma : float
        Attention inverse temperature (the paper trains with 1).
    lr : float
        Adam learning rate (0.01).
    steps : int
        Optimization steps ``M`` (10000).
    batch : int
        Tasks per step and seed ``B`` (32).
    family : str or tuple of str
        Task family (or families, mixed per task).
    scale, anisotropic, unequal_weights
        Task options (Appendix D).
    clip : float or None
        Gradient-norm clipping per seed (off by default, as in the paper; on for Fig. 17).
    seeds : tuple of int
        One run per seed, trained together as an ensemble.
    device : str or None
        ``None`` picks CUDA when available, else the CPU.
    val_tasks : int
        Held-out validation tasks (the same for every seed).
    val_every : int
        Validation interval in steps (also at step 0 and the last step).
    val_seed : int
        Seed of the validation tasks.
    impl : {"sdpa", "direct"}
        Attention kernel (``"sdpa"``: fused, no ``n x n`` matrix kept).

    Raises
    ------
    ValueError
        Naming the field, for an invalid value.

    Examples
    --------
    >>> cfg = TrainConfig(d=2, k=3, n=16, seeds=[0, 1])
    >>> cfg.seeds, cfg.scheme, cfg.steps
    ((0, 1), 'bn', 10000)
    >>> TrainConfig(k=1)
    Traceback (most recent call last):
    ...
    ValueError: TrainConfig.k must be an int >= 2, got 1
    """

    d: int = 4
    k: int = 6
    n: int = 512
    scheme: str = "bn"
    omega: str = "l2"
    tau: float = 0.1
    gamma: float = 1.0
    lr: float = 0.01
    steps: int = 10000
    batch: int = 32
    family: str | tuple = "normal"
    scale: float = 0.1
    anisotropic: bool = False
    unequal_weights: bool = False
    clip: float | None = None
    seeds: tuple = (0,)
    device: str | None = None
    val_tasks: int = 256
    val_every: int = 100
    val_seed: int = 2_147_483_647
    impl: str = "sdpa"

    def __post_init__(self) -> None:
        def positive_int(name):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"TrainConfig.{name} must be a positive int, got {value!r}")

        def positive_float(name, allow_inf=False):
            value = getattr(self, name)
            ok = isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0
            ok = ok and (math.isfinite(value) or (allow_inf and value == math.inf))
            if not ok:
                raise ValueError(f"TrainConfig.{name} must be a positive number, got {value!r}")

        for name in ("d", "n", "steps", "batch", "val_tasks", "val_every"):
            positive_int(name)
        if isinstance(self.k, bool) or not isinstance(self.k, int) or self.k < 2:
            raise ValueError(f"TrainConfig.k must be an int >= 2, got {self.k!r}")
        if self.k > self.n:
            raise ValueError(f"TrainConfig.k must be <= n, got k={self.k}, n={self.n}")
        for name in ("tau", "lr", "scale"):
            positive_float(name)
        positive_float("gamma")
        if self.scheme not in SCHEMES:
            raise ValueError(f"TrainConfig.scheme must be one of {SCHEMES}, got {self.scheme!r}")
        if self.omega not in OMEGAS:
            raise ValueError(f"TrainConfig.omega must be one of {OMEGAS}, got {self.omega!r}")
        families = (self.family,) if isinstance(self.family, str) else tuple(self.family)
        if not families or any(f not in FAMILIES for f in families):
            raise ValueError(f"TrainConfig.family must be one of {FAMILIES}, got {self.family!r}")
        self.family = self.family if isinstance(self.family, str) else families
        if self.clip is not None:
            positive_float("clip")
        seeds = (self.seeds,) if isinstance(self.seeds, int) else tuple(self.seeds)
        if not seeds or any(isinstance(s, bool) or not isinstance(s, int) or s < 0 for s in seeds):
            raise ValueError(f"TrainConfig.seeds must be non-negative ints, got {self.seeds!r}")
        if len(set(seeds)) != len(seeds):
            raise ValueError(f"TrainConfig.seeds must be distinct, got {self.seeds!r}")
        self.seeds = seeds
        if self.impl not in ("sdpa", "direct"):
            raise ValueError(f"TrainConfig.impl must be one of ('sdpa', 'direct'), got {self.impl!r}")
        if self.device is not None:
            try:
                torch.device(self.device)
            except (RuntimeError, TypeError):
                raise ValueError(f"TrainConfig.device is not a torch device: {self.device!r}") from None

    @classmethod
    def from_sizes(cls, sizes, **overrides) -> "TrainConfig":
        """A config from a profile's chapter sizes (a namespace or dict), taking the fields it knows.

        >>> from kmtrf_core.profiles import get_profile
        >>> cfg = TrainConfig.from_sizes(get_profile("quick").chapter("section4"), scheme="oh")
        >>> cfg.scheme, cfg.seeds
        ('oh', (0, 1))
        """
        values = dict(vars(sizes)) if not isinstance(sizes, dict) else dict(sizes)
        names = {f.name for f in dataclasses.fields(cls)}
        picked = {key: value for key, value in values.items() if key in names}
        picked.update(overrides)
        if isinstance(picked.get("seeds"), list):
            picked["seeds"] = tuple(picked["seeds"])
        return cls(**picked)

    def to_dict(self) -> dict:
        out = dataclasses.asdict(self)
        out["seeds"] = list(self.seeds)
        out["family"] = self.family if isinstance(self.family, str) else list(self.family)
        return out

    # fields that may differ between a checkpoint and the run that resumes it
    RESUMABLE = ("steps", "device")


def _task_generator(seed: int, device) -> torch.Generator:
    g = torch.Generator(device=device)
    g.manual_seed(seed * 1_000_003 + 17)  # a stream separate from the initialization's
    return g


def _sample(config: TrainConfig, generator, batch: int, device):
    return sample_tasks(
        batch, config.n, config.d, config.k, family=config.family, scale=config.scale,
        anisotropic=config.anisotropic, unequal_weights=config.unequal_weights,
        generator=generator, device=device,
    )


def validation_tasks(config: TrainConfig, device=None):
    """The fixed held-out tasks ``(X, C)`` that :func:`train` validates on (seed ``config.val_seed``).

    Parameters
    ----------
    config : TrainConfig
        Sets the task distribution, ``val_tasks`` and ``val_seed``.
    device : torch.device or str, optional
        Default :func:`~kmtrf_core.profiles.default_device`.

    Returns
    -------
    X : torch.Tensor
        Points ``(val_tasks, n, d)``.
    C : torch.Tensor
        Initial centers ``(val_tasks, k, d)``.

    Examples
    --------
    >>> cfg = TrainConfig(d=2, k=3, n=16, val_tasks=4)
    >>> X, C = validation_tasks(cfg, "cpu")
    >>> X.shape, C.shape, torch.equal(X, validation_tasks(cfg, "cpu")[0])
    (torch.Size([4, 16, 2]), torch.Size([4, 3, 2]), True)
    """
    device = torch.device(device) if device is not None else default_device()
    return _sample(config, torch.Generator(device=device).manual_seed(config.val_seed), config.val_tasks, device)


def relative_loss(
    model: ClusterTransformer, X: torch.Tensor, C: torch.Tensor, chunk: int = 64, reference: torch.Tensor | None = None
) -> torch.Tensor:
    """Relative loss of Eq. 20 per task: ``L(X, F(X, C)) / L(X, Lloyd_1(X, C))``.

    Below 1: the layer beats one Lloyd step on that task. Evaluated without
    gradients.

    Parameters
    ----------
    model : ClusterTransformer
        A single layer or an ensemble of ``S``.
    X : torch.Tensor
        Points ``(B, n, d)``.
    C : torch.Tensor
        Initial centers ``(B, k, d)``.
    chunk : int
        Tasks per forward pass.
    reference : torch.Tensor, optional
        The denominators ``L(X, Lloyd_1(X, C))`` ``(B,)`` when they are
        already known (fixed validation tasks), so they are not recomputed.

    Returns
    -------
    torch.Tensor
        ``(B,)``, or ``(S, B)`` for an ensemble.

    Examples
    --------
    The constructed layer of Theorem 2.1 is one Lloyd step:

    >>> X, C = sample_tasks(3, 20, 2, 3, generator=0, dtype=torch.float64)
    >>> relative_loss(ClusterTransformer.from_lloyd(2, 3, "bn"), X, C).round(decimals=6).tolist()
    [1.0, 1.0, 1.0]
    """
    with torch.no_grad():
        if reference is None:
            reference = kmeans_objective(X, lloyd(X, C))  # (B,)
        out = []
        for start in range(0, X.shape[0], chunk):
            Xc, Cc = X[start : start + chunk], C[start : start + chunk]
            centers = model(Xc, Cc)  # ((S,) b, k, d)
            Xe = Xc.expand(centers.shape[:-2] + Xc.shape[-2:])
            out.append(kmeans_objective(Xe.flatten(0, -3), centers.flatten(0, -3)).view(centers.shape[:-2]))
    return torch.cat(out, dim=-1) / reference


def _atomic_save(obj, path: Path) -> None:
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
    """Read a checkpoint written by :func:`train`; with ``config``, check that it can resume into it.

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


def train(
    config: TrainConfig,
    *,
    checkpoint: str | os.PathLike | None = None,
    checkpoint_every: int | None = None,
    resume: str | os.PathLike | None = None,
    progress: bool = False,
):
    """Algorithm 1: train the layer by Adam on the smoothed k-means loss of sampled tasks.

    Parameters
    ----------
    config : TrainConfig
    checkpoint : path, optional
        Where to write checkpoints (every ``checkpoint_every`` steps and at the end).
    checkpoint_every : int, optional
        Checkpoint interval in steps; None: only at the end.
    resume : path, optional
        A checkpoint to continue from; its config must match ``config``
        except for ``steps`` and ``device``.
    progress : bool
        Show a tqdm progress bar.

    Returns
    -------
    model : ClusterTransformer
        The trained layer; an ensemble (``model.ensemble == len(seeds)``) when
        there are several seeds (:meth:`~kmtrf_core.model.ClusterTransformer.members`
        splits it).
    history : pandas.DataFrame
        Columns ``step, seed, train_loss, val_relative_loss, wall_time``.

    Examples
    --------
    >>> cfg = TrainConfig(d=2, k=3, n=32, steps=3, batch=4, val_tasks=4, val_every=1, seeds=(0, 1))
    >>> model, history = train(cfg)
    >>> model.ensemble, len(history), list(history.columns)
    (2, 8, ['step', 'seed', 'train_loss', 'val_relative_loss', 'wall_time'])
    """
    import pandas as pd
    from tqdm.auto import tqdm

    if not isinstance(config, TrainConfig):
        raise ValueError(f"config must be a TrainConfig, got {type(config).__name__}")
    if checkpoint_every is not None and (not isinstance(checkpoint_every, int) or checkpoint_every < 1):
        raise ValueError(f"checkpoint_every must be a positive int, got {checkpoint_every!r}")
    device = torch.device(config.device) if config.device is not None else default_device()
    seeds = config.seeds
    S = len(seeds)

    members = [
        ClusterTransformer(config.d, config.k, config.scheme, config.gamma, impl=config.impl, device=device,
                           generator=torch.Generator(device=device).manual_seed(seed))
        for seed in seeds
    ]
    model = ClusterTransformer.stack(members) if S > 1 else members[0]
    del members
    params = [model.Q, model.K, model.V]
    optimizer = torch.optim.Adam(params, lr=config.lr)
    task_gens = [_task_generator(seed, device) for seed in seeds]
    X_val, C_val = validation_tasks(config, device)
    with torch.no_grad():
        lloyd_val = kmeans_objective(X_val, lloyd(X_val, C_val))  # the fixed denominators of Eq. 20

    rows: list[tuple] = []
    start_step, elapsed = 0, 0.0
    if resume is not None:
        state = load_checkpoint(resume, config)
        with torch.no_grad():
            for name in "QKV":
                getattr(model, name).copy_(state["weights"][name].to(device))
        optimizer.load_state_dict(state["optimizer"])
        for gen, gen_state in zip(task_gens, state["task_generators"]):
            gen.set_state(gen_state.to(gen.device) if gen.device.type != "cpu" else gen_state)
        # the interrupted run validated at its last step; a longer run validates only on its schedule
        rows = [
            (st, sd, tl, vl if st % config.val_every == 0 or st == config.steps else math.nan, wt)
            for st, sd, tl, vl, wt in state["history"]
        ]
        start_step, elapsed = state["step"], state["wall_time"]

    def save(step: int) -> None:
        _atomic_save(
            {
                "config": config.to_dict(),
                "step": step,
                "weights": {name: getattr(model, name).detach().cpu() for name in "QKV"},
                "optimizer": optimizer.state_dict(),
                "task_generators": [g.get_state() for g in task_gens],
                "history": rows,
                "wall_time": elapsed,
            },
            Path(checkpoint),
        )

    def validate(step: int) -> list[float]:
        model.eval()
        rel = relative_loss(model, X_val, C_val, chunk=config.batch, reference=lloyd_val)
        model.train()
        return rel.reshape(S, -1).mean(dim=1).tolist()

    t0 = time.perf_counter() - elapsed
    if start_step == 0:
        val = validate(0)
        rows += [(0, seed, math.nan, val[i], 0.0) for i, seed in enumerate(seeds)]

    bar = tqdm(range(start_step + 1, config.steps + 1), disable=not progress, desc="training", unit="step")
    for step in bar:
        batches = [_sample(config, g, config.batch, device) for g in task_gens]
        X = torch.stack([b[0] for b in batches]) if S > 1 else batches[0][0]  # ((S,) B, n, d)
        C = torch.stack([b[1] for b in batches]) if S > 1 else batches[0][1]
        centers = model(X, C)
        losses = smoothed_kmeans_loss(X.flatten(0, -3), centers.flatten(0, -3), config.omega, config.tau)
        per_seed = losses.view(S, config.batch).mean(dim=1)  # (S,)
        optimizer.zero_grad(set_to_none=True)
        per_seed.sum().backward()  # seeds do not interact: each slice gets its own gradient
        values = per_seed.detach().cpu()
        bad = ~torch.isfinite(values)
        if bool(bad.any()):
            seed = seeds[int(bad.nonzero()[0])]
            raise TrainingDiverged(
                f"non-finite training loss at step {step} for seed {seed} "
                f"(losses {values.tolist()}); try gradient clipping (TrainConfig.clip) or a smaller lr",
                step=step, seed=seed, history=pd.DataFrame(rows, columns=list(HISTORY_COLUMNS)),
            )
        if config.clip is not None:
            _clip_per_member(params, config.clip, S > 1)
        optimizer.step()
        elapsed = time.perf_counter() - t0
        validating = step % config.val_every == 0 or step == config.steps
        val = validate(step) if validating else [math.nan] * S
        rows += [(step, seed, values[i].item(), val[i], elapsed) for i, seed in enumerate(seeds)]
        if progress:
            bar.set_postfix(loss=f"{values.mean().item():.4g}")
        if checkpoint is not None and checkpoint_every is not None and step % checkpoint_every == 0:
            save(step)
    if checkpoint is not None:
        save(config.steps)
    model.eval()
    history = pd.DataFrame(rows, columns=list(HISTORY_COLUMNS))
    return model, history


# modules whose source decides what train() returns; a change to any of them invalidates cached runs
_TRAINING_SOURCES = ("_checks", "attention", "embeddings", "lloyd", "model", "objectives", "tasks", "train")


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


def _cache_key(config: TrainConfig) -> str:
    digest = hashlib.sha256()
    wanted = {key: value for key, value in config.to_dict().items() if key != "device"}
    digest.update(json.dumps(wanted, sort_keys=True).encode())
    digest.update(_training_code_fingerprint().encode())
    return digest.hexdigest()[:24]


@functools.lru_cache(maxsize=1)
def _training_code_fingerprint() -> str:
    """Of the training modules, read and parsed once per process (the code that runs is the imported one)."""
    here = Path(__file__).resolve().parent
    return "\n".join(_code_fingerprint((here / f"{name}.py").read_text()) for name in _TRAINING_SOURCES)


def _code_fingerprint(source: str) -> str:
    """The module's syntax tree without docstrings: editing prose or comments keeps cached runs valid."""
    import ast

    tree = ast.parse(source)
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and body:
            first = body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) and isinstance(first.value.value, str):
                node.body = body[1:] or [ast.Pass()]
    return ast.dump(tree, include_attributes=False)


def train_cached(config: TrainConfig, *, directory=None, refresh: bool = False, progress: bool = False):
    """:func:`train`, remembered on disk: a second call with the same config loads the result.

    The key is the config (without ``device``) and the source of the modules
    that training runs through, so editing the model, the tasks, the loss or
    the loop retrains. Several chapters share the models of Section 4 this way
    without training them twice in one book build.

    Parameters
    ----------
    config : TrainConfig
    directory : path, optional
        The cache folder (default :func:`cache_dir`).
    refresh : bool
        Train again and overwrite the cached run.

    Returns
    -------
    (model, history) as from :func:`train`; the model is in eval mode on
    the config's device (or the default device).

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
    import pandas as pd

    if not isinstance(config, TrainConfig):
        raise ValueError(f"config must be a TrainConfig, got {type(config).__name__}")
    path = cache_dir(directory) / f"run-{_cache_key(config)}.pt"
    device = torch.device(config.device) if config.device is not None else default_device()
    if path.exists() and not refresh:
        state = torch.load(path, map_location=device, weights_only=False)
        S = len(config.seeds)
        model = ClusterTransformer(config.d, config.k, config.scheme, config.gamma, impl=config.impl, device=device,
                                   ensemble=S if S > 1 else None)
        with torch.no_grad():
            for name in "QKV":
                getattr(model, name).copy_(state["weights"][name])
        return model.eval(), pd.DataFrame(state["history"], columns=list(HISTORY_COLUMNS))
    model, history = train(config, progress=progress)
    _atomic_save(
        {"config": config.to_dict(), "weights": {name: getattr(model, name).detach().cpu() for name in "QKV"},
         "history": list(history.itertuples(index=False, name=None))},
        path,
    )
    return model, history


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
    cache : bool
        Train through :func:`train_cached` (runs already on disk are loaded).

    Returns
    -------
    models : dict
        ``tuple(values in grid order) -> model`` (``None`` for a diverged run).
    history : pandas.DataFrame
        The histories of all runs, with a column for each grid field and for
        the main config fields (``d, k, n, scheme, omega, tau, gamma, lr, clip``),
        and ``diverged``.

    Examples
    --------
    >>> base = TrainConfig(d=2, k=3, n=16, steps=2, batch=2, val_tasks=2, val_every=1)
    >>> models, hist = sweep(base, {"scheme": ["oh", "bn"]})
    >>> sorted(models), sorted(hist.scheme.unique())
    ([('bn',), ('oh',)], ['bn', 'oh'])
    """
    import itertools

    import pandas as pd
    from tqdm.auto import tqdm

    if on_diverge not in ("raise", "record"):
        raise ValueError(f"on_diverge must be 'raise' or 'record', got {on_diverge!r}")
    fields = {f.name for f in dataclasses.fields(TrainConfig)}
    unknown = [key for key in grid if key not in fields]
    if unknown:
        raise ValueError(f"grid has fields TrainConfig does not: {unknown}")
    names = list(grid)
    models, frames = {}, []
    combos = list(itertools.product(*(grid[name] for name in names)))
    for values in tqdm(combos, disable=not progress, desc="sweep"):
        config = dataclasses.replace(base, **dict(zip(names, values)))
        try:
            model, hist = train_cached(config) if cache else train(config)
            hist = hist.assign(diverged=False)
        except TrainingDiverged as err:
            if on_diverge == "raise":
                raise
            model, hist = None, err.history.assign(diverged=True)
        for name in dict.fromkeys((*SWEEP_COLUMNS, *names)):
            value = getattr(config, name)
            hist[name] = [value if not isinstance(value, tuple) else "+".join(map(str, value))] * len(hist)
        models[tuple(values)] = model
        frames.append(hist)
    return models, pd.concat(frames, ignore_index=True)


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
    import numpy as np
    import pandas as pd

    rows = []
    for key, part in history.groupby(list(by)):
        key = key if isinstance(key, tuple) else (key,)
        finals, trains, speeds = [], [], []
        for _, run in part.groupby("seed"):
            val = run.dropna(subset=["val_relative_loss"])
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


def _clip_per_member(params, max_norm: float, ensemble: bool) -> None:
    # like torch.nn.utils.clip_grad_norm_, but one norm per ensemble member
    with torch.no_grad():
        if ensemble:
            sq = sum(p.grad.pow(2).flatten(1).sum(dim=1) for p in params)  # (S,)
        else:
            sq = sum(p.grad.pow(2).sum() for p in params)
        coef = (max_norm / (sq.sqrt() + 1e-6)).clamp(max=1.0)
        for p in params:
            p.grad.mul_(coef.view(-1, *([1] * (p.grad.dim() - 1))) if ensemble else coef)


def _parse_args(argv=None) -> tuple[TrainConfig, argparse.Namespace]:
    defaults = TrainConfig()
    parser = argparse.ArgumentParser(
        prog="python -m kmtrf_core.train",
        description="Train the clustering transformer layer (Algorithm 1 of Park et al.) on sampled tasks.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    parser.add_argument("--d", type=int, default=defaults.d, help="data dimension")
    parser.add_argument("--k", type=int, default=defaults.k, help="number of clusters")
    parser.add_argument("--n", type=int, default=defaults.n, help="points per task")
    parser.add_argument("--scheme", choices=SCHEMES, default=defaults.scheme, help="token embedding")
    parser.add_argument("--omega", choices=OMEGAS, default=defaults.omega, help="regularized min: softmin or sparsemax")
    parser.add_argument("--tau", type=float, default=defaults.tau, help="penalty of the regularized min")
    parser.add_argument("--gamma", type=float, default=defaults.gamma, help="attention inverse temperature")
    parser.add_argument("--lr", type=float, default=defaults.lr, help="Adam learning rate")
    parser.add_argument("--steps", type=int, default=defaults.steps, help="optimization steps M")
    parser.add_argument("--batch", type=int, default=defaults.batch, help="tasks per step and seed B")
    parser.add_argument("--family", nargs="+", choices=FAMILIES, default=[defaults.family], help="task family (several: mixed)")
    parser.add_argument("--scale", type=float, default=defaults.scale, help="spread of the mixture components")
    parser.add_argument("--anisotropic", action="store_true", help="per-dimension spreads")
    parser.add_argument("--unequal-weights", action="store_true", help="mixture weights drawn from the simplex")
    parser.add_argument("--clip", type=float, default=None, help="gradient-norm clipping per seed (off if omitted)")
    parser.add_argument("--seeds", type=int, nargs="+", default=list(defaults.seeds), help="seeds, trained together")
    parser.add_argument("--device", default=None, help="torch device (default: cuda if available, else cpu)")
    parser.add_argument("--val-tasks", type=int, default=defaults.val_tasks, help="held-out validation tasks")
    parser.add_argument("--val-every", type=int, default=defaults.val_every, help="validation interval in steps")
    parser.add_argument("--val-seed", type=int, default=defaults.val_seed, help="seed of the validation tasks")
    parser.add_argument("--impl", choices=("sdpa", "direct"), default=defaults.impl, help="attention kernel")
    parser.add_argument("--out", default="runs/train", help="output folder: checkpoint.pt and history.csv")
    parser.add_argument("--checkpoint-every", type=int, default=1000, help="checkpoint interval in steps")
    parser.add_argument("--resume", action="store_true", help="continue from OUT/checkpoint.pt")
    args = parser.parse_args(argv)
    family = args.family[0] if len(args.family) == 1 else tuple(args.family)
    config = TrainConfig(
        d=args.d, k=args.k, n=args.n, scheme=args.scheme, omega=args.omega, tau=args.tau, gamma=args.gamma,
        lr=args.lr, steps=args.steps, batch=args.batch, family=family, scale=args.scale,
        anisotropic=args.anisotropic, unequal_weights=args.unequal_weights, clip=args.clip,
        seeds=tuple(args.seeds), device=args.device, val_tasks=args.val_tasks, val_every=args.val_every,
        val_seed=args.val_seed, impl=args.impl,
    )
    return config, args


def main(argv=None) -> int:
    """Command-line entry point: train, write ``OUT/checkpoint.pt`` and ``OUT/history.csv``.

    ``python -m kmtrf_core.train --help`` lists the options: one per
    :class:`TrainConfig` field (``--val-tasks`` for ``val_tasks``, ...), and
    ``--out``, ``--checkpoint-every``, ``--resume``.

    Parameters
    ----------
    argv : list of str, optional
        The arguments; default ``sys.argv[1:]``.

    Returns
    -------
    int
        0 on success (the process exit status).

    Examples
    --------
    >>> import contextlib, io, tempfile
    >>> args = ["--d", "2", "--k", "3", "--n", "16", "--steps", "2", "--batch", "2", "--val-tasks", "2"]
    >>> with tempfile.TemporaryDirectory() as out, contextlib.redirect_stdout(io.StringIO()) as log:
    ...     status = main(args + ["--out", out])
    ...     files = sorted(p.name for p in Path(out).iterdir())
    >>> status, files, log.getvalue().startswith("wrote")
    (0, ['checkpoint.pt', 'history.csv'], True)
    """
    try:
        config, args = _parse_args(argv)
    except ValueError as err:  # invalid combination of values
        raise SystemExit(f"error: {err}") from None
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    ckpt = out / "checkpoint.pt"
    model, history = train(
        config, checkpoint=ckpt, checkpoint_every=args.checkpoint_every,
        resume=ckpt if args.resume else None, progress=True,
    )
    history.to_csv(out / "history.csv", index=False)
    last = history[history.step == history.step.max()]
    print(f"wrote {ckpt} and {out / 'history.csv'}")
    print(last.to_string(index=False))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
