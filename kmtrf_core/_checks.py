"""Input checks shared by the core modules.

Every public function validates what it is given and raises ``ValueError``
naming the offending argument, so that a wrong shape or a NaN fails loudly at
the call site instead of deep inside a matrix product.
"""

from __future__ import annotations

import math

import torch

SCHEMES = ("oh", "bn", "na", "sc")
"""Token-embedding schemes: one-hot, binary, none, and our scalar codes."""


def check_scheme(scheme: str) -> str:
    if not isinstance(scheme, str) or scheme.lower() not in SCHEMES:
        raise ValueError(f"scheme must be one of {SCHEMES}, got {scheme!r}")
    return scheme.lower()


def check_k(k: int, name: str = "k") -> int:
    if isinstance(k, bool) or not isinstance(k, int):
        raise ValueError(f"{name} must be an int, got {type(k).__name__}")
    if k < 2:
        raise ValueError(f"{name} must be >= 2, got {k}")
    return k


def check_positive_int(value: int, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{name} must be a positive int, got {value!r}")
    return value


def check_gamma(gamma: float) -> float:
    try:
        gamma = float(gamma)
    except (TypeError, ValueError):
        raise ValueError(f"gamma must be a positive number or math.inf, got {gamma!r}") from None
    if math.isnan(gamma) or gamma <= 0:
        raise ValueError(f"gamma must be > 0 (or math.inf), got {gamma}")
    return gamma


def check_tensor(x, name: str, rank: int, last: int | None = None) -> torch.Tensor:
    """A floating tensor of the given rank with finite entries."""
    if not isinstance(x, torch.Tensor):
        raise ValueError(f"{name} must be a torch.Tensor, got {type(x).__name__}")
    if x.dim() != rank:
        raise ValueError(f"{name} must have rank {rank}, got shape {tuple(x.shape)}")
    if not x.is_floating_point():
        raise ValueError(f"{name} must be a floating tensor, got dtype {x.dtype}")
    if last is not None and x.shape[-1] != last:
        raise ValueError(f"{name} must have last dimension {last}, got shape {tuple(x.shape)}")
    if not bool(torch.isfinite(x).all()):
        raise ValueError(f"{name} has non-finite values (nan or inf)")
    return x


def check_points_centers(X, C, k_le_n: bool = True) -> tuple[torch.Tensor, torch.Tensor]:
    """Check a batch of tasks: points ``X`` (B, n, d) and centers ``C`` (B, k, d).

    ``k_le_n=False`` allows more centers than points (loss evaluations of a
    few points); clustering itself needs ``k <= n``.
    """
    check_tensor(X, "X", 3)
    check_tensor(C, "C", 3)
    if X.shape[0] != C.shape[0]:
        raise ValueError(f"X and C must have the same batch size, got {X.shape[0]} and {C.shape[0]}")
    if X.shape[2] != C.shape[2]:
        raise ValueError(f"C must have the same d as X: X has d={X.shape[2]}, C has d={C.shape[2]}")
    k, n = C.shape[1], X.shape[1]
    if k < 2:
        raise ValueError(f"C must hold k >= 2 centers, got k={k}")
    if k_le_n and k > n:
        raise ValueError(f"k must be <= n, got k={k} centers for n={n} points")
    if X.dtype != C.dtype:
        raise ValueError(f"X and C must share a dtype, got {X.dtype} and {C.dtype}")
    return X, C
