"""What an embedding costs: time and memory of the layer, OH vs BN (Figure 1, Table 1).

The paper's Section 2 compares the layer of Eq. 4 under the one-hot (OH,
``d_emb = d + k``) and binary (BN, ``d_emb = d + ceil(log2 k)``) embeddings by
forward time, backward time, eval-mode forward time and peak memory. This
module measures the same four numbers for :class:`~kmtrf_core.model.ClusterTransformer`
on whatever device runs it, and counts the FLOPs and bytes of the four
attentions so that a measurement can be explained.

What is measured, per configuration (``d, k, scheme, n, batch``):

* ``forward``: the model's forward pass in train mode, autograd recording
  (the model only; the loss is computed outside the clock);
* ``backward``: ``loss.backward()`` of the training loss, the smoothed k-means
  loss of Eq. 6 with sparsemax (``omega="l2"``, ``tau=0.1``) averaged over
  tasks, through the loss and the layer;
* ``eval``: the forward pass in ``model.eval()`` under :func:`torch.no_grad`;
* ``peak_mb``: the peak memory one training step (forward, loss, backward)
  adds on top of what is resident before it (weights and data).

Times are wall-clock milliseconds, ``warmup`` untimed repetitions then
``repeats`` timed ones; :func:`measure_grid` interleaves the schemes of one
``(d, k)`` repetition by repetition, so that a slow spell of a shared machine
hits OH and BN alike. Other work on the machine can only add time, so the
fastest repetition (``min``) is the least disturbed estimate and the median
the typical one; both are kept. On CUDA the clock is a pair of CUDA events
around each phase and the memory is ``torch.cuda.max_memory_allocated`` after
``reset_peak_memory_stats``, over a second training step of the configuration
(the first allocates the gradients and any lazy state). On the CPU the clock is :func:`time.perf_counter`
(the CPU ops are synchronous) and the memory is the growth of the resident set
of a separate worker process: the peak-RSS counter (``VmHWM``) is reset through
``/proc/self/clear_refs`` after the model and data exist, one training step
runs, and the peak minus the resident set before the step is reported. The
worker runs with a small fixed glibc mmap threshold (16 KiB) so that freed
tensors go back to the operating system and one configuration does not hide
inside memory freed by the previous one, and it warms up with one unmeasured
step of its first configuration. Where ``clear_refs`` is not available (not Linux) every
configuration gets its own fresh process and the peak comes from
``ru_maxrss``. The method used is recorded in every result.

Used in chapter 8 (the price of an embedding) and by ``bench/table1.py``.
"""

from __future__ import annotations

import gc
import json
import math
import os
import platform
import statistics
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import pandas as pd
import torch
from tqdm.auto import tqdm

from ..attention import IMPLS
from ..device import resolve_device
from ..embeddings import SCHEMES, embedding_dim
from ..model import ClusterTransformer
from ..objectives import smoothed_kmeans_loss
from ..tasks import sample_tasks
from ..validation import check_choice, check_clusters, check_int, check_number, check_table

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

MEMORY_CUDA = "CUDA max_memory_allocated increase over one training step"
MEMORY_CPU_HWM = "CPU peak RSS increase over one training step (worker process, VmHWM reset)"
MEMORY_CPU_FRESH = "CPU peak RSS increase over one training step (fresh process per config, ru_maxrss)"

_LOSS_OMEGA, _LOSS_TAU = "l2", 0.1
_DTYPES = {"float32": torch.float32, "float64": torch.float64, "float16": torch.float16, "bfloat16": torch.bfloat16}


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
        Peak memory added by one training step, MiB (``nan`` if not measured).
    resident_mb : float
        Bytes of the weights, buffers and data resident before the step, MiB.
    memory_method : str
        How ``peak_mb`` was measured (one of the ``MEMORY_*`` labels).

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

    def stats(self, metric: str) -> dict:
        """``median``, ``mean``, ``std`` (sample std, 0 for one repeat), ``min``, ``max`` of a metric, in ms."""
        check_choice(metric, "metric", METRICS)
        x = list(self.times_ms[metric])
        return dict(
            median=statistics.median(x),
            mean=statistics.fmean(x),
            std=statistics.stdev(x) if len(x) > 1 else 0.0,
            min=min(x),
            max=max(x),
        )

    def as_dict(self) -> dict:
        """One flat row: the configuration, ``{metric}_{stat}_ms`` for every metric and stat, memory."""
        row = {key: value for key, value in asdict(self).items() if key != "times_ms"}
        for metric in METRICS:
            for stat, value in self.stats(metric).items():
                row[f"{metric}_{stat}_ms"] = value
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
    check_choice(impl, "impl", IMPLS)
    return scheme, gamma


