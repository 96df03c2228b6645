"""What an embedding costs: time and memory of the layer, OH vs BN (Figure 1, Table 1).

The paper's Section 2 compares the layer of Eq. 4 under the one-hot (OH,
``d_emb = d + k``) and binary (BN, ``d_emb = d + ceil(log2 k)``) embeddings by
forward time, backward time, eval-mode forward time and peak memory. This
module measures the same four numbers for :class:`~kmtrf_core.model.ClusterTransformer`
on whatever device runs it: it times the three phases itself and asks
:mod:`kmtrf_core.cost.memory` for the peak memory (the FLOPs and bytes that
explain a measurement are counted in :mod:`kmtrf_core.cost.analytic`).

What is measured, per configuration (``d, k, scheme, n, batch``):

* ``forward``: the model's forward pass in train mode, autograd recording
  (the model only; the loss is computed outside the clock);
* ``backward``: ``loss.backward()`` of the training loss, the smoothed k-means
  loss of Eq. 6 with sparsemax (``omega="l2"``, ``tau=0.1``) averaged over
  tasks (:func:`~kmtrf_core.cost.memory.step_loss`), through the loss and the layer;
* ``eval``: the forward pass in ``model.eval()`` under :func:`torch.no_grad`;
* ``peak_mb``: the peak memory one training step (forward, loss, backward)
  adds on top of what is resident before it (weights and data); on CUDA the
  allocator's ``max_memory_allocated``, on the CPU the peak resident set of a
  separate worker process (details, and the ``MEMORY_*`` labels recorded in
  every result, in :mod:`kmtrf_core.cost.memory`).

Times are wall-clock milliseconds, ``warmup`` untimed repetitions then
``repeats`` timed ones; :func:`measure_grid` interleaves the schemes of one
``(d, k)`` repetition by repetition, so that a slow spell of a shared machine
hits OH and BN alike. Other work on the machine can only add time, so the
fastest repetition (``min``) is the least disturbed estimate and the median
the typical one; both are kept. On CUDA the clock is a pair of CUDA events
around each phase; on the CPU it is :func:`time.perf_counter` (the CPU ops
are synchronous). All timings of a call run before its memory measurements.

Used in chapter 8 (the price of an embedding) and by ``bench/table1.py``.
"""

from __future__ import annotations

import dataclasses
import gc
import math
import os
import platform
import statistics
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd
import torch
from tqdm.auto import tqdm

from ..attention import IMPLS
from ..device import resolve_device
from ..embeddings import SCHEMES, embedding_dim
from ..validation import check_choice, check_clusters, check_int, check_number, check_table
from .memory import MEMORY_CUDA, check_dtype, cpu_peak_mb, cuda_peak_mb, step_inputs, step_loss

__all__ = [
    "METRICS",
    "Measurement",
    "measure_model",
    "measure_grid",
    "compare_schemes",
    "machine_description",
]

METRICS = ("forward", "backward", "eval")
"""The timed phases, in the order a training step runs them (eval last)."""


