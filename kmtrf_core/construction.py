"""The weights that make the layer execute Lloyd's algorithm (Theorem 2.1, Appendix B).

The proof's weights do not depend on which codes the center tokens carry: with
``P_x`` the projection onto the ``d`` data coordinates and ``P_c`` the one onto
the ``m`` code coordinates,

====  =======  =======  =======  =====================================
 mu    Q_mu     K_mu     V_mu     role (Eq. 12-19)
====  =======  =======  =======  =====================================
 1     P_x      P_x      P_c     write the nearest center's code
 2     P_x      P_x     -P_c     erase the point's old code
 3     P_c      P_c      P_x     average the points carrying code j
 4     P_c      P_c     -P_x     erase the center's old position
====  =======  =======  =======  =====================================

so one construction serves every code matrix with distinct rows: one-hot
(OH), binary (BN), and our Gray (GC) and scalar codes ``0..k-1`` (SC,
``d_emb = d + 1``).
At ``gamma = inf`` exactness needs (i) distinct code rows, (ii) no empty
cluster and (iii) no exact tie in an assignment. What each scheme costs at
finite ``gamma`` is governed by the code geometry (:func:`code_geometry`).

Used in chapter 5.
"""

from __future__ import annotations

import math

import torch

from .attention import hardmax_weights, sqdist
from .embeddings import cluster_codes
from .lloyd import lloyd
from .model import ClusterTransformer, check_model, lloyd_weights  # lloyd_weights lives with the layer it fills
from .validation import check_number, check_points_centers, check_same_dtype, check_tensor

__all__ = ["lloyd_weights", "code_geometry", "code_lloyd_step", "layer_trace", "finite_gamma_error"]


def code_geometry(k: int, scheme: str | None = None, codes: torch.Tensor | None = None) -> dict:
    """Geometry of a code matrix, which sets the price of a scheme at finite ``gamma``.

    Parameters
    ----------
    k : int
        Number of clusters (unused when ``codes`` is given).
    scheme : str, optional
        One of :data:`~kmtrf_core.embeddings.SCHEMES`: whose codes
        (:func:`~kmtrf_core.embeddings.cluster_codes`) to describe.
    codes : torch.Tensor, optional
        A ``(k, m)`` real code matrix (``k >= 2`` rows, finite) to describe
        instead of a scheme's, on any device.

    Returns
    -------
    dict
        ``m`` (code dimension), ``distinct`` (rows all different: needed for
        exactness), ``margin`` (smallest squared distance between two codes:
        how sharply the center update separates clusters), ``neighbors`` (most
        codes at that smallest distance from one code), ``max_sqnorm`` (largest
        squared code norm: how far a blurred assignment can throw a point's
        code).

    Raises
    ------
    ValueError
        Naming ``codes`` for anything but a finite real ``(k, m)`` tensor
        with ``k >= 2``; naming ``k`` or ``scheme`` for a bad scheme.

    Examples
    --------
    >>> g = code_geometry(8, "bn")
    >>> g["m"], g["margin"], g["neighbors"], g["max_sqnorm"]
    (3, 1.0, 3, 3.0)
    >>> code_geometry(3, codes=torch.eye(3))["margin"]
    2.0
    """
    if codes is None:
        codes = cluster_codes(k, scheme, dtype=torch.float64)
    elif not isinstance(codes, torch.Tensor):
        raise ValueError(f"codes must be a (k, m) torch.Tensor, got {type(codes).__name__}")
    elif codes.dim() != 2 or codes.shape[0] < 2:
        raise ValueError(f"codes must be a (k, m) tensor with k >= 2 rows, got shape {tuple(codes.shape)}")
    elif codes.dtype.is_complex or codes.dtype == torch.bool:
        raise ValueError(f"codes must be a real tensor, got dtype {codes.dtype}")
    codes = codes.to(torch.float64)
    if not bool(torch.isfinite(codes).all()):
        raise ValueError("codes has non-finite values (nan or inf)")
    D = sqdist(codes, codes)
    off = D.clone()
    off.fill_diagonal_(math.inf)  # in place, so it stays on the codes' device
    margin = off.min().item()
    return {
        "m": codes.shape[1],
        "distinct": margin > 0,
        "margin": margin,
        "neighbors": int((off == margin).sum(dim=1).max().item()),
        "max_sqnorm": (codes * codes).sum(dim=1).max().item(),
    }


