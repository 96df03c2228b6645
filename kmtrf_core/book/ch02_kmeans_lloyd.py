"""Chapter 2 (``book/02_kmeans_lloyd.ipynb``): what the chapter reads off Lloyd's iterations.

The algorithm itself is the paper room's (:mod:`kmtrf_core.lloyd`); this
module holds the two summaries the chapter shows:

* :func:`assignment_settling`: when Lloyd's assignments stop changing;
* :func:`spread_statistics`: how concentrated a task's points are after
  min-max scaling, and where Lloyd's centers end up.
"""

from __future__ import annotations

import torch

from ..attention import sqdist
from ..validation import check_int, check_number, check_points_centers

__all__ = ["assignment_settling", "spread_statistics"]


def assignment_settling(assignments: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The iteration at which each task's Lloyd assignment took its final value.

    Once two consecutive assignments agree, the centers stop moving and Lloyd's
    algorithm sits at a fixed point, so "the last iteration that changed an
    assignment" is well defined. Tasks still changing at the last iteration are
    cut off at ``T`` (a lower bound for them). Used in chapter 2.

    Parameters
    ----------
    assignments : torch.Tensor
        ``(T, B, n)`` integer assignments, as in
        :attr:`~kmtrf_core.lloyd.LloydTrajectory.assignments` (index ``t`` made
        at iteration ``t + 1``).

    Returns
    -------
    settled_at : torch.Tensor
        ``(B,)`` int64: the first iteration (1 to ``T``) from which the
        assignment no longer changes within the ``T`` iterations.
    still_changing : torch.Tensor
        ``(B,)`` bool: whether iteration ``T`` re-assigned some point (always
        False when ``T = 1``).

    Examples
    --------
    Task 0 settles at iteration 2, task 1 at iteration 1, task 2 is still
    changing at iteration 3:

    >>> A = torch.tensor([[[0, 1], [0, 0], [0, 1]],
    ...                   [[1, 1], [0, 0], [1, 1]],
    ...                   [[1, 1], [0, 0], [0, 1]]])
    >>> settled_at, still_changing = assignment_settling(A)
    >>> settled_at.tolist(), still_changing.tolist()
    ([2, 1, 3], [False, False, True])
    """
    if not isinstance(assignments, torch.Tensor) or assignments.dim() != 3:
        raise ValueError("assignments must be a (T, B, n) torch.Tensor")
    if assignments.is_floating_point() or assignments.dtype == torch.bool:
        raise ValueError(f"assignments must be an integer tensor, got dtype {assignments.dtype}")
    steps, batch = assignments.shape[:2]
    if steps == 1:
        ones = torch.ones(batch, dtype=torch.int64, device=assignments.device)
        return ones, torch.zeros(batch, dtype=torch.bool, device=assignments.device)
    changed = (assignments[1:] != assignments[:-1]).any(dim=-1)  # (T - 1, B)
    iteration = torch.arange(2, steps + 1, device=assignments.device).unsqueeze(1)  # (T - 1, 1)
    settled_at = torch.where(changed, iteration, 1).amax(dim=0)
    return settled_at, changed[-1]


def spread_statistics(
    X: torch.Tensor, C: torch.Tensor, final_centers: torch.Tensor, box: float = 0.1, top: int | None = None
) -> dict[str, torch.Tensor]:
    """Per task: how concentrated the points are, and where the final centers sit.

    Chapter 2 uses these four numbers to show why heavy-tailed (Cauchy) tasks
    behave differently after min-max scaling.

    Parameters
    ----------
    X : torch.Tensor
        Points ``(B, n, d)``.
    C : torch.Tensor
        Initial centers ``(B, k, d)``.
    final_centers : torch.Tensor
        Centers ``(B, k, d)`` after Lloyd's iterations.
    box : float
        Side of the box centred at the coordinate-wise median, ``> 0``.
    top : int, optional
        How many of the most expensive points to count in ``top_share``;
        default ``max(1, n // 100)`` (the top 1%).

    Returns
    -------
    dict of torch.Tensor
        Each ``(B,)``:

        * ``"width90"``: width of the interval holding the central 90% of the
          coordinates (5% to 95% quantiles), mean over the dimensions;
        * ``"in_box"``: share of the points inside the ``box``-sided box
          centred at the coordinate-wise median;
        * ``"top_share"``: share of the objective ``L(X, C)`` (Eq. 1) that
          the ``top`` most expensive points contribute;
        * ``"outside"``: number of final centers outside the box that holds
          the central 90% of the points in each coordinate.

    Examples
    --------
    One far outlier carries almost all of the initial objective, and the
    center that Lloyd moves onto it lies outside the central box:

    >>> X = torch.tensor([[[0.0], [0.1], [0.2], [0.3], [10.0]]], dtype=torch.float64)
    >>> C = torch.tensor([[[0.0], [0.3]]], dtype=torch.float64)
    >>> final = torch.tensor([[[0.15], [10.0]]], dtype=torch.float64)
    >>> stats = spread_statistics(X, C, final, box=0.5, top=1)
    >>> round(stats["top_share"].item(), 4), stats["outside"].tolist()
    (0.9998, [1])
    >>> stats["in_box"].tolist()
    [0.8]
    """
    check_points_centers(X, C)
    check_points_centers(X, final_centers)
    box = check_number(box, "box")
    n = X.shape[1]
    top = max(1, n // 100) if top is None else check_int(top, "top")
    levels = torch.tensor([0.05, 0.95], dtype=X.dtype, device=X.device)
    q = torch.quantile(X, levels, dim=1)  # (2, B, d)
    width90 = (q[1] - q[0]).mean(dim=-1)
    centre = X.median(dim=1, keepdim=True).values
    in_box = ((X - centre).abs() <= box / 2).all(dim=-1).double().mean(dim=1)
    per_point = sqdist(X, C).amin(dim=-1)  # (B, n): each point's term of Eq. 1
    top_share = per_point.topk(top, dim=1).values.sum(1) / per_point.sum(1)
    low, high = q[0].unsqueeze(1), q[1].unsqueeze(1)
    outside = ((final_centers < low) | (final_centers > high)).any(dim=-1).sum(dim=-1)
    return {"width90": width90, "in_box": in_box, "top_share": top_share, "outside": outside}