@dataclass(frozen=True)
class Measurement:
    """Time and memory of one configuration (see :func:`measure_model`; Figure 1, Table 1).

    Attributes
    ----------
    d, k, scheme, n, batch, d_emb, impl, gamma, dtype
        The configuration.
    device : str
        Where it ran, e.g. ``"cpu"`` or ``"cuda (NVIDIA ...)"``.
    threads : int
        ``torch.get_num_threads()`` during the measurement.
    repeats, warmup : int
        Timed and untimed repetitions.
    times_ms : dict
        Raw timings in ms, ``{"forward": [...], "backward": [...], "eval": [...]}``.
    peak_mb : float
        Peak memory added by one training step, MiB (``nan`` if not measured): the median of
        ``peaks_mb``.
    peaks_mb : tuple of float
        Every measurement of that peak (``memory_repeats`` of them, each a fresh step), MiB; their
        least and largest are ``peak_min_mb`` and ``peak_max_mb`` of :meth:`as_dict`.
    resident_mb : float
        Bytes of the weights, buffers and data resident before the step, MiB.
    memory_method : str
        How ``peak_mb`` was measured (one of the ``MEMORY_*`` labels of
        :mod:`kmtrf_core.cost.memory`).

    Examples
    --------
    >>> times = {"forward": [3.0, 1.0, 2.0], "backward": [4.0, 5.0, 6.0], "eval": [1.0, 1.0, 1.0]}
    >>> r = Measurement(d=2, k=3, scheme="bn", n=16, batch=2, d_emb=4, impl="direct", gamma=1.0,
    ...                   dtype="float32", device="cpu", threads=1, repeats=3, warmup=1, times_ms=times)
    >>> r.stats("forward")["median"], r.as_dict()["backward_mean_ms"]
    (2.0, 5.0)
    """

    d: int
    k: int
    scheme: str
    n: int
    batch: int
    d_emb: int
    impl: str
    gamma: float
    dtype: str
    device: str
    threads: int
    repeats: int
    warmup: int
    times_ms: dict = field(repr=False)
    peak_mb: float = math.nan
    resident_mb: float = math.nan
    memory_method: str = "not measured"
    peaks_mb: tuple = field(default=(), repr=False)

    def stats(self, metric: str) -> dict:
        """``median``, ``mean``, ``std`` (sample std, 0 for one repeat), ``min``, ``max`` of a metric, in ms.

        ``metric`` is one of :data:`METRICS`, in any case.

        >>> times = {"forward": [3.0, 1.0, 2.0], "backward": [4.0], "eval": [1.0]}
        >>> r = Measurement(d=2, k=3, scheme="bn", n=16, batch=2, d_emb=4, impl="direct", gamma=1.0,
        ...                   dtype="float32", device="cpu", threads=1, repeats=3, warmup=1, times_ms=times)
        >>> r.stats("Forward")
        {'median': 2.0, 'mean': 2.0, 'std': 1.0, 'min': 1.0, 'max': 3.0}
        """
        metric = check_choice(metric, "metric", METRICS)
        x = list(self.times_ms[metric])
        return dict(
            median=statistics.median(x),
            mean=statistics.fmean(x),
            std=statistics.stdev(x) if len(x) > 1 else 0.0,
            min=min(x),
            max=max(x),
        )

    def as_dict(self) -> dict:
        """One flat row: the configuration, ``{metric}_{stat}_ms`` for every metric and stat, memory
        (``peak_mb`` and the range of its measurements, ``peak_min_mb`` to ``peak_max_mb``).

        >>> times = {"forward": [2.0], "backward": [4.0], "eval": [1.0]}
        >>> r = Measurement(d=2, k=3, scheme="bn", n=16, batch=2, d_emb=4, impl="direct", gamma=1.0,
        ...                   dtype="float32", device="cpu", threads=1, repeats=1, warmup=0, times_ms=times,
        ...                   peak_mb=5.0, peaks_mb=(4.0, 5.0, 7.0))
        >>> row = r.as_dict()
        >>> row["eval_median_ms"], row["peak_mb"], row["peak_min_mb"], row["peak_max_mb"], "times_ms" in row
        (1.0, 5.0, 4.0, 7.0, False)
        """
        row = {key: value for key, value in asdict(self).items() if key not in ("times_ms", "peaks_mb")}
        for metric in METRICS:
            for stat, value in self.stats(metric).items():
                row[f"{metric}_{stat}_ms"] = value
        peaks = self.peaks_mb or (self.peak_mb,)
        row["peak_min_mb"], row["peak_max_mb"] = min(peaks), max(peaks)
        return row