def code_lloyd_step(X: torch.Tensor, C: torch.Tensor, codes: torch.Tensor) -> torch.Tensor:
    """What the constructed layer computes at ``gamma = inf``, written as a Lloyd step.

    Points take the code of their nearest center; center ``j`` moves to the
    mean of the points whose code is nearest to code ``j``. For a non-empty
    cluster those are exactly its points (Lloyd's update). For an empty one
    they are the points of the clusters with the nearest codes: all points
    under OH (every other code is at squared distance 2), the clusters one bit
    away under BN, the neighbouring indices under SC. Assumes no assignment ties.

    Parameters
    ----------
    X : torch.Tensor
        Points ``(B, n, d)``.
    C : torch.Tensor
        Centers ``(B, k, d)``.
    codes : torch.Tensor
        The ``(k, m)`` code matrix the center tokens carry, rows distinct;
        moved to ``X``'s dtype and device.

    Returns
    -------
    torch.Tensor
        New centers ``(B, k, d)``, on ``X``'s device.

    Examples
    --------
    The cluster of the center at 20 is empty. Lloyd keeps that center; the
    layer moves it to the mean of all points under OH, and under BN to the
    mean of cluster 0, whose code ``(0, 0)`` is one bit from its code ``(0, 1)``:

    >>> from kmtrf_core.lloyd import lloyd_step
    >>> X = torch.tensor([[[0.], [1.], [9.], [10.]]], dtype=torch.float64)
    >>> C = torch.tensor([[[0.], [9.5], [20.]]], dtype=torch.float64)
    >>> lloyd_step(X, C).flatten().tolist()
    [0.5, 9.5, 20.0]
    >>> code_lloyd_step(X, C, cluster_codes(3, "oh")).flatten().tolist()
    [0.5, 9.5, 5.0]
    >>> code_lloyd_step(X, C, cluster_codes(3, "bn")).flatten().tolist()
    [0.5, 9.5, 0.5]
    """
    check_points_centers(X, C)
    check_tensor(codes, "codes", 2)
    if codes.shape[0] != C.shape[1]:
        raise ValueError(f"codes must have one row per center, got {codes.shape[0]} rows for k={C.shape[1]}")
    codes = codes.to(dtype=X.dtype, device=X.device)
    Y = codes[sqdist(X, C).argmin(dim=-1)]  # (B, n, m)
    W = hardmax_weights(sqdist(codes.expand(X.shape[0], -1, -1), Y))  # (B, k, n)
    return W @ X


