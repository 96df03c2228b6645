"""What defines a training run (Algorithm 1, Section 3, Appendix F): :class:`TrainConfig`.

Its fields are the paper's hyperparameters (defaults: the paper's setting) and
the task distribution; the command line (:mod:`kmtrf_core.training.cli`) is
generated from them, and the run cache (:mod:`kmtrf_core.training.runs`) keys
on them.
"""

from __future__ import annotations

import dataclasses
import numbers
from dataclasses import dataclass, field

import torch

from ..attention import IMPLS
from ..device import resolve_device
from ..embeddings import SCHEMES
from ..model import ClusterTransformer
from ..objectives import OMEGAS
from ..tasks import FAMILIES, check_families
from ..validation import check_choice, check_clusters, check_int, check_number
from .convergence import PATIENCE

__all__ = ["TrainConfig", "TrainingDiverged", "HISTORY_COLUMNS", "UNROLL_LOSSES", "check_config", "initial_layer", "layer_for"]

UNROLL_LOSSES = ("last", "sum")
"""With ``TrainConfig.unroll > 1``: the loss of the last step, or the sum over the unrolled steps."""

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
        Dimension, clusters, points per task (4, 6, 512).
    scheme : str
        Token embedding, one of :data:`~kmtrf_core.embeddings.SCHEMES` (``"bn"``).
    omega : {"ne", "l2"}
        Regularized min of the loss (softmin or sparsemax; ``"l2"``).
    tau : float
        Its penalty (0.1).
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
    impl : {"auto", "sdpa", "direct"}
        Attention kernel (``"sdpa"``: fused, no ``n x n`` matrix kept;
        ``"direct"``: explicit weights; ``"auto"``: the faster of the two
        for the size and device, :mod:`kmtrf_core.attention`).
    until_flat : float or None
        Train under the stop rule of :mod:`kmtrf_core.training.convergence`
        with this relative tolerance: stop once the layer beats Lloyd on its
        validation tasks and its best value has improved by less than this
        over the last ``patience`` steps; ``steps`` is the cap, where a run
        that never satisfies the rule ends. ``None``: exactly ``steps`` steps
        (the paper).
    min_steps : int
        No stop by the rule before this step.
    patience : int
        The rule's window in steps (default
        :data:`~kmtrf_core.training.convergence.PATIENCE`); a multiple of
        ``val_every``. A plateau above one Lloyd step never stops a run: the
        rule also needs the median curve below one Lloyd step at the step.
    snapshots : bool
        Keep the weights at every validation step (``history.attrs["snapshots"]``).
    ffn : int
        Hidden width of a feedforward block in the layer (0: none, the
        paper's layer; Appendix A's open question, chapter 19).
    unroll : int
        Layers applied to each training task, re-embedded between steps
        (1: the paper's single-step training; ``T > 1`` trains for ``T``-step
        clustering through the unrolled steps, chapter 18). Validation then
        compares ``T`` layer steps with ``T`` Lloyd steps.
    unroll_loss : {"last", "sum"}
        With ``unroll > 1``: the smoothed loss after the last step, or summed
        over the ``T`` steps.
    gamma_end, tau_end : float or None
        Anneal ``gamma`` (the attention's inverse temperature) or ``tau``
        (the loss's penalty) geometrically from its value to this one over
        the first :attr:`anneal_steps` steps, then hold it (chapter 18).
        ``None``: fixed, as in the paper. The trained layer keeps
        :attr:`final_gamma`.
    trim : float
        Fraction of each task's points, those with the largest smoothed
        losses, left out of the training loss (0: the paper's loss; a robust
        loss for the Cauchy question, chapter 21). Validation is unchanged.

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
    impl: str = _option("auto", "attention kernel", choices=IMPLS)
    until_flat: float | None = _option(
        None, "stop once the validation curve is flat to this relative tolerance (steps: the maximum)", kind=float)
    min_steps: int = _option(0, "no stop by the rule before this step")
    patience: int = _option(PATIENCE, "steps without improvement of the best validation value before the rule stops")
    snapshots: bool = _option(False, "keep the weights at every validation step")
    ffn: int = _option(0, "hidden width of a feedforward block (0: none, the paper's layer)")
    unroll: int = _option(1, "layers per training task, re-embedded (1: the paper's single-step training)")
    unroll_loss: str = _option("last", "with unroll > 1: loss after the last step, or summed over steps",
                               choices=UNROLL_LOSSES)
    gamma_end: float | None = _option(None, "anneal gamma geometrically to this value (fixed if omitted)",
                                      kind=float)
    tau_end: float | None = _option(None, "anneal tau geometrically to this value (fixed if omitted)", kind=float)
    trim: float = _option(0.0, "fraction of each task's points with the largest losses left out of the loss")

    def __post_init__(self) -> None:
        def field_name(name):
            return f"TrainConfig.{name}"

        def number(name, checked):  # a NumPy scalar is stored as the Python number the check returns
            if not isinstance(getattr(self, name), (int, float)):
                setattr(self, name, checked)

        for name in ("d", "n", "steps", "batch", "val_tasks", "val_every"):
            number(name, check_int(getattr(self, name), field_name(name)))
        check_clusters(self.k, self.n, field_name("k"))
        number("k", int(self.k))
        for name in ("tau", "lr", "scale", "gamma"):
            number(name, check_number(getattr(self, name), field_name(name)))
        self.scheme = check_choice(self.scheme, field_name("scheme"), SCHEMES)
        self.omega = check_choice(self.omega, field_name("omega"), OMEGAS)
        families = check_families(self.family, field_name("family"))
        self.family = families[0] if isinstance(self.family, str) else families
        if self.clip is not None:
            number("clip", check_number(self.clip, field_name("clip")))
        one_seed = isinstance(self.seeds, numbers.Integral)
        if not one_seed and (isinstance(self.seeds, (str, bytes)) or not hasattr(self.seeds, "__iter__")):
            raise ValueError(f"TrainConfig.seeds must be an int or a sequence of distinct non-negative ints, "
                             f"got {self.seeds!r}")
        seeds = (self.seeds,) if one_seed else tuple(self.seeds)
        seeds = tuple(check_int(seed, "TrainConfig.seeds entries", minimum=0) for seed in seeds)
        if not seeds or len(set(seeds)) != len(seeds):
            raise ValueError(f"TrainConfig.seeds must be distinct non-negative ints, got {self.seeds!r}")
        self.seeds = seeds
        number("val_seed", check_int(self.val_seed, field_name("val_seed"), minimum=0))
        number("min_steps", check_int(self.min_steps, field_name("min_steps"), minimum=0))
        number("patience", check_int(self.patience, field_name("patience")))
        if self.until_flat is not None:
            number("until_flat", check_number(self.until_flat, field_name("until_flat")))
        self.impl = check_choice(self.impl, field_name("impl"), IMPLS)
        if self.device is not None:
            resolve_device(self.device, field_name("device"))
        number("ffn", check_int(self.ffn, field_name("ffn"), minimum=0))
        number("unroll", check_int(self.unroll, field_name("unroll")))
        self.unroll_loss = check_choice(self.unroll_loss, field_name("unroll_loss"), UNROLL_LOSSES)
        for name in ("gamma_end", "tau_end"):
            if getattr(self, name) is not None:
                number(name, check_number(getattr(self, name), field_name(name)))
        number("trim", check_number(self.trim, field_name("trim"), allow_zero=True))
        if self.trim >= 1:
            raise ValueError(f"TrainConfig.trim must leave points in the loss (0 <= trim < 1), got {self.trim!r}")

    @property
    def anneal_steps(self) -> int:
        """Steps over which ``gamma`` / ``tau`` move to ``gamma_end`` / ``tau_end``.

        ``min(min_steps, steps)`` when the run stops on flatness and
        ``min_steps > 0`` (it cannot stop before, so the trained layer always
        ends at ``gamma_end``), else ``steps``.

        >>> TrainConfig(steps=400, until_flat=0.02, min_steps=300).anneal_steps
        300
        """
        return min(self.min_steps, self.steps) if self.until_flat is not None and self.min_steps > 0 else self.steps

    @property
    def earliest_stop(self) -> int:
        """The first step at which the stop rule may end the run: ``min_steps``, and for an annealed run
        (``gamma_end`` or ``tau_end``) at least its schedule plus the patience, so the layer trains at its
        final values before it can stop.

        >>> TrainConfig(steps=5000, until_flat=0.02, min_steps=2500, patience=2000).earliest_stop
        2500
        >>> TrainConfig(steps=5000, until_flat=0.02, min_steps=2500, patience=2000, gamma_end=8.0).earliest_stop
        4500
        """
        if self.gamma_end is None and self.tau_end is None:
            return self.min_steps
        return max(self.min_steps, self.anneal_steps + self.patience)

    def schedule(self, step: int) -> tuple:
        """``(gamma, tau)`` in force at optimization step ``step`` (1-based; 0 gives the start values).

        Geometric from the start to the end value over :attr:`anneal_steps`, then constant.

        >>> cfg = TrainConfig(gamma=1.0, gamma_end=16.0, steps=4)
        >>> [cfg.schedule(step)[0] for step in range(6)]
        [1.0, 2.0, 4.0, 8.0, 16.0, 16.0]
        """
        fraction = min(step, self.anneal_steps) / self.anneal_steps

        def moved(start, end):
            return start if end is None else float(start * (end / start) ** fraction)

        return moved(self.gamma, self.gamma_end), moved(self.tau, self.tau_end)

    @property
    def final_gamma(self) -> float:
        """The attention temperature the trained layer keeps (``gamma_end`` when annealed).

        >>> TrainConfig(gamma=1.0, gamma_end=8.0).final_gamma
        8.0
        """
        return self.gamma if self.gamma_end is None else self.gamma_end

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
        """The fields as plain data (lists for ``seeds`` and a tuple of families), as checkpoints store them."""
        out = dataclasses.asdict(self)
        out["seeds"] = list(self.seeds)
        out["family"] = self.family if isinstance(self.family, str) else list(self.family)
        return out

    # fields that may differ between a checkpoint and the run that resumes it
    RESUMABLE = ("steps", "device")


def layer_for(config: TrainConfig, *, ensemble: bool = True, device=None, generator=None,
              dtype=None) -> ClusterTransformer:
    """An untrained layer of ``config``'s architecture (the one training and the run cache build).

    Its scheme, ``ffn`` block, attention kernel and temperature (:attr:`TrainConfig.final_gamma`) come
    from the config; with ``ensemble`` and several seeds, an ensemble of ``len(seeds)``. ``device``,
    ``generator`` (the initial weights) and ``dtype`` go to :class:`~kmtrf_core.model.ClusterTransformer`.

    >>> layer = layer_for(TrainConfig(d=2, k=3, n=16, scheme="oh", seeds=(0, 1), gamma_end=4.0))
    >>> layer.scheme, layer.ensemble, layer.gamma
    ('oh', 2, 4.0)
    """
    check_config(config)
    S = len(config.seeds)
    options = {} if dtype is None else {"dtype": dtype}
    if config.ffn:
        options["ffn"] = config.ffn
    return ClusterTransformer(config.d, config.k, config.scheme, config.final_gamma, impl=config.impl,
                              device=device, generator=generator, ensemble=S if ensemble and S > 1 else None,
                              **options)


def initial_layer(config: TrainConfig, device=None) -> ClusterTransformer:
    """The untrained layer that :func:`~kmtrf_core.training.train` starts ``config``'s run from.

    Each seed's member is :func:`layer_for` with the generator seeded by that seed; several seeds
    are stacked into one ensemble, in the order of ``config.seeds``. Chapter 16 compares trained
    layers with these, their own initializations.

    >>> cfg = TrainConfig(d=2, k=3, n=16, scheme="bn", seeds=(0, 1))
    >>> first = initial_layer(cfg)
    >>> first.ensemble, bool(torch.equal(first.Q, initial_layer(cfg).Q))
    (2, True)
    """
    check_config(config)
    members = [layer_for(config, ensemble=False, device=device,
                         generator=torch.Generator(device=device).manual_seed(seed)) for seed in config.seeds]
    return ClusterTransformer.stack(members) if len(members) > 1 else members[0]


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
