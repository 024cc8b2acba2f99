"""Clocks. Every component takes a :class:`Clock` so tests can drive time by hand.

``monotonic()`` measures intervals (timeouts, linger, backoff); ``time()`` is the wall
clock for timestamps and metrics. No module-level clock: pass one per pipeline.
"""

from __future__ import annotations

import threading
import time
from typing import Protocol


class Clock(Protocol):
    """Time source used by the runtime. Implementations must be thread-safe."""

    def monotonic(self) -> float:
        """Seconds from an arbitrary origin; never goes backwards."""
        ...

    def time(self) -> float:
        """Wall-clock seconds since the epoch."""
        ...

    def sleep(self, seconds: float) -> None:
        """Block the calling thread for ``seconds`` (a manual clock advances instead)."""
        ...


class SystemClock:
    """The real clock."""

    def monotonic(self) -> float:
        return time.monotonic()

    def time(self) -> float:
        return time.time()

    def sleep(self, seconds: float) -> None:
        if seconds > 0:
            time.sleep(seconds)


class ManualClock:
    """A clock that only moves when told to; ``sleep`` advances it instead of waiting."""

    def __init__(self, start: float = 1_000.0, wall_start: float = 1_700_000_000.0) -> None:
        self._lock = threading.Lock()
        self._now = start
        self._wall_offset = wall_start - start

    def monotonic(self) -> float:
        with self._lock:
            return self._now

    def time(self) -> float:
        with self._lock:
            return self._now + self._wall_offset

    def sleep(self, seconds: float) -> None:
        self.advance(seconds)

    def advance(self, seconds: float) -> None:
        """Move time forward by ``seconds`` (negative values are refused)."""
        if seconds < 0:
            raise ValueError("a clock cannot go backwards")
        with self._lock:
            self._now += seconds
