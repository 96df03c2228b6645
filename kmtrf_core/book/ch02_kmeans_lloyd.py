"""Chapter 2 (``book/02_kmeans_lloyd.ipynb``): what the chapter reads off Lloyd's iterations.

The algorithm itself is the paper room's (:mod:`kmtrf_core.lloyd`); this
module holds the two summaries the chapter shows:

* :func:`assignment_settling`: when Lloyd's assignments stop changing;
* :func:`spread_statistics`: how concentrated a task's points are after
  min-max scaling, and where Lloyd's centers end up;
* :func:`family_contrasts`, :func:`contrast_text`: cauchy's share of the starting objective
  left after a step against each other family's, on 95% intervals over tasks.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import torch

from ..attention import sqdist
from ..validation import check_int, check_number, check_points_centers
from .uncertainty import compare

__all__ = ["assignment_settling", "contrast_text", "family_contrasts", "spread_statistics"]


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


def family_contrasts(objectives: dict, steps, reference: str = "cauchy") -> pd.DataFrame:
    """Per step and other family: is ``reference``'s remaining share of the objective larger? (chapter 2)

    The share of task ``b`` after ``t`` steps is ``L(X, C^(t)) / L(X, C^(0))`` (Eq. 1). For each
    step in ``steps`` and each family other than ``reference``, the difference of the mean
    shares (reference minus other) gets a 95% bootstrap interval over tasks, unpaired because
    each family has its own tasks (:func:`~kmtrf_core.book.uncertainty.compare`).

    Parameters
    ----------
    objectives : dict
        Family -> objective trajectory ``(T + 1, B)`` (torch tensor or array), as from
        :func:`~kmtrf_core.lloyd.lloyd_loss_trajectory`; every starting objective positive.
    steps : sequence of int
        Steps ``t`` in ``1..T`` to compare.
    reference : str
        The family compared with the others.

    Returns
    -------
    pandas.DataFrame
        Indexed by ``(step, family)``; columns ``difference``, ``low``, ``high`` (the interval
        of reference minus other) and ``verdict``: ``"higher"`` (the interval above 0: the
        reference keeps more of its objective), ``"lower"`` or ``"inconclusive"``.

    Examples
    --------
    >>> rng = np.random.default_rng(0)
    >>> def trajectory(first):  # (T + 1, B) with T = 2
    ...     start = 1 + rng.random(64)
    ...     return np.stack([start, first * start, 0.5 * start + 0.01 * rng.standard_normal(64)])
    >>> table = family_contrasts({"normal": trajectory(0.5), "cauchy": trajectory(0.8)}, [1, 2])
    >>> table.verdict.tolist()
    ['higher', 'inconclusive']
    """
    if reference not in objectives:
        raise ValueError(f"objectives has no {reference!r} family (its families: {list(objectives)})")
    shares = {}
    for family, trajectory in objectives.items():
        values = np.asarray(trajectory.cpu() if isinstance(trajectory, torch.Tensor) else trajectory, dtype=float)
        if values.ndim != 2 or values.shape[0] < 2 or values.shape[1] < 2:
            raise ValueError(f"objectives[{family!r}] must be (T + 1, B) with T >= 1 and B >= 2, got {values.shape}")
        if not (np.isfinite(values).all() and (values[0] > 0).all()):
            raise ValueError(f"objectives[{family!r}] must be finite with positive starting objectives")
        shares[family] = values / values[0]
    rows = []
    for step in steps:
        step = check_int(step, "steps")
        for family, share in shares.items():
            if family == reference:
                continue
            if step > share.shape[0] - 1 or step > shares[reference].shape[0] - 1:
                raise ValueError(f"step {step} is beyond the trajectories' {share.shape[0] - 1} steps")
            # a: the other family, b: the reference; "reproduced" means the other is below
            c = compare(share[step], shares[reference][step], paired=False)
            verdict = {"reproduced": "higher", "not reproduced": "lower"}.get(c.verdict, "inconclusive")
            rows.append(dict(step=step, family=family, difference=-c.difference, low=-c.high, high=-c.low,
                             verdict=verdict))
    if not rows:
        raise ValueError("objectives must hold at least one family besides the reference")
    return pd.DataFrame(rows).set_index(["step", "family"])


def contrast_text(table: pd.DataFrame, reference: str = "cauchy") -> str:
    """One line per step of :func:`family_contrasts`: against how many families the reference is higher.

    >>> table = pd.DataFrame({"difference": [0.2, 0.1, -0.1], "low": [0.1, 0.05, -0.2], "high": [0.3, 0.2, 0.1],
    ...     "verdict": ["higher", "higher", "inconclusive"]},
    ...     index=pd.MultiIndex.from_tuples([(1, "normal"), (1, "gumbel"), (20, "normal")], names=["step", "family"]))
    >>> print(contrast_text(table))
    after 1 step: cauchy keeps more of its starting objective than 2 of 2 other families (2 higher, 0 lower, 0 inconclusive; 95% intervals over tasks)
    after 20 steps: cauchy keeps more of its starting objective than 0 of 1 other families (0 higher, 0 lower, 1 inconclusive; 95% intervals over tasks)
    """
    lines = []
    for step, part in table.groupby(level="step", sort=True):
        verdicts = part.verdict.tolist()
        higher, lower = verdicts.count("higher"), verdicts.count("lower")
        lines.append(f"after {step} step{'s' if step != 1 else ''}: {reference} keeps more of its starting objective "
                     f"than {higher} of {len(verdicts)} other families ({higher} higher, {lower} lower, "
                     f"{len(verdicts) - higher - lower} inconclusive; 95% intervals over tasks)")
    return "\n".join(lines)
