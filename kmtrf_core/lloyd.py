"""Lloyd's algorithm (Algorithm 2) and the k-means objective (Eq. 1), batched over tasks.

Assignments come from one GEMM and an ``argmin`` over centers (ties go to the
lowest index, as in scikit-learn); new centers from a one-hot matrix product.
There is no Python loop over tasks or clusters.

Empty clusters
--------------
Algorithm 2 leaves the center of a cluster that receives no point undefined.
``empty="keep"`` (the default) keeps such a center where it was, the usual
convention; ``empty="error"`` raises instead. scikit-learn relocates empty
clusters to far-away points, and the constructed transformer of Theorem 2.1
moves them to the mean of the points with the nearest code (see
:func:`kmtrf_core.construction.code_lloyd_step`): outside the theorem's
assumption the three disagree, by design, and the tests compare them only on
tasks without empty clusters (:func:`has_empty_cluster`).

Used in chapters 2 and 5.
"""

from __future__ import annotations

from typing import NamedTuple

import torch

from .validation import check_choice, check_int, check_points_centers
from .attention import task_sqdist

__all__ = [
    "assign",
    "kmeans_objective",
    "lloyd_step",
    "lloyd",
    "LloydTrajectory",
    "lloyd_trajectory",
    "has_empty_cluster",
]

EMPTY_POLICIES = ("keep", "error")


def assign(X: torch.Tensor, C: torch.Tensor) -> torch.Tensor:
    """Index of the nearest center of every point (Algorithm 2, line 5).

    Parameters
    ----------
    X : torch.Tensor
        Points ``(B, n, d)``.
    C : torch.Tensor
        Centers ``(B, k, d)``.

    Returns
    -------
    torch.Tensor
        ``(B, n)`` int64 in ``[0, k)``; exact ties go to the lowest index.

    Examples
    --------
    >>> X = torch.tensor([[[0.], [0.9], [2.]]])
    >>> C = torch.tensor([[[0.], [2.]]])
    >>> assign(X, C).tolist()
    [[0, 0, 1]]
    """
    check_points_centers(X, C)
    return task_sqdist(X, C).argmin(dim=-1)


def kmeans_objective(X: torch.Tensor, C: torch.Tensor) -> torch.Tensor:
    """The k-means objective of Eq. 1 for each task: ``sum_i min_j |x_i - c_j|^2``.

    Parameters
    ----------
    X : torch.Tensor
        Points ``(B, n, d)``.
    C : torch.Tensor
        Centers ``(B, k, d)``.

    Returns
    -------
    torch.Tensor
        ``(B,)``.

    Examples
    --------
    >>> X = torch.tensor([[[0.], [1.], [4.]]])
    >>> C = torch.tensor([[[0.], [4.]]])
    >>> kmeans_objective(X, C)
    tensor([1.])
    """
    check_points_centers(X, C, k_le_n=False)
    return task_sqdist(X, C).amin(dim=-1).sum(dim=-1)


def _step(X: torch.Tensor, C: torch.Tensor, empty: str):
    a = task_sqdist(X, C).argmin(dim=-1)  # (B, n)
    onehot = torch.nn.functional.one_hot(a, C.shape[1]).to(X.dtype)  # (B, n, k)
    counts = onehot.sum(dim=1)  # (B, k)
    # sums of points taken relative to the first center, so float32 means do not lose digits to where
    # the data sit (translation-equivariant to rounding)
    shift = C[:, :1, :]  # (B, 1, d): a center, so x - shift is exact near the data (Sterbenz)
    sums = onehot.transpose(1, 2) @ (X - shift)  # (B, k, d)
    is_empty = counts == 0
    if empty == "error" and bool(is_empty.any()):
        tasks = torch.nonzero(is_empty.any(dim=1)).flatten().tolist()
        raise ValueError(f"empty cluster in tasks {tasks[:10]} (empty='error')")
    means = sums / counts.clamp_min(1).unsqueeze(-1) + shift
    C_new = torch.where(is_empty.unsqueeze(-1), C, means)
    return C_new, a, counts


def lloyd_step(X: torch.Tensor, C: torch.Tensor, empty: str = "keep") -> torch.Tensor:
    """One Lloyd iteration: assign every point, then move each center to the mean of its points.

    One pass of the loop of Algorithm 2 (lines 5-6).

    Parameters
    ----------
    X : torch.Tensor
        Points ``(B, n, d)``.
    C : torch.Tensor
        Centers ``(B, k, d)``.
    empty : {"keep", "error"}
        What an empty cluster does (module docstring).

    Returns
    -------
    torch.Tensor
        New centers ``(B, k, d)``.

    Examples
    --------
    >>> X = torch.tensor([[[0.], [1.], [9.], [10.]]])
    >>> lloyd_step(X, torch.tensor([[[0.], [9.]]])).flatten().tolist()
    [0.5, 9.5]
    """
    check_points_centers(X, C)
    return _step(X, C, check_choice(empty, "empty", EMPTY_POLICIES))[0]


