"""The chunked passes over the points behind :class:`~kmtrf_core.estimator.TransformerKMeans`'s Lloyd step.

Each pass touches every point once, ``chunk`` points at a time, so memory stays
bounded in ``n``; the arithmetic follows scikit-learn's ``KMeans`` (``_kmeans.py``
and ``_k_means_common.pyx``) closely enough that, from the same centers, the
labels are the same, empty clusters included.
"""

from __future__ import annotations

import numpy as np
import torch

from ..validation import check_finite_result

__all__ = ["lloyd_pass", "lloyd_update"]


def chunk_slices(n: int, size: int):
    for start in range(0, n, size):
        yield slice(start, min(start + size, n))


def device_chunks(X: torch.Tensor, size: int, device):
    """``(part, rows)`` for each chunk of ``size`` rows of ``X``, the rows on ``device``.

    Where ``X`` is already there the rows are a view; data kept in host
    memory (larger than a GPU's) are copied over a chunk at a time. The copy
    is ``non_blocking``: meant for host to device, where the stream orders it
    before any use; a device-to-host copy would need a synchronization first.
    """
    for part in chunk_slices(X.shape[0], size):
        yield part, X[part].to(device, non_blocking=True)


def sample_weights(sample_weight, n: int, dtype):
    """``None`` (every point weighs 1) or a finite, non-negative ``(n,)`` array with a positive sum.

    ``dtype`` is the points' numpy or torch float dtype; the weights come back as its numpy twin.
    """
    if sample_weight is None:
        return None
    dtype = {torch.float32: np.float32, torch.float64: np.float64}.get(dtype, dtype)
    w = np.asarray(sample_weight, dtype=dtype)
    if w.ndim == 0:
        w = np.full(n, float(w), dtype=dtype)
    if w.shape != (n,):
        raise ValueError(f"sample_weight.shape == {w.shape}, expected {(n,)}!")  # KMeans's words
    if not np.isfinite(w).all() or (w < 0).any() or w.sum() <= 0:
        raise ValueError("sample_weight must be finite and non-negative, and not all zero")
    return w


def squared_norms(X: torch.Tensor, chunk: int, device=None) -> torch.Tensor:
    """``|x|^2`` of every row, chunk by chunk (no temporary the size of ``X``), on ``device`` (default ``X``'s)."""
    device = X.device if device is None else torch.device(device)
    out = torch.empty(X.shape[0], dtype=X.dtype, device=device)
    for part, rows in device_chunks(X, chunk, device):
        out[part] = (rows * rows).sum(dim=1)
    return out


def lloyd_pass(X: torch.Tensor, x2: torch.Tensor, C: torch.Tensor, chunk: int, w: torch.Tensor | None = None,
          means: bool = False):
    """One pass over the points: nearest center, its squared distance and, with ``means``, the cluster sums.

    ``|x - c|^2 = |x|^2 + (|c|^2 - 2 x.c)``: the bracket decides the nearest
    center (the lowest index on a tie), one ``addmm`` per chunk laid out
    ``(k, chunk)`` so that the minimum runs across contiguous rows, and
    ``|x|^2`` (``x2``, once per fit) is added to the minimum only. The caller
    works on centered data, as scikit-learn's KMeans does, which keeps the
    cancellation small. The per-cluster (weighted) sums and weights are
    accumulated chunk by chunk while the chunk is in cache. A distance that
    overflows the dtype raises ``ValueError``.

    The pass runs where ``C`` is; ``X`` may stay elsewhere (data larger than
    a GPU's memory, kept in host memory): each chunk is copied over in turn.

    Returns ``labels (n,)``, ``dist (n,)`` and, with ``means``, ``(sums (k, d), weights (k,))``.

    >>> X = torch.tensor([[0.0], [1.0], [9.0]], dtype=torch.float64)
    >>> C = torch.tensor([[0.0], [10.0]], dtype=torch.float64)
    >>> labels, dist, (sums, weights) = lloyd_pass(X, squared_norms(X, 2), C, chunk=2, means=True)
    >>> labels.tolist(), dist.tolist(), sums.flatten().tolist(), weights.tolist()
    ([0, 0, 1], [0.0, 1.0, 1.0], [1.0, 9.0], [2.0, 1.0])
    """
    k = C.shape[0]
    c2 = (C * C).sum(dim=1, keepdim=True)  # (k, 1)
    labels = torch.empty(X.shape[0], dtype=torch.int64, device=C.device)
    dist = torch.empty(X.shape[0], dtype=X.dtype, device=C.device)
    sums = torch.zeros_like(C) if means else None
    for part, rows in device_chunks(X, chunk, C.device):
        torch.min(torch.addmm(c2, C, rows.t(), alpha=-2.0), dim=0, out=(dist[part], labels[part]))
        if means:
            sums.index_add_(0, labels[part], rows if w is None else rows * w[part].unsqueeze(1))
    check_finite_result(dist.add_(x2).clamp_min_(0.0), "squared distances")
    if not means:
        return labels, dist, None
    weights = torch.bincount(labels, weights=w, minlength=k).to(C.dtype)
    return labels, dist, (sums, weights)


