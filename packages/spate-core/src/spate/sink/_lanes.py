"""The effectively-once lanes of the sink pool (B88, B89, B121, B125, B145).

A collaborator of :class:`~spate.sink.SinkPool` that imports downward only: it builds on
:class:`~spate.sink._admission.Admission` (the room rule, holding acks, queueing a sealed
block) and on the intents of :mod:`spate.sink._intents`; the pool constructs it and
calls it, nothing here imports the pool.

Under ``pipeline.delivery: effectively_once`` the pool keeps one open block per (shard,
lane) instead of one batch per shard. Each row's position is its record's offset (the
chain's :class:`~spate.sink._intents.RecordPosition`) and its index among that record's
rows for the shard. The first row of a lane claims the lane and loads its intents on
every shard (:meth:`EffectivelyOnceLanes.load`); replayed rows are sealed at exactly the
recorded boundaries (never by size, linger, tick or drain), a free block ends before the
next recorded one begins, and a replayed block that cannot be completed is failed, never
written short. A block's intent is recorded and its lane's ownership checked before its
insert (:meth:`EffectivelyOnceLanes.fence`, run by the pool's workers). Frames are placed
row by row exactly as rows one at a time would be (:meth:`EffectivelyOnceLanes.offer_frame`).

Every method is called with the pool's lock held unless its docstring says otherwise.
"""

from __future__ import annotations

import logging
import threading
from collections import deque
from collections.abc import Collection, Mapping, Sequence
from typing import Protocol, runtime_checkable

from spate._clock import Clock
from spate.checkpoint._ack import AckToken
from spate.errors import ErrorClass, SinkError
from spate.flow._contract import ByteBudget
from spate.records import ROW_COLUMN, Lane
from spate.sink._admission import Admission
from spate.sink._batching import BUDGET_CHUNK, LaneFrame, PoolBatch, SealReason
from spate.sink._contract import ACCEPTED, Offer
from spate.sink._intents import Intent, IntentWriter, Position, RecordPosition, live_intents
from spate.sink._shard import Shard
from spate.sink._workers import Settled, release_settled, settle_batch
from spate.sink._writer import FrameConnector, SinkConnector

logger = logging.getLogger("spate.sink._pool")

_LOAD_RETRY = 1.0
"""Seconds before a lane whose intents could not be read is tried again."""


class LaneBlocks:
    """Effectively-once state of one (shard, lane): its open block, the position of its
    last row, the recorded blocks still ahead of it and the epoch this pool claimed the
    lane with on the shard (under the pool lock)."""

    __slots__ = ("epoch", "last", "open", "plans")

    def __init__(self, plans: list[Intent], epoch: int) -> None:
        self.epoch = epoch
        self.open: PoolBatch | None = None
        self.last: Position | None = None
        self.plans: deque[Intent] = deque(plans)


class _Series(Protocol):
    def to_list(self) -> list[int]: ...


@runtime_checkable
class RowFrame(Protocol):
    """A frame as the columnar path offers it (a polars DataFrame)."""

    @property
    def columns(self) -> list[str]: ...

    def get_column(self, name: str) -> _Series: ...