def machine_description(device=None) -> dict:
    """Name the machine a measurement ran on.

    Parameters
    ----------
    device : torch.device or str, optional
        The measured device; default :func:`~kmtrf_core.device.default_device`.

    Returns
    -------
    dict
        ``processor`` (the CPU model where the OS tells it, else
        :func:`platform.processor`), ``machine``, ``system``, ``cpu_count``,
        ``torch_threads``, ``omp_wait_policy`` (the ``OMP_WAIT_POLICY``
        environment variable, ``"default"`` if unset: with the default
        spin-then-sleep policy a CPU shared with another busy process can stall
        every multi-threaded op for hundreds of ms; ``PASSIVE`` avoids that),
        ``torch``, ``python``, ``device`` and ``device_name``.

    Examples
    --------
    >>> info = machine_description("cpu")
    >>> info["device"], info["cpu_count"] >= 1, info["torch_threads"] >= 1
    ('cpu', True, True)
    """
    device = resolve_device(device)
    processor = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.lower().startswith("model name"):
                processor = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return dict(
        processor=processor,
        machine=platform.machine(),
        system=platform.system(),
        cpu_count=os.cpu_count() or 1,
        torch_threads=torch.get_num_threads(),
        omp_wait_policy=os.environ.get("OMP_WAIT_POLICY", "default"),
        torch=torch.__version__,
        python=platform.python_version(),
        device=device.type,
        device_name=_device_name(device),
    )


def _device_name(device: torch.device) -> str:
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    return device.type


# --- measurement --------------------------------------------------------------------


def _check_config(d, k, scheme, n, batch, gamma, impl):
    check_int(d, "d")
    check_int(k, "k", minimum=2)
    scheme = check_choice(scheme, "scheme", SCHEMES)
    check_int(n, "n")
    check_int(batch, "batch")
    check_clusters(k, n)
    gamma = check_number(gamma, "gamma", allow_inf=True)
    if math.isinf(gamma):
        raise ValueError("gamma must be finite for profiling (gamma = inf has no gradient)")
    impl = check_choice(impl, "impl", IMPLS)
    return scheme, gamma, impl


def _dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def _resident_mb(model, X, C) -> float:
    tensors = list(model.parameters()) + list(model.buffers()) + [X, C]
    return sum(t.numel() * t.element_size() for t in tensors) / 2**20


class _Clock:
    """Milliseconds of a code block: CUDA events on CUDA, perf_counter on the CPU."""

    def __init__(self, device: torch.device):
        self.cuda = device.type == "cuda"

    def __enter__(self):
        if self.cuda:
            torch.cuda.synchronize()
            self.start, self.end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            self.start.record()
        else:
            self.t0 = time.perf_counter()
        return self

    def __exit__(self, *exc):
        if self.cuda:
            self.end.record()
            torch.cuda.synchronize()
            self.ms = self.start.elapsed_time(self.end)
        else:
            self.ms = (time.perf_counter() - self.t0) * 1e3
        return False


def _time_group(cfgs: list[dict], device: torch.device, repeats: int, warmup: int) -> list[tuple[dict, float]]:
    """Time configurations that differ only in the scheme, interleaved repetition by repetition.

    Interleaving makes a slow spell of the machine (another process, a
    throttled core) fall on every scheme alike, so their ratios stay honest
    even when the absolute times do not.
    """
    setups = [step_inputs(cfg, device) for cfg in cfgs]
    resident = [_resident_mb(*setup) for setup in setups]
    times = [{metric: [] for metric in METRICS} for _ in cfgs]
    gc.collect()
    for rep in range(warmup + repeats):
        for (model, X, C), record in zip(setups, times):
            model.train()
            model.zero_grad(set_to_none=True)
            with _Clock(device) as fwd:
                out = model.apply_layers(X, C)  # (B, k, d)
            loss = step_loss(X, out)
            with _Clock(device) as bwd:
                loss.backward()
            del out, loss
            model.zero_grad(set_to_none=True)
            model.eval()
            with torch.no_grad(), _Clock(device) as ev:
                model.apply_layers(X, C)
            if rep >= warmup:
                record["forward"].append(fwd.ms)
                record["backward"].append(bwd.ms)
                record["eval"].append(ev.ms)
    del setups
    gc.collect()
    return list(zip(times, resident))


def _configs(entries, n, batch, gamma, impl, dtype, seed):
    return [
        dict(d=d, k=k, scheme=scheme, n=n, batch=batch, gamma=gamma, impl=impl, dtype=_dtype_name(dtype), seed=seed)
        for d, k, scheme in entries
    ]


