"""Batched samplers of clustering tasks (Appendix D).

A task is ``n`` points drawn from a ``k``-component mixture in ``d``
dimensions: component ``j`` has a location ``l_j ~ U(0, 1)^d``, a per-dimension
spread ``s_j`` (all ones, or ``U(0, 1)^d`` when anisotropic), and a weight
``w_j`` (``1/k``, or drawn uniformly from the simplex when unequal). A point of
component ``j`` is ``l_j + scale * s_j * e`` with ``e`` drawn from the family's
standard distribution, independently per coordinate; a lognormal point is
``exp(l_j + scale * s_j * e)`` with ``e ~ N(0, 1)``, the distribution with
location ``l_j`` and scale ``scale * s_j`` of its logarithm (torch's
``LogNormal(loc, scale)``, as the authors' released code draws it in ``ctasks.py``):

============  ==============================================
family        standard noise ``e``
============  ==============================================
normal        N(0, 1)
cauchy        standard Cauchy (location 0, scale 1)
gumbel        standard Gumbel (location 0, scale 1)
laplace       Laplace (location 0, scale 1)
lognormal     N(0, 1), exponentiated with the location
============  ==============================================

The points are then min-max scaled per task and per dimension to ``[0, 1]``,
and the initial centers are the points at a uniformly random ``k``-subset of
the indices.
All ``B`` tasks come from one set of tensor operations: no Python loop over
tasks or components. Every draw goes through one ``torch.Generator``.

Used in chapter 2 and by training and evaluation.
"""

from __future__ import annotations

import math

import torch

from .validation import (check_choice, check_clusters, check_finite_result, check_float_dtype, check_int, check_number,
                         check_same_dtype, check_tensor)

__all__ = [
    "FAMILIES",
    "SHIFTS",
    "check_families",
    "family_tasks",
    "make_generator",
    "min_max_scale",
    "sample_tasks",
    "shifted_tasks",
    "to_unit_cube",
]

#: The five task families of Appendix D (their noise is the table above).
FAMILIES = ("normal", "cauchy", "gumbel", "laplace", "lognormal")

SHIFTS = {
    "unequal weights": dict(unequal_weights=True),
    "anisotropic": dict(anisotropic=True),
    "half scale": dict(scale_factor=0.5),
    "double scale": dict(scale_factor=2.0),
}
"""The four distribution shifts of Fig. 7, relative to the training tasks."""


def check_families(family, name: str = "family") -> tuple:
    """One family name or a sequence of distinct ones, each in :data:`FAMILIES`; returns a tuple.

    Names are read in any case, as every string option is
    (:func:`~kmtrf_core.validation.check_choice`), and returned in lower case.

    >>> check_families("normal"), check_families(["Cauchy", "laplace"])
    (('normal',), ('cauchy', 'laplace'))
    >>> check_families(["normal", "NORMAL"])
    Traceback (most recent call last):
    ...
    ValueError: family must be distinct names from ('normal', 'cauchy', 'gumbel', 'laplace', 'lognormal'), got ['normal', 'NORMAL']
    """
    families = (family,) if isinstance(family, str) else tuple(family) if isinstance(family, (list, tuple)) else ()
    try:
        families = tuple(check_choice(f, name, FAMILIES) for f in families)
    except ValueError:
        families = ()
    if not families or len(set(families)) != len(families):
        raise ValueError(f"{name} must be distinct names from {FAMILIES}, got {family!r}")
    return families


def make_generator(seed=None, device=None, name: str = "seed") -> torch.Generator:
    """A ``torch.Generator`` from a seed (int), an existing generator (returned as is) or None (seed 0).

    Parameters
    ----------
    seed : int, torch.Generator or None
        A seed, a generator to pass through unchanged, or None for seed 0.
    device : torch.device or str, optional
        Device of a new generator (default the CPU); ignored for a generator.
    name : str
        What the caller calls the argument, for the error message (``"generator"``
        where a function takes ``generator=``).

    Returns
    -------
    torch.Generator

    Raises
    ------
    ValueError
        For any other ``seed`` (a float, a bool, a string), naming ``name``.

    Examples
    --------
    >>> make_generator(3).initial_seed()
    3
    >>> g = torch.Generator().manual_seed(5)
    >>> make_generator(g) is g
    True
    """
    if isinstance(seed, torch.Generator):
        return seed
    if seed is not None:
        check_int(seed, name, minimum=None)
    gen = torch.Generator(device=device if device is not None else "cpu")
    gen.manual_seed(0 if seed is None else seed)
    return gen


