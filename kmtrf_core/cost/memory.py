"""Peak memory of one training step of the layer, OH vs BN (Figure 1, Table 1).

The ``peak_mb`` of a :class:`~kmtrf_core.cost.harness.Measurement`: the peak
memory that one training step (forward, loss, backward) of a configuration
adds on top of what is resident before it (weights and data). This module
also holds what a step of a configuration is, so that the timing harness
(:mod:`kmtrf_core.cost.harness`) and the memory measure run the same step:

* :func:`step_inputs`: the model and the batch of tasks of one configuration;
* :func:`step_loss`: the training loss, the smoothed k-means loss of Eq. 6
  with sparsemax (``omega="l2"``, ``tau=0.1``) averaged over tasks;
* :func:`training_step`: forward, loss and ``loss.backward()``.

How the peak is measured:

* on CUDA (:func:`cuda_peak_mb`): ``torch.cuda.max_memory_allocated`` after
  ``reset_peak_memory_stats``, minus the memory allocated before, over a second
  training step of the configuration (the first allocates the gradients and any
  lazy state);
* on the CPU (:func:`cpu_peak_mb`): the growth of the resident set of a
  separate worker process. The peak-RSS counter (``VmHWM``) is reset through
  ``/proc/self/clear_refs`` after the model and data exist, one training step
  runs, and the peak minus the resident set before the step is reported. The
  worker runs with a small fixed glibc mmap threshold (16 KiB) so that freed
  tensors go back to the operating system and one configuration does not hide
  inside memory freed by the previous one, and it warms up with one unmeasured
  step of its first configuration. Where ``clear_refs`` is not available (not
  Linux) every configuration gets its own fresh process and the peak comes
  from ``ru_maxrss``.

The method used is one of the ``MEMORY_*`` labels and is recorded in every
result. Used by :func:`~kmtrf_core.cost.harness.measure_model` and
:func:`~kmtrf_core.cost.harness.measure_grid` (chapter 8, ``bench/table1.py``).
"""

from __future__ import annotations

import gc
import json
import os
import subprocess
import sys
from pathlib import Path

import torch

from ..model import ClusterTransformer
from ..objectives import smoothed_kmeans_loss
from ..tasks import sample_tasks
from ..validation import FLOAT_DTYPES

__all__ = [
    "MEMORY_CUDA",
    "MEMORY_CPU_HWM",
    "MEMORY_CPU_FRESH",
    "check_dtype",
    "step_inputs",
    "step_loss",
    "training_step",
    "cuda_peak_mb",
    "cpu_peak_mb",
]

MEMORY_CUDA = "CUDA max_memory_allocated increase over one training step"
MEMORY_CPU_HWM = "CPU peak RSS increase over one training step (worker process, VmHWM reset)"
MEMORY_CPU_FRESH = "CPU peak RSS increase over one training step (fresh process per config, ru_maxrss)"

_LOSS_OMEGA, _LOSS_TAU = "l2", 0.1
_DTYPES = {"float32": torch.float32, "float64": torch.float64}


# --- the measured step --------------------------------------------------------------


def check_dtype(dtype) -> torch.dtype:
    """``torch.float32`` or ``torch.float64``, given as one or by its name (``"float32"``, ``"float64"``).

    The two dtypes the package computes in
    (:data:`~kmtrf_core.validation.FLOAT_DTYPES`): the layer refuses any
    other input, so float16 and bfloat16 are refused here, by name, rather
    than deep inside the measured step.

    Parameters
    ----------
    dtype : torch.dtype or str
        ``torch.float32``, ``torch.float64``, ``"float32"`` or ``"float64"``
        (a name in any case, e.g. ``"Float32"``).

    Returns
    -------
    torch.dtype

    Raises
    ------
    ValueError
        Naming ``dtype``, for anything else.

    Examples
    --------
    >>> check_dtype("float64"), check_dtype(torch.float32), check_dtype("Float32")
    (torch.float64, torch.float32, torch.float32)
    >>> check_dtype(torch.float16)
    Traceback (most recent call last):
    ...
    ValueError: dtype must be torch.float32 or torch.float64 (or 'float32', 'float64'), got torch.float16
    """
    # a name in any case, as every other option (validation.check_choice); float16 and the rest stay refused
    checked = _DTYPES.get(dtype.strip().lower()) if isinstance(dtype, str) else dtype
    if checked not in FLOAT_DTYPES:
        raise ValueError(f"dtype must be torch.float32 or torch.float64 (or 'float32', 'float64'), got {dtype!r}")
    return checked


