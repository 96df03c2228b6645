"""Where computations run: CUDA when available, else the CPU.

Every function that creates tensors without inputs to copy a device from
(training, the cost harness, the estimator, the book's profiles) asks here.
"""

from __future__ import annotations

import torch

__all__ = ["default_device", "resolve_device"]


def default_device() -> torch.device:
    """CUDA when available, else the CPU.

    Examples
    --------
    >>> default_device().type in ("cuda", "cpu")
    True
    """
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def resolve_device(device=None, name: str = "device") -> torch.device:
    """``device`` as a ``torch.device``; :func:`default_device` for ``None``.

    Raises ``ValueError`` naming ``name`` for something that is not a device.

    >>> resolve_device("cpu")
    device(type='cpu')
    >>> resolve_device("gpu")
    Traceback (most recent call last):
    ...
    ValueError: device is not a torch device: 'gpu'
    """
    if device is None:
        return default_device()
    try:
        return torch.device(device)
    except (RuntimeError, TypeError):
        raise ValueError(f"{name} is not a torch device: {device!r}") from None
