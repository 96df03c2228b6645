"""Squared-distance attention (Definition 2.2) and its gamma = inf limit (Appendix B).

For queries ``Zq`` (B, q, m) and keys ``Zk`` (B, r, m), with projections
``Q, K, V`` of size ``m x m`` (``m = d_emb``), the attention of Eq. 3 in rows is

.. math::

    \\mathcal{A}_2^\\gamma(Z_q, Z_k)_i = \\sum_j w_{ij} V z'_j, \\qquad
    w_{i\\cdot} = \\mathrm{softmax}_j\\Big(-\\frac{\\gamma}{\\sqrt{m}}
    \\lVert Q z_i - K z'_j \\rVert^2\\Big).

Finite ``gamma`` never forms the distance matrix with ``cdist``: softmax over
keys ignores the per-query term ``|Q z_i|^2``, so the logits are
``gamma / sqrt(m) * (2 q.k - |k|^2)``, one batched GEMM. ``impl="sdpa"`` feeds
the same logits to :func:`torch.nn.functional.scaled_dot_product_attention`
through the augmented vectors ``[q, 1]`` and ``[2k, -|k|^2]``, so the
``q x r`` weight matrix need not be stored. ``impl="direct"`` stores it, as
Eq. 3 writes it; on the CPU, from :data:`EXPLICIT_MIN_WEIGHTS` weights per
task, as one autograd node whose backward is laid out for the CPU's BLAS
(:mod:`kmtrf_core.explicit_attention`). ``impl="auto"`` picks the fastest of
the three by the size of the weights: on the CPU the node up to
:data:`EXPLICIT_MAX_WEIGHTS` weights (about twice as fast as the fused kernel
for the points' self-attention at the book's sizes), the fused kernel beyond
and on a GPU. On the CPU, where it is the fastest for them, autograd forms
the weights of attentions with fewer than :data:`EXPLICIT_MIN_WEIGHTS`
weights per task under every ``impl``, and of attentions on fewer than 16
keys under ``"sdpa"`` and ``"auto"`` (``"direct"`` gives those the node from
:data:`EXPLICIT_MIN_WEIGHTS` weights per task on); their memory is still
linear in the queries. The values agree to rounding whichever kernel runs.

``gamma = math.inf`` is the exact limit, computed separately: every query
puts weight ``1/|S_i|`` on the set ``S_i`` of keys at the exact minimum
distance (averaging hard attention; a plain hardmax when the minimum is
unique). No large finite gamma stands in for it.

Used in chapters 4 (the limit) and 5 (the construction).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from .explicit_attention import explicit_attention
from .softmax import SHORT_ROW, softmax_last
from .validation import check_choice, check_finite_result, check_int, check_number, check_same_dtype, check_tensor

__all__ = ["sqdist", "squared_distances", "task_sqdist", "attention_weights", "hardmax_weights", "distance_attention", "attend"]

IMPLS = ("direct", "sdpa", "auto")

EXPLICIT_MIN_WEIGHTS = 2048
"""On the CPU, attentions with fewer weights than this per task (the centers on the points, the centers on
each other) form their explicit weights through autograd under every ``impl``: there neither the fused
kernel nor :func:`~kmtrf_core.explicit_attention.explicit_attention` gains (10 centers on 64 points, 32
tasks, forward and backward, one thread: 0.39 ms through autograd, 0.41 as one node, 0.37 fused in one run
of ``bench/attention_kernels.py``, 0.36 / 0.51 / 0.50 with the projections in a scratch timing). Under
``"sdpa"`` and ``"auto"`` so do attentions on fewer than 16 keys (the points on the centers), where
PyTorch's fused kernel pays per short row (:mod:`kmtrf_core.softmax`); ``"direct"`` gives those the node."""

