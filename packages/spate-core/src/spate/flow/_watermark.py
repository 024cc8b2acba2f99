"""Pause/resume hysteresis over the byte budget (B7).

Pause once usage reaches ``high_ratio`` of the limit; resume only once it is below
``low_ratio`` *and* the pause has lasted at least ``min_pause``, so the source does not
flap. Pure state, driven by the pipeline thread once per loop turn.
"""

from __future__ import annotations

from spate._clock import Clock


class Hysteresis:
    """Decides whether the source should be paused for backpressure."""

    __slots__ = ("_clock", "_high", "_low", "_min_pause", "paused", "paused_at", "pauses")

    def __init__(
        self, *, limit: int, high_ratio: float, low_ratio: float, min_pause: float, clock: Clock
    ) -> None:
        if not 0 < low_ratio < high_ratio <= 1:
            raise ValueError(
                f"need 0 < low_ratio < high_ratio <= 1, got {low_ratio} and {high_ratio}"
            )
        self._high = high_ratio * limit
        self._low = low_ratio * limit
        self._min_pause = min_pause
        self._clock = clock
        self.paused = False
        self.paused_at = 0.0
        self.pauses = 0

    def update(self, used: int) -> bool:
        """Feed the current usage; return whether the source should now be paused."""
        if not self.paused:
            if used >= self._high:
                self.paused = True
                self.paused_at = self._clock.monotonic()
                self.pauses += 1
            return self.paused
        if used < self._low and self._clock.monotonic() - self.paused_at >= self._min_pause:
            self.paused = False
        return self.paused
