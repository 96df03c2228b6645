"""Smoothed k-means objectives: regularized min with softmin (NE) or sparsemax (L2) (Section 3, Appendix H).

For a point ``x`` and centers ``C`` let ``r_j = |x - c_j|^2``. The k-means loss
of the point is ``L = min_j r_j = <P(r), r>`` with ``P(r)`` the one-hot argmin
(Eq. 21-23). Regularizing the argmin over the simplex with ``tau * Omega``
gives weights ``P_Omega(r / tau)`` and the smooth upper bound (Eq. 24)

.. math::

    \\tilde L^\\tau_\\Omega(x, C) = \\langle P_\\Omega(r/\\tau), r \\rangle \\ \\ge\\ L(x, C).

* ``omega="ne"`` (negative entropy): ``P = softmax(-r / tau)``, softmin weights (Eq. 26);
* ``omega="l2"`` (half squared norm): ``P = sparsemax(-r / tau)`` (Eq. 27-29),
  the Euclidean projection of ``-r / tau`` onto the simplex, often exactly one-hot.

A task's loss sums over its points (Eq. 5 and 6).
Used in the smoothing chapter and by training.
"""

from __future__ import annotations

import math

import torch

from .validation import check_choice, check_int, check_number, check_points_centers, check_tensor
from .attention import squared_distances, task_sqdist
from .softmax import softmax_last

__all__ = [
    "OMEGAS",
    "sparsemax",
    "sparsemax_threshold",
    "regularized_weights",
    "smoothed_point_losses",
    "smoothed_kmeans_loss",
    "training_loss",
    "weight_gap",
    "smoothing_gap",
    "smoothing_constant",
    "sparsemax_is_tight",
    "weight_gap_bound",
    "worst_weight_gap",
]

OMEGAS = ("ne", "l2")


def _check_scores(z, name: str) -> torch.Tensor:
    return check_tensor(z, name, None, min_rank=1)


