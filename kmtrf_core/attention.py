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
``q x r`` weight matrix need not be stored.

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

from ._checks import check_gamma, check_tensor

__all__ = ["sqdist", "attention_weights", "hardmax_weights", "distance_attention", "attend"]

IMPLS = ("direct", "sdpa")


def sqdist(A: torch.Tensor, B: torch.Tensor) -> torch.Tensor:
    """Pairwise squared Euclidean distances by GEMM, clamped at 0.

    Parameters
    ----------
    A : torch.Tensor
        ``(..., q, m)``.
    B : torch.Tensor
        ``(..., r, m)``.

    Returns
    -------
    torch.Tensor
        ``(..., q, r)`` with entry ``(i, j) = |A_i - B_j|^2``: the paper's
        ``sqdist`` (Definition 2.2), transposed to rows.

    Examples
    --------
    >>> sqdist(torch.tensor([[0., 0.]]), torch.tensor([[3., 4.], [1., 0.]]))
    tensor([[25.,  1.]])
    """
    a2 = (A * A).sum(-1, keepdim=True)  # (..., q, 1)
    b2 = (B * B).sum(-1).unsqueeze(-2)  # (..., 1, r)
    return (a2 + b2 - 2.0 * (A @ B.transpose(-1, -2))).clamp_min_(0.0)


def hardmax_weights(D: torch.Tensor) -> torch.Tensor:
    """Averaging hardmax of ``-D`` along the last axis.

    Each row puts equal weight on the entries that attain the row minimum
    exactly and zero elsewhere: a one-hot row when the minimum is unique.
    This is ``hardmax``/``avghardmax`` of Eq. 14 and 18.

    >>> hardmax_weights(torch.tensor([[2., 1., 1.], [0., 3., 4.]]))
    tensor([[0.0000, 0.5000, 0.5000],
            [1.0000, 0.0000, 0.0000]])
    """
    W = (D == D.amin(-1, keepdim=True)).to(D.dtype)
    return W / W.sum(-1, keepdim=True)


def attention_weights(q: torch.Tensor, k: torch.Tensor, gamma: float, d_emb: int | None = None) -> torch.Tensor:
    """Attention weights of projected queries ``q`` (..., q, m) on projected keys ``k`` (..., r, m).

    Returns ``softmax(-gamma / sqrt(d_emb) * sqdist(q, k))`` over the keys,
    ``(..., q, r)``, or :func:`hardmax_weights` when ``gamma`` is ``math.inf``.
    ``d_emb`` defaults to ``m``.

    Examples
    --------
    >>> q, k = torch.zeros(1, 1), torch.tensor([[1.], [2.]])
    >>> attention_weights(q, k, math.inf)
    tensor([[1., 0.]])
    >>> attention_weights(q, k, 1.0).sum().item()
    1.0
    """
    gamma = check_gamma(gamma)
    if math.isinf(gamma):
        return hardmax_weights(sqdist(q, k))
    scale = gamma / math.sqrt(q.shape[-1] if d_emb is None else d_emb)
    logits = 2.0 * (q @ k.transpose(-1, -2)) - (k * k).sum(-1).unsqueeze(-2)  # (..., q, r)
    return torch.softmax(scale * logits, dim=-1)


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
    impl : {"direct", "sdpa"}
        Finite-gamma kernel: explicit weights, or
        :func:`~torch.nn.functional.scaled_dot_product_attention` on augmented
        vectors. Ignored at ``gamma = inf``.

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
    gamma = check_gamma(gamma)
    if impl not in IMPLS:
        raise ValueError(f"impl must be one of {IMPLS}, got {impl!r}")
    return attend(Zq, Zk, Q, K, V, gamma, impl)


def attend(Zq, Zk, Q, K, V, gamma: float, impl: str = "direct", trace: dict | None = None, name: str = "weights"):
    """:func:`distance_attention` without input checks, for the model's hot path.

    Works on any leading batch dimensions: ``Zq`` ``(..., q, m)``, ``Zk``
    ``(..., r, m)``, projections ``(..., m, m)`` broadcastable against them
    (an ensemble of models stacks its projections in front). With a ``trace``
    dict the explicit weights are computed and stored under ``name``.
    """
    q = Zq @ Q.transpose(-1, -2)  # (..., q, m)
    k = Zk @ K.transpose(-1, -2)  # (..., r, m)
    v = Zk @ V.transpose(-1, -2)  # (..., r, m)
    if trace is None and impl == "sdpa" and not math.isinf(gamma):
        m = Zq.shape[-1]
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
    W = attention_weights(q, k, gamma)  # (..., q, r)
    if trace is not None:
        trace[name] = W
    return W @ v
