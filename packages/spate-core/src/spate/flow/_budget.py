"""The in-flight byte budget: estimated bytes of rows held by unresolved batches (B7).

Sinks call :meth:`InflightBudget.acquire` when they accept a row and
:meth:`InflightBudget.release` when the row's buffer is written or abandoned. Neither
blocks; the runtime reads :attr:`InflightBudget.used` once per poll-loop turn and feeds
it to the pause hysteresis (:mod:`spate.flow._watermark`). One instance per pipeline,
created before the sinks (they receive it through ``BuildContext.budget``).
"""

from __future__ import annotations

import threading


class InflightBudget:
    """A thread-safe byte counter with a limit; implements ``ByteBudget``."""

    __slots__ = ("_lock", "_used", "limit", "peak")

    def __init__(self, limit: int) -> None:
        if limit <= 0:
            raise ValueError(f"max_inflight_bytes must be positive, got {limit}")
        self.limit = limit
        self._used = 0
        self.peak = 0
        self._lock = threading.Lock()

    def acquire(self, nbytes: int) -> None:
        """Count ``nbytes`` more as held (any thread, never blocks)."""
        with self._lock:
            used = self._used + nbytes
            self._used = used
            if used > self.peak:
                self.peak = used

    def release(self, nbytes: int) -> None:
        """Count ``nbytes`` as no longer held (any thread, never blocks)."""
        with self._lock:
            used = self._used - nbytes
            if used < 0:
                # Over-release is a sink bug; clamp rather than let the budget go negative
                # and silently lift backpressure for good.
                used = 0
            self._used = used

    @property
    def used(self) -> int:
        with self._lock:
            return self._used

    @property
    def ratio(self) -> float:
        """Used bytes as a fraction of the limit."""
        return self.used / self.limit
