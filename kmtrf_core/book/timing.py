"""Wall-clock timing for the chapters: how long a cell's experiment took, said once.

Chapters report the time of what they run (a sweep, a grid of measurements)
so a reader can judge the cost of a profile; this replaces hand-rolled
``time.perf_counter()`` pairs in cells.
"""

from __future__ import annotations

import time
from contextlib import contextmanager

__all__ = ["Stopwatch", "timed"]


class Stopwatch:
    """Elapsed wall-clock seconds since it was started; ``str()`` gives ``"12 s"``.

    >>> watch = Stopwatch()
    >>> watch.seconds >= 0.0, str(watch).endswith(" s")
    (True, True)
    """

    def __init__(self) -> None:
        self._start = time.perf_counter()
        self._stop: float | None = None

    def stop(self) -> "Stopwatch":
        """Freeze the reading (later reads return the same value); returns the stopwatch.

        >>> watch = Stopwatch().stop()
        >>> watch.seconds == watch.seconds
        True
        """
        if self._stop is None:
            self._stop = time.perf_counter()
        return self

    @property
    def seconds(self) -> float:
        """Seconds since the start, up to :meth:`stop` once stopped.

        >>> watch = Stopwatch()
        >>> 0.0 <= watch.seconds <= watch.stop().seconds
        True
        """
        end = self._stop if self._stop is not None else time.perf_counter()
        return end - self._start

    def __str__(self) -> str:
        return f"{self.seconds:.0f} s" if self.seconds >= 10 else f"{self.seconds:.1f} s"

    def __repr__(self) -> str:
        return f"Stopwatch({self.seconds:.3f} s)"


@contextmanager
def timed():
    """Time a block: ``with timed() as clock: ...``, then ``clock.seconds`` or ``f"{clock}"``.

    >>> with timed() as clock:
    ...     _ = sum(range(1000))
    >>> clock.seconds < 10.0
    True
    """
    watch = Stopwatch()
    try:
        yield watch
    finally:
        watch.stop()
