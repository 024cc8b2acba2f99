"""Admission into the sink pool: where rows, row batches and frames enter a shard's batch.

A collaborator of :class:`~spate.sink.SinkPool` that imports downward only (shards,
batches, writers, routers): the pool hands it the lock it shares, its shards and its
connector, and keeps the lifecycle (start, tick, flush, revocation, close). It owns

* **placement** (B13): one shard → no routing; several → the router, row by row
  (:meth:`Admission.route`) or over a whole column (:meth:`Admission.route_frame`);
* **the one room rule** (B7, B95, B144): :meth:`Admission.admit` takes a part of rows in
  any form all or nothing, refusing while a target shard has sealed batches waiting and
  less room than the part (:meth:`Admission.room`); :meth:`Admission.offer` is that rule
  written out for one row on the per-row path;
* **holding acks** (B2, B4): every batch holds each source batch's ack once, and the
  budget its rows count, through :meth:`Admission.hold`;
* **sealing** (B10, B56): :meth:`Admission.seal` cuts a shard's open batch and
  :meth:`Admission.enqueue` queues any sealed batch with its sequence number and dedup
  token (run-nonce tokens, or identity tokens while a tier offers an identified batch).

The effectively-once lanes (:mod:`spate.sink._lanes`) build on this module: their blocks
are admitted by the same room rule, hold acks the same way and are queued by the same
:meth:`Admission.enqueue`. Every method here is called with the pool's lock held unless
its docstring says otherwise.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence, Sized
from typing import Protocol, runtime_checkable

from spate._clock import Clock
from spate.checkpoint._ack import AckToken
from spate.errors import ErrorClass, SinkError
from spate.flow._contract import ByteBudget
from spate.records import Lane
from spate.sink._batching import BUDGET_CHUNK, LaneFrame, PoolBatch, SealReason
from spate.sink._contract import ACCEPTED, Offer
from spate.sink._held import HeldErrors
from spate.sink._router import Router
from spate.sink._shard import Shard
from spate.sink._writer import (
    FrameBuffer,
    FrameConnector,
    RowBatchConnector,
    RowBlock,
    RowBlockBuffer,
    RowBuffer,
    SinkConnector,
)
from spate.sink.config import PoolConfig

Parts = Sequence[tuple[Shard, object, int]]
"""``(shard, rows, count)``: rows in any form an append function adds to a buffer."""

Append = Callable[[RowBuffer, object, int, int], int]
"""Append rows ``start:stop`` of a part to a buffer; return the bytes they add."""


class PreparedRows:
    """Rows :meth:`Admission.prepare_rows` checked and placed: ``(shard, rows)`` parts,
    each a connector's :class:`~spate.sink.RowBlock`, with the record of each part's rows
    while the pool keeps them (rows refused at write time, B245, B349)."""

    __slots__ = ("parts", "records")

    def __init__(
        self, parts: list[tuple[int, RowBlock]], records: list[list[int]] | None = None
    ) -> None:
        self.parts = parts
        self.records = records


class _Column(Protocol):
    def to_pylist(self) -> list[object]: ...


@runtime_checkable
class _ColumnFrame(Protocol):
    """A prepared frame whose columns can be read by name (an Arrow table)."""

    def column(self, name: str) -> _Column: ...


def rows_of(frame: object) -> int:
    """Rows of a prepared frame (an Arrow table or anything with a length)."""
    if not isinstance(frame, Sized):
        raise SinkError(f"a frame must have a length, got {type(frame).__name__}", ErrorClass.FATAL)
    return len(frame)


class Admission:
    """The entering side of one sink pool."""

    def __init__(
        self,
        name: str,
        connector: SinkConnector,
        *,
        shards: list[Shard],
        router: Router | None,
        cond: threading.Condition,
        clock: Clock,
        budget: ByteBudget,
        config: PoolConfig,
        pipeline: str,
        run_nonce: str,
    ) -> None:
        """``cond`` is the pool's condition (its lock guards every batch); ``shards`` and
        ``router`` are the pool's own."""
        self.name = name
        self.closed = False
        """Set by the pool's ``close``: nothing is admitted any more."""
        self._connector = connector
        self._row_connector = connector if isinstance(connector, RowBatchConnector) else None
        self._frame_connector = connector if isinstance(connector, FrameConnector) else None
        self._shards = shards
        self._router = router
        self._cond = cond
        self._lock = cond  # the per-row path takes it without `with` (cheaper)
        self._clock = clock
        self._budget = budget
        self.max_rows = config.batch.max_rows
        self.max_bytes = config.batch.max_bytes
        self.linger = config.batch.linger
        self.queue_limit = config.inflight.max_per_shard
        self._pipeline = pipeline
        self._token_prefix = f"{pipeline}-{run_nonce}"
        self.identity: str | None = None
        self.errors: HeldErrors | None = None
        """The chain's record policy for rows refused at write time, bound by the pool
        while its connector may refuse them (B245): every batch then keeps each row's
        record (:attr:`PoolBatch.origins`)."""
        self._identity_rows: dict[int, int] = {}

    @property
    def router(self) -> Router | None:
        """The pool's router (``None`` with one shard and no router)."""
        return self._router

    # -- rows one at a time ------------------------------------------------------------

    def route(self, row: object, key: bytes | None, lane: Lane) -> Shard:
        """The shard of one row (any thread; lock not needed). A row the router cannot
        place raises ``SinkError`` naming the sink (a record error: nothing is held)."""
        router = self._router
        if router is None:
            return self._shards[0]
        try:
            return self._shards[router.route(row, key, lane)]
        except SinkError as exc:  # a row the router cannot place: a record error
            raise SinkError(f"sink {self.name}: {exc.reason}", exc.error_class) from None

    def offer(self, row: object, key: bytes | None, lane: Lane, ack: AckToken) -> Offer:
        """:meth:`SinkPool.offer <spate.sink.SinkPool.offer>`: append ``row`` to its
        shard's open batch, or refuse it while the shard is full (lock NOT held: taken
        here). One row has no room exactly when its shard has no open batch and a full
        queue, which is :meth:`admit`'s rule for a part of one row."""
        shard = self._shards[0] if self._router is None else self.route(row, key, lane)
        # One uncontended lock per row: worker threads seal lingering batches, so the
        # open batch is shared. acquire/release in try/finally costs less than `with`.
        lock = self._lock
        lock.acquire()
        try:
            batch = shard.open
            if batch is None:
                batch = self.open_batch(shard)
                if batch is None:
                    return Offer.REJECTED
            try:
                size = batch.buffer.append(row)
            except SinkError:
                self.record_error(shard, batch)
                raise
            except Exception as exc:
                self.record_error(shard, batch)
                raise SinkError(
                    f"sink {self.name}: cannot encode row: {exc!r}", ErrorClass.RECORD
                ) from exc
            batch.rows += 1
            if batch.origins is not None:
                batch.note_row(self.errors, ack)  # type: ignore[arg-type]
            nbytes = batch.nbytes + size
            batch.nbytes = nbytes
            if ack is not batch.last_ack:
                batch.hold(ack)
                self.acquire(batch)
            elif nbytes - batch.acquired >= BUDGET_CHUNK:
                self.acquire(batch)
            if batch.rows >= self.max_rows:
                self.seal(shard, "max_rows")
            elif nbytes >= self.max_bytes:
                self.seal(shard, "max_bytes")
        finally:
            lock.release()
        return ACCEPTED

    def open_batch(self, shard: Shard, force: bool = False) -> PoolBatch | None:
        """A new open batch for ``shard``, or None while its queue is full; ``force``
        opens one anyway (rows :meth:`admit` has already taken)."""
        if self.closed:
            raise RuntimeError(f"sink {self.name} is closed")
        if not force and len(shard.queue) >= self.queue_limit:
            return None
        batch = shard.open = PoolBatch(
            shard.index, self._connector.new_buffer(shard.index), self._clock.monotonic()
        )
        if self.errors is not None:
            batch.origins = []
        self._cond.notify()  # a sleeping worker must learn the new linger deadline
        return batch

    def record_error(self, shard: Shard, batch: PoolBatch) -> None:
        """The buffer refused a row: count it and drop a still-empty batch."""
        shard.m_errors["record"].inc()
        if batch.rows == 0:
            shard.open = None

    # -- the one room rule and holding acks --------------------------------------------

    def admit(
        self,
        parts: Parts,
        ack: AckToken,
        append: Append,
        records: Sequence[Sequence[int] | None] | None = None,
    ) -> Offer:
        """Admit ``parts`` — ``(shard, rows, count)``, rows in any form ``append`` adds
        to a buffer — all or nothing (B7, B95, B144).

        The one room rule: a shard refuses ``count`` rows while it has sealed batches
        waiting and fewer than ``count`` rows of room (:meth:`room`: what its open batch
        and its queue's free places may still take); a shard with nothing queued always
        takes them, so a batch larger than the room is taken once the queue has drained
        and never waits forever. Rows are cut at ``batch.max_rows`` (batches opened past
        the queue limit by an admitted part are forced); a batch seals on ``max_bytes``
        after the rows that reach it. Each batch holds ``ack`` once (:meth:`hold`).
        ``records`` gives, per part, the record index of each of its rows (kept while
        the connector may refuse rows at write time, B245).
        """
        if self.closed:
            raise RuntimeError(f"sink {self.name} is closed")
        if not all(self.fits(shard, count) for shard, _part, count in parts):
            return Offer.REJECTED
        max_rows = self.max_rows
        for i, (shard, part, count) in enumerate(parts):
            start = 0
            while start < count:
                batch = shard.open
                if batch is None:
                    batch = self.open_batch(shard, force=True)
                    assert batch is not None
                # max(…, 1): never a negative room, whatever the limits were before.
                stop = min(count, start + max(max_rows - batch.rows, 1))
                batch.nbytes += append(batch.buffer, part, start, stop)
                batch.rows += stop - start
                if batch.origins is not None:
                    self.note(batch, None if records is None else records[i], start, stop, ack)
                start = stop
                self.hold(batch, ack)
                if batch.rows >= max_rows:
                    self.seal(shard, "max_rows")
                elif batch.nbytes >= self.max_bytes:
                    self.seal(shard, "max_bytes")
        return ACCEPTED

    def note(
        self,
        batch: PoolBatch,
        records: Sequence[int] | None,
        start: int,
        stop: int,
        ack: AckToken,
    ) -> None:
        """Keep the records of a part's rows ``start:stop`` just appended to ``batch``;
        without them (rows whose records are not known) its origins become unknown."""
        errors = self.errors
        if records is None or errors is None:
            batch.origins = None
            return
        batch.note(errors.kept(), records[start:stop], ack)

    def fits(
        self, shard: Shard, count: int, batch: PoolBatch | None = None, lane: bool = False
    ) -> bool:
        """The room rule for ``count`` rows on ``shard``: taken when nothing is queued
        there or when they fit in its :meth:`room` (``batch`` and ``lane`` as there)."""
        return not shard.queue or self.room(shard, batch, lane) >= count

    def hold(self, batch: PoolBatch, ack: AckToken) -> None:
        """``batch`` holds ``ack`` (retained once per batch) and the budget its rows
        count; rows, row batches, frames and lane blocks all hold their acks here."""
        if ack is not batch.last_ack:
            batch.hold(ack)
        self.acquire(batch)

    def acquire(self, batch: PoolBatch) -> None:
        """Count the bytes ``batch`` added since its last acquisition against the budget."""
        delta = batch.nbytes - batch.acquired
        if delta > 0:
            batch.acquired = batch.nbytes
            self._budget.acquire(delta)

    def room(self, shard: Shard, batch: PoolBatch | None = None, lane: bool = False) -> int:
        """Rows ``shard`` takes now before refusing, as :meth:`offer` counts: its open
        batch's room and its queue's free places. ``lane``: the open batch is ``batch``,
        a lane block (effectively once), not the shard's."""
        free = self.queue_limit - len(shard.queue)
        if not lane:
            batch = shard.open
        if batch is None:
            return max(free, 0) * self.max_rows
        return self.max_rows - batch.rows + max(free - 1, 0) * self.max_rows

    # -- a source batch's rows at once (RowBatchSink, B95) -----------------------------

    def takes_rows(self) -> bool:
        """Whether the connector checks rows per column (``prepare_rows``)."""
        connector = self._row_connector
        return connector is not None and connector.takes_rows is True

    def prepare_rows(
        self, rows: list[object], keys: Sequence[bytes | None], lane: Lane
    ) -> tuple[PreparedRows, list[tuple[int, str]]]:
        """:meth:`SinkPool.prepare_rows <spate.sink.SinkPool.prepare_rows>` (B95; lock
        NOT held): bad rows as ``(position, reason)`` — unplaceable by the router first,
        then refused by the connector — each counted as :meth:`offer` counts it."""
        count = len(rows)
        bad: list[tuple[int, str]] = []
        shards: list[int] | None = None
        # The rows' records, while batches keep them: the chain names them (B349).
        errors = self.errors
        records = None if errors is None else errors.cell.records
        if records is not None and len(records) != count:
            records = None
        router = self._router
        if router is not None:
            shards = []
            route = router.route
            placed: list[int] = []
            for position in range(count):
                try:
                    shards.append(route(rows[position], keys[position], lane))
                except SinkError as exc:
                    bad.append((position, f"sink {self.name}: {exc.reason}"))
                    continue
                placed.append(position)
            if bad:
                rows = [rows[p] for p in placed]
                if records is not None:
                    records = [records[p] for p in placed]
        else:
            placed = []
        unplaced = bool(bad)
        connector = self._row_connector
        if connector is None:
            raise SinkError(f"sink {self.name} cannot take rows at once", ErrorClass.FATAL)
        block, refused = connector.prepare_rows(rows)
        if refused:
            shard_errors = [s.m_errors["record"] for s in self._shards]
            for position, error in refused:
                shard_errors[shards[position] if shards is not None else 0].inc()
                original = placed[position] if unplaced else position
                if isinstance(error, SinkError):
                    bad.append((original, error.reason))
                else:
                    bad.append((original, f"sink {self.name}: cannot encode row: {error!r}"))
            dropped = {position for position, _ in refused}
            if shards is not None:
                shards = [s for i, s in enumerate(shards) if i not in dropped]
            if records is not None:
                records = [r for i, r in enumerate(records) if i not in dropped]
            bad.sort()
        parts: list[tuple[int, RowBlock]]
        kept: list[list[int]] | None = None
        if shards is None or len(self._shards) == 1:
            parts = [(0, block)]
            if records is not None:
                kept = [list(records)]
        else:
            by_shard = _by_shard(shards)
            parts = [
                (i, block if len(positions) == len(block) else block.take(positions))
                for i, positions in by_shard
            ]
            if records is not None:
                kept = [[records[p] for p in positions] for _, positions in by_shard]
        return PreparedRows(parts, kept), bad

    def offer_rows(self, prepared: object, ack: AckToken) -> Offer:
        """Append prepared rows to their shards' open batches, all or nothing (B95), by
        :meth:`admit` (lock NOT held: taken here)."""
        if not isinstance(prepared, PreparedRows):
            raise SinkError(
                f"sink {self.name}: offer_rows takes what prepare_rows returned", ErrorClass.FATAL
            )
        parts = [(self._shards[index], block, len(block)) for index, block in prepared.parts]
        with self._cond:
            return self.admit(parts, ack, self._append_block, prepared.records)

    def _append_block(self, buffer: RowBuffer, block: object, start: int, stop: int) -> int:
        """Append rows ``start:stop`` of a prepared :class:`RowBlock`."""
        if not isinstance(buffer, RowBlockBuffer) or not isinstance(block, RowBlock):
            raise SinkError(
                f"sink {self.name}: its buffers cannot take row blocks", ErrorClass.FATAL
            )
        whole = start == 0 and stop == len(block)
        return buffer.append_rows(block if whole else block.slice(start, stop))

    # -- frames (the columnar path) ----------------------------------------------------

    def takes_frames(self) -> bool:
        """Whether the connector takes columns (a sink that evolves its table does not)."""
        connector = self._frame_connector
        return connector is not None and connector.takes_frames is True

    def frame_connector(self) -> FrameConnector:
        """The connector as a :class:`~spate.sink.FrameConnector`, or ``SinkError``."""
        connector = self._frame_connector
        if connector is None:
            raise SinkError(f"sink {self.name} cannot take columns", ErrorClass.FATAL)
        return connector

    def offer_frame(
        self,
        frame: object,
        keys: Sequence[bytes | None] | None,
        lane: Lane,
        ack: AckToken,
        shards: Sequence[int] | None,
    ) -> Offer:
        """:meth:`SinkPool.offer_frame <spate.sink.SinkPool.offer_frame>` under at least
        once: the frame's rows by shard, admitted by :meth:`admit` (lock NOT held). A
        :class:`LaneFrame` carries its rows' records (kept for rows refused at write
        time, B245)."""
        records: list[int] | None = None
        if isinstance(frame, LaneFrame):
            records = frame.records
            frame = frame.frame
        count = rows_of(frame)
        if not count:
            return ACCEPTED
        router = self._router
        parts: list[tuple[Shard, object]]
        part_records: list[list[int]] | None = None
        if shards is None and router is not None:
            shards = self.route_frame(router, frame, keys, count, lane)
        if shards is None:
            parts = [(self._shards[0], frame)]
            if records is not None:
                part_records = [records]
        else:
            take = self.take_rows
            by_shard = _by_shard(shards)
            parts = [
                (self._shards[i], frame if len(rows) == count else take(frame, rows))
                for i, rows in by_shard
            ]
            if records is not None:
                part_records = [[records[r] for r in rows] for _, rows in by_shard]
        with self._cond:
            return self.admit(
                [(shard, part, rows_of(part)) for shard, part in parts],
                ack,
                self._append_frame,
                part_records,
            )

    def _append_frame(self, buffer: RowBuffer, frame: object, start: int, stop: int) -> int:
        """Append rows ``start:stop`` of a prepared frame."""
        if start == 0 and stop == rows_of(frame):
            return self.append_frame(buffer, frame)
        return self.append_frame(buffer, self.take_rows(frame, list(range(start, stop))))

    def append_frame(self, buffer: RowBuffer, frame: object) -> int:
        """Append a whole prepared frame to a batch's buffer; return the bytes it adds."""
        if not isinstance(buffer, FrameBuffer):
            raise SinkError(f"sink {self.name}: its buffers cannot take frames", ErrorClass.FATAL)
        return buffer.append_frame(frame)

    def take_rows(self, frame: object, rows: list[int]) -> object:
        """The rows of a prepared frame at ``rows`` (the connector's ``take_rows``)."""
        connector = self._frame_connector
        if connector is None:
            raise SinkError(f"sink {self.name} cannot split frames", ErrorClass.FATAL)
        return connector.take_rows(frame, rows)

    def route_frame(
        self,
        router: Router,
        frame: object,
        keys: Sequence[bytes | None] | None,
        count: int,
        lane: Lane,
    ) -> Sequence[int]:
        """The shard of each row of ``frame``: the router's whole-column placement."""
        column = router.placed_by
        values: Sequence[object]
        if column is None:
            values = list(keys) if keys is not None else [None] * count
        else:
            if not isinstance(frame, _ColumnFrame):
                raise SinkError(
                    f"sink {self.name}: a frame routed by column {column!r} must be an Arrow "
                    f"table, got {type(frame).__name__}",
                    ErrorClass.FATAL,
                )
            values = frame.column(column).to_pylist()
        try:
            return router.route_column(values, lane)
        except SinkError as exc:  # a value the router cannot place: a record error
            raise SinkError(f"sink {self.name}: {exc.reason}", exc.error_class) from None

    # -- sealing -----------------------------------------------------------------------

    def seal(self, shard: Shard, reason: SealReason) -> None:
        """Seal ``shard``'s open batch and queue it (nothing when it holds no row)."""
        batch = shard.open
        if batch is None:
            return
        shard.open = None
        if batch.rows == 0:
            return
        token = None
        if self.identity is not None:
            # Rows of an identified batch (a spool tier's): the token names exactly
            # which rows these are, so a replay of the same batch gets the same token.
            start = self._identity_rows.get(shard.index, 0)
            self._identity_rows[shard.index] = start + batch.rows
            token = f"{self._pipeline}-{self.identity}-{shard.index}-{start}-{batch.rows}"
        self.enqueue(shard, batch, reason, token)

    def enqueue(
        self, shard: Shard, batch: PoolBatch, reason: SealReason, token: str | None = None
    ) -> None:
        """Queue a sealed ``batch`` for the workers: its sequence number, its dedup token
        (``token``, or ``{pipeline}-{run_nonce}-{shard}-{seq}``) and its budget."""
        batch.seq = shard.next_seq
        shard.next_seq += 1
        batch.token = (
            token if token is not None else f"{self._token_prefix}-{shard.index}-{batch.seq}"
        )
        batch.reason = reason
        self.acquire(batch)
        shard.queue.append(batch)
        shard.m_flushes[reason].inc()
        self._cond.notify()

    def seal_all(self, reason: SealReason) -> None:
        """Seal every shard's open batch."""
        for shard in self._shards:
            self.seal(shard, reason)

    def seal_lingering(self, now: float) -> None:
        """Seal the open batches whose first row is ``linger`` old (not while an
        identified batch is offered: its rows are cut by their rows alone, B56)."""
        linger = self.linger
        for shard in self._shards if self.identity is None else ():
            batch = shard.open
            if batch is not None and batch.rows and now - batch.opened_at >= linger:
                self.seal(shard, "linger")

    def set_identity(self, identity: str | None) -> None:
        """Seal what is open and cut from now under ``identity`` (None: the run nonce)."""
        self.seal_all("tier")
        self.identity = identity
        self._identity_rows = {}


def _by_shard(shards: Sequence[int]) -> list[tuple[int, list[int]]]:
    """The positions of each shard index in ``shards``, by shard."""
    by_shard: dict[int, list[int]] = {}
    for position, shard_index in enumerate(shards):
        by_shard.setdefault(shard_index, []).append(position)
    return sorted(by_shard.items())