EXPLICIT_MAX_WEIGHTS = 1 << 22
"""On the CPU, ``impl="auto"`` runs attentions of up to this many weights over all tasks and ensemble
members as one autograd node (:func:`~kmtrf_core.explicit_attention.explicit_attention`) and larger ones
with the fused kernel, whose memory is linear in the keys. 2**22 weights are 16 MB in float32: 32 tasks of
256 x 256, where the node is twice as fast as the fused kernel, and not 32 tasks of 512 x 512, where the
fused kernel is faster (``bench/README.md``, "The CPU step")."""


def sqdist(A: torch.Tensor, B: torch.Tensor) -> torch.Tensor:
    """Pairwise squared Euclidean distances by GEMM, clamped at 0.

    Computed as ``|a|^2 + |b|^2 - 2 a.b`` after moving both sets by the first
    point of ``B``: the distances do not change, and the expansion no longer
    cancels when the data sit far from the origin, so float32 results do not
    depend on where the data are (translation-equivariant to rounding).

    Parameters
    ----------
    A : torch.Tensor
        ``(..., q, m)``, float32 or float64, finite, no empty dimension but ``m``.
    B : torch.Tensor
        ``(..., r, m)``, the same dtype; leading dimensions broadcast.

    Returns
    -------
    torch.Tensor
        ``(..., q, r)`` with entry ``(i, j) = |A_i - B_j|^2``: the paper's
        ``sqdist`` (Definition 2.2), transposed to rows.

    Raises
    ------
    ValueError
        For input that breaks :func:`~kmtrf_core.validation.check_tensor`,
        mismatched ``m``, dtypes or leading dimensions, or distances that
        overflow the dtype.

    Examples
    --------
    >>> sqdist(torch.tensor([[0., 0.]]), torch.tensor([[3., 4.], [1., 0.]]))
    tensor([[25.,  1.]])
    >>> A, B = torch.rand(200, 4) + 1000, torch.rand(5, 4) + 1000  # float32, far from the origin
    >>> error = sqdist(A, B) - sqdist(A.double(), B.double())
    >>> bool(error.abs().max() < 1e-4)  # the plain expansion is off by about 0.06 here
    True
    """
    check_tensor(A, "A", None, min_rank=2, nonempty=False)
    check_tensor(B, "B", None, min_rank=2, last=A.shape[-1], nonempty=False)
    for name, x in (("A", A), ("B", B)):
        if 0 in x.shape[:-1]:  # m = 0 is allowed: points without coordinates (NA's codes) are all at distance 0
            raise ValueError(f"{name} must not have an empty dimension other than the last, got shape "
                             f"{tuple(x.shape)}")
    check_same_dtype(A, B, "A and B")
    try:
        torch.broadcast_shapes(A.shape[:-2], B.shape[:-2])
    except RuntimeError:
        raise ValueError(f"A and B must have broadcastable leading dimensions, got shapes {tuple(A.shape)} "
                         f"and {tuple(B.shape)}") from None
    return task_sqdist(A, B)


def task_sqdist(X: torch.Tensor, C: torch.Tensor) -> torch.Tensor:
    """:func:`sqdist` for tasks the caller has already checked (Lloyd, the losses): no input checks again.

    The shift and the overflow check stay, so an overflow is still a
    ``ValueError``, never an ``inf``; only the second pass of input checks
    (ranks, dtypes, finiteness) on the hot path of training is skipped.

    >>> task_sqdist(torch.tensor([[[0., 0.]]]), torch.tensor([[[3., 4.], [1., 0.]]]))
    tensor([[[25.,  1.]]])
    """
    return check_finite_result(squared_distances(X, C), "squared distances")