def _check_dtype(dtype) -> torch.dtype:
    if isinstance(dtype, str):
        dtype = _DTYPES.get(dtype)
    if not isinstance(dtype, torch.dtype) or not dtype.is_floating_point:
        raise ValueError(f"dtype must be a floating torch.dtype, got {dtype!r}")
    return dtype


def _dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def _setup(cfg: dict, device: torch.device):
    dtype = _check_dtype(cfg["dtype"])
    gen = torch.Generator().manual_seed(cfg["seed"])
    model = ClusterTransformer(
        cfg["d"], cfg["k"], cfg["scheme"], cfg["gamma"], generator=gen, dtype=dtype, impl=cfg["impl"]
    ).to(device)
    X, C = sample_tasks(cfg["batch"], cfg["n"], cfg["d"], cfg["k"], generator=cfg["seed"], dtype=dtype)
    return model, X.to(device), C.to(device)


def _train_step(model, X, C) -> torch.Tensor:
    out = model.apply_layers(X, C)  # (B, k, d)
    loss = smoothed_kmeans_loss(X, out, _LOSS_OMEGA, _LOSS_TAU).mean()
    loss.backward()
    return loss


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
    setups = [_setup(cfg, device) for cfg in cfgs]
    resident = [_resident_mb(*setup) for setup in setups]
    times = [{metric: [] for metric in METRICS} for _ in cfgs]
    gc.collect()
    for rep in range(warmup + repeats):
        for (model, X, C), record in zip(setups, times):
            model.train()
            model.zero_grad(set_to_none=True)
            with _Clock(device) as fwd:
                out = model.apply_layers(X, C)  # (B, k, d)
            loss = smoothed_kmeans_loss(X, out, _LOSS_OMEGA, _LOSS_TAU).mean()
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


def _cuda_peak_mb(cfg: dict, device: torch.device) -> float:
    model, X, C = _setup(cfg, device)
    _train_step(model, X, C)  # first step allocates the gradients and any lazy state
    model.zero_grad(set_to_none=True)
    gc.collect()
    torch.cuda.synchronize(device)
    torch.cuda.reset_peak_memory_stats(device)
    before = torch.cuda.memory_allocated(device)
    _train_step(model, X, C)
    torch.cuda.synchronize(device)
    peak = torch.cuda.max_memory_allocated(device) - before
    del model, X, C
    gc.collect()
    return peak / 2**20


def _cpu_peak_mb(configs: list[dict], threads: int, fresh: bool = False) -> tuple[list[float], str]:
    """Peak RSS increase of a training step, measured in worker processes.

    One worker for all configurations (``VmHWM`` reset before each), or, where
    that is unavailable or ``fresh`` is set, one fresh process per configuration.
    """
    if not configs:
        return [], MEMORY_CPU_HWM
    env = dict(os.environ)
    # A small fixed threshold stops glibc from raising it after frees, so every tensor
    # above 16 KiB is mmap-ed and returned to the OS when freed: RSS follows live tensors.
    env["MALLOC_MMAP_THRESHOLD_"] = "16384"
    env["MALLOC_TRIM_THRESHOLD_"] = "16384"
    package_parent = str(Path(__file__).resolve().parent.parent)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (package_parent, env.get("PYTHONPATH", "")) if p)

    def run(batch_of_configs, mode):
        payload = json.dumps(dict(configs=batch_of_configs, threads=threads, mode=mode))
        proc = subprocess.run(
            [sys.executable, "-c", "from kmtrf_core.cost.harness import _memory_worker; _memory_worker()"],
            input=payload, capture_output=True, text=True, env=env, check=False,
        )
        if proc.returncode != 0:
            raise RuntimeError(f"memory worker failed (exit {proc.returncode}): {proc.stderr[-2000:]}")
        return json.loads(proc.stdout.strip().splitlines()[-1])

    if not fresh:
        answer = run(configs, "hwm")
        if answer.get("peaks") is not None:
            return answer["peaks"], MEMORY_CPU_HWM
    return [run([cfg], "fresh")["peaks"][0] for cfg in configs], MEMORY_CPU_FRESH


