"""What algorithm does a learned layer execute? Reference k-means steps and a distance between algorithms.

A trained layer maps centers ``C`` to new centers ``F(X, C)``. To say which
known algorithm that map resembles, we put it next to one step of several
reference variants of k-means, all started from the same centers, and measure
how far apart the two one-step outputs are, in the spirit of the algorithmic
distances of Akyurek et al. (2023), who compare in-context learners with
reference learning algorithms by the difference of their predictions.

The references, each batched over tasks:

* Lloyd's step (:func:`kmtrf_core.lloyd.lloyd_step`, empty clusters keep
  their center);
* soft k-means at inverse temperature ``beta`` (:func:`soft_kmeans_step`):
  every point spreads a unit of weight over the centers,

  .. math::

      w_{ij} = \\frac{e^{-\\beta \\lVert x_i - c_j \\rVert^2}}{\\sum_l e^{-\\beta \\lVert x_i - c_l \\rVert^2}},
      \\qquad c_j' = \\frac{\\sum_i w_{ij} x_i}{\\sum_i w_{ij}},

  Lloyd's step at ``beta = inf`` and every center at the mean of all points
  as ``beta -> 0``;
* over- or under-relaxed Lloyd (:func:`relaxed_lloyd_step`),
  ``C + alpha (Lloyd(C) - C)``;
* mini-batch k-means (Sculley, 2010; the first step of scikit-learn's
  ``MiniBatchKMeans``, from fresh per-center counts): Lloyd's step on a
  random subset of the points (:func:`minibatch_kmeans_step`).

The distance (:func:`algorithm_distance`) is per task

.. math::

    \\delta(F, G) = \\frac{\\lVert F(X, C) - G(X, C) \\rVert_F}{\\lVert \\mathrm{Lloyd}(X, C) - C \\rVert_F},

the difference of the two outputs in units of the length of Lloyd's step
from the same ``C``: 0 for the same step, 1 between staying put and Lloyd.
:func:`fit_reference` finds the ``beta`` or ``alpha`` whose reference is
closest to a given step, and :func:`compare_algorithms` follows a step (a
learned layer) for several iterations and compares every one of its steps
with every reference.

Used in the chapter on what the learned layer computes.
"""

from __future__ import annotations

import math
from typing import Callable, NamedTuple

import numpy as np
import pandas as pd
import torch

from .attention import task_sqdist
from .lloyd import lloyd_step
from .tasks import make_generator
from .validation import check_choice, check_int, check_number, check_points_centers

__all__ = [
    "REFERENCES",
    "ReferenceFit",
    "algorithm_distance",
    "compare_algorithms",
    "fit_reference",
    "minibatch_kmeans_step",
    "relaxed_lloyd_step",
    "soft_kmeans_step",
]

REFERENCES = ("lloyd", "soft", "relaxed", "minibatch", "stay")
"""The reference algorithms of :func:`compare_algorithms`, in the order of its rows."""

FITTED = ("soft", "relaxed")


def _weighted_means(X: torch.Tensor, C: torch.Tensor, W: torch.Tensor) -> torch.Tensor:
    """New centers as the ``W``-weighted means of the points; a center of total weight 0 stays.

    The arithmetic is that of Lloyd's step (sums relative to the first center,
    so float32 means do not lose digits to where the data sit), so a one-hot
    ``W`` of the nearest centers reproduces :func:`~kmtrf_core.lloyd.lloyd_step`
    to the last bit.
    """
    mass = W.sum(dim=1)  # (B, k)
    shift = C[:, :1, :]  # (B, 1, d)
    sums = W.transpose(1, 2) @ (X - shift)  # (B, k, d)
    is_empty = mass == 0
    means = sums / torch.where(is_empty, torch.ones_like(mass), mass).unsqueeze(-1) + shift
    return torch.where(is_empty.unsqueeze(-1), C, means)


def _check_real(value, name: str) -> float:
    """Any finite real number (negative and zero included)."""
    if isinstance(value, torch.Tensor) and value.numel() == 1 and not value.dtype.is_complex:
        value = value.item()
    if not isinstance(value, (int, float)) or isinstance(value, bool) or not math.isfinite(value):
        raise ValueError(f"{name} must be a finite real number, got {value!r}")
    return float(value)