def squared_distances(A: torch.Tensor, B: torch.Tensor, center: bool = True) -> torch.Tensor:
    """The kernel of :func:`sqdist` and :func:`task_sqdist`: no input checks and no overflow check.

    With ``center=True`` both sets are first moved by ``B``'s first point, as
    in :func:`sqdist`. ``center=False`` skips that shift: the exact
    ``gamma = inf`` attention of the layer keeps the plain expansion, whose
    exact ties (the averaging hardmax of Eq. 18) a shift could round apart.

    >>> squared_distances(torch.tensor([[0., 0.]]), torch.tensor([[3., 4.]]))
    tensor([[25.]])
    """
    if center:
        # distances are unchanged by a common shift; by one of B's own points, x - b is exact whenever
        # x and b lie within a factor 2 of each other (Sterbenz), and integer-valued data stay exact
        shift = B[..., :1, :]  # (..., 1, m)
        A, B = A - shift, B - shift
    a2 = (A * A).sum(-1, keepdim=True)  # (..., q, 1)
    b2 = (B * B).sum(-1).unsqueeze(-2)  # (..., 1, r)
    return (a2 + b2 - 2.0 * (A @ B.transpose(-1, -2))).clamp_min_(0.0)


def hardmax_weights(D: torch.Tensor) -> torch.Tensor:
    """Averaging hardmax of ``-D`` along the last axis.

    Each row puts equal weight on the entries that attain the row minimum
    exactly and zero elsewhere: a one-hot row when the minimum is unique.
    This is ``hardmax``/``avghardmax`` of Eq. 14 and 18.

    Parameters
    ----------
    D : torch.Tensor
        ``(..., r)`` scores to minimize (e.g. ``(..., q, r)`` distances), rank
        ``>= 1``, float32 or float64, finite, no empty dimension.

    Returns
    -------
    torch.Tensor
        ``D``'s shape, non-negative, rows summing to 1.

    Examples
    --------
    >>> hardmax_weights(torch.tensor([[2., 1., 1.], [0., 3., 4.]]))
    tensor([[0.0000, 0.5000, 0.5000],
            [1.0000, 0.0000, 0.0000]])
    """
    check_tensor(D, "D", None, min_rank=1)
    return _hardmax(D)


def _hardmax(D: torch.Tensor) -> torch.Tensor:
    W = (D == D.amin(-1, keepdim=True)).to(D.dtype)
    return W / W.sum(-1, keepdim=True)


def attention_weights(q: torch.Tensor, k: torch.Tensor, gamma: float, d_emb: int | None = None) -> torch.Tensor:
    """Attention weights of projected queries on projected keys (the ``w_ij`` of Eq. 3).

    ``softmax(-gamma / sqrt(d_emb) * sqdist(q, k))`` over the keys, or
    :func:`hardmax_weights` of ``sqdist(q, k)`` when ``gamma`` is ``math.inf``
    (Appendix B). Both are computed after moving queries and keys by the
    first key, as :func:`sqdist` does: the weights do not change, and float32
    keeps its digits for data far from the origin.

    Parameters
    ----------
    q : torch.Tensor
        Projected queries ``(..., q, m)``, i.e. ``Zq @ Q.T``.
    k : torch.Tensor
        Projected keys ``(..., r, m)``, i.e. ``Zk @ K.T``; leading dimensions
        broadcast against ``q``'s.
    gamma : float
        Inverse temperature, ``> 0``; ``math.inf`` for the exact limit.
    d_emb : int, optional
        The ``m`` of the scale ``gamma / sqrt(m)``; defaults to ``q.shape[-1]``.

    Returns
    -------
    torch.Tensor
        ``(..., q, r)``, rows summing to 1.

    Examples
    --------
    >>> q, k = torch.zeros(1, 1), torch.tensor([[1.], [2.]])
    >>> attention_weights(q, k, math.inf)
    tensor([[1., 0.]])
    >>> attention_weights(q, k, 1.0).sum().item()
    1.0

    Far from the origin, float32 weights agree with float64's:

    >>> g = torch.Generator().manual_seed(0)
    >>> q, k = torch.rand(200, 3, generator=g) + 1000, torch.rand(7, 3, generator=g) + 1000
    >>> W, W64 = attention_weights(q, k, 10.0), attention_weights(q.double(), k.double(), 10.0)
    >>> bool((W.double() - W64).abs().max() < 1e-3)
    True
    """
    check_tensor(q, "q", None, min_rank=2)
    check_tensor(k, "k", None, min_rank=2, last=q.shape[-1])
    check_same_dtype(q, k, "q and k")
    try:
        torch.broadcast_shapes(q.shape[:-2], k.shape[:-2])
    except RuntimeError:
        raise ValueError(f"q and k must have broadcastable leading dimensions, got shapes {tuple(q.shape)} "
                         f"and {tuple(k.shape)}") from None
    gamma = check_number(gamma, "gamma", allow_inf=True)
    if d_emb is not None:
        check_int(d_emb, "d_emb")
    if math.isinf(gamma):
        return _hardmax(check_finite_result(squared_distances(q, k), "squared distances"))
    # softmax over the keys ignores a common shift of queries and keys; by a key, 2 q.k - |k|^2 no longer
    # cancels far from the origin (the model's _weights keeps its unshifted form: training is unchanged)
    shift = k[..., :1, :]  # (..., 1, m)
    return check_finite_result(_weights(q - shift, k - shift, gamma, d_emb), "attention logits")


