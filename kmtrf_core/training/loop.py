"""Training the layer on a distribution of clustering tasks (Algorithm 1, Section 3, Appendix F).

Each step samples ``B`` tasks per seed (Appendix D), runs one layer (or
``config.unroll`` re-embedded ones), and takes an Adam step on the mean
smoothed k-means loss (Eq. 6). Several seeds train together as one vectorized
ensemble (:class:`~kmtrf_core.model.ClusterTransformer` with ``ensemble=S``):
every seed keeps its own initialization, its own task stream and its own Adam
state, so the result equals ``S`` separate runs up to floating-point rounding,
at a fraction of the cost.

The history is a tidy table, one row per (step, seed): the training loss, and
at validation steps the relative validation loss of Eq. 20 (the mean over
fixed held-out tasks of ``L(X, F(X, C)) / L(X, Lloyd(X, C))``), plus the wall
time. A non-finite loss, centers or gradient stops the run with
:class:`~kmtrf_core.training.config.TrainingDiverged`. With
``config.until_flat`` the run stops at the first validation step (from
``config.earliest_stop`` on) where its validation curve beats Lloyd and has
been flat for ``config.patience`` steps (the stop rule of
:mod:`kmtrf_core.training.convergence`); a run that never gets there trains
to its cap, ``config.steps``.

Checkpoints hold the weights, the config, the history, the optimizer state,
the task generators' states and any snapshots, written atomically; resuming
reproduces the uninterrupted run.

The run machinery around this loop (the cache of trained runs, sweeps) is
:mod:`kmtrf_core.training.runs`; checkpoint files are
:mod:`kmtrf_core.training.checkpoints`; the command line is
``python -m kmtrf_core.training --help``.
"""

from __future__ import annotations

import math
import os
import time

import pandas as pd
import torch
from tqdm.auto import tqdm

from ..device import resolve_device
from ..evaluate import relative_loss
from ..lloyd import kmeans_objective, lloyd
from ..objectives import training_loss
from ..tasks import sample_tasks
from ..validation import check_int
from .checkpoints import atomic_save, load_checkpoint, load_weights, remove_stale_temporaries, weights_of
from .config import HISTORY_COLUMNS, TrainConfig, TrainingDiverged, check_config, initial_layer
from .convergence import should_stop
from .graphs import Stepper, graph_obstacle, set_capturable
from .heap import hold_freed_memory

__all__ = ["task_generators", "train", "training_step", "validation_tasks"]


def _task_generator(seed: int, device) -> torch.Generator:
    g = torch.Generator(device=device)
    g.manual_seed(seed * 1_000_003 + 17)  # a stream separate from the initialization's
    return g


def task_generators(config: TrainConfig, device=None) -> list:
    """The task stream of each seed of ``config`` as :func:`train` starts it: one generator per seed, on ``device``.

    >>> cfg = TrainConfig(d=2, k=3, seeds=(0, 1))
    >>> a, b = task_generators(cfg, "cpu")
    >>> a.initial_seed() != b.initial_seed()
    True
    """
    device = resolve_device(device)
    return [_task_generator(seed, device) for seed in config.seeds]


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
        Default :func:`~kmtrf_core.device.default_device`.

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
    device = resolve_device(device)
    return _sample(config, torch.Generator(device=device).manual_seed(config.val_seed), config.val_tasks, device)


