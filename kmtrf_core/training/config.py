"""What defines a training run (Algorithm 1, Section 3, Appendix F): :class:`TrainConfig`.

Its fields are the paper's hyperparameters (defaults: the paper's setting) and
the task distribution; the command line (:mod:`kmtrf_core.training.cli`) is
generated from them, and the run cache (:mod:`kmtrf_core.training.runs`) keys
on them.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

from ..attention import IMPLS
from ..device import resolve_device
from ..embeddings import SCHEMES
from ..objectives import OMEGAS
from ..tasks import FAMILIES, check_families
from ..validation import check_choice, check_clusters, check_int, check_number

__all__ = ["TrainConfig", "TrainingDiverged", "HISTORY_COLUMNS", "check_config"]

HISTORY_COLUMNS = ("step", "seed", "train_loss", "val_relative_loss", "wall_time")
"""The columns of a training history, one row per (step, seed)."""


class TrainingDiverged(RuntimeError):
    """A training loss became NaN or infinite.

    Raised by :func:`~kmtrf_core.training.train`; :func:`~kmtrf_core.training.sweep` can record it instead
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
        The history rows up to the failure (same columns as :func:`~kmtrf_core.training.train`'s).

    Examples
    --------
    >>> err = TrainingDiverged("non-finite training loss at step 7 for seed 1", step=7, seed=1)
    >>> isinstance(err, RuntimeError), err.step, err.seed, err.history is None
    (True, 7, 1, True)
    """

    def __init__(self, message: str, step: int, seed: int, history=None):
        super().__init__(message)
        self.step, self.seed, self.history = step, seed, history


def _option(default, help: str, *, choices=None, kind=None, several: bool = False):
    """A config field with what the command line shows for it (:mod:`kmtrf_core.training.cli`).

    ``kind`` is the value type where the default does not tell it (``None``
    defaults); ``several`` marks a field that takes one or more values.
    """
    metadata = {"help": help, "choices": choices, "kind": kind or type(default), "several": several}
    if isinstance(default, tuple):
        return field(default_factory=lambda: default, metadata=metadata)
    return field(default=default, metadata=metadata)


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
    until_flat : float or None
        Stop once the validation curve has flattened to this relative
        tolerance (:mod:`kmtrf_core.training.convergence`); ``steps`` is then
        the most it trains. ``None``: exactly ``steps`` steps (the paper).
    min_steps : int
        No flatness stop before this step (a plateau is flat too).
    snapshots : bool
        Keep the weights at every validation step (``history.attrs["snapshots"]``).

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

    d: int = _option(4, "data dimension")
    k: int = _option(6, "number of clusters")
    n: int = _option(512, "points per task")
    scheme: str = _option("bn", "token embedding", choices=SCHEMES)
    omega: str = _option("l2", "regularized min: softmin or sparsemax", choices=OMEGAS)
    tau: float = _option(0.1, "penalty of the regularized min")
    gamma: float = _option(1.0, "attention inverse temperature")
    lr: float = _option(0.01, "Adam learning rate")
    steps: int = _option(10000, "optimization steps M")
    batch: int = _option(32, "tasks per step and seed B")
    family: str | tuple = _option("normal", "task family (several: mixed per task)", choices=FAMILIES, several=True)
    scale: float = _option(0.1, "spread of the mixture components")
    anisotropic: bool = _option(False, "per-dimension spreads")
    unequal_weights: bool = _option(False, "mixture weights drawn from the simplex")
    clip: float | None = _option(None, "gradient-norm clipping per seed (off if omitted)", kind=float)
    seeds: tuple = _option((0,), "seeds, trained together", kind=int, several=True)
    device: str | None = _option(None, "torch device (default: cuda if available, else cpu)", kind=str)
    val_tasks: int = _option(256, "held-out validation tasks")
    val_every: int = _option(100, "validation interval in steps")
    val_seed: int = _option(2_147_483_647, "seed of the validation tasks")
    impl: str = _option("sdpa", "attention kernel", choices=IMPLS)
    until_flat: float | None = _option(
        None, "stop once the validation curve is flat to this relative tolerance (steps: the maximum)", kind=float)
    min_steps: int = _option(0, "no flatness stop before this step")
    snapshots: bool = _option(False, "keep the weights at every validation step")

    def __post_init__(self) -> None:
        def field_name(name):
            return f"TrainConfig.{name}"

        for name in ("d", "n", "steps", "batch", "val_tasks", "val_every"):
            check_int(getattr(self, name), field_name(name))
        check_clusters(self.k, self.n, field_name("k"))
        for name in ("tau", "lr", "scale", "gamma"):
            check_number(getattr(self, name), field_name(name))
        self.scheme = check_choice(self.scheme, field_name("scheme"), SCHEMES)
        self.omega = check_choice(self.omega, field_name("omega"), OMEGAS)
        families = check_families(self.family, field_name("family"))
        self.family = self.family if isinstance(self.family, str) else families
        if self.clip is not None:
            check_number(self.clip, field_name("clip"))
        seeds = (self.seeds,) if isinstance(self.seeds, int) else tuple(self.seeds)
        for seed in seeds:
            check_int(seed, "TrainConfig.seeds entries", minimum=0)
        if not seeds or len(set(seeds)) != len(seeds):
            raise ValueError(f"TrainConfig.seeds must be distinct non-negative ints, got {self.seeds!r}")
        self.seeds = seeds
        check_int(self.val_seed, field_name("val_seed"), minimum=0)
        check_int(self.min_steps, field_name("min_steps"), minimum=0)
        if self.until_flat is not None:
            check_number(self.until_flat, field_name("until_flat"))
        self.impl = check_choice(self.impl, field_name("impl"), IMPLS)
        if self.device is not None:
            resolve_device(self.device, field_name("device"))

    @classmethod
    def from_sizes(cls, sizes, **overrides) -> "TrainConfig":
        """A config from a profile's chapter sizes (a namespace or dict), taking the fields it knows.

        >>> from kmtrf_core.book.profiles import get_profile
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


def check_config(config) -> TrainConfig:
    """A :class:`TrainConfig` (its fields were checked when it was made).

    >>> check_config({"d": 2})
    Traceback (most recent call last):
    ...
    ValueError: config must be a TrainConfig, got dict
    """
    if not isinstance(config, TrainConfig):
        raise ValueError(f"config must be a TrainConfig, got {type(config).__name__}")
    return config
