"""The byte budget seen by sinks: what they hold counts against backpressure (B7).

Sinks call :meth:`ByteBudget.acquire` when they accept a row (with an estimate of the
row's in-memory size) and :meth:`ByteBudget.release` once the row's batch is written or
abandoned. Neither call blocks: the runtime watches the level and pauses the source at
``high_ratio`` of ``backpressure.max_inflight_bytes`` (docs/concepts/architecture.md).
"""

from __future__ import annotations

from typing import Protocol


class ByteBudget(Protocol):
    def acquire(self, nbytes: int) -> None:
        """Count ``nbytes`` more as held. Never blocks; may go above the limit."""
        ...

    def release(self, nbytes: int) -> None:
        """Count ``nbytes`` as no longer held."""
        ...