def train(
    config: TrainConfig,
    *,
    checkpoint: str | os.PathLike | None = None,
    checkpoint_every: int | None = None,
    resume: str | os.PathLike | None = None,
    progress: bool = False,
    graph: bool = False,
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
    graph : bool
        On CUDA: after a few eager steps, record one step as a CUDA graph and
        replay it (:mod:`kmtrf_core.training.graphs`), with Adam in its
        capturable form; equal to the eager run up to floating-point order.
        ``ValueError`` where a graph cannot hold the step
        (:func:`~kmtrf_core.training.graphs.graph_obstacle`: not on CUDA, an
        annealed ``gamma`` or ``tau``, a mixture of task families).

    Returns
    -------
    model : ClusterTransformer
        The trained layer, in eval mode at ``config.final_gamma``; an ensemble
        (``model.ensemble == len(seeds)``) when there are several seeds
        (:meth:`~kmtrf_core.model.ClusterTransformer.members` splits it).
    history : pandas.DataFrame
        Columns ``step, seed, train_loss, val_relative_loss, wall_time``
        (``train_loss`` NaN at step 0, ``val_relative_loss`` NaN between
        validations).
        With ``config.snapshots``, ``history.attrs["snapshots"]`` is the list
        of ``(step, weights)`` at every validation step (weights as from
        :func:`~kmtrf_core.training.checkpoints.weights_of`).

    Examples
    --------
    >>> cfg = TrainConfig(d=2, k=3, n=32, steps=3, batch=4, val_tasks=4, val_every=1, seeds=(0, 1))
    >>> model, history = train(cfg)
    >>> model.ensemble, len(history), list(history.columns)
    (2, 8, ['step', 'seed', 'train_loss', 'val_relative_loss', 'wall_time'])
    """
    check_config(config)
    if checkpoint_every is not None:
        check_int(checkpoint_every, "checkpoint_every")
    device = resolve_device(config.device)
    if graph and (reason := graph_obstacle(config, device)) is not None:
        raise ValueError(f"graph=True: {reason}")
    if device.type == "cpu":
        hold_freed_memory()  # the steps' arrays stay with the process: no page faults per step (training.heap)
    seeds = config.seeds
    S = len(seeds)

    model = initial_layer(config, device)
    optimizer = torch.optim.Adam(model.parameters(), lr=config.lr, capturable=bool(graph))
    task_gens = task_generators(config, device)
    X_val, C_val = validation_tasks(config, device)
    T = config.unroll
    with torch.no_grad():  # the fixed denominators of Eq. 20 (T Lloyd steps when training for T steps)
        lloyd_val = kmeans_objective(X_val, lloyd(X_val, C_val, steps=T))

    rows: list[tuple] = []
    snapshots: list[tuple] = []
    curve: dict = {}  # validation step -> median over seeds, for the flatness rule
    start_step, elapsed = 0, 0.0
    if resume is not None:
        state = load_checkpoint(resume, config)
        load_weights(model, state["weights"])
        optimizer.load_state_dict(state["optimizer"])
        set_capturable(optimizer, bool(graph))  # the saved run's choice came back with the state
        for gen, gen_state in zip(task_gens, state["task_generators"]):
            gen.set_state(gen_state.to(gen.device) if gen.device.type != "cpu" else gen_state)
        # the interrupted run validated at its last step; a longer run validates only on its schedule
        rows = [
            (st, sd, tl, vl if st % config.val_every == 0 or st == config.steps else math.nan, wt)
            for st, sd, tl, vl, wt in state["history"]
        ]
        start_step, elapsed = state["step"], state["wall_time"]
        snapshots = list(state.get("snapshots", []))
        for st, _, _, vl, _ in rows:
            if not math.isnan(vl):
                curve.setdefault(st, []).append(vl)
        curve = {st: _median(vals) for st, vals in curve.items()}

    if checkpoint is not None:
        remove_stale_temporaries(checkpoint)

    def save(step: int) -> None:
        atomic_save(
            {
                "config": config.to_dict(),
                "step": step,
                "weights": weights_of(model),
                "optimizer": optimizer.state_dict(),
                "task_generators": [g.get_state() for g in task_gens],
                "history": rows,
                "snapshots": snapshots,
                "wall_time": elapsed,
            },
            checkpoint,
        )

    def validate(step: int) -> list[float]:
        model.eval()
        model.gamma = config.schedule(step)[0]
        rel = relative_loss(model, X_val, C_val, chunk=config.batch, reference=lloyd_val, steps=T)
        model.train()
        per_seed = rel.reshape(S, -1).mean(dim=1)
        curve[step] = _median(per_seed.tolist())
        if config.snapshots:
            snapshots.append((step, weights_of(model)))
        return per_seed.tolist()

    def flat() -> bool:
        if config.until_flat is None:
            return False
        steps = sorted(curve)
        return should_stop(steps, [curve[st] for st in steps], config.until_flat, config.patience,
                           config.earliest_stop)

    t0 = time.perf_counter() - elapsed
    if start_step == 0:
        val = validate(0)
        rows += [(0, seed, math.nan, val[i], 0.0) for i, seed in enumerate(seeds)]

    last_step = start_step
    pending: list = []  # steps whose losses and checks are still on the device: (step, losses, ok, wall time)

    def read_back() -> None:
        # one transfer for all pending steps: no host synchronization between validations (a GPU step then
        # never waits for the host); the first non-finite value still names its step, seed and kind
        if not pending:
            return
        batch = list(pending)
        pending.clear()
        losses = torch.stack([entry[1] for entry in batch]).cpu()  # (P, S)
        ok = torch.stack([entry[2] for entry in batch]).cpu()  # (P, 3, S): centers, loss, gradient
        all_ok = bool(ok.all())
        for i, (step, _, _, wall) in enumerate(batch):
            for check, what in enumerate(("centers", "training loss", "gradient")):
                if not all_ok:
                    _check_finite(ok[i, check], what, step, seeds, rows)
            rows.extend((step, seed, losses[i, j].item(), math.nan, wall) for j, seed in enumerate(seeds))
        if progress:
            bar.set_postfix(loss=f"{losses[-1].mean().item():.4g}")

    stopped = start_step > 0 and start_step in curve and flat()  # a resumed run that had already stopped
    bar = tqdm(range(start_step + 1, config.steps + 1), disable=not progress or stopped, desc="training",
               unit="step")
    stepper = Stepper(lambda step: training_step(model, optimizer, config, task_gens, step), optimizer, task_gens,
                      bool(graph))
    for step in [] if stopped else bar:
        values, ok = stepper(step)
        elapsed = time.perf_counter() - t0
        pending.append((step, values, ok, elapsed))
        last_step = step
        validating = step % config.val_every == 0 or step == config.steps
        saving = checkpoint is not None and checkpoint_every is not None and step % checkpoint_every == 0
        if validating or saving:
            read_back()  # a diverged run stops here, before its weights are validated or saved
            if validating:
                val = validate(step)
                rows[-S:] = [row[:3] + (val[j],) + row[4:] for j, row in enumerate(rows[-S:])]
            if saving:
                save(step)
        if validating and flat():
            break
    read_back()
    bar.close()
    if checkpoint is not None:
        save(last_step)
    model.eval()
    model.gamma = config.final_gamma
    history = pd.DataFrame(rows, columns=list(HISTORY_COLUMNS))
    if config.snapshots:
        history.attrs["snapshots"] = snapshots
    return model, history


def training_step(model, optimizer, config: TrainConfig, task_gens, step: int):
    """One step of Algorithm 1 on device, with nothing read back to the host.

    Samples ``config.batch`` tasks per seed from ``task_gens``, runs the layer
    (``config.unroll`` re-embedded applications), takes the mean smoothed
    k-means loss per seed and one optimizer step. Divergence is not raised
    here: the returned flags say, per seed, whether the centers, the loss
    and the gradient were finite, and :func:`train` reads them back at its
    next validation (one transfer for many steps, so a GPU never waits).

    Returns
    -------
    losses : torch.Tensor
        ``(S,)`` training loss per seed, on the model's device.
    ok : torch.Tensor
        ``(3, S)`` bool: finite centers, finite loss, finite gradient.

    Examples
    --------
    >>> cfg = TrainConfig(d=2, k=3, n=16, batch=4, seeds=(0, 1))
    >>> model = initial_layer(cfg, "cpu")
    >>> opt = torch.optim.Adam(model.parameters(), lr=cfg.lr)
    >>> losses, ok = training_step(model, opt, cfg, [torch.Generator().manual_seed(s) for s in (0, 1)], 1)
    >>> tuple(losses.shape), bool(ok.all())
    ((2,), True)
    """
    S = len(config.seeds)
    device = model.Q.device
    batches = [_sample(config, g, config.batch, device) for g in task_gens]
    X = torch.stack([b[0] for b in batches]) if S > 1 else batches[0][0]  # ((S,) B, n, d)
    C = torch.stack([b[1] for b in batches]) if S > 1 else batches[0][1]
    model.gamma, tau = config.schedule(step)
    losses = 0.0
    centers = C
    centers_ok = torch.ones(S, dtype=torch.bool, device=device)
    for t in range(1, config.unroll + 1):  # re-embedded: each step sees fresh tokens, as a single-step layer does
        centers = model.run_unchecked(X, centers)
        if t == config.unroll or config.unroll_loss == "sum":
            centers_ok &= centers.detach().reshape(S, -1).isfinite().all(dim=1)
            losses = losses + training_loss(X.flatten(0, -3), centers.flatten(0, -3), config.omega, tau,
                                            trim=config.trim)
    per_seed = losses.view(S, config.batch).mean(dim=1)  # (S,)
    optimizer.zero_grad(set_to_none=True)
    per_seed.sum().backward()  # seeds do not interact: each slice gets its own gradient
    values = per_seed.detach()
    params = [p for group in optimizer.param_groups for p in group["params"]]
    ok = torch.stack([centers_ok, values.isfinite(), _finite_gradients(params, S)])  # (3, S)
    if config.clip is not None:
        _clip_per_member(params, config.clip, S > 1)
    optimizer.step()
    return values, ok


def _check_finite(ok, what: str, step: int, seeds, rows) -> None:
    """Raise :class:`TrainingDiverged` for the first seed whose ``what`` is not finite at ``step``."""
    ok = ok.cpu()
    if bool(ok.all()):
        return
    index = int((~ok).nonzero()[0])
    seed = seeds[index]
    losses = [row[2] for row in rows if row[1] == seed and math.isfinite(row[2])]
    last = f"{losses[-1]:.4g}" if losses else "none yet"
    raise TrainingDiverged(
        f"training diverged at step {step} for seed {seed}: non-finite {what} (last finite training loss: "
        f"{last}); lower the learning rate (TrainConfig.lr, --lr) or clip the gradients (TrainConfig.clip, --clip)",
        step=step, seed=seed, history=pd.DataFrame(rows, columns=list(HISTORY_COLUMNS)),
    )


def _finite_gradients(params, S: int) -> torch.Tensor:
    """Per seed, whether every gradient entry is finite: ``(S,)`` bool."""
    if S == 1:
        return torch.stack([p.grad.isfinite().all() for p in params]).all().reshape(1)
    return torch.stack([p.grad.reshape(S, -1).isfinite().all(dim=1) for p in params]).all(dim=0)


def _median(values) -> float:
    # the median of convergence.validation_curve (the mean of the middle two for an even count)
    return float(torch.tensor(values, dtype=torch.float64).quantile(0.5))


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