def _check_centers_like(x, name: str, C: torch.Tensor) -> torch.Tensor:
    """A finite tensor of ``C``'s shape and dtype (the output of one step from ``C``)."""
    if not isinstance(x, torch.Tensor):
        raise ValueError(f"{name} must be a torch.Tensor, got {type(x).__name__}")
    if x.shape != C.shape:
        raise ValueError(f"{name} must have the shape of C {tuple(C.shape)}, got {tuple(x.shape)}")
    if x.dtype != C.dtype:
        raise ValueError(f"{name} must have the dtype of C ({C.dtype}), got {x.dtype}")
    if not bool(torch.isfinite(x).all()):
        raise ValueError(f"{name} has non-finite values (nan or inf)")
    return x


def _check_grid(grid, algorithm: str) -> list:
    """A non-empty 1-D sequence of numbers: finite and positive for ``soft`` (beta), finite for ``relaxed``."""
    if isinstance(grid, torch.Tensor):
        values = grid.detach().cpu().tolist() if grid.dim() == 1 else None
    elif isinstance(grid, np.ndarray):
        values = grid.tolist() if grid.ndim == 1 else None
    elif isinstance(grid, (list, tuple, range)):
        values = list(grid)
    else:
        values = None
    if not values:
        raise ValueError(f"grid must be a non-empty 1-D sequence of numbers, got {grid!r}")
    if algorithm == "soft":
        return [check_number(v, f"grid[{i}] (a beta)") for i, v in enumerate(values)]
    return [_check_real(v, f"grid[{i}] (an alpha)") for i, v in enumerate(values)]


def _lloyd_lengths(X: torch.Tensor, C: torch.Tensor, L: torch.Tensor) -> torch.Tensor:
    """Per task ``|Lloyd(C) - C|_F``, floored at ``eps * (1 + max |X|)`` so a fixed point divides safely."""
    floor = torch.finfo(X.dtype).eps * (1.0 + X.abs().amax(dim=(1, 2)))  # (B,)
    return torch.maximum((L - C).flatten(1).norm(dim=1), floor)


