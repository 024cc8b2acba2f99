"""What flows out of a source: lanes, payload batches and their borrowed views.

A *lane* is the unit of ordering and commit (a Kafka topic-partition, an S3 split). A
:class:`PayloadBatch` is what one poll returns for one lane: payloads are ``memoryview``
objects over buffers the source owns. They are *borrowed*: no operator may keep one
after its batch is processed; keep ``bytes(view)`` instead. Where a view spans a whole
object, ``view.obj`` returns that object without a copy (docs/concepts/architecture.md).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple


class Lane(NamedTuple):
    """A unit of ordering and commit: ``(stream, partition)``.

    Kafka uses ``(topic, partition)``; a source without partitions uses its own stream
    name and partition 0, an S3 backfill ``(split_id, 0)``.
    """

    stream: str
    partition: int

    def __str__(self) -> str:
        return f"{self.stream}[{self.partition}]"


@dataclass(slots=True)
class PayloadBatch:
    """Records polled from one lane in one call, in offset order.

    ``next_offset`` is the position to commit once the whole batch is delivered
    (normally ``offsets[-1] + 1``). ``timestamps`` are milliseconds since the epoch
    (0 when unknown). All per-record lists have the same length.
    """

    lane: Lane
    offsets: list[int]
    payloads: list[memoryview]
    keys: list[bytes | None]
    timestamps: list[int]
    next_offset: int

    def __len__(self) -> int:
        return len(self.payloads)

    @property
    def first_offset(self) -> int:
        return self.offsets[0] if self.offsets else self.next_offset

    @property
    def last_offset(self) -> int:
        return self.offsets[-1] if self.offsets else self.next_offset - 1


@dataclass(frozen=True, slots=True)
class RecordMeta:
    """Where one record came from, for operators that need it (``ctx.meta`` style use)."""

    lane: Lane
    offset: int
    key: bytes | None
    timestamp_ms: int
