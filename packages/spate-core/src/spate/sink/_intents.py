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
processing; the pool reads it in ``offer``. :class:`IntentWriter` is what a connector's
shard writer implements to keep intents (the ClickHouse connector: a state table).
"""

from __future__ import annotations

from typing import NamedTuple, Protocol, runtime_checkable

from spate.records import Lane

DELIVERY_MODES = ("at_least_once", "effectively_once")

Position = tuple[int, int]
"""``(offset, index)`` of a row: its record's offset and its index among that record's
rows for one (sink, shard)."""


class RecordPosition:
    """The offset of the record the chain is processing (set per record, read by sinks)."""

    __slots__ = ("offset",)

    def __init__(self) -> None:
        self.offset = -1


class Intent(NamedTuple):
    """One block of one (sink, shard, lane): rows from ``first`` to ``last`` inclusive."""

    shard: int
    lane: Lane
    first: Position
    last: Position

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