def _distances(new: torch.Tensor, reference: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
    return (new - reference).flatten(1).norm(dim=1) / lengths


def soft_kmeans_step(X: torch.Tensor, C: torch.Tensor, beta: float) -> torch.Tensor:
    """One step of soft k-means at inverse temperature ``beta``.

    Every point weighs the centers by a softmax of its negative scaled squared
    distances, and each center moves to the weighted mean of the points:

    .. math::

        w_{ij} = \\mathrm{softmax}_j\\big(-\\beta \\lVert x_i - c_j \\rVert^2\\big), \\qquad
        c_j' = \\sum_i w_{ij} x_i \\Big/ \\sum_i w_{ij}.

    The logits are shifted by each point's smallest distance before the
    softmax, so no ``beta`` overflows it. A center whose total weight
    underflows to 0 keeps its position (the ``empty="keep"`` convention of
    Lloyd's step). ``beta = math.inf`` is exactly
    :func:`~kmtrf_core.lloyd.lloyd_step`; as ``beta -> 0`` every center moves to
    the mean of all points.

    Parameters
    ----------
    X : torch.Tensor
        Points ``(B, n, d)``.
    C : torch.Tensor
        Centers ``(B, k, d)``.
    beta : float
        Inverse temperature, ``> 0`` or ``math.inf``.

    Returns
    -------
    torch.Tensor
        New centers ``(B, k, d)``.

    Raises
    ------
    ValueError
        For bad ``X``/``C`` or a ``beta`` that is not positive (0, negative, NaN).

    Examples
    --------
    >>> X = torch.tensor([[[0.], [1.], [9.], [10.]]], dtype=torch.float64)
    >>> C = torch.tensor([[[0.], [9.]]], dtype=torch.float64)
    >>> soft_kmeans_step(X, C, math.inf).flatten().tolist()
    [0.5, 9.5]
    >>> soft_kmeans_step(X, C, 1e-12).flatten().round(decimals=6).tolist()  # all points' mean
    [5.0, 5.0]
    >>> soft_kmeans_step(X, C, 0.0)
    Traceback (most recent call last):
    ...
    ValueError: beta must be a positive number or math.inf, got 0.0
    """
    check_points_centers(X, C)
    beta = check_number(beta, "beta", allow_inf=True)
    if beta == math.inf:
        return lloyd_step(X, C, empty="keep")
    D = task_sqdist(X, C)  # (B, n, k)
    gaps = D - D.amin(dim=-1, keepdim=True)  # >= 0, and 0 at each point's nearest center
    # the nearest center's logit is 0 outright: a beta beyond the dtype's range (1e300 in float32) is inf
    # there, and inf * 0 would be NaN; elsewhere such a beta gives -inf, a weight of exactly 0
    logits = torch.where(gaps > 0, gaps * -beta, torch.zeros_like(gaps))
    W = torch.softmax(logits, dim=-1)  # (B, n, k)
    return _weighted_means(X, C, W)


def relaxed_lloyd_step(X: torch.Tensor, C: torch.Tensor, alpha: float) -> torch.Tensor:
    """Over- or under-relaxed Lloyd: ``C + alpha (Lloyd(C) - C)``.

    .. math::

        C' = C + \\alpha\\,\\big(\\mathrm{Lloyd}(X, C) - C\\big)

    ``alpha = 0`` stays at ``C``, ``alpha = 1`` is Lloyd's step, ``alpha > 1``
    overshoots it and ``0 < alpha < 1`` falls short (empty clusters keep their
    center, so they do not move for any ``alpha``). Computed by
    :func:`torch.lerp`, which returns ``C`` at ``alpha = 0`` and Lloyd's step at
    ``alpha = 1`` to the last bit.

    Parameters
    ----------
    X : torch.Tensor
        Points ``(B, n, d)``.
    C : torch.Tensor
        Centers ``(B, k, d)``.
    alpha : float
        Any finite step multiplier.

    Returns
    -------
    torch.Tensor
        New centers ``(B, k, d)``.

    Examples
    --------
    >>> X = torch.tensor([[[0.], [1.], [9.], [10.]]])
    >>> C = torch.tensor([[[0.], [9.]]])
    >>> relaxed_lloyd_step(X, C, 2.0).flatten().tolist()
    [1.0, 10.0]
    >>> relaxed_lloyd_step(X, C, 0.0).flatten().tolist()
    [0.0, 9.0]
    """
    check_points_centers(X, C)
    alpha = _check_real(alpha, "alpha")
    return torch.lerp(C, lloyd_step(X, C), alpha)


def minibatch_kmeans_step(X: torch.Tensor, C: torch.Tensor, batch: int, generator=None) -> torch.Tensor:
    """One step of mini-batch k-means from fresh per-center counts (Sculley, 2010).

    Each task draws ``batch`` of its ``n`` points uniformly without
    replacement, and Lloyd's step is taken on that subset alone: every center
    moves to the mean of the sampled points nearest to it, and a center that
    no sampled point chose stays. With all per-center counts at 0 this is
    Sculley's update with learning rate ``1 / count``, the first step of
    scikit-learn's ``MiniBatchKMeans``. ``batch = n`` is exactly
    :func:`~kmtrf_core.lloyd.lloyd_step`.

    The subsets of all tasks come from one ``torch.rand(B, n).argsort``, so a
    generator with the same seed gives the same step.

    Parameters
    ----------
    X : torch.Tensor
        Points ``(B, n, d)``.
    C : torch.Tensor
        Centers ``(B, k, d)``.
    batch : int
        Points sampled per task, ``1 <= batch <= n`` (it may be below ``k``).
    generator : torch.Generator or int, optional
        Source of randomness (an int is a seed; None is seed 0, on ``X``'s
        device); a given generator draws on its own device.

    Returns
    -------
    torch.Tensor
        New centers ``(B, k, d)``.

    Examples
    --------
    >>> X = torch.tensor([[[0.], [1.], [9.], [10.]]])
    >>> C = torch.tensor([[[0.], [9.]]])
    >>> minibatch_kmeans_step(X, C, 4).flatten().tolist()  # every point: Lloyd's step
    [0.5, 9.5]
    >>> C1 = minibatch_kmeans_step(X, C, 2, generator=torch.Generator().manual_seed(1))
    >>> C1.shape
    torch.Size([1, 2, 1])
    >>> minibatch_kmeans_step(X, C, 5)
    Traceback (most recent call last):
    ...
    ValueError: batch must be <= n, got batch=5 for n=4 points
    """
    check_points_centers(X, C)
    B, n, _ = X.shape
    check_int(batch, "batch")
    if batch > n:
        raise ValueError(f"batch must be <= n, got batch={batch} for n={n} points")
    gen = make_generator(generator, X.device, name="generator")
    # drawn where the generator lives, so one seed picks the same points whatever X's device
    order = torch.rand(B, n, generator=gen, dtype=torch.float32, device=gen.device).argsort(dim=1).to(X.device)
    sampled = torch.zeros(B, n, dtype=X.dtype, device=X.device)
    sampled.scatter_(1, order[:, :batch], 1.0)  # (B, n): 1 on the drawn points
    nearest = task_sqdist(X, C).argmin(dim=-1)  # (B, n)
    W = torch.nn.functional.one_hot(nearest, C.shape[1]).to(X.dtype) * sampled.unsqueeze(-1)  # (B, n, k)
    return _weighted_means(X, C, W)


def algorithm_distance(X: torch.Tensor, C: torch.Tensor, new: torch.Tensor, reference: torch.Tensor) -> torch.Tensor:
    """Per task, how far apart two algorithms' steps from ``C`` land, in units of Lloyd's step length.

    .. math::

        \\delta = \\frac{\\lVert \\mathrm{new} - \\mathrm{reference} \\rVert_F}
                       {\\max\\big(\\lVert \\mathrm{Lloyd}(X, C) - C \\rVert_F,\\;
                        \\varepsilon\\,(1 + \\max_{i,l} |x_{il}|)\\big)}

    with ``epsilon`` the machine epsilon of ``X``'s dtype. The floor only
    matters where Lloyd does not move (``C`` is already a fixed point): there
    the distance stays finite, 0 when the two steps agree and very large
    (about ``|new - reference| / epsilon``) when they do not, never NaN.

    Parameters
    ----------
    X : torch.Tensor
        Points ``(B, n, d)``.
    C : torch.Tensor
        The common starting centers ``(B, k, d)``.
    new, reference : torch.Tensor
        The two algorithms' one-step outputs from ``C``, each of ``C``'s shape
        and dtype, finite.

    Returns
    -------
    torch.Tensor
        ``(B,)`` of ``X``'s dtype, non-negative: 0 for the same step, 1 between
        ``C`` (no move) and Lloyd's step.

    Examples
    --------
    >>> X = torch.tensor([[[0.], [1.], [9.], [10.]]])
    >>> C = torch.tensor([[[0.], [9.]]])
    >>> L = lloyd_step(X, C)
    >>> algorithm_distance(X, C, C, L), algorithm_distance(X, C, L, L)
    (tensor([1.]), tensor([0.]))
    >>> algorithm_distance(X, C, relaxed_lloyd_step(X, C, 1.5), L)
    tensor([0.5000])
    """
    check_points_centers(X, C)
    _check_centers_like(new, "new", C)
    _check_centers_like(reference, "reference", C)
    return _distances(new, reference, _lloyd_lengths(X, C, lloyd_step(X, C)))


class ReferenceFit(NamedTuple):
    """The reference parameter closest to a step (returned by :func:`fit_reference`).

    A named tuple: ``parameter`` (the best ``beta`` or ``alpha`` of the grid),
    ``distance`` (pooled over tasks: the summed distances over the summed Lloyd step lengths) and ``curve``
    (a ``pandas.DataFrame`` with columns ``parameter`` and ``distance``, one row
    per grid value, in the grid's order).

    Examples
    --------
    >>> X = torch.tensor([[[0.], [1.], [9.], [10.]]])
    >>> C = torch.tensor([[[0.], [9.]]])
    >>> best, distance, curve = fit_reference(X, C, relaxed_lloyd_step(X, C, 0.5), "relaxed", [0.0, 0.5, 1.0])
    >>> best, distance, curve.shape
    (0.5, 0.0, (3, 2))
    """

    parameter: float
    distance: float
    curve: pd.DataFrame


def _reference_step(X, C, L, algorithm: str, parameter: float) -> torch.Tensor:
    if algorithm == "soft":
        return soft_kmeans_step(X, C, parameter)
    return torch.lerp(C, L, parameter)


def _pooled(new: torch.Tensor, reference: torch.Tensor, lengths: torch.Tensor) -> float:
    """The tasks' summed distance over their summed Lloyd step lengths (tasks near a fixed point weigh little)."""
    return float((new - reference).flatten(1).norm(dim=1).sum() / lengths.sum())


def _fit(X, C, new, L, lengths, algorithm: str, grid: list):
    """Per-task distances at the best grid value, and the pooled-distance curve."""
    means, best = [], None
    for parameter in grid:
        reference = _reference_step(X, C, L, algorithm, parameter)
        per_task = _distances(new, reference, lengths)
        means.append(_pooled(new, reference, lengths))
        if best is None or means[-1] < best[1]:  # ties: the first grid value
            best = (parameter, means[-1], per_task)
    curve = pd.DataFrame({"parameter": [float(p) for p in grid], "distance": means})
    return best, curve


def fit_reference(X: torch.Tensor, C: torch.Tensor, new: torch.Tensor, algorithm: str, grid) -> ReferenceFit:
    """The ``beta`` (soft k-means) or ``alpha`` (relaxed Lloyd) whose step from ``C`` is closest to ``new``.

    For every value of ``grid``, the distance between ``new`` and the
    reference's step from ``C``, pooled over tasks: the sum of the numerators
    of :func:`algorithm_distance` over the sum of the Lloyd step lengths, so a
    task near a fixed point, where Lloyd barely moves, weighs little instead
    of dominating a mean of ratios. The best value minimizes it (ties go to the first in the grid). The
    reference steps are evaluated on the grid, never extrapolated: a step that
    is soft k-means at a ``beta`` between two grid values is fitted to one of
    them.

    Parameters
    ----------
    X : torch.Tensor
        Points ``(B, n, d)``.
    C : torch.Tensor
        The starting centers ``(B, k, d)``.
    new : torch.Tensor
        The step to explain, ``C``'s shape and dtype.
    algorithm : {"soft", "relaxed"}
        :func:`soft_kmeans_step` (``grid`` holds betas, each finite and
        positive) or :func:`relaxed_lloyd_step` (``grid`` holds alphas, each
        finite).
    grid : sequence of float
        A non-empty list, tuple, 1-D array or 1-D tensor of parameter values.

    Returns
    -------
    ReferenceFit
        ``(parameter, distance, curve)``.

    Examples
    --------
    >>> X = torch.tensor([[[0.], [1.], [9.], [10.]]], dtype=torch.float64)
    >>> C = torch.tensor([[[0.], [9.]]], dtype=torch.float64)
    >>> new = soft_kmeans_step(X, C, 0.1)
    >>> fit = fit_reference(X, C, new, "soft", [0.01, 0.1, 1.0])
    >>> fit.parameter, fit.distance
    (0.1, 0.0)
    >>> fit.curve.columns.tolist()
    ['parameter', 'distance']
    >>> fit_reference(X, C, new, "soft", [])
    Traceback (most recent call last):
    ...
    ValueError: grid must be a non-empty 1-D sequence of numbers, got []
    """
    check_points_centers(X, C)
    algorithm = check_choice(algorithm, "algorithm", FITTED)
    _check_centers_like(new, "new", C)
    grid = _check_grid(grid, algorithm)
    L = lloyd_step(X, C)
    best, curve = _fit(X, C, new, L, _lloyd_lengths(X, C, L), algorithm, grid)
    return ReferenceFit(float(best[0]), best[1], curve)


def compare_algorithms(
    step: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
    X: torch.Tensor,
    C: torch.Tensor,
    steps: int,
    *,
    betas,
    alphas,
    batch: int,
    generator=None,
    per_task: bool = False,
) -> pd.DataFrame:
    """Follow ``step`` for ``steps`` iterations and compare each of its steps with every reference algorithm.

    Starting at ``C_1 = C``, iteration ``t`` computes ``new = step(X, C_t)``
    and its :func:`algorithm_distance` to each reference's step from the same
    ``C_t``, then continues from ``C_{t+1} = new``: the comparison follows the
    step's own trajectory, not Lloyd's. The references (:data:`REFERENCES`)
    and their ``parameter`` column:

    ===========  =============================================  ==================
    algorithm    reference step from ``C_t``                    parameter
    ===========  =============================================  ==================
    lloyd        :func:`~kmtrf_core.lloyd.lloyd_step`           1.0 (an alpha)
    soft         :func:`soft_kmeans_step`, best beta of betas   that beta
    relaxed      :func:`relaxed_lloyd_step`, best alpha         that alpha
    minibatch    :func:`minibatch_kmeans_step` with ``batch``   ``batch``
    stay         ``C_t`` itself (no move)                       0.0 (an alpha)
    ===========  =============================================  ==================

    The distance to ``stay`` is the length of the step in units of Lloyd's.
    Runs without gradients.

    Parameters
    ----------
    step : callable
        ``(X, C) -> new centers`` of ``C``'s shape and dtype: a learned layer
        (``lambda X, C: model(X, C)``) or a reference step.
    X : torch.Tensor
        Points ``(B, n, d)``.
    C : torch.Tensor
        Initial centers ``(B, k, d)``.
    steps : int
        Iterations ``T >= 1``.
    betas : sequence of float
        The grid of soft k-means (finite, positive), see :func:`fit_reference`.
    alphas : sequence of float
        The grid of relaxed Lloyd (finite).
    batch : int
        Sample size of mini-batch k-means, ``1 <= batch <= n``.
    generator : torch.Generator or int, optional
        Randomness of the mini-batches (an int is a seed; None is seed 0).
    per_task : bool
        Add a column ``task_norms``: per task, ``|step - reference|_F`` (a float64 array ``(B,)``;
        ``distance`` is their sum over the summed Lloyd step lengths), for intervals over tasks.

    Returns
    -------
    pandas.DataFrame
        ``T * 5`` rows with columns ``step`` (1 to ``T``), ``algorithm``,
        ``parameter``, ``distance`` (pooled over tasks, as in :func:`fit_reference`)
        and ``distance_median`` (the median of the per-task ratios).

    Raises
    ------
    ValueError
        For bad inputs, or a ``step`` that returns anything but a finite tensor
        of ``C``'s shape and dtype.

    Examples
    --------
    Lloyd's step is itself at distance 0 from Lloyd and at 1 from staying put:

    >>> X = torch.tensor([[[0.], [1.], [9.], [10.]]], dtype=torch.float64)
    >>> C = torch.tensor([[[0.], [1.]]], dtype=torch.float64)
    >>> table = compare_algorithms(lloyd_step, X, C, 2, betas=[0.1, 1.0], alphas=[0.5, 1.0], batch=2)
    >>> table[table.step == 1][["algorithm", "parameter", "distance"]].round(3)
       algorithm  parameter  distance
    0      lloyd        1.0      0.00
    1       soft        1.0      0.05
    2    relaxed        1.0      0.00
    3  minibatch        2.0      0.50
    4       stay        0.0      1.00
    """
    if not callable(step):
        raise ValueError(f"step must be a callable (X, C) -> new centers, got {type(step).__name__}")
    check_points_centers(X, C)
    check_int(steps, "steps")
    betas = _check_grid(betas, "soft")
    alphas = _check_grid(alphas, "relaxed")
    check_int(batch, "batch")
    if batch > X.shape[1]:
        raise ValueError(f"batch must be <= n, got batch={batch} for n={X.shape[1]} points")
    gen = make_generator(generator, X.device, name="generator")
    rows = []
    with torch.no_grad():
        for t in range(1, steps + 1):
            new = step(X, C)
            _check_centers_like(new, f"step's output at step {t}", C)
            L = lloyd_step(X, C)
            lengths = _lloyd_lengths(X, C, L)
            (beta, _, _), _ = _fit(X, C, new, L, lengths, "soft", betas)
            (alpha, _, relaxed), _ = _fit(X, C, new, L, lengths, "relaxed", alphas)
            references = {
                "lloyd": (1.0, L),
                "soft": (float(beta), soft_kmeans_step(X, C, beta)),
                "relaxed": (float(alpha), relaxed_lloyd_step(X, C, alpha)),
                "minibatch": (float(batch), minibatch_kmeans_step(X, C, batch, gen)),
                "stay": (0.0, C),
            }
            for name in REFERENCES:
                parameter, reference = references[name]
                d = _distances(new, reference, lengths)
                row = (t, name, parameter, _pooled(new, reference, lengths), float(torch.quantile(d.double(), 0.5)))
                if per_task:
                    row += ((new - reference).flatten(1).norm(dim=1).double().cpu().numpy(),)
                rows.append(row)
            C = new
    columns = ["step", "algorithm", "parameter", "distance", "distance_median"]
    return pd.DataFrame(rows, columns=columns + (["task_norms"] if per_task else []))