def layer_trace(model, X_bar: torch.Tensor, C_bar: torch.Tensor) -> dict:
    """One layer of ``model`` with every intermediate of Eq. 12-19 kept, for inspection.

    Parameters
    ----------
    model : ClusterTransformer
        A single layer (e.g. :meth:`~kmtrf_core.model.ClusterTransformer.from_lloyd`).
    X_bar : torch.Tensor
        Point tokens ``(B, n, d_emb)``, e.g. from ``model.embed(X, C)``.
    C_bar : torch.Tensor
        Center tokens ``(B, k, d_emb)``.

    Returns
    -------
    dict
        ``weights_1`` ``(B, n, k)`` and ``weights_2`` ``(B, n, n)``: the
        attention weights of the point update (the hardmax matrices of Eq. 14
        at ``gamma = inf``); ``update_x`` ``(B, n, d_emb)``: the sum of the two
        attentions (Eq. 15); ``X_bar``: the updated point tokens;
        ``weights_3`` ``(B, k, n)`` and ``weights_4`` ``(B, k, k)`` (Eq. 18);
        ``update_c`` (Eq. 19); ``C_bar``: the updated center tokens; with a
        feedforward block also ``update_ffn_x`` and ``update_ffn_c``.

    Examples
    --------
    With the constructed weights, attention 1 puts each point on its nearest center:

    >>> from kmtrf_core.model import ClusterTransformer
    >>> model = ClusterTransformer.from_lloyd(2, 3, "bn")
    >>> X = torch.tensor([[[0., 0.], [0., 1.], [5., 5.], [9., 9.]]], dtype=torch.float64)
    >>> C = X[:, [0, 2, 3]].clone()
    >>> trace = layer_trace(model, *model.embed(X, C))
    >>> trace["weights_1"].shape, trace["weights_1"][0].argmax(dim=-1).tolist()
    (torch.Size([1, 4, 3]), [0, 0, 1, 2])
    """
    check_model(model, single=True)
    check_tensor(X_bar, "X_bar", 3, last=model.d_emb)
    check_tensor(C_bar, "C_bar", 3, last=model.d_emb)
    if X_bar.shape[0] != C_bar.shape[0] or C_bar.shape[1] != model.k:
        raise ValueError(f"X_bar (B, n, {model.d_emb}) and C_bar (B, {model.k}, {model.d_emb}) must share B and "
                         f"C_bar must hold the model's k={model.k} tokens; got {tuple(X_bar.shape)} and "
                         f"{tuple(C_bar.shape)}")
    check_same_dtype(X_bar, model.Q, "X_bar and the model's weights")
    check_same_dtype(C_bar, model.Q, "C_bar and the model's weights")
    trace: dict = {}
    with torch.no_grad():
        trace["X_bar"], trace["C_bar"] = model.layer(X_bar, C_bar, trace=trace)
    return trace


def finite_gamma_error(X: torch.Tensor, C: torch.Tensor, scheme: str, gamma: float, steps: int = 1) -> torch.Tensor:
    """Relative distance of the constructed layer at ``gamma`` from Lloyd, per task.

    ``|F(X, C) - lloyd(X, C)| / |lloyd(X, C)|`` (Frobenius norms over the
    ``(k, d)`` centers) after ``steps`` layers / iterations; zero at
    ``gamma = inf`` on tasks that satisfy the theorem's assumptions (Theorem 2.1).

    Parameters
    ----------
    X : torch.Tensor
        Points ``(B, n, d)``.
    C : torch.Tensor
        Initial centers ``(B, k, d)``.
    scheme : {"oh", "bn", "gc", "sc"}
        Token embedding of the constructed layer (``"na"`` has none).
    gamma : float
        Attention inverse temperature, ``> 0`` or ``math.inf``.
    steps : int
        Layers of the model and Lloyd iterations ``T``.

    Returns
    -------
    torch.Tensor
        ``(B,)``: ``||F - Lloyd|| / ||Lloyd||`` per task (Frobenius norms of the
        centers), the absolute error where Lloyd's centers are all zero.

    Examples
    --------
    >>> g = torch.Generator().manual_seed(0)
    >>> X = torch.rand(4, 30, 2, generator=g, dtype=torch.float64); C = X[:, :3].clone()
    >>> bool(finite_gamma_error(X, C, "bn", math.inf).max() < 1e-12)
    True
    >>> bool(finite_gamma_error(X, C, "bn", 1e3).mean() < finite_gamma_error(X, C, "bn", 10.0).mean())
    True
    """
    check_points_centers(X, C)
    gamma = check_number(gamma, "gamma", allow_inf=True)
    model = ClusterTransformer.from_lloyd(X.shape[2], C.shape[1], scheme, gamma, dtype=X.dtype, device=X.device)
    with torch.no_grad():
        ours = model(X, C, steps=steps)
    ref = lloyd(X, C, steps=steps)
    # both norms of one task in units of its largest |coordinate| of Lloyd's centers: the ratio is unchanged,
    # and tiny data (1e-30 in float32) do not underflow to 0/0; Lloyd's centers all at the origin count as 1
    scale = ref.flatten(1).abs().amax(dim=1, keepdim=True)
    scale = torch.where(scale > 0, scale, torch.ones((), dtype=scale.dtype, device=scale.device))
    return ((ours - ref).flatten(1) / scale).norm(dim=1) / (ref.flatten(1) / scale).norm(dim=1).clamp_min(1.0)