def _profile(entries, *, n, batch, gamma, impl, repeats, warmup, dtype, device, seed, memory, disable,
             memory_repeats=1):
    check_int(n, "n")
    check_int(memory_repeats, "memory_repeats")
    check_int(batch, "batch")
    check_int(repeats, "repeats")
    check_int(warmup, "warmup", minimum=0)
    check_int(seed, "seed", minimum=None)
    dtype = check_dtype(dtype)
    device = resolve_device(device)
    checked = []
    for d, k, scheme in entries:
        scheme, gamma, impl = _check_config(d, k, scheme, n, batch, gamma, impl)
        checked.append((d, k, scheme))
    configs = _configs(checked, n, batch, gamma, impl, dtype, seed)
    threads = torch.get_num_threads()
    device_label = device.type if device.type != "cuda" else f"cuda ({_device_name(device)})"

    # Configurations that differ only in the scheme are timed together, interleaved.
    groups: dict[tuple, list[int]] = {}
    for i, cfg in enumerate(configs):
        groups.setdefault((cfg["d"], cfg["k"]), []).append(i)
    timed = [None] * len(configs)
    for members in tqdm(list(groups.values()), desc="timing", disable=disable):
        for i, result in zip(members, _time_group([configs[i] for i in members], device, repeats, warmup)):
            timed[i] = result
    peaks, method = [()] * len(configs), "not measured"
    if memory:
        # every configuration once, then again: OH and BN of a grid point stay next to each other
        rounds = configs * memory_repeats
        if device.type == "cuda":
            flat = [cuda_peak_mb(cfg, device) for cfg in tqdm(rounds, desc="memory", disable=disable)]
            method = MEMORY_CUDA
        else:
            flat, method = cpu_peak_mb(rounds, threads)
        peaks = [tuple(flat[i::len(configs)]) for i in range(len(configs))]
    return [
        Measurement(
            d=cfg["d"], k=cfg["k"], scheme=cfg["scheme"], n=n, batch=batch,
            d_emb=embedding_dim(cfg["d"], cfg["k"], cfg["scheme"]), impl=impl, gamma=gamma,
            dtype=cfg["dtype"], device=device_label, threads=threads, repeats=repeats, warmup=warmup,
            times_ms={key: tuple(value) for key, value in times.items()},
            peak_mb=statistics.median(peak) if peak else math.nan, peaks_mb=peak, resident_mb=resident,
            memory_method=method,
        )
        for cfg, (times, resident), peak in zip(configs, timed, peaks)
    ]


def measure_model(
    d: int,
    k: int,
    scheme: str,
    n: int,
    batch: int,
    gamma: float = 1.0,
    *,
    impl: str = "direct",
    repeats: int = 10,
    warmup: int = 3,
    dtype: torch.dtype = torch.float32,
    device=None,
    seed: int = 0,
    memory: bool = True,
    memory_repeats: int = 1,
) -> Measurement:
    """Time and memory of one layer of Eq. 4 on a batch of ``batch`` tasks of ``n`` points.

    Parameters
    ----------
    d, k : int
        Data dimension and clusters (``2 <= k <= n``).
    scheme : {"oh", "bn", "sc", "na"}
        Token embedding.
    n, batch : int
        Points per task and tasks per batch (the paper: ``n = 1024``, ``B = 32``).
    gamma : float
        Attention inverse temperature (finite; the paper trains with 1).
    impl : {"direct", "sdpa"}
        Attention kernel (see :func:`~kmtrf_core.attention.distance_attention`):
        ``"direct"`` forms the ``q x r`` weights like Eq. 3, ``"sdpa"`` hands
        the augmented vectors to PyTorch's fused attention.
    repeats, warmup : int
        Timed and untimed repetitions (the paper: 30 and 10).
    dtype : torch.dtype
        Of weights and data (float32 by default, as in training).
    device : torch.device or str, optional
        Default :func:`~kmtrf_core.device.default_device`.
    seed : int
        Seeds the weights and the tasks (:func:`~kmtrf_core.tasks.sample_tasks`).
    memory : bool
        Also measure the peak memory of a training step (on the CPU this
        starts a worker process, about two seconds).
    memory_repeats : int
        How many times that peak is measured, each on a fresh step: ``peak_mb`` is their median,
        ``peaks_mb`` all of them. On a CPU the resident set moves a little from one measurement to
        the next, and BN's saving at small ``k`` is small too; chapter 8 reads the range.

    Returns
    -------
    Measurement

    Raises
    ------
    ValueError
        Naming the argument, for a bad size, scheme, impl, gamma or dtype.

    Examples
    --------
    >>> r = measure_model(2, 3, "bn", n=16, batch=2, repeats=2, warmup=1, device="cpu", memory=False)
    >>> r.d_emb, len(r.times_ms["forward"]), r.stats("eval")["median"] > 0
    (4, 2, True)
    """
    return _profile(
        [(d, k, scheme)], n=n, batch=batch, gamma=gamma, impl=impl, repeats=repeats, warmup=warmup,
        dtype=dtype, device=device, seed=seed, memory=memory, disable=True, memory_repeats=memory_repeats,
    )[0]


