"""One fused pass of Lloyd's step on the CPU: assignment, inertia and cluster sums in one sweep (numba).

:func:`~kmtrf_core.estimator.passes.lloyd_pass` runs the same pass as three torch
operations per chunk (the distance GEMM, the minimum over the centers, the
per-cluster sums); on a CPU each of them reads the chunk again, and the
minimum with its index costs more than the GEMM (``bench/estimator.py``).
Here each thread takes chunks of points, computes their inner products with
``-2 C`` by one BLAS call into a buffer of its own, and in the same loop picks
the nearest center (the lowest index on a tie, as scikit-learn's
``_update_chunk_dense``), adds the squared distance ``|x|^2 + |c|^2 - 2 x.c``
(clamped at 0) to the inertia, and adds the point to its cluster's sum, while
the chunk is in cache. Memory beyond the labels is, per thread, one ``(k, d)``
sum and one ``(chunk, k)`` buffer of products, each allocated by its thread
(not rows of one shared array, whose cache lines the threads would fight over).

The pass is bound by memory traffic more than by arithmetic at the sizes
``bench/estimator.py`` times, so it moves no more bytes than scikit-learn's:
int32 labels updated in place (a label that does not change is not written,
and the count of changes replaces a second pass comparing old and new
labels), no array of per-point distances (their sum is all Lloyd's loop
needs), and the GEMM writes into a reused buffer (numba's ``X @ C`` would
allocate and copy one per chunk).

numba compiles it on first use (a few seconds, then cached on disk next to
this module); where numba is not installed, :data:`AVAILABLE` is false and
the estimator uses the torch pass.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
import threadpoolctl

try:  # an accelerator, not a requirement: without numba the torch pass does the same work
    import numba
except ImportError:  # pragma: no cover - numba is in requirements.txt
    numba = None

__all__ = ["AVAILABLE", "FusedPass", "fused_lloyd_pass"]

AVAILABLE = numba is not None
"""Whether the fused CPU pass can run here (numba is importable)."""

_CONTROLLER = None  # threadpoolctl's view of the loaded BLAS libraries, made on first use

CHUNK = 1024
"""Points per chunk of the fused pass: the chunk and its ``(chunk, k)`` products stay in cache."""


def _kernel(X, x2, C, w, labels, chunk, threads, means):  # pragma: no cover - compiled by numba
    n, d = X.shape
    weighted = w.shape[0] == n
    two, one, zero = X.dtype.type(2), X.dtype.type(1), X.dtype.type(0)  # float32 stays float32
    k = C.shape[0]
    c2 = np.empty(k, dtype=X.dtype)
    for j in range(k):
        total = zero
        for f in range(d):
            total += C[j, f] * C[j, f]
        c2[j] = total
    # -2 C^T: scaling by a power of two is exact, so x.(-2c) is -2 (x.c) bit for bit and the GEMM does the product
    minus_two_CT = np.ascontiguousarray(C.T) * (-two)
    n_chunks = (n + chunk - 1) // chunk
    sums = np.zeros((threads, k, d), dtype=X.dtype)
    weights = np.zeros((threads, k), dtype=X.dtype)
    inertia = np.zeros(threads, dtype=np.float64)
    changed = np.zeros(threads, dtype=np.int64)
    for thread in numba.prange(threads):
        # each thread's own arrays, allocated apart: rows of one shared (threads, k) array sit on the same
        # cache lines, and every point's update bounced those lines between the cores (false sharing)
        thread_sums = np.zeros((k, d), dtype=X.dtype)
        thread_weights = np.zeros(k, dtype=X.dtype)
        products = np.empty((min(chunk, n), k), dtype=X.dtype)  # one per thread, reused chunk after chunk
        part = 0.0  # the inertia in float64, whatever the dtype
        moved = 0
        for chunk_index in range(thread, n_chunks, threads):
            start = chunk_index * chunk
            end = min(start + chunk, n)
            np.dot(X[start:end], minus_two_CT, products[:end - start])  # into the buffer: no temporary
            for i in range(end - start):
                best = c2[0] + products[i, 0]
                label = 0
                for j in range(1, k):
                    value = c2[j] + products[i, j]
                    if value < best:
                        best = value
                        label = j
                point = start + i
                if labels[point] != label:  # only a changed label writes its cache line
                    labels[point] = label
                    moved += 1
                squared = best + x2[point]
                if squared < zero:  # rounding below 0 is clamped; a NaN (inf - inf) is kept, for the caller to see
                    squared = zero
                weight = w[point] if weighted else one
                part += squared * weight
                if means:
                    thread_weights[label] += weight
                    for f in range(d):
                        thread_sums[label, f] += X[point, f] * weight
        sums[thread] = thread_sums
        weights[thread] = thread_weights
        inertia[thread] = part
        changed[thread] = moved
    return sums.sum(axis=0), weights.sum(axis=0), inertia.sum(), changed.sum()


_compiled = numba.njit(parallel=True, cache=True, nogil=True)(_kernel) if AVAILABLE else None


class FusedPass(NamedTuple):
    """What :func:`fused_lloyd_pass` returns.

    >>> out = fused_lloyd_pass(np.array([[0.0], [4.0]]), np.array([0.0, 16.0]), np.array([[1.0]]), means=False)
    >>> out.labels.tolist(), out.inertia, out.changed, out.sums
    ([0, 0], 10.0, 2, None)
    """

    labels: np.ndarray
    """``(n,)`` int32: each point's nearest center (the lowest index on a tie)."""
    inertia: float
    """The (weighted) sum of the squared distances to the nearest centers, accumulated in float64."""
    changed: int
    """How many labels differ from those the ``labels`` array held on entry (0: Lloyd has converged)."""
    sums: np.ndarray | None
    """``(k, d)`` (weighted) sum of each cluster's points; ``None`` without ``means``."""
    weights: np.ndarray | None
    """``(k,)`` (weighted) number of points in each cluster; ``None`` without ``means``."""