def _weights(q: torch.Tensor, k: torch.Tensor, gamma: float, d_emb: int | None = None) -> torch.Tensor:
    """:func:`attention_weights` without input checks (the model's hot path)."""
    if math.isinf(gamma):
        return _hardmax(squared_distances(q, k, center=False))
    scale = gamma / math.sqrt(q.shape[-1] if d_emb is None else d_emb)
    # the scale goes on the (q, m) and (r,) factors, not on the (q, r) logits: one pass less over the big array
    logits = (2.0 * scale * q) @ k.transpose(-1, -2) - scale * (k * k).sum(-1).unsqueeze(-2)  # (..., q, r)
    return softmax_last(logits)


def distance_attention(
    Zq: torch.Tensor,
    Zk: torch.Tensor,
    Q: torch.Tensor,
    K: torch.Tensor,
    V: torch.Tensor,
    gamma: float,
    impl: str = "direct",
) -> torch.Tensor:
    """Squared-distance attention of Eq. 3, batched over tasks, in rows.

    Parameters
    ----------
    Zq : torch.Tensor
        Query tokens ``(B, q, m)``.
    Zk : torch.Tensor
        Key (and value) tokens ``(B, r, m)``.
    Q, K, V : torch.Tensor
        Projections ``(m, m)``, applied as ``Z @ Q.T`` (the paper's ``Q Z``).
    gamma : float
        Inverse temperature, ``> 0``; ``math.inf`` for the exact limit.
    impl : {"direct", "sdpa", "auto"}
        Finite-gamma kernel: explicit weights, or
        :func:`~torch.nn.functional.scaled_dot_product_attention` on augmented
        vectors, or the faster of the two forms for this size and device (see
        the module's introduction). Ignored at ``gamma = inf``.

    Returns
    -------
    torch.Tensor
        ``(B, q, m)``: row ``i`` is ``sum_j w_ij V z'_j``.

    Examples
    --------
    >>> Z = torch.tensor([[[0.], [1.], [3.]]])
    >>> I = torch.eye(1)
    >>> distance_attention(Z, Z, I, I, I, math.inf).flatten().tolist()
    [0.0, 1.0, 3.0]
    """
    check_tensor(Zq, "Zq", 3)
    check_tensor(Zk, "Zk", 3, last=Zq.shape[-1])
    if Zq.shape[0] != Zk.shape[0]:
        raise ValueError(f"Zq and Zk must share the batch size, got {tuple(Zq.shape)} and {tuple(Zk.shape)}")
    m = Zq.shape[-1]
    for name, W in (("Q", Q), ("K", K), ("V", V)):
        check_tensor(W, name, 2)
        if W.shape != (m, m):
            raise ValueError(f"{name} must be ({m}, {m}) for tokens of size {m}, got {tuple(W.shape)}")
        check_same_dtype(Zq, W, f"Zq and {name}")
    check_same_dtype(Zq, Zk, "Zq and Zk")
    gamma = check_number(gamma, "gamma", allow_inf=True)
    impl = check_choice(impl, "impl", IMPLS)  # any case, as ClusterTransformer(impl=...) reads it
    return check_finite_result(attend(Zq, Zk, Q, K, V, gamma, impl), "attention outputs")


