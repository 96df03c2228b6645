"""Using a layer trained at ``(d', k')`` on tasks of smaller ``d`` and ``k`` (Appendix A, chapter 17).

A transformer layer learns an algorithm for one ``d`` and one ``k`` (Appendix A
names this a limitation and proposes zero coordinates for a smaller ``d``).
:func:`pad_tasks` fits a smaller task to a wider layer: zero coordinates for
``d``, and, our design, filler centers for ``k`` (far from the data, or copies
of the task's own centers); :func:`padded_trajectory` runs such a layer for
several re-embedded steps, padding again before every step. At ``gamma = inf``
the constructed layer with far fillers is Lloyd's algorithm on the real centers
exactly (tested).
"""

from __future__ import annotations

import math

import torch

from .lloyd import lloyd_trajectory  # noqa: F401  (the doctests)
from .model import ClusterTransformer, check_model
from .tasks import sample_tasks  # noqa: F401  (the doctests)
from .validation import check_choice, check_clusters, check_int, check_points_centers

__all__ = ["PAD_FILLS", "pad_tasks", "padded_trajectory"]

PAD_FILLS = ("far", "copy")
"""How :func:`pad_tasks` makes the centers a smaller task lacks."""


def pad_tasks(X: torch.Tensor, C: torch.Tensor, d: int | None = None, k: int | None = None, fill: str = "far"):
    """Tasks of a smaller ``d`` and ``k`` made to fit a layer trained at ``d' >= d`` and ``k' >= k``.

    Points and centers get ``d' - d`` zero coordinates: squared distances do
    not change (Appendix A's proposal for ``d``). The ``k' - k`` missing
    centers are filled in one of two ways (our design for ``k``):

    * ``"far"`` (default): dummy centers ``(v_j, ..., v_j)``, ``v_j = max + 2 j w``
      with ``w`` the task's box width (at least 1), so no point is nearer to a
      dummy than to a real center. At ``gamma = inf`` a dummy gets no points and
      the constructed layer executes Lloyd's step on the ``k`` real centers
      exactly, for every scheme (tested).
    * ``"copy"``: copies of the task's own centers, in turn (``C[:, j mod k]``),
      inside the data's range. A point is then tied between a center and its
      copy; the averaging hardmax writes the mean of their two codes into the
      point's token, as near to the two codes as to no other for one-hot
      codes, but for binary codes that differ in more than one bit exactly as
      near to other clusters' codes too (the mean of 000 and 011 is as near to
      001 and 010): the constructed OH layer stays exact, the BN layer does not
      (tested, and shown in chapter 17).

    Read the first ``k`` centers and ``d`` coordinates of the output
    (:func:`padded_trajectory` does both, step by step).

    Parameters
    ----------
    X, C : torch.Tensor
        Points ``(B, n, d)`` and centers ``(B, k, d)``.
    d, k : int, optional
        The layer's sizes ``d' >= d`` and ``k <= k' <= n`` (default: the task's own).
    fill : {"far", "copy"}
        How the missing centers are made.

    Returns
    -------
    (torch.Tensor, torch.Tensor)
        ``(B, n, d')`` and ``(B, k', d')``.

    Examples
    --------
    >>> X, C = torch.rand(2, 10, 2), torch.rand(2, 3, 2)
    >>> Xp, Cp = pad_tasks(X, C, d=4, k=5, fill="copy")
    >>> tuple(Xp.shape), tuple(Cp.shape), bool(torch.equal(Cp[:, 3:, :2], C[:, :2]))
    ((2, 10, 4), (2, 5, 4), True)
    >>> bool((pad_tasks(X, C, k=5)[1][:, 3:] > 2).all())
    True
    """
    check_points_centers(X, C)
    fill = check_choice(fill, "fill", PAD_FILLS)
    B, n, d0 = X.shape
    k0 = C.shape[1]
    d = d0 if d is None else check_int(d, "d")
    k = k0 if k is None else check_clusters(k, n)
    if d < d0:
        raise ValueError(f"d={d} is smaller than the tasks' {d0} coordinates: padding only adds dimensions")
    if k < k0:
        raise ValueError(f"k={k} is smaller than the tasks' {k0} centers: padding only adds centers")
    if fill == "copy":
        extra = C[:, torch.arange(k0, k, device=C.device) % k0]
    else:
        both = torch.cat([X, C], dim=1).flatten(1)  # (B, (n + k) d)
        lo, hi = both.min(dim=1).values, both.max(dim=1).values  # (B,)
        width = torch.clamp(hi - lo, min=1.0)
        steps = torch.arange(1, k - k0 + 1, dtype=X.dtype, device=X.device)  # two box widths apart
        extra = (hi[:, None] + 2 * width[:, None] * steps[None, :])[..., None].expand(B, k - k0, d0)
    zeros = X.new_zeros(())
    X = torch.cat([X, zeros.expand(B, n, d - d0)], dim=-1)
    C = torch.cat([torch.cat([C, extra], dim=1), zeros.expand(B, k, d - d0)], dim=-1)
    return X, C


def padded_trajectory(model: ClusterTransformer, X: torch.Tensor, C: torch.Tensor, steps: int,
                      fill: str = "far") -> torch.Tensor:
    """A layer trained at ``(d', k')`` used for ``steps`` re-embedded steps on tasks of smaller ``(d, k)``.

    Each step pads the current ``k`` centers with :func:`pad_tasks`, applies
    the layer once and keeps the first ``k`` centers' first ``d``
    coordinates, so a filler center never becomes a cluster of its own.

    Parameters
    ----------
    model : ClusterTransformer
        A single layer or an ensemble, trained at ``d' >= d``, ``k' >= k``.
    X, C, steps
        As in :func:`~kmtrf_core.evaluate.center_trajectory`.
    fill : {"far", "copy"}
        How the missing centers are made (:func:`pad_tasks`).

    Returns
    -------
    torch.Tensor
        ``(T + 1, B, k, d)`` or ``(T + 1, S, B, k, d)``, as
        :func:`~kmtrf_core.evaluate.center_trajectory`; a task whose centers overflowed is ``inf``.

    Examples
    --------
    The constructed layer for ``(d', k') = (3, 5)`` runs Lloyd's algorithm on tasks with ``d = 2``, ``k = 3``:

    >>> X, C = sample_tasks(2, 30, 2, 3, generator=0, dtype=torch.float64)
    >>> traj = padded_trajectory(ClusterTransformer.from_lloyd(3, 5, "bn"), X, C, steps=3)
    >>> torch.allclose(traj, lloyd_trajectory(X, C, 3).centers)
    True
    """
    model = check_model(model)
    check_int(steps, "steps")
    check_points_centers(X, C)
    d, k = X.shape[-1], C.shape[-2]
    S = model.ensemble
    Xs = X if S is None else X.expand(S, *X.shape).flatten(0, 1)  # (S B, n, d)
    current = C if S is None else C.expand(S, *C.shape)
    out = [current]
    with torch.no_grad():
        for _ in range(steps):
            Xp, Cp = pad_tasks(Xs, current.reshape(-1, k, d), model.d, model.k, fill)
            if S is not None:
                Xp, Cp = Xp.view(S, -1, *Xp.shape[1:]), Cp.view(S, -1, *Cp.shape[1:])
            current = model.apply_layers(Xp, Cp)[..., :k, :d]
            out.append(current)
    out = torch.stack(out)
    return torch.where(torch.isnan(out), torch.full((), math.inf, dtype=out.dtype), out)  # overflow: inf
