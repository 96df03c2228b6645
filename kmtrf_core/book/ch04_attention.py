"""Chapter 4 (``book/04_attention.ipynb``): how sharp distance attention is at a finite ``gamma``.

The attention is the paper room's (:mod:`kmtrf_core.attention`);
:func:`nearest_key_leakage` measures the weight it leaves off each point's
nearest center, with its bound.
"""

from __future__ import annotations

import math

import torch

from ..attention import attention_weights, sqdist
from ..validation import check_number, check_points_centers

__all__ = ["nearest_key_leakage"]


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