def measure_grid(
    d_grid,
    k_grid,
    *,
    schemes=("oh", "bn"),
    n: int,
    batch: int,
    gamma: float = 1.0,
    impl: str = "direct",
    repeats: int = 10,
    warmup: int = 3,
    dtype: torch.dtype = torch.float32,
    device=None,
    seed: int = 0,
    memory: bool = True,
    disable: bool = True,
    memory_repeats: int = 1,
):
    """:func:`measure_model` over every ``(d, k, scheme)`` of a grid, as a DataFrame.

    On the CPU all memory measurements share one worker process (started once,
    after all timings), so a grid costs one interpreter start-up, not one per
    configuration.

    Parameters
    ----------
    d_grid, k_grid : sequence of int
        Data dimensions and cluster counts (every ``k <= n``).
    schemes : sequence of str
        Embeddings to compare.
    disable : bool
        Turn off the ``tqdm`` progress bar.
    n, batch, gamma, impl, repeats, warmup, dtype, device, seed, memory, memory_repeats
        As in :func:`measure_model`.

    Returns
    -------
    pandas.DataFrame
        One row per configuration (:meth:`Measurement.as_dict`), in the
        order ``d``, then ``k``, then ``scheme``.

    Examples
    --------
    >>> df = measure_grid([2], [2, 3], n=8, batch=2, repeats=1, warmup=0, device="cpu", memory=False)
    >>> df[["d", "k", "scheme", "d_emb"]].values.tolist()
    [[2, 2, 'oh', 4], [2, 2, 'bn', 3], [2, 3, 'oh', 5], [2, 3, 'bn', 4]]
    """
    d_grid, k_grid, schemes = list(d_grid), list(k_grid), list(schemes)
    for name, grid in (("d_grid", d_grid), ("k_grid", k_grid), ("schemes", schemes)):
        if not grid:
            raise ValueError(f"{name} must not be empty")
    entries = [(d, k, s) for d in d_grid for k in k_grid for s in schemes]
    results = _profile(
        entries, n=n, batch=batch, gamma=gamma, impl=impl, repeats=repeats, warmup=warmup,
        dtype=dtype, device=device, seed=seed, memory=memory, disable=disable, memory_repeats=memory_repeats,
    )
    return pd.DataFrame([r.as_dict() for r in results])


