"""Measurements behind the figures and tables of the theory chapters (2 to 5).

The paper's mathematics lives at the package top (:mod:`kmtrf_core.lloyd`,
:mod:`kmtrf_core.attention`, :mod:`kmtrf_core.construction`); this module holds
the few summaries that the book's chapters read off it, so that a cell only
calls and shows them:

* :func:`assignment_settling`: when Lloyd's assignments stop changing (chapter 2);
* :func:`spread_statistics`: how concentrated a task's points are after
  min-max scaling, and where Lloyd's centers end up (chapter 2);
* :func:`nearest_key_leakage`: the weight that distance attention at a finite
  ``gamma`` leaves off the nearest key, with its bound (chapter 4);
* :func:`relative_center_error` and :func:`layerwise_lloyd_errors`: how far the
  constructed layer is from Lloyd's iterations, layer by layer (chapter 5).
"""

from __future__ import annotations

import math

import torch

from ..attention import attention_weights, sqdist
from ..evaluate import center_trajectory
from ..lloyd import lloyd_trajectory
from ..model import ClusterTransformer
from ..validation import check_int, check_number, check_points_centers, check_tensor

__all__ = [
    "assignment_settling",
    "spread_statistics",
    "nearest_key_leakage",
    "relative_center_error",
    "layerwise_lloyd_errors",
]


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


def nearest_key_leakage(X: torch.Tensor, C: torch.Tensor, gamma: float) -> dict[str, torch.Tensor]:
    """Weight that distance attention leaves off each point's nearest center, and its bound.

    With the points as queries, the centers as keys and identity projections
    (the first attention of the layer stripped to its core), a point whose
    nearest center is unique, with squared-distance gap ``Delta`` to the
    runner-up, gives the other ``k - 1`` centers at most
    ``(k - 1) exp(-gamma Delta / sqrt(d))`` of its weight. Used in chapter 4.

    Parameters
    ----------
    X : torch.Tensor
        Points ``(B, n, d)`` (queries).
    C : torch.Tensor
        Centers ``(B, k, d)`` (keys), ``k >= 2``.
    gamma : float
        Attention inverse temperature, ``> 0`` (finite).

    Returns
    -------
    dict of torch.Tensor
        Each ``(B, n)``:

        * ``"off"``: ``1 -`` the weight on the nearest center;
        * ``"bound"``: ``(k - 1) exp(-gamma Delta / sqrt(d))``;
        * ``"gap"``: ``Delta``, the second-smallest minus the smallest squared distance;
        * ``"entropy"``: the entropy of the point's weights (natural log).

    Examples
    --------
    >>> X = torch.tensor([[[0.0, 0.0], [0.4, 0.0]]], dtype=torch.float64)
    >>> C = torch.tensor([[[0.0, 0.0], [1.0, 0.0]]], dtype=torch.float64)
    >>> leak = nearest_key_leakage(X, C, gamma=10.0)
    >>> leak["gap"].round(decimals=6).tolist()
    [[1.0, 0.2]]
    >>> bool((leak["off"] <= leak["bound"]).all())
    True
    """
    check_points_centers(X, C, k_le_n=False)  # any number of queries, even one point
    gamma = check_number(gamma, "gamma")
    k, d = C.shape[1], X.shape[2]
    if k < 2:
        raise ValueError(f"need k >= 2 centers, got {k}")
    two = sqdist(X, C).topk(2, dim=-1, largest=False)
    gap = two.values[..., 1] - two.values[..., 0]
    nearest = two.indices[..., :1]
    W = attention_weights(X, C, gamma)  # (B, n, k)
    off = 1.0 - W.gather(-1, nearest).squeeze(-1)
    bound = (k - 1) * torch.exp(-gamma * gap / math.sqrt(d))
    entropy = -(W * W.clamp_min(1e-300).log()).sum(-1)
    return {"off": off, "bound": bound, "gap": gap, "entropy": entropy}


def relative_center_error(centers: torch.Tensor, reference: torch.Tensor) -> torch.Tensor:
    """``max |centers - reference| / max |reference|`` per task (max over all entries).

    The exactness measure of chapter 5: a task counts as exact when this is at
    most ``1e-12`` in float64.

    Parameters
    ----------
    centers, reference : torch.Tensor
        ``(B, k, d)`` each.

    Returns
    -------
    torch.Tensor
        ``(B,)``.

    Examples
    --------
    >>> ref = torch.tensor([[[1.0, -4.0]], [[2.0, 0.0]]])
    >>> relative_center_error(ref + torch.tensor([0.0, 0.5]), ref).tolist()
    [0.125, 0.25]
    """
    check_tensor(centers, "centers", rank=3)
    check_tensor(reference, "reference", rank=3)
    if centers.shape != reference.shape:
        raise ValueError(f"centers {tuple(centers.shape)} and reference {tuple(reference.shape)} differ")
    return (centers - reference).abs().flatten(1).amax(1) / reference.abs().flatten(1).amax(1)


def layerwise_lloyd_errors(X: torch.Tensor, C: torch.Tensor, scheme: str, steps: int) -> torch.Tensor:
    """Relative error of layer ``t`` of the constructed model against Lloyd iteration ``t``.

    Runs the layer of Theorem 2.1 (``gamma = inf``, weights from
    :meth:`~kmtrf_core.model.ClusterTransformer.from_lloyd`) on its own tokens
    for ``steps`` layers and compares the centers after each layer with
    Lloyd's (:func:`relative_center_error`). Used in chapter 5.

    Parameters
    ----------
    X : torch.Tensor
        Points ``(B, n, d)``.
    C : torch.Tensor
        Initial centers ``(B, k, d)``.
    scheme : {"oh", "bn", "sc"}
        Token embedding of the constructed layer.
    steps : int
        Number of layers / Lloyd iterations ``T >= 1``.

    Returns
    -------
    torch.Tensor
        ``(T, B)``; row ``t - 1`` compares layer ``t`` with iteration ``t``.

    Examples
    --------
    >>> g = torch.Generator().manual_seed(0)
    >>> X = torch.rand(3, 40, 2, generator=g, dtype=torch.float64)
    >>> errors = layerwise_lloyd_errors(X, X[:, :4].clone(), "bn", steps=3)
    >>> errors.shape, bool(errors.max() < 1e-12)
    (torch.Size([3, 3]), True)
    """
    check_points_centers(X, C)
    steps = check_int(steps, "steps")
    d, k = X.shape[2], C.shape[1]
    reference = lloyd_trajectory(X, C, steps).centers  # (T + 1, B, k, d)
    model = ClusterTransformer.from_lloyd(d, k, scheme, dtype=X.dtype, device=X.device)
    layers = center_trajectory(model, X, C, steps, mode="naive")  # the layer on its own tokens
    return torch.stack([relative_center_error(layers[t], reference[t]) for t in range(1, steps + 1)])
