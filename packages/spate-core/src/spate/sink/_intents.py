"""Block intents: what effectively-once delivery records before each insert (B88, B89).

Under ``pipeline.delivery: effectively_once`` the sink pool keeps one open block per
(shard, lane), so a block is a contiguous run of one partition's rows. A row's position
is ``(offset, index)``: the offset of the record it came from and its index among the
rows that record gave this (sink, shard) — a flat_map or a split may give several.
Before a block is inserted the pool records its :class:`Intent` (first and last
position) through its writer, and the block's dedup token is a function of that intent
alone (:meth:`Intent.token`: no run nonce). A lane assigned again (restart, rebalance)
reads the intents at or after its first replayed offset, and the pool seals the replayed
rows at exactly the recorded boundaries, so the rebuilt block carries the same token and
ClickHouse drops it when the first insert had landed (docs/adr/0006).

:class:`RecordPosition` is the cell the chain sets to the offset of the record it is
processing; the pool reads it in ``offer``. The columnar path sets it to the offsets of
the whole batch instead, and the pool finds each row's offset through the row's record
index (``offer_frame``). :class:`IntentWriter` is what a connector's
shard writer implements to keep intents (the ClickHouse connector: a state table).

Ownership (B125): a lane's owner *claims* it on each shard before reading its intents,
which gives it an epoch greater than any before; every intent carries its owner's epoch,
and after recording an intent and before inserting the block the owner checks that no
later epoch has claimed the lane. A revoked or frozen owner whose intent lands after the
next owner read the intents therefore sees the newer claim and never inserts the block;
such a late intent is void, and :func:`live_intents` drops every intent a newer epoch's
intent overlaps (docs/adr/0006).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple, Protocol, runtime_checkable

from spate.records import Lane

DELIVERY_MODES = ("at_least_once", "effectively_once")

Position = tuple[int, int]
"""``(offset, index)`` of a row: its record's offset and its index among that record's
rows for one (sink, shard)."""


class RecordPosition:
    """The offset of the record the chain is processing (set per record, read by sinks)."""

    __slots__ = ("offset", "offsets")

    def __init__(self) -> None:
        self.offset = -1
        self.offsets: Sequence[int] = ()
        """The offsets of the batch a path offers at once (the columnar path): a frame's
        rows name their records by their index in it."""


class Intent(NamedTuple):
    """One block of one (sink, shard, lane): rows from ``first`` to ``last`` inclusive,
    recorded by the owner that claimed the lane with ``epoch``."""

    shard: int
    lane: Lane
    first: Position
    last: Position
    epoch: int = 0

    def token(self, pipeline: str, sink: str) -> str:
        """The block's ``insert_deduplication_token``: a function of its positions only."""
        return (
            f"spate:{pipeline}:{sink}:{self.shard}:{self.lane.stream}:{self.lane.partition}:"
            f"{self.first[0]}.{self.first[1]}-{self.last[0]}.{self.last[1]}"
        )


@runtime_checkable
class IntentWriter(Protocol):
    """A shard writer that keeps block intents where the blocks go (B88)."""

    def record_intent(self, pipeline: str, sink: str, intent: Intent) -> None:
        """Durably record ``intent`` before its block is inserted; raise ``SinkError``
        (RETRYABLE when the endpoint is down). Worker thread; blocks."""
        ...

    def load_intents(self, pipeline: str, sink: str, lane: Lane, since: int) -> list[Intent]:
        """This shard's intents of ``lane`` whose last offset is ``since`` or later, in
        position order. Raises ``SinkError`` when they cannot be read. Blocks."""
        ...

    def forget_intents(self, pipeline: str, sink: str, lane: Lane, below: int) -> None:
        """Delete the intents of ``lane`` whose last offset is below ``below`` (committed:
        never replayed again). Best effort; may raise. Blocks."""
        ...

    def claim_lane(self, pipeline: str, sink: str, lane: Lane) -> int:
        """Durably record, on this shard, a new owner of ``lane`` and return its epoch,
        greater than every epoch recorded for the lane before (B125). Called before
        :meth:`load_intents`; raises ``SinkError``. Blocks."""
        ...

    def owns_lane(self, pipeline: str, sink: str, lane: Lane, epoch: int) -> bool:
        """Whether no owner has claimed ``lane`` on this shard after ``epoch`` (B125).
        Called after an intent is recorded and before its block is inserted; raises
        ``SinkError``. Blocks."""
        ...


def live_intents(intents: list[Intent]) -> list[Intent]:
    """``intents`` without those a newer epoch's intent overlaps, in position order.

    An owner claims a lane before reading its intents and cuts its own blocks around
    every intent it read, so an older intent its blocks overlap is one it did not see:
    recorded after the claim, by an owner that then found itself fenced and never
    inserted it (B125). Replaying it would write rows the newer blocks hold.
    """
    kept = [
        i
        for i in intents
        if not any(k.epoch > i.epoch and k.first <= i.last and i.first <= k.last for k in intents)
    ]
    return sorted(kept, key=lambda i: (i.first, i.last))