def lloyd_update(X: torch.Tensor, C: torch.Tensor, labels: torch.Tensor, sums: torch.Tensor,
                  weights: torch.Tensor, w: torch.Tensor | None, empty: str, chunk: int) -> torch.Tensor:
    """Lloyd's new centers from the cluster sums, with scikit-learn's rule for an empty cluster or the paper's.

    Without an empty cluster: ``sums * (1 / weights)``, as scikit-learn's
    ``_average_centers`` computes it. With one and ``empty="keep"``, its center
    stays where it was. With ``empty="relocate"`` (scikit-learn's
    ``_relocate_empty_clusters_dense``, replayed step for step on the host, where
    the ``k x d`` sums are small): each empty cluster takes one of the points
    farthest from their own old center, in the order of ``numpy.argpartition``;
    the point leaves its cluster's sum; a cluster still empty sits at the center
    of the heaviest one.

    >>> X = torch.tensor([[0.0], [0.2], [0.5]], dtype=torch.float64)
    >>> C = torch.tensor([[0.0], [0.45], [50.0]], dtype=torch.float64)
    >>> labels, _, (sums, weights) = lloyd_pass(X, squared_norms(X, 8), C, 8, means=True)
    >>> lloyd_update(X, C, labels, sums, weights, None, "keep", 8).flatten().tolist()
    [0.1, 0.5, 50.0]
    >>> lloyd_update(X, C, labels, sums, weights, None, "relocate", 8).flatten().tolist()  # as KMeans: 0.2 moves
    [0.0, 0.5, 0.2]
    """
    empty_clusters = weights == 0
    if not bool(empty_clusters.any()):
        return sums * weights.reciprocal().unsqueeze(1)
    if empty == "keep":
        return torch.where(empty_clusters.unsqueeze(1), C, sums * weights.reciprocal().unsqueeze(1))
    sums_h, weights_h = sums.cpu().numpy().copy(), weights.cpu().numpy().copy()
    labels_h = labels.cpu().numpy()
    empty_ids = np.where(weights_h == 0)[0]
    n_empty = len(empty_ids)
    distances = np.empty(X.shape[0], dtype=sums_h.dtype)
    for part, rows in device_chunks(X, chunk, C.device):  # differences on the device, the sum in numpy's order
        distances[part] = ((rows - C[labels[part]]).cpu().numpy() ** 2).sum(axis=1)
    if distances.max() > 0:  # all points on their centers: nothing to relocate (scikit-learn's rule)
        far = np.argpartition(distances, -n_empty)[:-n_empty - 1:-1]
        rows = X[torch.as_tensor(far.copy(), device=X.device)].cpu().numpy()  # X's device: it may be the host
        weights_of = np.ones(len(far), dtype=sums_h.dtype) if w is None else w[torch.as_tensor(far.copy(), device=w.device)].cpu().numpy()
        for index in range(n_empty):
            new_id, old_id, weight = empty_ids[index], labels_h[far[index]], weights_of[index]
            sums_h[old_id] -= rows[index] * weight
            sums_h[new_id] = rows[index] * weight
            weights_h[new_id] = weight
            weights_h[old_id] -= weight
    heaviest = int(np.argmax(weights_h))
    for j in range(len(weights_h)):  # in order, as scikit-learn's loop: a later copy sees an averaged center
        if weights_h[j] > 0:
            sums_h[j] *= 1.0 / weights_h[j]
        else:
            sums_h[j] = sums_h[heaviest]
    return torch.from_numpy(sums_h).to(C.device)


def same_clustering(a: np.ndarray, b: np.ndarray, k: int) -> bool:
    """Whether each label of ``a`` maps to one label of ``b`` (scikit-learn's ``_is_same_clustering``)."""
    return len(np.unique(a.astype(np.int64) * k + b)) == len(np.unique(a))
