"""k-means++ seeding with every pass over the points on a torch device (a GPU), drawing what ``KMeans`` draws.

scikit-learn's ``kmeans_plusplus`` (the greedy variant of Arthur and
Vassilvitskii's seeding: ``2 + int(log k)`` candidates per center, the one
that lowers the potential most is kept) runs in numpy on the host. On a GPU
that would leave the seeding, ``k`` passes over all the points, to the CPU
while the Lloyd passes take milliseconds. :func:`kmeans_plusplus` runs the
same algorithm with the passes on ``device`` (the data resident there, or in
host memory and copied a chunk at a time) and only the random draws on the
host, from the same ``RandomState`` calls in the same order as scikit-learn.
So in float64 it picks the same points as ``sklearn.cluster.kmeans_plusplus``
up to the rounding of sums taken in another order, which moves a pick only
when a random value falls within rounding of a boundary between two points
(tested equal on the CPU). In float32 the distances are float32 while
scikit-learn computes them in float64, and the sums of this module are float64
while scikit-learn's cumulative sum is float32, so the picks may differ.
"""

from __future__ import annotations

import numpy as np
import torch
from sklearn.utils import check_random_state

from .passes import device_chunks, sample_weights, squared_norms

__all__ = ["kmeans_plusplus"]


def kmeans_plusplus(X: torch.Tensor, n_clusters: int, random_state=None, *, sample_weight=None, x_squared_norms=None,
                    n_local_trials: int | None = None, chunk: int = 16384, device=None):
    """Greedy k-means++ seeds of ``X`` (``(n, d)`` tensor), the passes over the points on ``device``.

    Parameters
    ----------
    X : torch.Tensor
        The points; where they are may differ from ``device`` (each chunk is
        copied over in turn, for data larger than the device's memory).
    n_clusters : int
    random_state : int, RandomState or None
        Every random draw comes from it, as in ``sklearn.cluster.kmeans_plusplus``.
    sample_weight : ndarray ``(n,)``, optional
        Non-negative weights of the points (the seeding draws by weight times distance).
    x_squared_norms : torch.Tensor ``(n,)``, optional
        ``|x|^2`` of every point, on ``device``; computed when not given.
    n_local_trials : int, optional
        Candidates per center; default ``2 + int(log(n_clusters))``, as scikit-learn.
    chunk : int
        Points per chunk.
    device : torch.device or str, optional
        Where the passes run; default ``X``'s device.

    Returns
    -------
    centers : torch.Tensor ``(n_clusters, d)`` on ``device``, ``X``'s dtype
    indices : ndarray ``(n_clusters,)``, the rows of ``X`` that were picked

    Raises
    ------
    ValueError
        For a wrong shape or dtype, ``n_clusters`` out of range, weights that are
        negative, non-finite or all zero (the estimator's messages), and data whose
        distances are not finite (NaN, inf, or an overflow of the dtype).

    Examples
    --------
    >>> from sklearn.cluster import kmeans_plusplus as sklearn_kmeans_plusplus
    >>> X = np.random.default_rng(0).normal(size=(500, 3))
    >>> centers, indices = kmeans_plusplus(torch.from_numpy(X), 6, random_state=1, chunk=128)
    >>> indices.tolist() == sklearn_kmeans_plusplus(X, 6, random_state=1)[1].tolist()
    True
    >>> torch.equal(centers, torch.from_numpy(X[indices]))
    True
    """
    if not isinstance(X, torch.Tensor) or X.dim() != 2 or not X.is_floating_point():
        raise ValueError(f"X must be a floating (n, d) tensor, got {getattr(X, 'shape', type(X).__name__)}")
    n = X.shape[0]
    if n_clusters < 1:
        raise ValueError(f"n_clusters must be >= 1, got {n_clusters}")
    if n_clusters > n:
        raise ValueError(f"n_samples={n} should be >= n_clusters={n_clusters}.")
    if n_local_trials is None:
        n_local_trials = 2 + int(np.log(n_clusters))
    elif n_local_trials < 1:
        raise ValueError(f"n_local_trials must be >= 1, got {n_local_trials}")
    device = X.device if device is None else torch.device(device)
    random_state = check_random_state(random_state)
    np_dtype = np.float64 if X.dtype == torch.float64 else np.float32
    w_host = sample_weights(sample_weight, n, np_dtype)  # the estimator's checks and messages
    w_host = np.ones(n, dtype=np_dtype) if w_host is None else w_host
    w = torch.from_numpy(w_host).to(device, torch.float64)
    x2 = squared_norms(X, chunk, device) if x_squared_norms is None else x_squared_norms.to(device)

    def distances(ids: np.ndarray):
        """Squared distances of the rows ``ids`` to every point ``(len(ids), n)``, chunk by chunk, as scikit-learn
        expands them; yields ``(part, distances)``."""
        cand = X[torch.as_tensor(ids, device=X.device)].to(device)
        cc = (cand * cand).sum(dim=1, keepdim=True)
        for part, rows in device_chunks(X, chunk, device):
            D = torch.addmm(cc, cand, rows.t(), alpha=-2.0)  # -2 c.x + |c|^2, then + |x|^2: scikit-learn's order
            yield part, D.add_(x2[part]).clamp_min_(0.0).to(torch.float64)

    indices = np.full(n_clusters, -1, dtype=np.int64)
    indices[0] = random_state.choice(n, p=w_host / w_host.sum())  # scikit-learn's first draw, on the host
    closest = torch.empty(n, dtype=torch.float64, device=device)
    for part, D in distances(indices[:1]):
        closest[part] = D[0]
    potential = float(closest @ w)
    if not np.isfinite(potential):  # the sum every draw scales: one test instead of one per point
        raise ValueError("X holds NaN or inf, or values whose squared distances overflow its dtype")
    for c in range(1, n_clusters):
        draws = torch.from_numpy(random_state.uniform(size=n_local_trials) * potential).to(device)
        ids = torch.searchsorted(torch.cumsum(w * closest, dim=0), draws).clamp_(max=n - 1).cpu().numpy()
        potentials = torch.zeros(n_local_trials, dtype=torch.float64, device=device)
        for part, D in distances(ids):
            potentials += torch.minimum(D, closest[part]) @ w[part]
        best = int(torch.argmin(potentials))
        potential = float(potentials[best])
        for part, D in distances(ids):  # the same product again (same shapes, same rounding): the winner's row
            torch.minimum(closest[part], D[best], out=closest[part])
        indices[c] = ids[best]
    centers = X[torch.as_tensor(indices, device=X.device)].to(device)
    return centers, indices