def lloyd(X: torch.Tensor, C: torch.Tensor, steps: int = 1, empty: str = "keep") -> torch.Tensor:
    """``steps`` iterations of Lloyd's algorithm (Algorithm 2) from centers ``C``.

    Parameters
    ----------
    X, C, steps, empty
        As in :func:`lloyd_trajectory`.

    Returns
    -------
    torch.Tensor
        Centers after ``T`` iterations, ``(B, k, d)``.

    Examples
    --------
    >>> X = torch.tensor([[[0.], [1.], [9.], [10.]]])
    >>> C = torch.tensor([[[0.], [1.]]])
    >>> lloyd(X, C, steps=3).flatten().tolist()
    [0.5, 9.5]
    """
    return lloyd_trajectory(X, C, steps, empty).centers[-1]


class LloydTrajectory(NamedTuple):
    """Everything ``T`` Lloyd iterations produced (returned by :func:`lloyd_trajectory`).

    A named tuple of three tensors:

    * ``centers``: ``(T + 1, B, k, d)``, index 0 the initial centers;
    * ``assignments``: ``(T, B, n)`` int64, index ``t`` the assignment made at iteration ``t + 1``;
    * ``counts``: ``(T, B, k)``, points per cluster at iteration ``t + 1`` (0: an empty cluster).

    Examples
    --------
    >>> X = torch.tensor([[[0.], [1.], [9.], [10.]]])
    >>> traj = lloyd_trajectory(X, torch.tensor([[[0.], [9.]]]), steps=1)
    >>> centers, assignments, counts = traj
    >>> centers[-1].flatten().tolist(), assignments[0].tolist(), counts[0].tolist()
    ([0.5, 9.5], [[0, 0, 1, 1]], [[2.0, 2.0]])
    """

    centers: torch.Tensor
    assignments: torch.Tensor
    counts: torch.Tensor


def lloyd_trajectory(X: torch.Tensor, C: torch.Tensor, steps: int, empty: str = "keep") -> LloydTrajectory:
    """Run ``steps`` Lloyd iterations (Algorithm 2) and keep every intermediate center, assignment and count.

    Parameters
    ----------
    X : torch.Tensor
        Points ``(B, n, d)``.
    C : torch.Tensor
        Initial centers ``(B, k, d)``.
    steps : int
        Number of iterations ``T >= 1``.
    empty : {"keep", "error"}
        Empty-cluster policy (module docstring).

    Returns
    -------
    LloydTrajectory
        ``centers`` ``(T + 1, B, k, d)``, ``assignments`` ``(T, B, n)``,
        ``counts`` ``(T, B, k)``.

    Examples
    --------
    >>> X = torch.tensor([[[0.], [1.], [9.], [10.]]])
    >>> traj = lloyd_trajectory(X, X[:, :2].clone(), steps=2)
    >>> traj.centers.shape, traj.counts[0].tolist()
    (torch.Size([3, 1, 2, 1]), [[1.0, 3.0]])
    """
    check_points_centers(X, C)
    check_int(steps, "steps")
    empty = check_choice(empty, "empty", EMPTY_POLICIES)
    centers, assignments, counts = [C], [], []
    for _ in range(steps):
        C, a, c = _step(X, C, empty)
        centers.append(C)
        assignments.append(a)
        counts.append(c)
    return LloydTrajectory(torch.stack(centers), torch.stack(assignments), torch.stack(counts))


def has_empty_cluster(X: torch.Tensor, C: torch.Tensor, steps: int) -> torch.Tensor:
    """Whether any of the first ``steps`` Lloyd iterations of each task leaves a cluster empty.

    Parameters
    ----------
    X, C, steps
        As in :func:`lloyd_trajectory` (``steps``: the iterations to check).

    Returns
    -------
    torch.Tensor
        ``(B,)`` bool; Theorem 2.1's exactness holds only where this is False.

    Examples
    --------
    The center at 20 of the first task attracts no point:

    >>> X = torch.tensor([[[0.], [1.], [9.], [10.]]]).expand(2, 4, 1)
    >>> C = torch.tensor([[[0.], [1.], [20.]], [[0.], [9.], [10.]]])
    >>> has_empty_cluster(X, C, steps=1)
    tensor([ True, False])
    """
    counts = lloyd_trajectory(X, C, steps).counts  # (T, B, k)
    return (counts == 0).any(dim=2).any(dim=0)