def fused_lloyd_pass(X: np.ndarray, x2: np.ndarray, C: np.ndarray, w: np.ndarray | None = None,
                     chunk: int = CHUNK, labels: np.ndarray | None = None, means: bool = True) -> FusedPass:
    """Labels, inertia and (weighted) cluster sums and weights of one pass over ``X``.

    The per-point squared distances are not stored: Lloyd's loop needs only
    their sum. With ``labels`` (the previous pass's), the labels are updated in
    place and ``changed`` counts the points that moved, so the loop's test for
    convergence costs no second pass over the labels (as scikit-learn compares
    ``labels`` with ``labels_old``).

    Parameters
    ----------
    X : ndarray (n, d)
        C-contiguous float32 or float64 points (centered, as the estimator keeps them).
    x2 : ndarray (n,)
        ``|x|^2`` of every point.
    C : ndarray (k, d)
        Centers, the dtype of ``X``.
    w : ndarray (n,), optional
        Point weights (default 1).
    chunk : int
        Points per chunk.
    labels : ndarray (n,) int32, optional
        The previous labels, overwritten with the new ones (default: a new array).
    means : bool
        Whether to accumulate the cluster sums and weights (a pass that only
        assigns, such as the last one of a fit or ``predict``, skips them).

    Returns
    -------
    FusedPass

    Examples
    --------
    >>> X = np.array([[0.0], [1.0], [9.0]])
    >>> out = fused_lloyd_pass(X, (X * X).sum(1), np.array([[0.0], [10.0]]))
    >>> out.labels.tolist(), out.inertia, out.changed, out.sums.ravel().tolist(), out.weights.tolist()
    ([0, 0, 1], 2.0, 3, [1.0, 9.0], [2.0, 1.0])
    >>> fused_lloyd_pass(X, (X * X).sum(1), np.array([[0.0], [10.0]]), labels=out.labels).changed
    0
    """
    if not AVAILABLE:
        raise RuntimeError("the fused pass needs numba (pip install numba); the torch pass needs nothing more")
    # the compiled kernel answers a wrong type or shape with a long numba traceback: say it here instead
    if not (isinstance(X, np.ndarray) and X.ndim == 2 and X.dtype in (np.float32, np.float64)
            and X.flags.c_contiguous):
        raise ValueError("X must be a C-contiguous float32 or float64 array (n, d), got "
                         f"{type(X).__name__} {getattr(X, 'dtype', '')} {getattr(X, 'shape', '')}")
    n, d = X.shape
    for name, array, shape in (("x2", x2, (n,)), ("C", C, (None, d)), ("w", w, (n,))):
        if array is None and name == "w":
            continue
        if (not isinstance(array, np.ndarray) or array.dtype != X.dtype or array.ndim != len(shape)
                or any(want is not None and got != want for got, want in zip(array.shape, shape))):
            raise ValueError(f"{name} must be a {X.dtype} array of shape {shape} (None: any) for X of shape "
                             f"{X.shape}, got {type(array).__name__} {getattr(array, 'dtype', '')} "
                             f"{getattr(array, 'shape', '')}")
    if C.shape[0] == 0:  # the kernel starts from center 0: with none it would read past the array
        raise ValueError(f"C must hold at least one center, got shape {C.shape}")
    if labels is None:
        labels = np.full(n, -1, dtype=np.int32)
    elif not (isinstance(labels, np.ndarray) and labels.dtype == np.int32 and labels.shape == (n,)
              and labels.flags.c_contiguous and labels.flags.writeable):
        raise ValueError(f"labels must be a writeable, contiguous int32 array of shape {(n,)}, got "
                         f"{type(labels).__name__} {getattr(labels, 'dtype', '')} {getattr(labels, 'shape', '')}")
    if not (isinstance(chunk, (int, np.integer)) and chunk >= 1):
        raise ValueError(f"chunk must be a positive int, got {chunk!r}")
    w = np.empty(0, dtype=X.dtype) if w is None else w  # empty: every point weighs 1
    C = np.ascontiguousarray(C)
    with _one_blas_thread():
        sums, weights, inertia, changed = _compiled(X, x2, C, w, labels, int(chunk), numba.get_num_threads(),
                                                    bool(means))
    return FusedPass(labels, float(inertia), int(changed), sums if means else None, weights if means else None)


def _one_blas_thread():
    """BLAS on one thread inside the kernel's threads, as scikit-learn's KMeans does around its own loop.

    Each of numba's threads calls BLAS for its chunk; a threaded BLAS would start threads of its own
    inside them (oversubscription), and OpenBLAS warns that it may hang when called from an OpenMP
    region with its threads on.
    """
    global _CONTROLLER
    if _CONTROLLER is None:
        _CONTROLLER = threadpoolctl.ThreadpoolController()  # inspects the loaded libraries once
    return _CONTROLLER.limit(limits=1, user_api="blas")