def step_inputs(config: dict, device):
    """The model and the batch of tasks of one configuration, on ``device``.

    Parameters
    ----------
    config : dict
        ``d``, ``k``, ``scheme``, ``n``, ``batch``, ``gamma``, ``impl``,
        ``dtype`` (a name, e.g. ``"float32"``) and ``seed``, already checked
        (the harness checks them); plain values, so that a configuration
        travels to the CPU worker process as JSON.
    device : torch.device or str
        Where the model and the tasks go.

    Returns
    -------
    model : ClusterTransformer
        One layer of Eq. 4, weights drawn from ``seed``.
    X : torch.Tensor
        ``(batch, n, d)`` points, from :func:`~kmtrf_core.tasks.sample_tasks` with ``seed``.
    C : torch.Tensor
        ``(batch, k, d)`` initial centers.

    Examples
    --------
    >>> config = dict(d=2, k=3, scheme="bn", n=8, batch=2, gamma=1.0, impl="direct", dtype="float32", seed=0)
    >>> model, X, C = step_inputs(config, "cpu")
    >>> tuple(X.shape), tuple(C.shape), X.dtype
    ((2, 8, 2), (2, 3, 2), torch.float32)
    """
    dtype = check_dtype(config["dtype"])
    gen = torch.Generator().manual_seed(config["seed"])
    model = ClusterTransformer(
        config["d"], config["k"], config["scheme"], config["gamma"], generator=gen, dtype=dtype, impl=config["impl"]
    ).to(device)
    X, C = sample_tasks(config["batch"], config["n"], config["d"], config["k"], generator=config["seed"], dtype=dtype)
    return model, X.to(device), C.to(device)


def step_loss(X: torch.Tensor, centers: torch.Tensor) -> torch.Tensor:
    """The training loss of a measured step: Eq. 6 with sparsemax, ``tau = 0.1``, mean over tasks.

    Parameters
    ----------
    X : torch.Tensor
        ``(B, n, d)`` points.
    centers : torch.Tensor
        ``(B, k, d)`` centers the layer put out.

    Returns
    -------
    torch.Tensor
        A scalar (``omega="l2"``, ``tau=0.1`` in
        :func:`~kmtrf_core.objectives.smoothed_kmeans_loss`).

    Examples
    --------
    >>> X = torch.tensor([[[0.0], [2.0]]])
    >>> step_loss(X, torch.tensor([[[0.0], [2.0]]])).item()
    0.0
    """
    return smoothed_kmeans_loss(X, centers, _LOSS_OMEGA, _LOSS_TAU).mean()


def training_step(model, X: torch.Tensor, C: torch.Tensor) -> torch.Tensor:
    """One training step without the optimizer: forward, :func:`step_loss`, ``loss.backward()``.

    Parameters
    ----------
    model : ClusterTransformer
        The layer; its gradients accumulate.
    X, C : torch.Tensor
        ``(B, n, d)`` points and ``(B, k, d)`` initial centers.

    Returns
    -------
    torch.Tensor
        The loss (a scalar, already backpropagated).

    Examples
    --------
    >>> config = dict(d=2, k=3, scheme="oh", n=8, batch=2, gamma=1.0, impl="direct", dtype="float32", seed=0)
    >>> model, X, C = step_inputs(config, "cpu")
    >>> loss = training_step(model, X, C)
    >>> loss.dim(), all(p.grad is not None for p in model.parameters())
    (0, True)
    """
    out = model.apply_layers(X, C)  # (B, k, d)
    loss = step_loss(X, out)
    loss.backward()
    return loss


# --- the measures -------------------------------------------------------------------