def _open_uniform(shape, gen, dtype, device) -> torch.Tensor:
    # uniform on (0, 1), never exactly 0 or 1, so the inverse CDFs stay finite
    tiny = torch.finfo(dtype).tiny
    return torch.rand(shape, generator=gen, dtype=dtype, device=device).clamp_(tiny, 1.0 - torch.finfo(dtype).eps)


def _noise(family: str, shape, gen, dtype, device) -> torch.Tensor:
    if family in ("normal", "lognormal"):  # lognormal: the normal draw, exponentiated by _lognormal
        return torch.randn(shape, generator=gen, dtype=dtype, device=device)
    u = _open_uniform(shape, gen, dtype, device)
    if family == "cauchy":
        return torch.tan(math.pi * (u - 0.5))
    if family == "gumbel":
        return -torch.log(-torch.log(u))
    # laplace, by the inverse CDF in the form that stays finite at both ends of (0, 1):
    # log1p(-2|u - 1/2|) would round u - 1/2 to -1/2 for u < 3e-8 in float32 and return -inf
    return torch.where(u < 0.5, torch.log(2.0 * u), -torch.log(2.0 * (1.0 - u)))


def _lognormal(log_points: torch.Tensor) -> torch.Tensor:
    # exp of (B, n, d) logarithms, each task and dimension divided by its largest point first: per-dimension
    # min-max scaling (which follows) does not see a positive factor, and exp never overflows
    return (log_points - log_points.amax(dim=1, keepdim=True)).exp_()


def min_max_scale(X: torch.Tensor) -> torch.Tensor:
    """Per-task, per-dimension min-max scaling of points ``(B, n, d)`` to ``[0, 1]``.

    A constant dimension maps to 0 (Appendix D scales every task this way).
    A task whose range overflows the dtype raises ``ValueError``.

    Parameters
    ----------
    X : torch.Tensor
        Points ``(B, n, d)``.

    Returns
    -------
    torch.Tensor
        ``(B, n, d)``, each dimension of each task spanning ``[0, 1]``.

    Examples
    --------
    >>> min_max_scale(torch.tensor([[[1., 5.], [3., 5.], [2., 5.]]])).tolist()
    [[[0.0, 0.0], [1.0, 0.0], [0.5, 0.0]]]
    >>> min_max_scale(torch.tensor([[[-3e38], [3e38], [0.0]]]))
    Traceback (most recent call last):
    ...
    ValueError: the spans of X overflow torch.float32 at this input's scale; rescale the data (for example with kmtrf_core.to_unit_cube) or use float64
    """
    check_tensor(X, "X", 3)
    return _min_max_scale(X, check=True)


def _min_max_scale(X: torch.Tensor, check: bool = False) -> torch.Tensor:
    """:func:`min_max_scale`; without ``check``, the sampler's: its points are finite by construction and it runs
    inside the training step, where checking the spans would read a value back from the device every step
    (and could not be recorded in a CUDA graph)."""
    lo = X.amin(dim=1, keepdim=True)
    span = X.amax(dim=1, keepdim=True) - lo  # (B, 1, d)
    if check:
        check_finite_result(span, "the spans of X")
    return (X - lo) / torch.where(span > 0, span, torch.ones_like(span))