def compare_schemes(df, scheme: str = "bn", baseline: str = "oh", stat: str = "median", by=("d", "k")):
    """Put a scheme beside a baseline for every grid point of a :func:`measure_grid` table.

    For each time metric ``m`` in :data:`METRICS` the result has
    ``m_<baseline>``, ``m_<scheme>`` (the chosen ``stat``, ms), ``m_speedup``
    (baseline / scheme, above 1 when ``scheme`` is faster) and ``m_gain_pct``
    (``100 (baseline - scheme) / baseline``, the paper's relative improvement
    of Figure 1); for memory ``peak_mb_<...>``, ``memory_reduction_pct`` the
    same way; and ``extra_<...>``, the extra embedding dimensions
    ``d_emb - d`` of Table 1.

    Parameters
    ----------
    df : pandas.DataFrame
        From :func:`measure_grid`, holding both schemes.
    scheme, baseline : str
        The scheme to rate and the one it is compared with.
    stat : {"median", "mean", "min", "max"}
        Which timing statistic to compare.
    by : tuple of str
        The columns that identify a grid point.

    Returns
    -------
    pandas.DataFrame
        One row per grid point.

    Examples
    --------
    >>> import pandas as pd
    >>> df = pd.DataFrame(dict(d=[2, 2], k=[4, 4], scheme=["oh", "bn"], d_emb=[6, 4], peak_mb=[10.0, 8.0],
    ...     forward_median_ms=[4.0, 2.0], backward_median_ms=[6.0, 3.0], eval_median_ms=[3.0, 3.0]))
    >>> row = compare_schemes(df).iloc[0]
    >>> float(row.forward_speedup), float(row.eval_gain_pct), float(row.memory_reduction_pct)
    (2.0, 0.0, 20.0)
    """
    if stat not in ("median", "mean", "min", "max"):
        raise ValueError(f"stat must be one of median, mean, min, max; got {stat!r}")
    by = [by] if isinstance(by, str) else list(by)
    columns = [f"{m}_{stat}_ms" for m in METRICS] + ["peak_mb", "d_emb"]
    check_table(df, "df", [*by, "scheme", *columns])
    missing = {scheme, baseline} - set(df["scheme"])
    if missing:
        raise ValueError(f"df has no rows for scheme(s) {sorted(missing)}")
    base = df[df.scheme == baseline].set_index(by)[columns]
    other = df[df.scheme == scheme].set_index(by)[columns]
    out = pd.merge(base, other, left_index=True, right_index=True, suffixes=(f"_{baseline}", f"_{scheme}"))
    out = out.reset_index()
    result = out[by].copy()
    for s in (baseline, scheme):
        result[f"extra_{s}"] = out[f"d_emb_{s}"] - out["d"] if "d" in out else out[f"d_emb_{s}"]
    for m in METRICS:
        b, o = out[f"{m}_{stat}_ms_{baseline}"], out[f"{m}_{stat}_ms_{scheme}"]
        result[f"{m}_{baseline}"], result[f"{m}_{scheme}"] = b, o
        result[f"{m}_speedup"] = b / o
        result[f"{m}_gain_pct"] = 100.0 * (b - o) / b
    b, o = out[f"peak_mb_{baseline}"], out[f"peak_mb_{scheme}"]
    result[f"peak_mb_{baseline}"], result[f"peak_mb_{scheme}"] = b, o
    result["memory_reduction_pct"] = 100.0 * (b - o) / b
    return result


def training_step_ms(config, steps: int = 20) -> float:
    """Median wall-clock milliseconds of one Algorithm 1 step, timed by training ``config`` briefly.

    The whole step is on the clock: sampling a batch of tasks, the forward pass,
    the smoothed loss, the backward pass and the Adam update. ``config`` is
    trained afresh (no cache) for ``steps`` steps with validation, stopping
    rules and snapshots switched off, and the median of the gaps between
    consecutive ``wall_time`` stamps of the history is returned, so the first
    step's start-up cost is left out.

    Parameters
    ----------
    config : TrainConfig
        What to time; its ``steps``, ``val_every``, ``until_flat`` and
        ``snapshots`` are overridden.
    steps : int
        How many steps to run (at least 2).

    Returns
    -------
    float
        Median milliseconds per step.

    Examples
    --------
    >>> from kmtrf_core.training import TrainConfig
    >>> ms = training_step_ms(TrainConfig(d=2, k=2, n=16, batch=4, seeds=(0,)), steps=3)
    >>> ms > 0
    True
    """
    from ..training import train  # the cost room does not need the training room, except here

    steps = check_int(steps, "steps", minimum=2)
    timed_config = dataclasses.replace(
        config, steps=steps, val_every=10**6, val_tasks=32, until_flat=None, snapshots=False
    )
    _, history = train(timed_config)
    stamps = history[history.step > 0].wall_time.to_numpy()
    return 1000.0 * float(np.median(np.diff(stamps)))
