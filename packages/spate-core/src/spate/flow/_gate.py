"""The pending gate: the hard per-lane bound on unresolved batches (B6).

Before each poll the runtime asks which lanes are at ``max_pending_batches``; those are
paused so nothing more is fetched from them, while the other lanes keep flowing. A lane
reopens as soon as it is under the bound again. Pure computation on the tracker's
counts; called from the pipeline thread.
"""

from __future__ import annotations

from collections.abc import Mapping

from spate.records import Lane


class PendingGate:
    """Which lanes must not be polled because they hold too many unresolved batches."""

    __slots__ = ("max_pending",)

    def __init__(self, max_pending: int) -> None:
        if max_pending < 1:
            raise ValueError(f"max_pending_batches must be at least 1, got {max_pending}")
        self.max_pending = max_pending

    def closed(self, pending: Mapping[Lane, int]) -> set[Lane]:
        """Lanes at or over the bound."""
        limit = self.max_pending
        return {lane for lane, count in pending.items() if count >= limit}
