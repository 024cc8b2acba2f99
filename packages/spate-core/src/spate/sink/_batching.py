"""A batch of one shard, from its first row to its resolution (B9, B10).

A :class:`PoolBatch` starts *open*: the pipeline thread appends rows to its connector
buffer and the batch remembers which source-batch acks it holds (``retain`` once per
ack, when the ack first appears) and how many bytes it has counted against the byte
budget. It is *sealed* on ``max_rows``, ``max_bytes``, ``linger``, a checkpoint tick or
a drain (:data:`SealReason`); sealing gives it its sequence number and its dedup token
``{pipeline}-{run_nonce}-{shard}-{seq}``, kept across every retry. It is *resolved*
once: written (acks released ok) or abandoned/failed (acks released not ok, B4). The
batch itself is the holder it names when it retains and releases an ack.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

from spate.checkpoint._ack import AckToken
from spate.records import Lane, PayloadBatch
from spate.sink._held import HeldErrors
from spate.sink._intents import Intent, Position
from spate.sink._writer import RowBuffer

SealReason = Literal["max_rows", "max_bytes", "linger", "tick", "drain", "tier", "replay"]

Origin = tuple[PayloadBatch, int, AckToken]
"""A buffered row's record: its source batch, the record's index in it and its ack."""

BUDGET_CHUNK = 64 * 1024
"""Bytes a batch may hold beyond what it has acquired from the budget before acquiring."""


class PoolBatch:
    """One shard's batch. Mutated only under the pool lock."""

    __slots__ = (
        "acks",
        "acquired",
        "attempts",
        "buffer",
        "fenced",
        "first",
        "generation",
        "intent",
        "intent_recorded",
        "lane",
        "last",
        "last_ack",
        "limit",
        "nbytes",
        "next_at",
        "opened_at",
        "origins",
        "plan_last",
        "reason",
        "rows",
        "seq",
        "settled",
        "shard",
        "token",
    )

    def __init__(self, shard: int, buffer: RowBuffer, opened_at: float) -> None:
        self.shard = shard
        self.buffer = buffer
        self.opened_at = opened_at
        self.rows = 0
        self.nbytes = 0
        self.acquired = 0
        self.acks: set[AckToken] = set()
        self.last_ack: AckToken | None = None
        self.seq = 0
        self.token = ""
        self.reason: SealReason | None = None
        self.attempts = 0
        self.next_at = 0.0
        self.settled = False
        # Effectively-once only (B88, B89): the block's lane and first/last positions; the
        # recorded end a replayed block must reach (``plan_last``) or the recorded start a
        # free block must stop before (``limit``); its intent and whether it is recorded.
        self.lane: Lane | None = None
        self.first: Position = (0, 0)
        self.last: Position = (0, 0)
        self.plan_last: Position | None = None
        self.limit: Position | None = None
        self.intent: Intent | None = None
        self.intent_recorded = False
        self.fenced = False  # its owner checked, after the intent, that it owns the lane
        self.generation = 0
        self.origins: list[Origin] | None = None
        """Each row's record, in buffer order, while the connector may refuse rows at
        write time (:class:`~spate.sink.RowRefusingConnector`, B245); None when not kept
        or not known for some row (a refused row then fails the batch)."""

    def hold(self, ack: AckToken) -> None:
        """Hold ``ack`` (retain once) if this batch does not hold it yet."""
        self.last_ack = ack
        if ack not in self.acks:
            ack.retain(self)
            self.acks.add(ack)

    def holds_any(self, lanes: frozenset[Lane]) -> bool:
        """Whether a row of one of ``lanes`` is in this batch (under the pool lock)."""
        return any(ack.lane in lanes for ack in self.acks)

    def note_row(self, errors: HeldErrors, ack: AckToken) -> None:
        """Keep the record of the row just appended: the one the chain is offering (or
        only its position, :meth:`HeldErrors.kept <spate.sink._held.HeldErrors.kept>`)."""
        origins = self.origins
        if origins is None:
            return
        kept = errors.kept()
        if kept is None:
            self.origins = None
            return
        origins.append((kept, errors.cell.index, ack))

    def note(self, cell_batch: PayloadBatch | None, records: Sequence[int], ack: AckToken) -> None:
        """Keep the records of the rows just appended (``records``: their indexes in
        ``cell_batch``); an unknown source batch makes the batch's origins unknown."""
        origins = self.origins
        if origins is None:
            return
        if cell_batch is None:
            self.origins = None
            return
        origins.extend((cell_batch, index, ack) for index in records)

    def __repr__(self) -> str:
        return (
            f"PoolBatch(shard={self.shard}, seq={self.seq}, rows={self.rows}, "
            f"attempts={self.attempts}, settled={self.settled})"
        )


class LaneFrame:
    """A prepared frame with the record index of each of its rows (the frame's row
    column, which the connector's check drops): kept under effectively once (each row is
    placed by its record's offset) and while a connector may refuse rows at write time
    (each row's record is kept, B245)."""

    __slots__ = ("frame", "records")

    def __init__(self, frame: object, records: list[int]) -> None:
        self.frame = frame
        self.records = records

    def __len__(self) -> int:
        return len(self.records)
