"""One fused pass of Lloyd's step on the CPU: assignment, distances and cluster sums in one sweep (numba).

:func:`~kmtrf_core.estimator.passes.lloyd_pass` runs the same pass as three torch
operations per chunk (the distance GEMM, the minimum over the centers, the
per-cluster sums); on a CPU each of them reads the chunk again, and the
minimum with its index costs more than the GEMM (``bench/estimator.py``).
Here each thread takes chunks of points, computes their inner products with
the centers by one BLAS call, and in the same loop picks the nearest center
(the lowest index on a tie, as scikit-learn's ``_update_chunk_dense``), the
squared distance ``|x|^2 + |c|^2 - 2 x.c`` clamped at 0, and adds the point
to its cluster's sum, while the chunk is in cache. Memory beyond the output
is one ``(k, d)`` sum per thread.

numba compiles it on first use (a few seconds, then cached on disk next to
this module); where numba is not installed, :data:`AVAILABLE` is false and
the estimator uses the torch pass.
"""

from __future__ import annotations

import numpy as np
import threadpoolctl

try:  # an accelerator, not a requirement: without numba the torch pass does the same work
    import numba
except ImportError:  # pragma: no cover - numba is in requirements.txt
    numba = None

__all__ = ["AVAILABLE", "fused_lloyd_pass"]

AVAILABLE = numba is not None
"""Whether the fused CPU pass can run here (numba is importable)."""

_CONTROLLER = None  # threadpoolctl's view of the loaded BLAS libraries, made on first use

CHUNK = 1024
"""Points per chunk of the fused pass: the chunk and its ``(chunk, k)`` products stay in cache."""


def _kernel(X, x2, C, w, labels, dist, chunk, threads):  # pragma: no cover - compiled by numba
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
    CT = np.ascontiguousarray(C.T)
    n_chunks = (n + chunk - 1) // chunk
    sums = np.zeros((threads, k, d), dtype=X.dtype)
    weights = np.zeros((threads, k), dtype=X.dtype)
    for thread in numba.prange(threads):
        for chunk_index in range(thread, n_chunks, threads):
            start = chunk_index * chunk
            end = min(start + chunk, n)
            products = X[start:end] @ CT  # (m, k)
            for i in range(end - start):
                best = c2[0] - two * products[i, 0]
                label = 0
                for j in range(1, k):
                    value = c2[j] - two * products[i, j]
                    if value < best:
                        best = value
                        label = j
                point = start + i
                labels[point] = label
                squared = best + x2[point]
                dist[point] = squared if squared > zero else zero
                weight = w[point] if weighted else one
                weights[thread, label] += weight
                for f in range(d):
                    sums[thread, label, f] += X[point, f] * weight
    return sums.sum(axis=0), weights.sum(axis=0)


_compiled = numba.njit(parallel=True, cache=True, nogil=True)(_kernel) if AVAILABLE else None


def fused_lloyd_pass(X: np.ndarray, x2: np.ndarray, C: np.ndarray, w: np.ndarray | None = None,
                     chunk: int = CHUNK):
    """Labels, squared distances and (weighted) cluster sums and weights of one pass over ``X``.

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

    Returns
    -------
    labels : ndarray (n,) int64
    dist : ndarray (n,)
    sums : ndarray (k, d)
    weights : ndarray (k,)

    Examples
    --------
    >>> X = np.array([[0.0], [1.0], [9.0]])
    >>> labels, dist, sums, weights = fused_lloyd_pass(X, (X * X).sum(1), np.array([[0.0], [10.0]]))
    >>> labels.tolist(), dist.tolist(), sums.ravel().tolist(), weights.tolist()
    ([0, 0, 1], [0.0, 1.0, 1.0], [1.0, 9.0], [2.0, 1.0])
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
    labels = np.empty(n, dtype=np.int64)
    dist = np.empty(n, dtype=X.dtype)
    w = np.empty(0, dtype=X.dtype) if w is None else w  # empty: every point weighs 1
    C = np.ascontiguousarray(C)
    with _one_blas_thread():
        sums, weights = _compiled(X, x2, C, w, labels, dist, chunk, numba.get_num_threads())
    return labels, dist, sums, weights


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

