"""Softmax over the last axis, fast where rows are short on the CPU.

Two places of the hot path take a softmax over a short last axis: the
softmin weights of the NE loss over the ``k`` centers (Eq. 26), and the
attention of the points on the ``k`` center tokens (Eq. 3). PyTorch's CPU
softmax pays a fixed cost per row when the row is shorter than its vector
width: at 4096 rows of 6 it takes 0.45 ms forward and 0.65 ms with its
backward, against 0.08 ms and 0.17 ms for the same arithmetic written as
``exp(z - max) / sum`` with the backward ``y * (g - <g, y>)`` in closed
form (2-core CPU, one thread, torch 2.13; 16 or more per row, PyTorch's
kernel is the faster one). :func:`softmax_last` picks between the two; the
values agree to rounding (a few units in the last place).

Used by :mod:`kmtrf_core.attention` and :mod:`kmtrf_core.objectives`, so by
every training step of the book.
"""

from __future__ import annotations

import torch

__all__ = ["SHORT_ROW", "softmax_last"]

# rows shorter than this go to the closed form on the CPU (measured: bench/README.md, "The CPU step")
SHORT_ROW = 16


class _ShortRowSoftmax(torch.autograd.Function):
    @staticmethod
    def forward(ctx, z):
        y = (z - z.amax(dim=-1, keepdim=True)).exp_()  # the largest entry becomes exp(0) = 1: no overflow
        y = y.div_(y.sum(dim=-1, keepdim=True))
        ctx.save_for_backward(y)
        return y

    @staticmethod
    def backward(ctx, grad):
        (y,) = ctx.saved_tensors
        # the softmax Jacobian diag(y) - y y^T applied to grad; out of place, so a second derivative works
        gy = grad * y
        return gy - y * gy.sum(dim=-1, keepdim=True)


def softmax_last(z: torch.Tensor) -> torch.Tensor:
    """``torch.softmax(z, dim=-1)``, computed in closed form for short rows on the CPU.

    No input checks: callers on the hot path have checked their input. Rows
    with ``-inf`` entries give those entries weight 0, as ``torch.softmax``
    does; a row of only ``-inf`` or with ``+inf`` or NaN gives NaN, as it does.

    Parameters
    ----------
    z : torch.Tensor
        ``(..., r)`` scores, float32 or float64, any device.

    Returns
    -------
    torch.Tensor
        ``z``'s shape, rows summing to 1; differentiable twice.

    Examples
    --------
    >>> z = torch.tensor([[0.0, 1.0, float("-inf")], [2.0, 2.0, 2.0]], dtype=torch.float64)
    >>> softmax_last(z)
    tensor([[0.2689, 0.7311, 0.0000],
            [0.3333, 0.3333, 0.3333]], dtype=torch.float64)
    >>> bool(torch.allclose(softmax_last(z), torch.softmax(z, dim=-1), rtol=0, atol=1e-15))
    True
    """
    if z.device.type == "cpu" and z.shape[-1] < SHORT_ROW:
        return _ShortRowSoftmax.apply(z)
    return torch.softmax(z, dim=-1)