def cuda_peak_mb(config: dict, device) -> float:
    """Peak CUDA memory one training step of a configuration adds, MiB (:data:`MEMORY_CUDA`).

    A first step allocates the gradients and any lazy state; the allocator's
    peak is then reset and the peak of a second step, minus what was allocated
    before it, is returned.

    Parameters
    ----------
    config : dict
        As in :func:`step_inputs`.
    device : torch.device or str
        A CUDA device.

    Returns
    -------
    float
        MiB.

    Raises
    ------
    ValueError
        Naming ``device``, when it is not a CUDA device.

    Examples
    --------
    >>> config = dict(d=2, k=3, scheme="bn", n=8, batch=2, gamma=1.0, impl="direct", dtype="float32", seed=0)
    >>> peak = cuda_peak_mb(config, "cuda") if torch.cuda.is_available() else 0.0
    >>> peak >= 0
    True
    """
    device = torch.device(device)
    if device.type != "cuda":
        raise ValueError(f"device must be a CUDA device, got {device}")
    model, X, C = step_inputs(config, device)
    training_step(model, X, C)  # first step allocates the gradients and any lazy state
    model.zero_grad(set_to_none=True)
    gc.collect()
    torch.cuda.synchronize(device)
    torch.cuda.reset_peak_memory_stats(device)
    before = torch.cuda.memory_allocated(device)
    training_step(model, X, C)
    torch.cuda.synchronize(device)
    peak = torch.cuda.max_memory_allocated(device) - before
    del model, X, C
    gc.collect()
    return peak / 2**20


def cpu_peak_mb(configs: list[dict], threads: int, fresh: bool = False) -> tuple[list[float], str]:
    """Peak RSS increase of a training step per configuration, measured in worker processes.

    One worker for all configurations (``VmHWM`` reset before each,
    :data:`MEMORY_CPU_HWM`), or, where that is unavailable or ``fresh`` is set,
    one fresh process per configuration (``ru_maxrss``, :data:`MEMORY_CPU_FRESH`).

    Parameters
    ----------
    configs : list of dict
        As in :func:`step_inputs`.
    threads : int
        ``torch.set_num_threads`` in the worker.
    fresh : bool
        One fresh process per configuration even where ``VmHWM`` can be reset.

    Returns
    -------
    peaks : list of float
        MiB, one per configuration, in order.
    method : str
        One of the ``MEMORY_CPU_*`` labels.

    Raises
    ------
    RuntimeError
        When a worker process fails (its standard error is quoted).

    Examples
    --------
    >>> config = dict(d=2, k=3, scheme="bn", n=8, batch=2, gamma=1.0, impl="direct", dtype="float32", seed=0)
    >>> peaks, method = cpu_peak_mb([config], threads=1)
    >>> len(peaks), peaks[0] >= 0, method in (MEMORY_CPU_HWM, MEMORY_CPU_FRESH)
    (1, True, True)
    """
    if not configs:
        return [], MEMORY_CPU_HWM
    env = dict(os.environ)
    # A small fixed threshold stops glibc from raising it after frees, so every tensor
    # above 16 KiB is mmap-ed and returned to the OS when freed: RSS follows live tensors.
    env["MALLOC_MMAP_THRESHOLD_"] = "16384"
    env["MALLOC_TRIM_THRESHOLD_"] = "16384"
    # the folder that holds the kmtrf_core package, so that the worker imports this copy of it
    package_parent = str(Path(__file__).resolve().parents[2])
    env["PYTHONPATH"] = os.pathsep.join(p for p in (package_parent, env.get("PYTHONPATH", "")) if p)

    def run(batch_of_configs, mode):
        payload = json.dumps(dict(configs=batch_of_configs, threads=threads, mode=mode))
        proc = subprocess.run(
            [sys.executable, "-c", "from kmtrf_core.cost.memory import _memory_worker; _memory_worker()"],
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


# --- inside the CPU worker process ----------------------------------------------------


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
        model, X, C = step_inputs(request["configs"][0], cpu)
        training_step(model, X, C)
        del model, X, C
    peaks = []
    for cfg in request["configs"]:
        model, X, C = step_inputs(cfg, cpu)
        gc.collect()
        before = _rss_bytes()
        if mode == "hwm":
            _reset_hwm()
            training_step(model, X, C)
            peak = _hwm_bytes() - before
        else:
            if before is None:
                before = _maxrss_bytes()
            training_step(model, X, C)
            peak = _maxrss_bytes() - before
        peaks.append(max(peak, 0) / 2**20)
        del model, X, C
        gc.collect()
    sys.stdout.write(json.dumps(dict(peaks=peaks)) + "\n")