def sparsemax_threshold(z: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The threshold ``kappa(z)`` of Eq. 28 and the support size ``N(z)``, along the last axis.

    With ``z`` sorted decreasingly, ``N(z) = max{m : 1 + m z_(m) > sum_{j<=m} z_(j)}``
    and ``kappa(z) = (sum_{j<=N} z_(j) - 1) / N``, so that
    ``sum_j [z_j - kappa]_+ = 1``.

    Parameters
    ----------
    z : torch.Tensor
        ``(..., k)`` scores.

    Returns
    -------
    kappa : torch.Tensor
        ``(...)``, the threshold.
    support_size : torch.Tensor
        ``(...)`` int64, the number ``N(z) >= 1`` of non-zero sparsemax weights.

    Examples
    --------
    >>> kappa, N = sparsemax_threshold(torch.tensor([0.5, 0.2, -3.0]))
    >>> round(kappa.item(), 6), N.item()
    (-0.15, 2)
    >>> sparsemax_threshold(torch.tensor([1.7e7, 0.0]))[1].item()  # float32, beyond 2**24: still the top one
    1
    """
    _check_scores(z, "z")
    kappa, N, top = _threshold(z)
    return kappa + top.squeeze(-1), N


def _threshold(z: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(kappa(z - top), N(z), top)`` with ``top`` the row maximum ``(..., 1)``."""
    # shifted by the maximum first: kappa(z - c) = kappa(z) - c, and the top entry is then exactly 0,
    # so it is always in the support even where the cumulative sum of large scores loses precision
    top = z.amax(dim=-1, keepdim=True)
    z_sorted = (z - top).sort(dim=-1, descending=True).values
    cumsum = z_sorted.cumsum(dim=-1)
    ranks = torch.arange(1, z.shape[-1] + 1, dtype=z.dtype, device=z.device)
    support = 1.0 + ranks * z_sorted > cumsum  # a prefix of True
    N = support.sum(dim=-1).clamp_min(1)  # >= 1: the top entry, 0, is in the support (NaN input aside)
    kappa = (cumsum.gather(-1, (N - 1).unsqueeze(-1)).squeeze(-1) - 1.0) / N.to(z.dtype)
    return kappa, N, top


class _Sparsemax(torch.autograd.Function):
    @staticmethod
    def forward(ctx, z):
        kappa, _, top = _threshold(z)
        p = ((z - top) - kappa.unsqueeze(-1)).clamp_min(0.0)  # in shifted scores: no digits lost to the shift
        ctx.save_for_backward(p)
        return p

    @staticmethod
    def backward(ctx, grad):
        (p,) = ctx.saved_tensors
        # Jacobian diag(s) - s s^T / |S| on the support S (Martins & Astudillo 2016, Eq. 12)
        s = (p > 0).to(grad.dtype)
        mean_on_support = (grad * s).sum(-1, keepdim=True) / s.sum(-1, keepdim=True)
        return s * (grad - mean_on_support)


def sparsemax(z: torch.Tensor) -> torch.Tensor:
    """Sparsemax along the last axis: the Euclidean projection of ``z`` onto the simplex (Eq. 27-28).

    Differentiable with the exact sparsemax Jacobian ``diag(s) - s s^T / |S|``,
    where ``s`` marks the support ``S``.

    Parameters
    ----------
    z : torch.Tensor
        ``(..., k)`` scores.

    Returns
    -------
    torch.Tensor
        ``(..., k)``, non-negative, rows summing to 1, often with exact zeros.

    Examples
    --------
    >>> sparsemax(torch.tensor([0.5, 0.2, -3.0]))
    tensor([0.6500, 0.3500, 0.0000])
    >>> sparsemax(torch.tensor([3.0, 0.0, 0.0]))
    tensor([1., 0., 0.])
    """
    _check_scores(z, "z")
    return _Sparsemax.apply(z)


def regularized_weights(r: torch.Tensor, omega: str = "l2", tau: float = 0.1) -> torch.Tensor:
    """The regularized-argmin weights ``P_Omega(r / tau)`` over the last axis (Eq. 26, 27).

    Parameters
    ----------
    r : torch.Tensor
        ``(..., k)`` squared distances (or any scores to minimize).
    omega : {"ne", "l2"}
        Softmin (negative-entropy regularizer) or sparsemax (L2 regularizer).
    tau : float
        Penalty ``> 0``; the weights approach the argmin as ``tau -> 0``.

    Returns
    -------
    torch.Tensor
        ``(..., k)``, non-negative, summing to 1 over the last axis.

    Examples
    --------
    >>> r = torch.tensor([0.0, 0.05, 1.0])
    >>> regularized_weights(r, "l2", 0.1)
    tensor([0.7500, 0.2500, 0.0000])
    >>> regularized_weights(r, "ne", 0.1).round(decimals=4)
    tensor([0.6224, 0.3775, 0.0000])
    """
    omega, tau = check_choice(omega, "omega", OMEGAS), check_number(tau, "tau")
    _check_scores(r, "r")
    return _regularized(r, omega, tau)


def _regularized(r: torch.Tensor, omega: str, tau: float) -> torch.Tensor:
    if tau < torch.finfo(r.dtype).smallest_normal * torch.finfo(r.dtype).eps:  # a host-side test: no sync
        raise ValueError(f"tau={tau!r} is below the smallest positive {r.dtype} number, where it would round "
                         "to 0 (and the weights to 0/0); use a larger tau or float64")
    # both maps are invariant to a shift of the scores: shifted so the best is exactly 0, a tiny tau
    # sends the others to -inf (weight 0) instead of every score to -inf (NaN)
    z = -(r - r.detach().amin(dim=-1, keepdim=True)) / tau
    if omega == "ne":
        return softmax_last(z)
    return _Sparsemax.apply(z)


def smoothed_point_losses(X: torch.Tensor, C: torch.Tensor, omega: str = "l2", tau: float = 0.1) -> torch.Tensor:
    """Per-point smoothed losses ``<P_Omega(r_i / tau), r_i>`` (Eq. 24, 26, 29): ``(B, n)``.

    Parameters
    ----------
    X : torch.Tensor
        Points ``(B, n, d)``.
    C : torch.Tensor
        Centers ``(B, k, d)``.
    omega : {"ne", "l2"}
        Softmin or sparsemax weights.
    tau : float
        Penalty ``> 0``.

    Returns
    -------
    torch.Tensor
        ``(B, n)``; entry ``i`` is at least ``min_j |x_i - c_j|^2``.

    Examples
    --------
    >>> X = torch.tensor([[[0.], [1.], [4.]]]); C = torch.tensor([[[0.], [4.]]])
    >>> smoothed_point_losses(X, C, "l2", 0.1)
    tensor([[0., 1., 0.]])
    >>> smoothed_point_losses(X, C, "ne", 10.0).round(decimals=2)
    tensor([[2.6900, 3.4800, 2.6900]])
    """
    check_points_centers(X, C, k_le_n=False)
    omega, tau = check_choice(omega, "omega", OMEGAS), check_number(tau, "tau")
    r = task_sqdist(X, C)  # (B, n, k); an overflow is a ValueError
    return (_regularized(r, omega, tau) * r).sum(dim=-1)


def smoothed_kmeans_loss(X: torch.Tensor, C: torch.Tensor, omega: str = "l2", tau: float = 0.1,
                         trim: float = 0.0) -> torch.Tensor:
    """Smoothed k-means loss of each task (Eq. 6): the sum of the per-point smoothed losses.

    With ``trim > 0`` the ``floor(trim * n)`` points of largest smoothed loss
    are left out of each task's sum: a trimmed loss, robust to outliers (ours,
    for Appendix A's Cauchy hypothesis; chapter 21). The paper's loss is
    ``trim = 0``. The floor is of the product as written in decimals:
    ``trim=0.29`` leaves out 29 of 100 points, though ``0.29 * 100`` is
    ``28.999999999999996`` in floating point.

    Parameters
    ----------
    X, C, omega, tau
        As in :func:`smoothed_point_losses` (``C`` e.g. the model output).
    trim : float
        Fraction of each task's points left out, ``0 <= trim < 1``.

    Returns
    -------
    torch.Tensor
        ``(B,)``; with ``trim = 0`` never below :func:`~kmtrf_core.lloyd.kmeans_objective`.

    Examples
    --------
    >>> X = torch.tensor([[[0.], [1.], [4.]]]); C = torch.tensor([[[0.], [4.]]])
    >>> smoothed_kmeans_loss(X, C, "l2", 0.1)
    tensor([1.])
    >>> from kmtrf_core.lloyd import kmeans_objective
    >>> bool(smoothed_kmeans_loss(X, C, "ne", 10.0) > kmeans_objective(X, C))
    True
    >>> smoothed_kmeans_loss(X, C, "l2", 0.1, trim=0.34)  # the point at 1 is left out
    tensor([0.])
    >>> X = torch.arange(100.0).view(1, 100, 1); C = torch.zeros(1, 2, 1)
    >>> smoothed_kmeans_loss(X, C, "l2", 0.1, trim=0.29) == (torch.arange(71.0) ** 2).sum()  # 29 left out
    tensor([True])
    """
    trim = check_number(trim, "trim", allow_zero=True)
    if trim >= 1:
        raise ValueError(f"trim must be below 1 (some points must stay in the loss), got {trim!r}")
    return _kmeans_loss(smoothed_point_losses(X, C, omega, tau), trim)


def training_loss(X: torch.Tensor, C: torch.Tensor, omega: str, tau: float, trim: float = 0.0) -> torch.Tensor:
    """:func:`smoothed_kmeans_loss` without input checks, for the training step: ``(B,)``.

    It never reads a value back to the host, so a GPU step that calls it can
    run as one captured graph; non-finite centers give a non-finite loss
    instead of a ``ValueError`` (the training loop names them as divergence).

    >>> X = torch.tensor([[[0.], [1.], [4.]]]); C = torch.tensor([[[0.], [4.]]])
    >>> torch.equal(training_loss(X, C, "l2", 0.1), smoothed_kmeans_loss(X, C, "l2", 0.1))
    True
    """
    r = squared_distances(X, C)  # (B, n, k); an overflow comes back as inf, never as a host check
    return _kmeans_loss((_regularized(r, omega, tau) * r).sum(dim=-1), trim)


def _kmeans_loss(losses: torch.Tensor, trim: float) -> torch.Tensor:
    # floor(trim * n), read with a margin far above the product's rounding error and far below 1 / n, so a
    # trim written in decimals counts its points (0.29 * 100 = 28.999999999999996 is 29); for the book's
    # trim 0.1 this is int(trim * n) at every n up to 2 million
    dropped = math.floor(trim * losses.shape[-1] + 1e-9)
    if dropped == 0:
        return losses.sum(dim=-1)
    return torch.topk(losses, losses.shape[-1] - dropped, dim=-1, largest=False).values.sum(dim=-1)


def weight_gap(r: torch.Tensor, omega: str = "l2", tau: float = 0.1) -> torch.Tensor:
    """``|P(r) - P_Omega(r / tau)|`` (Euclidean) over the last axis, with ``P(r)`` the one-hot argmin (Eq. 30).

    Proposition H.1 bounds it by :func:`weight_gap_bound`.

    Parameters
    ----------
    r, omega, tau
        As in :func:`regularized_weights`.

    Returns
    -------
    torch.Tensor
        ``(...)``, differentiable in ``r``.

    Examples
    --------
    >>> r = torch.tensor([[0.0, 0.05, 1.0], [0.0, 0.5, 1.0]])
    >>> weight_gap(r, "l2", 0.1).round(decimals=4)
    tensor([0.3536, 0.0000])
    """
    _check_scores(r, "r")
    P_hard = torch.nn.functional.one_hot(r.argmin(dim=-1), r.shape[-1]).to(r.dtype)
    return (P_hard - regularized_weights(r, omega, tau)).norm(dim=-1)


def weight_gap_bound(k: int, omega: str) -> float:
    """Proposition H.1's bound on :func:`weight_gap`: ``sqrt(1 - 1/k)`` for L2, ``sqrt(2 log k)`` for NE.

    Parameters
    ----------
    k : int
        Number of clusters, ``k >= 2``.
    omega : {"ne", "l2"}
        The regularizer.

    Returns
    -------
    float
        The bound; it does not depend on ``tau``.

    Examples
    --------
    >>> round(weight_gap_bound(4, "l2"), 4), round(weight_gap_bound(4, "ne"), 4)
    (0.866, 1.6651)
    """
    omega = check_choice(omega, "omega", OMEGAS)
    check_int(k, "k", minimum=2)
    return math.sqrt(1.0 - 1.0 / k) if omega == "l2" else math.sqrt(2.0 * math.log(k))


def worst_weight_gap(
    k: int, omega: str = "l2", tau: float = 0.1, restarts: int = 256, steps: int = 200, generator=None
) -> tuple[float, torch.Tensor]:
    """Search for the largest :func:`weight_gap` over ``r`` in ``R^k``: random starts, then gradient ascent.

    A numerical check of how tight Proposition H.1 is.

    Parameters
    ----------
    k : int
        Number of clusters, ``k >= 2``.
    omega : {"ne", "l2"}
        The regularizer.
    tau : float
        Penalty ``> 0``.
    restarts : int
        Random starting points, at scales from ``1e-3 tau`` to ``10 tau``.
    steps : int
        Adam steps of the ascent, ``>= 0`` (0: the best starting point).
    generator : torch.Generator, optional
        For the starting points.

    Returns
    -------
    gap : float
        The largest gap found: over the starting points and every iterate
        of the ascent (Adam can step past a maximum, so the last iterate
        need not be the best).
    r : torch.Tensor
        ``(k,)`` float64, the ``r`` attaining it.

    Examples
    --------
    >>> gap, r = worst_weight_gap(4, "l2", restarts=16, steps=20, generator=torch.Generator().manual_seed(0))
    >>> gap <= weight_gap_bound(4, "l2") + 1e-12
    True
    """
    omega, tau = check_choice(omega, "omega", OMEGAS), check_number(tau, "tau")
    check_int(k, "k", minimum=2)
    check_int(restarts, "restarts")
    check_int(steps, "steps", minimum=0)
    scales = torch.logspace(-3, 1, restarts, dtype=torch.float64)[:, None] * tau
    r = (torch.rand(restarts, k, generator=generator, dtype=torch.float64) * scales).requires_grad_(True)
    opt = torch.optim.Adam([r], lr=0.05 * tau)
    # Adam can step past a maximum: keep each start's best iterate (the starts and every step), not the last
    best_gaps = torch.full((restarts,), -math.inf, dtype=torch.float64)
    best_r = r.detach().clone()
    for step in range(steps + 1):
        gaps = weight_gap(r, omega, tau)
        with torch.no_grad():
            better = gaps > best_gaps
            best_gaps = torch.where(better, gaps, best_gaps)
            best_r = torch.where(better[:, None], r, best_r)
        if step == steps:
            break
        opt.zero_grad()
        (-gaps.sum()).backward()
        opt.step()
    best = int(best_gaps.argmax())
    return best_gaps[best].item(), best_r[best].clone()


def smoothing_gap(X: torch.Tensor, C: torch.Tensor, omega: str = "l2", tau: float = 0.1) -> torch.Tensor:
    """Per-point gap ``L~ - L >= 0`` between the smoothed and the exact loss (Eq. 24 minus Eq. 21).

    Parameters
    ----------
    X, C, omega, tau
        As in :func:`smoothed_point_losses`.

    Returns
    -------
    torch.Tensor
        ``(B, n)``, non-negative.

    Examples
    --------
    >>> X = torch.tensor([[[0.], [1.], [4.]]]); C = torch.tensor([[[0.], [4.]]])
    >>> smoothing_gap(X, C, "l2", 0.1)
    tensor([[0., 0., 0.]])
    >>> bool((smoothing_gap(X, C, "ne", 1.0) > 0).all())
    True
    """
    check_points_centers(X, C, k_le_n=False)
    r = task_sqdist(X, C)
    smooth = (regularized_weights(r, omega, tau) * r).sum(dim=-1)
    return (smooth - r.amin(dim=-1)).clamp_min(0.0)


def smoothing_constant(X: torch.Tensor, C: torch.Tensor, omega: str = "l2", tau: float = 0.1) -> torch.Tensor:
    """Empirical :math:`C_\\Omega^\\tau` (Eq. 9): the largest task gap ``L~(X, C) - L(X, C)`` over the batch.

    An estimate from below of the maximum over the task distribution.

    Parameters
    ----------
    X, C, omega, tau
        As in :func:`smoothed_point_losses` (``C`` e.g. the model output).

    Returns
    -------
    torch.Tensor
        A scalar: the largest of the ``B`` per-task gaps.

    Examples
    --------
    >>> X = torch.tensor([[[0.], [1.], [4.]], [[0.], [2.], [4.]]], dtype=torch.float64)
    >>> C = torch.tensor([[[0.], [4.]], [[0.], [4.]]], dtype=torch.float64)
    >>> round(smoothing_constant(X, C, "ne", 1.0).item(), 4), smoothing_constant(X, C, "l2", 0.1).item()
    (0.0027, 0.0)
    """
    return smoothing_gap(X, C, omega, tau).sum(dim=-1).max()


def sparsemax_is_tight(r: torch.Tensor, tau: float) -> torch.Tensor:
    """Where sparsemax is exactly one-hot, so ``L~_L2 = L``: the two smallest entries of ``r`` differ by ``>= tau``.

    This is the margin condition: ``sparsemax(-r / tau)`` has a single support
    element iff ``1 + 2 z_(2) <= z_(1) + z_(2)`` with ``z = -r / tau``
    (Eq. 28; the margin condition after Eq. 9).

    Parameters
    ----------
    r : torch.Tensor
        ``(..., k)`` squared distances, ``k >= 2``.
    tau : float
        Penalty ``> 0``.

    Returns
    -------
    torch.Tensor
        ``(...)`` bool.

    Examples
    --------
    >>> sparsemax_is_tight(torch.tensor([[0.0, 0.2, 1.0], [0.0, 0.05, 1.0]]), tau=0.1)
    tensor([ True, False])
    """
    tau = check_number(tau, "tau")
    _check_scores(r, "r")
    if r.shape[-1] < 2:
        raise ValueError(f"r must hold at least 2 distances per row, got shape {tuple(r.shape)}")
    two = r.topk(2, dim=-1, largest=False).values
    return (two[..., 1] - two[..., 0]) >= tau
