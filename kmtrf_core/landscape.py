"""Loss surfaces around a trained layer (Fig. 3) and the gap surfaces of Fig. 5.

Following Li et al. (2018), the loss is drawn on the plane
``theta + alpha * delta + beta * eta`` through the trained weights ``theta``,
spanned by two random directions ``delta`` and ``eta`` that are *filter
normalized*: every filter of a direction is rescaled to the norm of the
matching filter of ``theta``, so that the picture does not depend on the
arbitrary scale of each unit. Here a filter is one row of one of the twelve
``d_emb x d_emb`` projections (the weights that produce one coordinate of a
query, key or value).

On each grid point the layer is run on a fixed batch of tasks and three
numbers are kept: the smoothed loss of Eq. (6) (what training minimizes), the
k-means loss of Eq. (5), and their gap, which Section 3 bounds and Fig. 5
plots. The grid points run together as one ensemble of layers
(:class:`~kmtrf_core.model.ClusterTransformer` with ``ensemble=G``), so a
whole batch of grid points costs one batched forward pass.

Used in the chapters on loss landscapes and on the Cauchy problem; the readings of a surface
(its minima, its sharpness) are the book's, in :mod:`kmtrf_core.book.ch12_landscapes`.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from .validation import check_choice, check_int, check_number
from .model import ClusterTransformer, check_model
from .lloyd import kmeans_objective
from .objectives import OMEGAS, smoothed_kmeans_loss
from .tasks import make_generator

__all__ = [
    "Landscape",
    "filter_normalized_direction",
    "loss_surface",
]

PARAMETERS = ("Q", "K", "V")


@dataclass
class Landscape:
    """Losses on a 2-D grid through the trained weights (Fig. 3, Fig. 5), as :func:`loss_surface` returns them.

    Attributes
    ----------
    alphas, betas : numpy.ndarray
        Grid coordinates along the two directions, ``(A,)`` and ``(Bt,)``.
    smoothed : numpy.ndarray
        ``(A, Bt)``, mean over the tasks of the smoothed loss (Eq. 6).
    kmeans : numpy.ndarray
        ``(A, Bt)``, mean over the tasks of the k-means loss (Eq. 5).
    directions : tuple of dict
        The two directions, parameter name -> tensor shaped like the weights.
    omega, tau
        Of the smoothed loss.
    smoothed_tasks, kmeans_tasks : numpy.ndarray or None
        ``(A, Bt, B)``: the same losses per task, whose means over the last axis are ``smoothed``
        and ``kmeans`` (kept by :func:`loss_surface`, for intervals over the tasks).

    Examples
    --------
    >>> surface = Landscape(alphas=np.array([-1.0, 0.0, 1.0]), betas=np.array([0.0, 1.0]),
    ...                     smoothed=np.array([[3.0, 4.0], [1.5, 2.0], [3.5, 5.0]]),
    ...                     kmeans=np.array([[2.5, 3.0], [1.5, 1.5], [3.0, 4.5]]),
    ...                     directions=({}, {}), omega="l2", tau=0.1)
    >>> surface.gap.tolist()
    [[0.5, 1.0], [0.0, 0.5], [0.5, 0.5]]
    >>> surface.at(0.1, 0.2)
    {'smoothed': 1.5, 'kmeans': 1.5, 'gap': 0.0}
    """

    alphas: np.ndarray
    betas: np.ndarray
    smoothed: np.ndarray
    kmeans: np.ndarray
    directions: tuple
    omega: str
    tau: float
    smoothed_tasks: np.ndarray | None = None
    kmeans_tasks: np.ndarray | None = None

    @property
    def gap(self) -> np.ndarray:
        """The gap ``smoothed - kmeans`` (``>= 0``; Fig. 5).

        >>> Landscape(alphas=np.array([0.0]), betas=np.array([0.0, 1.0]), smoothed=np.array([[2.0, 3.0]]),
        ...           kmeans=np.array([[1.5, 3.0]]), directions=({}, {}), omega="ne", tau=0.1).gap.tolist()
        [[0.5, 0.0]]
        """
        return self.smoothed - self.kmeans

    def at(self, alpha: float, beta: float) -> dict:
        """The three losses at the grid point nearest to ``(alpha, beta)``.

        >>> surface = Landscape(alphas=np.array([0.0]), betas=np.array([0.0, 1.0]), smoothed=np.array([[2.0, 3.0]]),
        ...                     kmeans=np.array([[1.5, 3.0]]), directions=({}, {}), omega="ne", tau=0.1)
        >>> surface.at(0.0, 0.4), surface.at(5.0, 0.9)
        ({'smoothed': 2.0, 'kmeans': 1.5, 'gap': 0.5}, {'smoothed': 3.0, 'kmeans': 3.0, 'gap': 0.0})
        """
        i = int(np.abs(self.alphas - alpha).argmin())
        j = int(np.abs(self.betas - beta).argmin())
        return {"smoothed": float(self.smoothed[i, j]), "kmeans": float(self.kmeans[i, j]),
                "gap": float(self.gap[i, j])}


def filter_normalized_direction(model: ClusterTransformer, generator=None) -> dict:
    """A random direction in weight space, filter-normalized to the model (Li et al., 2018).

    Each entry is drawn from N(0, 1); then each filter (a row of one
    ``d_emb x d_emb`` projection) is rescaled to the Euclidean norm of the
    same row of the model's weights. A zero row of the weights gives a zero row.

    Parameters
    ----------
    model : ClusterTransformer
        A single layer (not an ensemble).
    generator : torch.Generator or int, optional
        Source of randomness.

    Returns
    -------
    dict
        ``{"Q": (4, m, m), "K": ..., "V": ...}`` on the model's device and dtype.

    Examples
    --------
    >>> model = ClusterTransformer(3, 4, "bn", generator=torch.Generator().manual_seed(0))
    >>> direction = filter_normalized_direction(model, generator=1)
    >>> torch.allclose(direction["Q"].norm(dim=-1), model.Q.detach().norm(dim=-1))
    True
    """
    model = check_model(model, single=True)
    gen = make_generator(generator, name="generator")
    out = {}
    for name in PARAMETERS:
        weight = getattr(model, name).detach()
        raw = torch.randn(weight.shape, generator=gen, dtype=torch.float64).to(weight)
        w_norm = weight.norm(dim=-1, keepdim=True)  # (4, m, 1): one norm per filter
        r_norm = raw.norm(dim=-1, keepdim=True)
        out[name] = raw * (w_norm / r_norm.clamp_min(torch.finfo(weight.dtype).tiny))
    return out


def _grid_losses(model, X, C, points, directions, omega, tau):
    """Smoothed and k-means losses per task, ``(G, B)`` each, at grid ``points`` ``(G, 2)`` as one ensemble."""
    G = points.shape[0]
    ens = model.like(ensemble=G)
    a = points[:, 0].to(model.Q).view(G, 1, 1, 1)
    b = points[:, 1].to(model.Q).view(G, 1, 1, 1)
    base = model.state_dict()  # Q, K, V: (4, m, m); with a feedforward block also F1, b1, F2, b2
    # the block's weights stay at the model's: every grid point gets its own copy
    block = {name: base[name].expand(G, *base[name].shape)
             for name in model.parameter_names() if name not in PARAMETERS}
    ens.load_state_dict(dict(base, **block, **{name: base[name] + a * directions[0][name] + b * directions[1][name]
                                               for name in PARAMETERS}))
    with torch.no_grad():
        centers = ens(X, C)  # (G, B, k, d)
        Xe = X.expand(G, *X.shape).flatten(0, 1)
        flat = centers.flatten(0, 1)
        smooth = smoothed_kmeans_loss(Xe, flat, omega, tau).view(G, -1)
        hard = kmeans_objective(Xe, flat).view(G, -1)
    return smooth, hard


def loss_surface(
    model: ClusterTransformer,
    X: torch.Tensor,
    C: torch.Tensor,
    alphas,
    betas,
    *,
    directions=None,
    generator=None,
    omega: str = "l2",
    tau: float = 0.1,
    batch_points: int | None = None,
) -> Landscape:
    """The smoothed loss, the k-means loss and their gap on a 2-D grid of weights (Fig. 3, Fig. 5).

    Parameters
    ----------
    model : ClusterTransformer
        A single trained layer; its weights are the origin of the plane. The
        plane moves the attention's projections ``Q, K, V``; a feedforward
        block (``ffn > 0``) keeps its weights at every grid point.
    X, C : torch.Tensor
        A fixed batch of tasks, ``(B, n, d)`` and ``(B, k, d)``.
    alphas, betas : sequence of float
        Grid coordinates along the two directions.
    directions : pair of dict, optional
        Directions to use; default two :func:`filter_normalized_direction`
        draws from ``generator``.
    generator : torch.Generator or int, optional
        For the default directions.
    omega, tau
        The smoothed loss (Eq. 6) of the surface.
    batch_points : int, optional
        Grid points per batched forward pass; default: as many as keep one
        pass near 32 M attention entries. ``1`` evaluates one point at a time.

    Returns
    -------
    Landscape

    Examples
    --------
    >>> model = ClusterTransformer(2, 3, "bn", generator=torch.Generator().manual_seed(0))
    >>> X = torch.rand(4, 20, 2, generator=torch.Generator().manual_seed(1)); C = X[:, :3].clone()
    >>> surface = loss_surface(model, X, C, [-1.0, 0.0, 1.0], [-1.0, 0.0, 1.0], generator=0)
    >>> surface.smoothed.shape, bool((surface.gap >= -1e-5).all()), surface.smoothed_tasks.shape
    ((3, 3), True, (3, 3, 4))
    >>> bool(np.allclose(surface.smoothed_tasks.mean(axis=-1), surface.smoothed, rtol=1e-6))
    True
    """
    model = check_model(model, single=True)
    model.prepare_tasks(X, C)
    omega, tau = check_choice(omega, "omega", OMEGAS), check_number(tau, "tau")
    alphas = np.asarray(alphas, dtype=np.float64)
    betas = np.asarray(betas, dtype=np.float64)
    for name, grid in (("alphas", alphas), ("betas", betas)):
        if grid.ndim != 1 or grid.size == 0 or not np.isfinite(grid).all():
            raise ValueError(f"{name} must be a non-empty 1-D sequence of finite numbers")
    if directions is None:
        gen = make_generator(generator, name="generator")
        directions = (filter_normalized_direction(model, gen), filter_normalized_direction(model, gen))
    if not (isinstance(directions, (tuple, list)) and len(directions) == 2):
        raise ValueError("directions must be a pair of dicts {'Q', 'K', 'V'} -> tensor")
    for direction in directions:
        if not isinstance(direction, dict) or any(
            name not in direction or not isinstance(direction[name], torch.Tensor)
            or direction[name].shape != getattr(model, name).shape or not bool(torch.isfinite(direction[name]).all())
            for name in PARAMETERS
        ):
            raise ValueError("each direction must map 'Q', 'K', 'V' to finite tensors shaped like the model's weights")
    directions = tuple({name: direction[name].to(model.Q) for name in PARAMETERS} for direction in directions)
    A, Bt = np.meshgrid(alphas, betas, indexing="ij")
    points = torch.from_numpy(np.stack([A.ravel(), Bt.ravel()], axis=1))  # (G, 2)
    if batch_points is None:
        B, n, k = X.shape[0], X.shape[1], C.shape[1]
        per_point = B * (n * n + n * k + k * n + k * k + n * model.d_emb)
        batch_points = max(1, min(points.shape[0], (32 << 20) // per_point))
    check_int(batch_points, "batch_points")
    smooth, hard = [], []
    for start in range(0, points.shape[0], batch_points):
        s, h = _grid_losses(model, X, C, points[start : start + batch_points], directions, omega, tau)
        smooth.append(s)
        hard.append(h)
    shape = (alphas.size, betas.size)
    smooth, hard = torch.cat(smooth), torch.cat(hard)  # (G, B)
    return Landscape(
        alphas=alphas,
        betas=betas,
        smoothed=smooth.mean(dim=1).double().cpu().numpy().reshape(shape),
        kmeans=hard.mean(dim=1).double().cpu().numpy().reshape(shape),
        directions=directions,
        omega=omega,
        tau=tau,
        smoothed_tasks=smooth.double().cpu().numpy().reshape(*shape, -1),
        kmeans_tasks=hard.double().cpu().numpy().reshape(*shape, -1),
    )