def attend(Zq, Zk, Q, K, V, gamma: float, impl: str = "direct", trace: dict | None = None, name: str = "weights"):
    """:func:`distance_attention` (Eq. 3) without input checks, for the model's hot path.

    Works on any leading batch dimensions (an ensemble of models stacks its
    projections in front).

    Parameters
    ----------
    Zq : torch.Tensor
        Query tokens ``(..., q, m)``.
    Zk : torch.Tensor
        Key (and value) tokens ``(..., r, m)``.
    Q, K, V : torch.Tensor
        Projections ``(..., m, m)``, broadcastable against the tokens.
    gamma : float
        Inverse temperature, ``> 0``; ``math.inf`` for the exact limit.
    impl : {"direct", "sdpa", "auto"}
        Finite-gamma kernel (see :func:`distance_attention`).
    trace : dict, optional
        If given, the explicit weights ``(..., q, r)`` are computed (even
        with ``impl="sdpa"``) and stored in it under ``name``.
    name : str
        Key of the weights in ``trace``.

    Returns
    -------
    torch.Tensor
        ``(..., q, m)``: row ``i`` is ``sum_j w_ij V z'_j``.

    Examples
    --------
    >>> g = torch.Generator().manual_seed(0)
    >>> Z = torch.rand(2, 5, 3, generator=g, dtype=torch.float64)
    >>> Q, K, V = torch.rand(3, 3, 3, generator=g, dtype=torch.float64)
    >>> trace = {}
    >>> out = attend(Z, Z, Q, K, V, 1.0, trace=trace, name="w")
    >>> out.shape, trace["w"].shape
    (torch.Size([2, 5, 3]), torch.Size([2, 5, 5]))
    >>> torch.allclose(attend(Z, Z, Q, K, V, 1.0, "sdpa"), out)
    True
    """
    kernel = "weights" if trace is not None or math.isinf(gamma) else _kernel(Zq, Zk, Q, impl)
    if kernel != "weights" and Zq is Zk and Zq.shape[-1] < Q.shape[-2]:  # narrow self-attention
        return (_explicit_narrow if kernel == "node" else _fused_narrow)(Zk, Q, K, V, gamma)
    q = Zq @ Q.transpose(-1, -2)  # (..., q, m)
    k = Zk @ K.transpose(-1, -2)  # (..., r, m)
    v = Zk @ V.transpose(-1, -2)  # (..., r, m)
    if kernel == "node":
        return explicit_attention(q, k, (k * k).sum(-1), v, gamma / math.sqrt(Q.shape[-2]))
    if kernel == "fused":
        m = q.shape[-1]  # the projections' rows: tokens may be narrower (plain points)
        q_aug = torch.cat([q, q.new_ones(q.shape[:-1] + (1,))], dim=-1)  # (..., q, m+1)
        k_aug = torch.cat([2.0 * k, -(k * k).sum(-1, keepdim=True)], dim=-1)  # (..., r, m+1)
        v_pad = torch.cat([v, v.new_zeros(v.shape[:-1] + (1,))], dim=-1)  # (..., r, m+1)
        # the fused (flash) kernel wants 4-D (batch, heads, length, dim) and one head dim for q, k, v;
        # otherwise PyTorch falls back to the math kernel, which stores the q x r weights
        lead = q_aug.shape[:-2]
        out = F.scaled_dot_product_attention(
            q_aug.reshape(-1, 1, *q_aug.shape[-2:]),
            k_aug.reshape(-1, 1, *k_aug.shape[-2:]),
            v_pad.reshape(-1, 1, *v_pad.shape[-2:]),
            scale=gamma / math.sqrt(m),
        )
        return out[..., :m].reshape(*lead, q.shape[-2], m)
    W = _weights(q, k, gamma)  # (..., q, r)
    if trace is not None:
        trace[name] = W
    return W @ v


