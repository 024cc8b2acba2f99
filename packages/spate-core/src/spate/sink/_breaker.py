"""The circuit breaker kept for each replica of a shard (B11).

* **closed**: writes go through; ``failure_threshold`` retryable failures in a row open
  it;
* **open**: the replica is not used; after ``open_for`` it becomes half-open;
* **half-open**: one trial write at a time; ``half_open_probes`` successes in a row
  close it, a failure opens it again for another ``open_for``.

Only retryable failures count: a fatal answer means the endpoint is reachable (it is a
problem of the batch, not of the replica). The breaker holds no lock of its own; the
pool calls it under the pool lock. State changes are logged and reported to
``on_change``.
"""

from __future__ import annotations

import enum
import logging
from collections.abc import Callable

from spate.sink.config import BreakerConfig

logger = logging.getLogger(__name__)


class BreakerState(enum.Enum):
    CLOSED = "closed"
    OPEN = "open"
    HALF_OPEN = "half_open"


class Breaker:
    """One replica's breaker. Not thread-safe: call it under the pool's lock."""

    __slots__ = (
        "_config",
        "_failures",
        "_on_change",
        "_opened_at",
        "_successes",
        "_trial",
        "name",
        "state",
    )

    def __init__(
        self,
        config: BreakerConfig,
        name: str,
        on_change: Callable[[BreakerState], None] | None = None,
    ) -> None:
        self._config = config
        self.name = name
        self.state = BreakerState.CLOSED
        self._failures = 0
        self._successes = 0
        self._opened_at = 0.0
        self._trial = False
        self._on_change = on_change

    def _set(self, state: BreakerState) -> None:
        if state is self.state:
            return
        self.state = state
        if state is BreakerState.OPEN:
            logger.warning(
                "breaker of %s opened for %.3gs after %d failed writes",
                self.name,
                self._config.open_for,
                self._failures,
            )
        elif state is BreakerState.CLOSED:
            logger.info("breaker of %s closed", self.name)
        else:
            logger.info("breaker of %s half-open: trying a write", self.name)
        if self._on_change is not None:
            self._on_change(state)

    def available(self, now: float) -> bool:
        """Whether a write could start on this replica now (no side effects)."""
        if self.state is BreakerState.CLOSED:
            return True
        if self.state is BreakerState.OPEN:
            return now >= self._opened_at + self._config.open_for
        return not self._trial

    def acquire(self, now: float) -> None:
        """A write starts on this replica (call only when :meth:`available`)."""
        if self.state is BreakerState.OPEN and now >= self._opened_at + self._config.open_for:
            self._successes = 0
            self._set(BreakerState.HALF_OPEN)
        if self.state is BreakerState.HALF_OPEN:
            self._trial = True

    def success(self) -> None:
        """A write on this replica succeeded (or the endpoint answered)."""
        if self.state is BreakerState.HALF_OPEN:
            self._trial = False
            self._successes += 1
            if self._successes >= self._config.half_open_probes:
                self._failures = 0
                self._set(BreakerState.CLOSED)
            return
        self._failures = 0

    def failure(self, now: float) -> None:
        """A write on this replica failed with a retryable error."""
        self._failures += 1
        if self.state is BreakerState.HALF_OPEN:
            self._trial = False
            self._opened_at = now
            self._set(BreakerState.OPEN)
        elif self.state is BreakerState.CLOSED and self._failures >= self._config.failure_threshold:
            self._opened_at = now
            self._set(BreakerState.OPEN)

    def reopens_at(self) -> float | None:
        """When an open breaker lets a trial through (None unless open)."""
        if self.state is BreakerState.OPEN:
            return self._opened_at + self._config.open_for
        return None
