"""Squared-distance attention with explicit weights as one autograd node, laid out for the CPU's BLAS.

The attention of Eq. 3 with finite ``gamma`` is ``W v`` with
``W = softmax(s (2 a b^T - c))`` over the keys, where ``a`` are the projected
queries, ``b`` and ``c = |k|^2`` the projected keys and their squared norms,
``v`` the values and ``s = gamma / sqrt(m)`` (:mod:`kmtrf_core.attention`).
At the book's sizes its products are narrow: ``W v`` is ``(q x r)`` times
``(r x h)`` with ``h`` between 4 and 11, and so are the products of the
backward pass (``W^T g``, ``dS b``, ``dS^T a``). Measured on the 2-core CPU
(torch 2.13 with MKL, one thread, 32 tasks of 128 x 128 weights, ``h = 4``):
the batched product with a narrow right factor takes 0.40 ms, the same product
as ``(v^T W^T)^T`` 0.10 ms. Autograd cannot choose that layout for the
backward pass, so :func:`explicit_attention` is one autograd function with a
hand-written backward in which every narrow product puts its narrow side first:

.. math::

    dv = W^T g, \\quad dS = W \\odot (g v^T - \\mathrm{rowsum}(W \\odot g v^T)), \\quad
    da = 2s\\, dS\\, b, \\quad db = 2s\\, dS^T a, \\quad dc = -s\\, \\mathrm{colsum}(dS).

Forward and backward of the points' self-attention (32 tasks of 128 points,
``h = 4``) take 1.35 ms this way, against 3.26 ms for PyTorch's fused kernel
on the augmented vectors and 3.50 ms for the same explicit weights through
autograd (one run of ``bench/attention_kernels.py``; ``bench/README.md``,
"The CPU step"). The weights are stored, so
memory is ``q x r`` per task: :func:`~kmtrf_core.attention.attend` uses this
form on the CPU up to :data:`~kmtrf_core.attention.EXPLICIT_MAX_WEIGHTS`
weights and the fused kernel beyond.

Its weights are arrays of a few MB that every step allocates and frees; with
glibc's defaults that costs a page fault per 4 KB page every step, unless
the process keeps its freed memory (:mod:`kmtrf_core.training.heap`, which
:func:`~kmtrf_core.training.loop.train` arranges on the CPU).

The values equal those of the autograd form to rounding (the logits and
weights are computed by the same operations, the products in another order).
The backward pass is differentiable once: a second derivative through it
raises an error instead of returning a wrong value.
"""

from __future__ import annotations

import torch
from torch.autograd.function import once_differentiable

from .softmax import softmax_last

__all__ = ["explicit_attention"]


def _narrow_mm(A: torch.Tensor, B: torch.Tensor) -> torch.Tensor:
    """``A @ B`` for a ``B`` with few columns, computed as ``(B^T A^T)^T`` (MKL is 4x faster that way round)."""
    return torch.matmul(B.transpose(-1, -2), A.transpose(-1, -2)).transpose(-1, -2)


class _ExplicitAttention(torch.autograd.Function):
    @staticmethod
    def forward(ctx, a, b, c, v, scale):
        # the same operations, in the same order, as attention._weights: the same logits and weights
        logits = (2.0 * scale * a) @ b.transpose(-1, -2)  # (..., q, r)
        logits.sub_((scale * c).unsqueeze(-2))
        W = softmax_last(logits)
        del logits
        out = _narrow_mm(W, v)
        ctx.save_for_backward(a, b, v, W, out)
        ctx.scale = scale
        return out

    @staticmethod
    @once_differentiable
    def backward(ctx, grad):
        a, b, v, W, out = ctx.saved_tensors
        s = ctx.scale
        need_a, need_b, need_c, need_v = ctx.needs_input_grad[:4]
        grad_v = _narrow_mm(W.transpose(-1, -2), grad) if need_v else None
        grad_a = grad_b = grad_c = None
        if need_a or need_b or need_c:
            # the softmax backward W * (G - rowsum(W * G)) with G = grad v^T, whose row sums are <grad_i, out_i>:
            # one (q, r) array, written in place, instead of three
            rowsum = (grad * out).sum(dim=-1, keepdim=True)  # (..., q, 1)
            dS = (grad @ v.transpose(-1, -2)).sub_(rowsum).mul_(W)  # (..., q, r): d loss / d logits, over s
            if need_a:
                grad_a = _narrow_mm(dS, b).mul_(2.0 * s)
            if need_b:
                grad_b = _narrow_mm(dS.transpose(-1, -2), a).mul_(2.0 * s)
            if need_c:
                grad_c = dS.sum(dim=-2).mul_(-s)
        return grad_a, grad_b, grad_c, grad_v, None


def explicit_attention(a: torch.Tensor, b: torch.Tensor, c: torch.Tensor, v: torch.Tensor, scale: float) -> torch.Tensor:
    """``softmax(scale * (2 a b^T - c)) @ v`` over the last axis, as one autograd node.

    No input checks: :func:`~kmtrf_core.attention.attend` calls it on its hot
    path. Leading (batch) dimensions broadcast.

    Parameters
    ----------
    a : torch.Tensor
        Queries ``(..., q, t)``.
    b : torch.Tensor
        Keys ``(..., r, t)``.
    c : torch.Tensor
        Per-key offsets ``(..., r)``: ``|k|^2`` for squared-distance attention
        (``b`` may be a narrower form of ``k``, as long as ``a b^T = q k^T``).
    v : torch.Tensor
        Values ``(..., r, h)``.
    scale : float
        Finite, positive: ``gamma / sqrt(m)``.

    Returns
    -------
    torch.Tensor
        ``(..., q, h)``; differentiable once in ``a``, ``b``, ``c`` and ``v``.

    Examples
    --------
    >>> g = torch.Generator().manual_seed(0)
    >>> a, b, v = (torch.rand(2, 5, 3, dtype=torch.float64, generator=g) for _ in range(3))
    >>> c = (b * b).sum(-1)
    >>> reference = torch.softmax(0.5 * (2 * a @ b.transpose(-1, -2) - c.unsqueeze(-2)), dim=-1) @ v
    >>> bool(torch.allclose(explicit_attention(a, b, c, v, 0.5), reference, rtol=0, atol=1e-15))
    True
    """
    lead = torch.broadcast_shapes(a.shape[:-2], b.shape[:-2], c.shape[:-1], v.shape[:-2])
    a, b, v = (x.expand(*lead, *x.shape[-2:]) for x in (a, b, v))  # views: their backward sums over the copies
    c = c.expand(*lead, c.shape[-1])
    return _ExplicitAttention.apply(a, b, c, v, float(scale))