def _rss_bytes() -> int | None:
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError):
        return None


def _hwm_bytes() -> int | None:
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError):
        pass
    return None


def _reset_hwm() -> bool:
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
    except OSError:
        return False
    return _hwm_bytes() is not None


def _maxrss_bytes() -> int:
    import resource  # Unix only; needed only where /proc is missing

    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return rss if sys.platform == "darwin" else rss * 1024  # bytes on macOS, KiB on Linux


def _memory_worker() -> None:
    """Entry point of the CPU memory worker: JSON configs on stdin, JSON peaks (MiB) on stdout."""
    request = json.loads(sys.stdin.read())
    torch.set_num_threads(request["threads"])
    cpu = torch.device("cpu")
    mode = request["mode"]
    if mode == "hwm" and not _reset_hwm():
        sys.stdout.write(json.dumps(dict(peaks=None)) + "\n")
        return
    # One unmeasured step of the first configuration warms the thread pool and the
    # kernels' lazily allocated state, which would otherwise count against it.
    if request["configs"]:
        model, X, C = _setup(request["configs"][0], cpu)
        _train_step(model, X, C)
        del model, X, C
    peaks = []
    for cfg in request["configs"]:
        model, X, C = _setup(cfg, cpu)
        gc.collect()
        before = _rss_bytes()
        if mode == "hwm":
            _reset_hwm()
            _train_step(model, X, C)
            peak = _hwm_bytes() - before
        else:
            if before is None:
                before = _maxrss_bytes()
            _train_step(model, X, C)
            peak = _maxrss_bytes() - before
        peaks.append(max(peak, 0) / 2**20)
        del model, X, C
        gc.collect()
    sys.stdout.write(json.dumps(dict(peaks=peaks)) + "\n")


def _configs(entries, n, batch, gamma, impl, dtype, seed):
    return [
        dict(d=d, k=k, scheme=scheme, n=n, batch=batch, gamma=gamma, impl=impl, dtype=_dtype_name(dtype), seed=seed)
        for d, k, scheme in entries
    ]


def _profile(entries, *, n, batch, gamma, impl, repeats, warmup, dtype, device, seed, memory, disable):
    check_int(n, "n")
    check_int(batch, "batch")
    check_int(repeats, "repeats")
    check_int(warmup, "warmup", minimum=0)
    check_int(seed, "seed", minimum=None)
    dtype = _check_dtype(dtype)
    device = resolve_device(device)
    checked = []
    for d, k, scheme in entries:
        scheme, gamma = _check_config(d, k, scheme, n, batch, gamma, impl)
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
    peaks, method = [math.nan] * len(configs), "not measured"
    if memory and device.type == "cuda":
        peaks = [_cuda_peak_mb(cfg, device) for cfg in tqdm(configs, desc="memory", disable=disable)]
        method = MEMORY_CUDA
    elif memory:
        peaks, method = _cpu_peak_mb(configs, threads)
    return [
        Measurement(
            d=cfg["d"], k=cfg["k"], scheme=cfg["scheme"], n=n, batch=batch,
            d_emb=embedding_dim(cfg["d"], cfg["k"], cfg["scheme"]), impl=impl, gamma=gamma,
            dtype=cfg["dtype"], device=device_label, threads=threads, repeats=repeats, warmup=warmup,
            times_ms={key: tuple(value) for key, value in times.items()},
            peak_mb=peak, resident_mb=resident, memory_method=method,
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
        dtype=dtype, device=device, seed=seed, memory=memory, disable=True,
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
    n, batch, gamma, impl, repeats, warmup, dtype, device, seed, memory
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
        dtype=dtype, device=device, seed=seed, memory=memory, disable=disable,
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
