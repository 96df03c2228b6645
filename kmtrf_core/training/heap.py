"""Keep the memory a CPU training step frees for the next step, instead of handing it back to the system.

A training step on the CPU allocates the same arrays every step and frees
them all at its end. With glibc's defaults, arrays of a few MB come from the
heap, and once more than a few MB lie free at its top the heap is trimmed,
so the next step takes the pages back one page fault at a time. The explicit
attention weights of :mod:`kmtrf_core.explicit_attention` (2 MB per
attention at 32 tasks of 128 points) made this visible: on the 2-core
machine of ``bench/README.md`` the n 128 step spent about 2 ms of system time
in 1000-1200 page faults, more than the faster attention saved. Raising
glibc's mmap threshold to 32 MB and its trim threshold to 256 MB removes the
faults (0 per step), at the price of up to 256 MB of freed memory kept by
the process.

:func:`hold_freed_memory` does that once per process; :func:`~kmtrf_core.training.loop.train`
calls it on the CPU. It leaves the allocator alone where the environment
already sets ``MALLOC_MMAP_THRESHOLD_`` or ``MALLOC_TRIM_THRESHOLD_`` (the
memory measurements of :mod:`kmtrf_core.cost.memory` do), and off glibc.
"""

from __future__ import annotations

import ctypes
import os
import sys

__all__ = ["MMAP_THRESHOLD", "TRIM_THRESHOLD", "hold_freed_memory"]

MMAP_THRESHOLD = 32 << 20
"""Bytes: allocations below this come from the heap (glibc's own upper bound for its adaptive threshold)."""

TRIM_THRESHOLD = 256 << 20
"""Bytes of free memory at the heap's top that glibc keeps before giving memory back to the system."""

_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3  # glibc's mallopt parameters (malloc.h)
_ENVIRONMENT = ("MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_")
_held: bool | None = None


def hold_freed_memory() -> bool:
    """Set glibc's mmap and trim thresholds for this process (once); whether they are set.

    Returns ``False``, changing nothing, off Linux, without glibc's
    ``mallopt``, or where the environment sets either threshold.

    Examples
    --------
    >>> held = hold_freed_memory()
    >>> held == hold_freed_memory()  # once per process: the second call only reports
    True
    """
    global _held
    if _held is None:
        _held = _set_thresholds()
    return _held


def _set_thresholds() -> bool:
    if not sys.platform.startswith("linux") or any(name in os.environ for name in _ENVIRONMENT):
        return False
    try:
        mallopt = ctypes.CDLL("libc.so.6").mallopt
    except (OSError, AttributeError):  # another C library
        return False
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    return bool(mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD)) and bool(mallopt(_M_TRIM_THRESHOLD, TRIM_THRESHOLD))