def _kernel(Zq: torch.Tensor, Zk: torch.Tensor, Q: torch.Tensor, impl: str) -> str:
    """Which kernel computes a finite-gamma attention: ``"fused"``, ``"node"`` (:func:`~kmtrf_core.explicit_attention.explicit_attention`) or ``"weights"``."""
    if Zq.device.type != "cpu":
        return "weights" if impl == "direct" else "fused"
    per_task = Zq.shape[-2] * Zk.shape[-2]
    if per_task < EXPLICIT_MIN_WEIGHTS or (impl != "direct" and Zk.shape[-2] < SHORT_ROW):
        return "weights"
    if impl == "direct":
        return "node"
    if impl == "sdpa":
        return "fused"
    tasks = math.prod(torch.broadcast_shapes(Zq.shape[:-2], Zk.shape[:-2], Q.shape[:-2]))
    return "node" if tasks * per_task <= EXPLICIT_MAX_WEIGHTS else "fused"


def _explicit_narrow(Z: torch.Tensor, Q: torch.Tensor, K: torch.Tensor, V: torch.Tensor, gamma: float):
    """Self-attention of tokens ``Z (..., n, t)`` narrower than the projections (the plain points ``[x, 0]``,
    see :func:`_fused_narrow`) by :func:`~kmtrf_core.explicit_attention.explicit_attention`, on their ``t``
    columns: queries ``Z Q^T K``, keys ``Z``, values ``Z``, and ``V`` applied after."""
    queries, key_norms = _narrow_terms(Z, Q, K)
    return explicit_attention(queries, Z, key_norms, Z, gamma / math.sqrt(Q.shape[-2])) @ V.transpose(-1, -2)


def _narrow_terms(Z: torch.Tensor, Q: torch.Tensor, K: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """For tokens ``Z (..., n, t)`` narrower than the projections: queries ``Z Q^T K`` (``t`` wide), whose
    products with ``Z`` are the logits' ``q_i . k_j``, and the key norms ``|K z_j|^2`` ``(..., n)``."""
    k = Z @ K.transpose(-1, -2)  # (..., n, m): only for the key norms
    return Z @ (Q.transpose(-1, -2) @ K), (k * k).sum(-1)


def _fused_narrow(Z: torch.Tensor, Q: torch.Tensor, K: torch.Tensor, V: torch.Tensor, gamma: float) -> torch.Tensor:
    """Self-attention of tokens ``Z (..., n, t)`` narrower than the projections' ``m`` rows, fused.

    The logits need only ``q_i . k_j = z_i^T (Q^T K) z_j`` and ``|k_j|^2``, and
    the output is ``(W Z) V^T``, so the fused kernel works on ``t + 1``
    columns instead of ``m + 1``: the points' self-attention on their fresh
    embedding ``[x, 0]`` (``t = d``), the largest attention of a training step.
    """
    t, m = Z.shape[-1], Q.shape[-2]
    lead = torch.broadcast_shapes(Z.shape[:-2], Q.shape[:-2], K.shape[:-2], V.shape[:-2])
    Z = Z.expand(*lead, *Z.shape[-2:])  # a view; projections may broadcast over the tokens
    queries, key_norms = _narrow_terms(Z, Q, K)
    q_aug = torch.cat([queries, Z.new_ones(Z.shape[:-1] + (1,))], dim=-1)  # (..., n, t+1)
    k_aug = torch.cat([2.0 * Z, -key_norms.unsqueeze(-1)], dim=-1)  # (..., n, t+1)
    v_pad = torch.cat([Z, Z.new_zeros(Z.shape[:-1] + (1,))], dim=-1)  # (..., n, t+1)
    q_aug, k_aug, v_pad = (x.reshape(-1, 1, *x.shape[-2:]) for x in (q_aug, k_aug, v_pad))
    out = F.scaled_dot_product_attention(q_aug, k_aug, v_pad, scale=gamma / math.sqrt(m))
    return out[..., :t].reshape(*lead, Z.shape[-2], t) @ V.transpose(-1, -2)  # (..., n, m)