class EffectivelyOnceLanes:
    """The (shard, lane) blocks of one sink pool and their intents."""

    def __init__(
        self,
        name: str,
        connector: SinkConnector,
        *,
        admission: Admission,
        shards: list[Shard],
        cond: threading.Condition,
        clock: Clock,
        budget: ByteBudget,
        pipeline: str,
        position: RecordPosition,
        forget_every: int,
    ) -> None:
        """``admission``, ``shards`` and ``cond`` are the pool's own; ``position`` is the
        cell the chain sets to each record's offset; every ``forget_every`` intents a
        shard records, the intents the committed offsets have passed are deleted."""
        self.name = name
        self._connector = connector
        self._admission = admission
        self._shards = shards
        self._cond = cond
        self._clock = clock
        self._budget = budget
        self._pipeline = pipeline
        self._position = position
        self._forget_every = forget_every
        self._lanes: dict[Lane, list[LaneBlocks]] = {}
        self._load_retry: dict[Lane, float] = {}
        self._committed: dict[Lane, int] = {}
        self._recorded = [0] * len(shards)
        self._generation: dict[Lane, int] = {}
        """Per lane: how many times it was revoked; a block of an older generation whose
        intent is not recorded yet is never recorded nor inserted (the next owner cuts)."""

    # -- rows one at a time ------------------------------------------------------------

    def offer(self, row: object, key: bytes | None, lane: Lane, ack: AckToken) -> Offer:
        """:meth:`SinkPool.offer <spate.sink.SinkPool.offer>` under ``effectively_once``:
        the row goes to its (shard, lane) block (pipeline thread; lock NOT held).

        The row's position is the chain's current record offset and the row's index among
        that record's rows for the shard. A lane seen for the first time loads its intents
        first (one read per shard, on this thread); while they cannot be read the row is
        refused (the chain stalls and offers it again). Replayed rows seal their block at
        exactly the recorded end; other blocks seal as at least once does, and a free
        block always ends before the next recorded one begins.
        """
        admission = self._admission
        shard = admission.route(row, key, lane)
        offset = self._position.offset
        states = self._lanes.get(lane)
        if states is None:
            states = self.load(lane, offset)
            if states is None:
                return Offer.REJECTED
        with self._cond:
            state = states[shard.index]
            last = state.last
            pos = (offset, last[1] + 1 if last is not None and last[0] == offset else 0)
            batch = state.open
            if batch is not None:
                plan_last = batch.plan_last
                limit = batch.limit
                if (plan_last is not None and pos > plan_last) or (
                    limit is not None and pos >= limit
                ):
                    self.seal(shard, state, "replay")
                    batch = None
            if batch is None:
                if admission.closed:
                    raise RuntimeError(f"sink {self.name} is closed")
                if len(shard.queue) >= admission.queue_limit:
                    return Offer.REJECTED
                batch = self._open_block(shard, state, lane, pos)
            try:
                size = batch.buffer.append(row)
            except SinkError:
                self._record_error(shard, state, batch)
                raise
            except Exception as exc:
                self._record_error(shard, state, batch)
                raise SinkError(
                    f"sink {self.name}: cannot encode row: {exc!r}", ErrorClass.RECORD
                ) from exc
            state.last = pos
            batch.last = pos
            batch.rows += 1
            if batch.origins is not None:
                batch.note_row(admission.errors, ack)  # type: ignore[arg-type]
            batch.nbytes += size
            if ack is not batch.last_ack:
                batch.hold(ack)
                admission.acquire(batch)
            elif batch.nbytes - batch.acquired >= BUDGET_CHUNK:
                admission.acquire(batch)
            if batch.plan_last is not None:
                if pos >= batch.plan_last:
                    self.seal(shard, state, "replay")
            elif batch.rows >= admission.max_rows:
                self.seal(shard, state, "max_rows")
            elif batch.nbytes >= admission.max_bytes:
                self.seal(shard, state, "max_bytes")
        return Offer.ACCEPTED

    # -- frames ------------------------------------------------------------------------

    def prepare_frame(
        self, connector: FrameConnector, frame: object
    ) -> tuple[LaneFrame, list[tuple[int, str]]]:
        """The connector's per-column check of a frame, keeping the record index of each
        row that passes (the frame's row column, which the check drops): each row is
        placed by its record's offset (lock NOT held)."""
        if not isinstance(frame, RowFrame) or ROW_COLUMN not in frame.columns:
            raise SinkError(
                f"sink {self.name}: under effectively_once a frame must keep its "
                f"{ROW_COLUMN} column (the record of each row)",
                ErrorClass.FATAL,
            )
        records = frame.get_column(ROW_COLUMN).to_list()
        table, bad = connector.prepare_frame(frame)
        if bad:
            dropped = {position for position, _ in bad}
            records = [r for i, r in enumerate(records) if i not in dropped]
        return LaneFrame(table, records), bad

    def offer_frame(
        self,
        prepared: object,
        keys: Sequence[bytes | None] | None,
        lane: Lane,
        ack: AckToken,
        shards: Sequence[int] | None,
    ) -> Offer:
        """:meth:`SinkPool.offer_frame <spate.sink.SinkPool.offer_frame>` under
        ``effectively_once``: each row goes to its (shard, lane) block at the position its
        record's offset gives it, as :meth:`offer` places rows one at a time (B88, B89,
        B145; pipeline thread, lock NOT held).

        A row's offset is the batch's offset (:attr:`RecordPosition.offsets`) at the row's
        record index; its index among that record's rows for the shard counts on from the
        lane's last row. Rows are cut where one at a time they would be: a replayed block
        at exactly its recorded end, a free block before the next recorded one begins, on
        ``max_rows``, and on ``max_bytes`` after the run of rows that reaches it. The
        frame is admitted all or nothing by the admission's room rule.
        """
        if not isinstance(prepared, LaneFrame):
            raise SinkError(
                f"sink {self.name}: offer_frame takes what prepare_frame returned",
                ErrorClass.FATAL,
            )
        frame, records = prepared.frame, prepared.records
        count = len(records)
        if not count:
            return ACCEPTED
        offsets = self._position.offsets
        if records[-1] >= len(offsets):
            raise SinkError(
                f"sink {self.name}: the frame's rows name records beyond the batch's "
                f"{len(offsets)} offsets (effectively once needs the batch's offsets)",
                ErrorClass.FATAL,
            )
        if any(records[i] > records[i + 1] for i in range(count - 1)):
            raise SinkError(
                f"sink {self.name}: under effectively_once a frame's rows must stay in "
                "record order",
                ErrorClass.FATAL,
            )
        admission = self._admission
        router = admission.router
        if shards is None and router is not None:
            shards = admission.route_frame(router, frame, keys, count, lane)
        by_shard: dict[int, list[int]] = {}
        if shards is None:
            by_shard[0] = list(range(count))
        else:
            for row, shard_index in enumerate(shards):
                by_shard.setdefault(shard_index, []).append(row)
        states = self._lanes.get(lane)
        if states is None:
            states = self.load(lane, offsets[records[0]])
            if states is None:
                return Offer.REJECTED
        with self._cond:
            if admission.closed:
                raise RuntimeError(f"sink {self.name} is closed")
            for index, rows in by_shard.items():
                shard = self._shards[index]
                if not admission.fits(shard, len(rows), states[index].open, lane=True):
                    return Offer.REJECTED
            for index, rows in sorted(by_shard.items()):
                shard = self._shards[index]
                self._place_rows(shard, states[index], lane, ack, frame, records, rows)
        return ACCEPTED

    def _place_rows(
        self,
        shard: Shard,
        state: LaneBlocks,
        lane: Lane,
        ack: AckToken,
        frame: object,
        records: list[int],
        rows: list[int],
    ) -> None:
        """Append ``rows`` of ``frame`` (whose rows come from ``records``) to ``state``'s
        blocks, cut as rows one at a time would be (the frame was admitted)."""
        admission = self._admission
        max_rows = admission.max_rows
        count = len(records)
        offsets = self._position.offsets
        run: list[int] = []
        batch: PoolBatch | None = state.open

        def flush(block: PoolBatch) -> None:
            part = frame if len(run) == count else admission.take_rows(frame, run)
            block.nbytes += admission.append_frame(block.buffer, part)
            block.rows += len(run)
            if block.origins is not None:
                admission.note(block, [records[row] for row in run], 0, len(run), ack)
            admission.hold(block, ack)
            run.clear()

        for row in rows:
            offset = offsets[records[row]]
            last = state.last
            pos = (offset, last[1] + 1 if last is not None and last[0] == offset else 0)
            if batch is not None:
                plan_last, limit = batch.plan_last, batch.limit
                if (plan_last is not None and pos > plan_last) or (
                    limit is not None and pos >= limit
                ):
                    if run:
                        flush(batch)
                    self.seal(shard, state, "replay")
                    batch = None
            if batch is None:
                batch = self._open_block(shard, state, lane, pos)
            run.append(row)
            state.last = pos
            batch.last = pos
            if batch.plan_last is not None:
                if pos >= batch.plan_last:
                    flush(batch)
                    self.seal(shard, state, "replay")
                    batch = None
            elif batch.rows + len(run) >= max_rows:
                flush(batch)
                self.seal(shard, state, "max_rows")
                batch = None
        if run and batch is not None:
            flush(batch)
            if batch.plan_last is None and batch.nbytes >= admission.max_bytes:
                self.seal(shard, state, "max_bytes")

    # -- blocks ------------------------------------------------------------------------

    def _open_block(self, shard: Shard, state: LaneBlocks, lane: Lane, pos: Position) -> PoolBatch:
        """Open the block of ``state`` starting at ``pos``: a replayed one when ``pos`` is
        inside a recorded block, else a free one ending before the next."""
        plans = state.plans
        while plans and plans[0].last < pos:
            plans.popleft()  # recorded blocks that gave no row this time (nothing to rebuild)
        batch = PoolBatch(shard.index, self._connector.new_buffer(shard.index), 0.0)
        batch.opened_at = self._clock.monotonic()
        batch.lane = lane
        batch.first = pos
        batch.generation = self._generation.get(lane, 0)
        if self._admission.errors is not None:
            batch.origins = []  # each row's record, for rows refused at write time (B245)
        if plans and plans[0].first <= pos:
            intent = plans.popleft()
            batch.plan_last = intent.last
            batch.intent = intent
            batch.intent_recorded = True  # it is in the state table already
            batch.fenced = True  # any later owner rebuilds it under the same token
            # A replay that starts inside a block keeps its token: the rows before the
            # committed offset are not offered again, and the first insert holds them all.
            batch.first = intent.first
        elif plans:
            batch.limit = plans[0].first
        state.open = batch
        self._cond.notify()  # a sleeping worker must learn the new linger deadline
        return batch

    def _record_error(self, shard: Shard, state: LaneBlocks, batch: PoolBatch) -> None:
        shard.m_errors["record"].inc()
        if batch.rows == 0:
            state.open = None

    def seal(self, shard: Shard, state: LaneBlocks, reason: SealReason) -> None:
        """Seal the open block of ``state``: its intent and token from its positions."""
        batch = state.open
        if batch is None:
            return
        state.open = None
        if batch.rows == 0:
            return
        if batch.plan_last is not None and reason != "replay":
            # Never written short: a shorter block under a new token would duplicate
            # the rows of a first insert that landed (B89).
            state.open = batch
            return
        lane = batch.lane
        assert lane is not None
        if batch.intent is None:
            batch.intent = Intent(shard.index, lane, batch.first, batch.last, state.epoch)
        self._admission.enqueue(shard, batch, reason, batch.intent.token(self._pipeline, self.name))

    def seal_all(self, reason: SealReason, lanes: frozenset[Lane] | None = None) -> None:
        """Seal every free lane block (of ``lanes`` when given)."""
        for lane, states in self._lanes.items():
            if lanes is not None and lane not in lanes:
                continue
            for index, state in enumerate(states):
                if state.open is not None and state.open.plan_last is None:
                    self.seal(self._shards[index], state, reason)

    def seal_lingering(self, now: float) -> None:
        """Seal the free lane blocks whose first row is ``linger`` old."""
        linger = self._admission.linger
        for states in self._lanes.values():
            for index, state in enumerate(states):
                batch = state.open
                if (
                    batch is not None
                    and batch.plan_last is None
                    and now - batch.opened_at >= linger
                ):
                    self.seal(self._shards[index], state, "linger")

    def opens(self, shard: int, free_only: bool = False) -> list[PoolBatch]:
        """Open lane blocks of ``shard`` holding rows; ``free_only``: not replayed ones."""
        if not self._lanes:
            return []
        out = []
        for states in self._lanes.values():
            batch = states[shard].open
            if batch is not None and batch.rows and not (free_only and batch.plan_last):
                out.append(batch)
        return out

    def drop_opens(self) -> None:
        """Forget every open lane block (the pool has abandoned them)."""
        for states in self._lanes.values():
            for state in states:
                state.open = None

    # -- lanes assigned, revoked, committed ----------------------------------------------

    def load(self, lane: Lane, since: int) -> list[LaneBlocks] | None:
        """Read ``lane``'s intents from each shard (pipeline thread, lock NOT held).

        ``since`` is the lane's first offset this assignment, at or past its committed
        offset; intents ending before it are committed and are deleted (best effort).
        Returns None (and retries later) when a shard cannot be read.
        """
        now = self._clock.monotonic()
        if now < self._load_retry.get(lane, 0.0):
            return None
        states: list[LaneBlocks] = []
        for shard in self._shards:
            writer = shard.replicas[shard.preferred].writer
            if not isinstance(writer, IntentWriter):
                raise SinkError(f"sink {self.name}: no intent writer", ErrorClass.FATAL)
            try:
                # Claim first, then read: an intent recorded after the claim is one its
                # owner will find fenced and never insert (B125).
                epoch = writer.claim_lane(self._pipeline, self.name, lane)
                plans = live_intents(writer.load_intents(self._pipeline, self.name, lane, since))
            except Exception as exc:
                self._load_retry[lane] = now + _LOAD_RETRY
                reason = exc.reason if isinstance(exc, SinkError) else repr(exc)
                logger.warning(
                    "sink %s: cannot read the block intents of %s on shard %d yet: %s",
                    self.name,
                    lane,
                    shard.index,
                    reason,
                )
                return None
            self._forget(writer, lane, since)
            states.append(LaneBlocks(plans, epoch))
        self._load_retry.pop(lane, None)
        with self._cond:
            self._lanes[lane] = states
        replayed = sum(len(s.plans) for s in states)
        if replayed:
            logger.info(
                "sink %s: %s replays %d recorded block(s) from offset %d",
                self.name,
                lane,
                replayed,
                since,
            )
        return states

    def revoked(self, lanes: Collection[Lane]) -> None:
        """:meth:`SinkPool.lanes_revoked <spate.sink.SinkPool.lanes_revoked>` (lock NOT
        held): fail the replayed blocks still waiting for rows of ``lanes`` (the next
        owner rebuilds them) and forget the lanes' state (read again if assigned)."""
        settled: list[Settled] = []
        lanes = frozenset(lanes)
        with self._cond:
            for lane in lanes:
                self._generation[lane] = self._generation.get(lane, 0) + 1
                for state in self._lanes.pop(lane, ()):
                    batch = state.open
                    state.open = None
                    if batch is not None and batch.rows and not batch.settled:
                        settled.append(settle_batch(batch, False))
                self._committed.pop(lane, None)
                self._load_retry.pop(lane, None)
            for shard in self._shards:
                # Blocks still waiting that were not cleared for their insert: the next
                # owner cuts those rows afresh or rebuilds them, so they must never be
                # recorded or inserted here (B125).
                stale = [b for b in shard.queue if b.lane in lanes and not b.fenced]
                for batch in stale:
                    shard.queue.remove(batch)
                    if not batch.settled:
                        settled.append(settle_batch(batch, False))
        release_settled(self._budget, settled)

    def replaying(self) -> frozenset[Lane]:
        """Lanes with a replayed block that holds rows and waits for more (B121; lock NOT
        held)."""
        if not self._lanes:
            return frozenset()
        with self._cond:
            return frozenset(
                lane
                for lane, states in self._lanes.items()
                if any(s.open is not None and s.open.plan_last and s.open.rows for s in states)
            )

    def committed(self, positions: Mapping[Lane, int]) -> None:
        """The source committed ``positions`` (lock NOT held)."""
        with self._cond:
            self._committed.update(positions)

    # -- intents (worker threads) --------------------------------------------------------

    def _record_intent(self, shard: Shard, writer: IntentWriter, intent: Intent) -> None:
        """Record ``intent`` (worker thread, lock NOT held); now and then delete the
        intents the committed offsets have passed."""
        writer.record_intent(self._pipeline, self.name, intent)
        self._recorded[shard.index] += 1
        if self._recorded[shard.index] % self._forget_every == 0:
            with self._cond:
                committed = dict(self._committed)
            for lane, offset in committed.items():
                self._forget(writer, lane, offset)

    def fence(self, shard: Shard, writer: object, batch: PoolBatch, intent: Intent) -> None:
        """Record ``batch``'s intent, then make sure the lane is still this pool's before
        its insert (worker thread, lock NOT held; raises ``SinkError``).

        The intent may land long after it was sent (a slow request, a frozen process).
        If the lane was revoked meanwhile, or another member has claimed it (a frozen
        member's session expired), that owner may have read the intents without this one
        and cut the rows its own way: the block must not be inserted (B125). Once the
        check passes, any later owner reads the intent and rebuilds the block under the
        same token, so the insert may land at any time after.
        """
        assert isinstance(writer, IntentWriter)  # start() checked every writer
        lane = intent.lane
        if not batch.intent_recorded:
            if batch.generation != self._generation.get(lane, 0):
                raise SinkError("its partition was revoked before its intent", ErrorClass.FATAL)
            self._record_intent(shard, writer, intent)
            batch.intent_recorded = True
        if batch.generation != self._generation.get(lane, 0):
            raise SinkError(
                f"{lane} was revoked while the block's intent was recorded; the next owner "
                "writes its rows",
                ErrorClass.FATAL,
            )
        if not writer.owns_lane(self._pipeline, self.name, lane, intent.epoch):
            raise SinkError(
                f"{lane} was claimed by another member (this member's session expired or "
                "it was revoked); that owner writes its rows",
                ErrorClass.FATAL,
            )
        batch.fenced = True

    def _forget(self, writer: IntentWriter, lane: Lane, below: int) -> None:
        try:
            writer.forget_intents(self._pipeline, self.name, lane, below)
        except Exception as exc:  # the state table's TTL removes them eventually
            logger.debug("sink %s: deleting old intents of %s failed: %r", self.name, lane, exc)