def to_unit_cube(X: torch.Tensor, C: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Map any tasks into the unit cube without changing their k-means problem (end of Appendix D).

    Per task: subtract the per-dimension minimum over points and centers
    together, then divide by the single largest coordinate ``v_ub`` left. A
    translation and one common scale preserve every assignment and Lloyd
    trajectory, and scale the objective by ``1 / v_ub^2``. A task whose
    points and centers all coincide raises ``ValueError``, and so does one
    whose range overflows the dtype, or ``X`` and ``C`` of different dtypes.

    Parameters
    ----------
    X : torch.Tensor
        Points ``(B, n, d)``.
    C : torch.Tensor
        Centers ``(B, k, d)``.

    Returns
    -------
    X : torch.Tensor
        ``(B, n, d)`` in ``[0, 1]``.
    C : torch.Tensor
        ``(B, k, d)`` in ``[0, 1]``.

    Examples
    --------
    >>> X = torch.tensor([[[-2., 0.], [2., 4.]]]); C = torch.tensor([[[0., 2.], [-2., 0.]]])
    >>> Xu, Cu = to_unit_cube(X, C)
    >>> Xu.tolist(), Cu.tolist()
    ([[[0.0, 0.0], [1.0, 1.0]]], [[[0.5, 0.5], [0.0, 0.0]]])
    """
    check_tensor(X, "X", 3)
    check_tensor(C, "C", 3, last=X.shape[2])
    if X.shape[0] != C.shape[0]:
        raise ValueError(f"X and C must have the same batch size, got {X.shape[0]} and {C.shape[0]}")
    check_same_dtype(X, C, "X and C")
    both = torch.cat([X, C], dim=1)  # (B, n + k, d)
    lo = both.amin(dim=1, keepdim=True)  # (B, 1, d)
    ub = (both - lo).flatten(1).amax(dim=1).view(-1, 1, 1)  # (B, 1, 1)
    check_finite_result(ub, "the spans of X and C")
    if bool((ub == 0).any()):
        raise ValueError("X and C: a task whose points and centers all coincide cannot be scaled")
    return (X - lo) / ub, (C - lo) / ub


def sample_tasks(
    batch: int,
    n: int,
    d: int,
    k: int,
    *,
    family="normal",
    scale: float = 0.1,
    anisotropic: bool = False,
    unequal_weights: bool = False,
    generator=None,
    dtype: torch.dtype = torch.float32,
    device=None,
    return_labels: bool = False,
):
    """Draw ``batch`` clustering tasks ``(X, C)`` (Appendix D).

    Parameters
    ----------
    batch : int
        Number of tasks ``B``.
    n, d, k : int
        Points per task, dimension, clusters (``2 <= k <= n``).
    family : str or sequence of str
        One of :data:`FAMILIES`, or several: each task then draws its family
        uniformly among them.
    scale : float
        Spread of each component, ``> 0`` (the paper's default 0.1); for lognormal, the spread of
        the points' logarithm.
    anisotropic : bool
        Per-dimension spreads ``s_j ~ U(0, 1)^d`` instead of ones.
    unequal_weights : bool
        Mixture weights uniform on the simplex instead of ``1/k``.
    generator : torch.Generator or int, optional
        Source of randomness (an int is a seed; None is seed 0).
    dtype : torch.dtype
        Of the returned tensors: ``torch.float32`` or ``torch.float64``.
    device
        Of the returned tensors.
    return_labels : bool
        Also return the mixture component of every point, ``(B, n)``.

    Returns
    -------
    X : torch.Tensor
        ``(B, n, d)`` in ``[0, 1]`` (each dimension spans exactly [0, 1]).
    C : torch.Tensor
        ``(B, k, d)``, the points of ``X`` at ``k`` distinct indices (a
        uniformly random ``k``-subset of the indices). Two of them can still
        coincide in value when ``X`` has repeated points.
    labels : torch.Tensor
        Only with ``return_labels``: ``(B, n)`` int64, the component of each point.

    Examples
    --------
    >>> X, C = sample_tasks(4, 100, 2, 3, family="laplace", generator=0)
    >>> X.shape, C.shape, bool(X.min() == 0), bool(X.max() == 1)
    (torch.Size([4, 100, 2]), torch.Size([4, 3, 2]), True, True)
    """
    batch = check_int(batch, "batch")
    n = check_int(n, "n")
    d = check_int(d, "d")
    k = check_int(k, "k", minimum=2)
    check_clusters(k, n)
    families = check_families(family)
    scale = check_number(scale, "scale")
    check_float_dtype(dtype)
    gen = make_generator(generator, device, name="generator")
    device = gen.device if device is None else torch.device(device)
    opts = dict(generator=gen, dtype=dtype, device=device)

    loc = torch.rand(batch, k, d, **opts)  # (B, k, d)
    spread = torch.rand(batch, k, d, **opts) if anisotropic else torch.ones(batch, k, d, dtype=dtype, device=device)
    if unequal_weights:
        weights = -torch.log(_open_uniform((batch, k), gen, dtype, device))  # Dirichlet(1, ..., 1)
    else:
        weights = torch.ones(batch, k, dtype=dtype, device=device)
    weights = weights / weights.sum(dim=1, keepdim=True)
    labels = torch.multinomial(weights, n, replacement=True, generator=gen)  # (B, n)
    idx = labels.unsqueeze(-1).expand(batch, n, d)
    mean = torch.gather(loc, 1, idx)  # (B, n, d)
    spread = torch.gather(spread, 1, idx)

    if len(families) == 1:
        noise = _noise(families[0], (batch, n, d), gen, dtype, device)
    else:
        which = torch.randint(len(families), (batch,), generator=gen, device=device)
        noise = torch.empty(batch, n, d, dtype=dtype, device=device)
        for f_idx, fam in enumerate(families):  # at most five families, never a loop over tasks
            rows = torch.nonzero(which == f_idx).flatten()
            if rows.numel():
                noise[rows] = _noise(fam, (rows.numel(), n, d), gen, dtype, device)
    points = mean + scale * spread * noise
    if "lognormal" in families:  # its tasks' points are the exponentials (a mask over tasks: no host read-back)
        logs = _lognormal(points)
        points = logs if len(families) == 1 else torch.where(
            (which == families.index("lognormal"))[:, None, None], logs, points)
    X = _min_max_scale(points)

    pick = torch.rand(batch, n, generator=gen, dtype=torch.float32, device=device).argsort(dim=1)[:, :k]  # (B, k)
    C = torch.gather(X, 1, pick.unsqueeze(-1).expand(batch, k, d))
    if return_labels:
        return X, C, labels
    return X, C


def shifted_tasks(
    shift: str | None,
    batch: int,
    n: int,
    d: int,
    k: int,
    *,
    family: str = "normal",
    scale: float = 0.1,
    generator=None,
    dtype: torch.dtype = torch.float32,
    device=None,
):
    """Tasks like the training tasks but for one of the shifts of Fig. 7 (:data:`SHIFTS`).

    ``shift=None`` draws the unshifted training distribution; ``"half scale"``
    and ``"double scale"`` multiply the component spread ``scale``.

    Parameters
    ----------
    shift : str or None
        A key of :data:`SHIFTS`, or None.
    batch, n, d, k : int
        Tasks, points per task, dimension, clusters.
    family : str
        Task family (:data:`FAMILIES`).
    scale : float
        The training tasks' component spread, before the shift.
    generator : torch.Generator or int, optional
        Source of randomness.
    dtype, device
        Of the returned tensors.

    Returns
    -------
    X : torch.Tensor
        Points ``(batch, n, d)``.
    C : torch.Tensor
        Initial centers ``(batch, k, d)``.

    Examples
    --------
    >>> X, C = shifted_tasks("double scale", 2, 50, 3, 4, generator=0)
    >>> X.shape, C.shape
    (torch.Size([2, 50, 3]), torch.Size([2, 4, 3]))
    """
    if shift is not None:
        shift = check_choice(shift, "shift", SHIFTS)
    options = dict(SHIFTS[shift]) if shift is not None else {}
    factor = options.pop("scale_factor", 1.0)
    return sample_tasks(batch, n, d, k, family=family, scale=scale * factor, generator=generator, dtype=dtype,
                        device=device, **options)


def family_tasks(
    per_family: int,
    n: int,
    d: int,
    k: int,
    *,
    families=FAMILIES,
    generator=None,
    dtype: torch.dtype = torch.float32,
    device=None,
    **options,
):
    """``per_family`` tasks from each family, in blocks: ``{family: (X, C)}``.

    The test sets of Fig. 8/18. One generator feeds all families in order,
    so the result is reproducible.

    Parameters
    ----------
    per_family : int
        Tasks per family.
    n, d, k : int
        Points per task, dimension, clusters.
    families : sequence of str
        Distinct families of :data:`FAMILIES`.
    generator : torch.Generator or int, optional
        Source of randomness.
    dtype, device
        Of the returned tensors.
    **options
        Passed to :func:`~kmtrf_core.tasks.sample_tasks` (e.g. ``scale``).

    Returns
    -------
    dict
        Family -> ``(X, C)``, shapes ``(per_family, n, d)`` and ``(per_family, k, d)``.

    Examples
    --------
    >>> tasks = family_tasks(2, 40, 2, 3, families=("normal", "cauchy"), generator=0)
    >>> {f: tuple(X.shape) for f, (X, C) in tasks.items()}
    {'normal': (2, 40, 2), 'cauchy': (2, 40, 2)}
    """
    families = check_families(families, "families")
    per_family = check_int(per_family, "per_family")
    gen = make_generator(generator, device, name="generator")
    return {
        fam: sample_tasks(per_family, n, d, k, family=fam, generator=gen, dtype=dtype, device=device, **options)
        for fam in families
    }
