"""The sink pool: the :class:`~spate.sink.Sink` every sink connector is built on.

What it does is described in docs/concepts/sinks.md.

A connector supplies buffers and per-endpoint writers (:mod:`spate.sink._writer`); the
pool does the rest:

* **routing** (B13): one shard → no routing; several → the connector's
  :class:`~spate.sink.Router` (which sees the row, its key and lane) or FNV-1a of the
  key placed by the shards' weights;
* **batching** (B10): each shard has one open batch; it seals on ``batch.max_rows``,
  ``batch.max_bytes``, ``batch.linger`` (from its first row), on :meth:`SinkPool.tick`
  and on :meth:`SinkPool.flush`; on revocation :meth:`SinkPool.flush_lanes` seals only
  the batches holding the revoked lanes' rows (B40);
* **flow control** (B7): at most ``inflight.max_per_shard`` writes per shard run at once
  and as many sealed batches again may wait; beyond that :meth:`SinkPool.offer`
  answers ``REJECTED`` (the chain stalls and the source pauses; nothing is dropped).
  Accepted rows count against the pipeline's byte budget until their batch resolves;
  the pool acquires per source batch and per 64 KiB rather than per row;
* **retries** (B9, B12): a retryable error re-queues the same batch — same rows, same
  dedup token ``{pipeline}-{run_nonce}-{shard}-{seq}`` — after a capped exponential
  backoff; ``retry.max_attempts`` (0 = until the drain deadline) bounds the attempts;
  a fatal error fails the batch at once;
* **breakers and failover** (B11): one breaker per replica; a failed write moves the
  shard's preference to its next replica; no batch ever goes to another shard, and a
  shard whose replicas are all open holds its batches;
* **acks** (B2, B4): a batch retains each source batch's ack once, on its first row,
  and releases it when written (ok) or failed/abandoned (not ok);
* **record errors** (B28): the buffer checks each row on append; the ``SinkError``
  (``RECORD``) goes back to the chain, which applies :attr:`SinkPool.on_record_error`;
* **effectively once** (``delivery="effectively_once"``, B88, B89): one open block per
  (shard, lane) instead of per shard; each row's position comes from the chain's
  :class:`~spate.sink._intents.RecordPosition`; a block's intent is recorded through its
  writer before the insert and its token derives from its positions; the first row of a
  lane loads the lane's intents and replayed rows are sealed at exactly the recorded
  boundaries (never by size, linger, tick or drain); a replayed block that cannot be
  completed is failed, never written short (:mod:`spate.sink._intents`).

Threads: ``io_threads`` workers (from the build context) write batches; with
``io_threads=0`` nothing runs in the background and writes happen inside
:meth:`SinkPool.tick`, :meth:`SinkPool.flush` and :meth:`SinkPool.pump` on the calling
thread, which with a manual clock makes every timing deterministic (tests). All shared
state is guarded by one lock; acks and budget are released outside it.
"""

from __future__ import annotations

import logging
import random
import threading
from collections import deque
from collections.abc import Callable, Collection, Mapping, Sequence, Sized
from typing import TYPE_CHECKING, Protocol, runtime_checkable

from spate._clock import Clock
from spate.checkpoint._ack import AckToken
from spate.errors import ErrorClass, ErrorPolicy, SinkError
from spate.flow._contract import ByteBudget
from spate.metrics._meter import Meter
from spate.records import Lane
from spate.sink._batching import BUDGET_CHUNK, PoolBatch, SealReason
from spate.sink._contract import ACCEPTED, Offer
from spate.sink._freshness import WriteFreshness
from spate.sink._intents import Intent, IntentWriter, Position, RecordPosition, live_intents
from spate.sink._retry import Backoff
from spate.sink._router import Router, StartingRouter, WeightedHashRouter
from spate.sink._shard import Replica, Shard
from spate.sink._workers import PoolWorkers, Settled, Work, release_settled, settle_batch
from spate.sink._writer import (
    FrameBuffer,
    FrameConnector,
    RowBatchConnector,
    RowBlock,
    RowBlockBuffer,
    RowBuffer,
    SinkConnector,
)
from spate.sink.config import PoolConfig, ShardConfig

if TYPE_CHECKING:
    from spate._context import BuildContext

logger = logging.getLogger(__name__)

_JOIN_TIMEOUT = 5.0
"""Real seconds :meth:`SinkPool.close` waits for each worker (a stuck write may never end)."""

_LOAD_RETRY = 1.0
"""Seconds before a lane whose intents could not be read is tried again."""

_FORGET_EVERY = 256
"""Intents a shard records between two deletions of committed intents."""


class _LaneBlocks:
    """Effectively-once state of one (shard, lane): its open block, the position of its
    last row, the recorded blocks still ahead of it and the epoch this pool claimed the
    lane with on the shard (under the pool lock)."""

    __slots__ = ("epoch", "last", "open", "plans")

    def __init__(self, plans: list[Intent], epoch: int) -> None:
        self.epoch = epoch
        self.open: PoolBatch | None = None
        self.last: Position | None = None
        self.plans: deque[Intent] = deque(plans)


class _PreparedRows:
    """Rows :meth:`SinkPool.prepare_rows` checked and placed: ``(shard, rows)`` parts,
    each a connector's :class:`~spate.sink.RowBlock`."""

    __slots__ = ("parts",)

    def __init__(self, parts: list[tuple[int, RowBlock]]) -> None:
        self.parts = parts


ROW_COLUMN = "__spate_row"
"""The column of a frame giving each row's record index in its batch (the columnar path
adds it; ``spate.ops._columnar`` names it too)."""


class _LaneFrame:
    """A frame :meth:`SinkPool.prepare_frame` checked under effectively once, with the
    record index of each of its rows."""

    __slots__ = ("frame", "records")

    def __init__(self, frame: object, records: list[int]) -> None:
        self.frame = frame
        self.records = records

    def __len__(self) -> int:
        return len(self.records)


class _Series(Protocol):
    def to_list(self) -> list[int]: ...


@runtime_checkable
class _RowFrame(Protocol):
    """A frame as the columnar path offers it (a polars DataFrame)."""

    @property
    def columns(self) -> list[str]: ...

    def get_column(self, name: str) -> _Series: ...


class _Column(Protocol):
    def to_pylist(self) -> list[object]: ...


@runtime_checkable
class _ColumnFrame(Protocol):
    """A prepared frame whose columns can be read by name (an Arrow table)."""

    def column(self, name: str) -> _Column: ...


def _rows_of(frame: object) -> int:
    """Rows of a prepared frame (an Arrow table or anything with a length)."""
    if not isinstance(frame, Sized):
        raise SinkError(f"a frame must have a length, got {type(frame).__name__}", ErrorClass.FATAL)
    return len(frame)


class SinkPool:
    """A sink made of shards of replicas, written by a small pool of worker threads."""

    def __init__(
        self,
        name: str,
        connector: SinkConnector,
        *,
        shards: Sequence[ShardConfig],
        pipeline: str,
        run_nonce: str,
        meter: Meter,
        clock: Clock,
        budget: ByteBudget,
        io_threads: int = 2,
        config: PoolConfig | None = None,
        component_type: str = "sink",
        router: Router | None = None,
        rng: Callable[[], float] = random.random,
        delivery: str = "at_least_once",
        position: RecordPosition | None = None,
    ) -> None:
        """Build the pool; nothing connects until :meth:`start`.

        ``shards`` lists each shard's replicas (endpoints handed to
        ``connector.open_writer``) and weight. ``io_threads`` worker threads write
        batches (0: writes run inside ``tick``/``flush``/``pump`` on the caller's
        thread). ``rng`` draws the retry jitter. ``delivery="effectively_once"`` needs
        ``position`` (the cell the chain sets to each record's offset) and writers that are
        :class:`~spate.sink._intents.IntentWriter` s (checked at :meth:`start`).
        """
        if not shards:
            raise ValueError(f"sink {name}: at least one shard is required")
        for i, shard in enumerate(shards):
            for _key, message in shard.config_errors():
                raise ValueError(f"sink {name}: shards[{i}]: {message}")
        if io_threads < 0:
            raise ValueError(f"io_threads must be 0 or more, got {io_threads}")
        cfg = config if config is not None else PoolConfig()
        self.name = name
        self.config = cfg
        self.on_record_error: ErrorPolicy = cfg.on_record_error
        self._connector = connector
        self._row_connector = connector if isinstance(connector, RowBatchConnector) else None
        self._frame_connector = connector if isinstance(connector, FrameConnector) else None
        self._clock = clock
        self._budget = budget
        self._io_threads = io_threads
        self._token_prefix = f"{pipeline}-{run_nonce}"
        self._pipeline = pipeline
        self._identity: str | None = None
        self._identity_rows: dict[int, int] = {}
        self._max_rows = cfg.batch.max_rows
        self._max_bytes = cfg.batch.max_bytes
        self._linger = cfg.batch.linger
        self._max_inflight = cfg.inflight.max_per_shard
        self._queue_limit = cfg.inflight.max_per_shard
        self._backoff = Backoff(cfg.retry, rng)
        self._shards = [
            Shard(i, s.replicas, cfg.breaker, name, meter, component_type)
            for i, s in enumerate(shards)
        ]
        if router is None and len(shards) > 1:
            router = WeightedHashRouter([s.weight for s in shards])
        self._router = router
        self._lock = threading.Lock()
        self._cond = threading.Condition(self._lock)
        self._threads: list[threading.Thread] = []
        self._started = False
        self._ready = False
        self._stopping = False
        self._closed = False
        self._rr = 0
        self.effectively_once = delivery == "effectively_once"
        self._position = position if position is not None else RecordPosition()
        if self.effectively_once:
            if position is None:
                raise ValueError(f"sink {name}: effectively_once needs the record position")
            self.offer = self._offer_lane  # type: ignore[method-assign]
        self._lanes: dict[Lane, list[_LaneBlocks]] = {}
        self._load_retry: dict[Lane, float] = {}
        self._committed: dict[Lane, int] = {}
        self._recorded = [0] * len(self._shards)
        self._generation: dict[Lane, int] = {}
        """Per lane: how many times it was revoked; a block of an older generation whose
        intent is not recorded yet is never recorded nor inserted (the next owner cuts)."""
        self._workers = PoolWorkers(
            name,
            cond=self._cond,
            clock=clock,
            backoff=self._backoff,
            budget=budget,
            next_work=self._next_work,
            next_wake=self._next_wake,
            fence=self._fence,
            stopping=self._stopped,
            freshness=WriteFreshness(meter, name, component_type, connector),
        )

    @classmethod
    def from_context(
        cls,
        connector: SinkConnector,
        context: BuildContext,
        *,
        shards: Sequence[ShardConfig],
        config: PoolConfig | None = None,
        component_type: str = "sink",
        router: Router | None = None,
    ) -> SinkPool:
        """The usual way a connector's factory builds its sink: names, meter, clock,
        budget, nonce and thread count come from the factory's ``BuildContext``."""
        return cls(
            context.component,
            connector,
            shards=shards,
            pipeline=context.pipeline,
            run_nonce=context.run_nonce,
            meter=context.meter,
            clock=context.clock,
            budget=context.budget,
            io_threads=context.io_threads,
            config=config,
            component_type=component_type,
            router=router,
            delivery=context.delivery,
            position=context.position,
        )

    # -- Sink protocol ----------------------------------------------------------------

    def start(self) -> None:
        """Open a writer per replica and probe each; raise ``SinkError`` naming a bad one.

        Called once by the runtime before anything is consumed (B29). Starts the workers.
        """
        if self._started:
            return
        for shard in self._shards:
            for replica in shard.replicas:
                self._open_and_probe(shard, replica)
                if self.effectively_once and not isinstance(replica.writer, IntentWriter):
                    raise SinkError(
                        f"sink {self.name}: pipeline.delivery: effectively_once needs a sink "
                        "that records block intents (ClickHouse); this one cannot",
                        ErrorClass.FATAL,
                    )
        self._start_router()
        with self._cond:
            self._started = True
            self._ready = True
        for i in range(self._io_threads):
            thread = threading.Thread(
                target=self._workers.run, name=f"spate-sink-{self.name}-{i}", daemon=True
            )
            thread.start()
            self._threads.append(thread)
        logger.info(
            "sink %s started: %d shard(s), %d worker(s)",
            self.name,
            len(self._shards),
            self._io_threads,
        )

    def _open_and_probe(self, shard: Shard, replica: Replica) -> None:
        where = f"sink {self.name}: shard {shard.index} replica {replica.endpoint}"
        try:
            writer = self._connector.open_writer(shard.index, replica.index, replica.endpoint)
            replica.writer = writer
            writer.probe()
        except SinkError as exc:
            raise SinkError(f"{where}: {exc.reason}", ErrorClass.FATAL) from exc
        except Exception as exc:
            raise SinkError(f"{where}: {exc!r}", ErrorClass.FATAL) from exc

    def _start_router(self) -> None:
        """Start a :class:`~spate.sink.StartingRouter` (it may need what the probes learned)."""
        router = self._router
        if not isinstance(router, StartingRouter):
            return
        try:
            router.start()
        except SinkError as exc:
            raise SinkError(f"sink {self.name}: {exc.reason}", ErrorClass.FATAL) from exc
        except Exception as exc:
            raise SinkError(f"sink {self.name}: {exc}", ErrorClass.FATAL) from exc

    def offer(self, row: object, key: bytes | None, lane: Lane, ack: AckToken) -> Offer:
        """Append ``row`` to its shard's open batch, or refuse it while the shard is full.

        Called on the pipeline thread for every row; never blocks on I/O. Raises
        ``SinkError(RECORD)`` for a row the connector cannot encode or the router cannot
        place (nothing is held).
        """
        router = self._router
        if router is None:
            shard = self._shards[0]
        else:
            try:
                shard = self._shards[router.route(row, key, lane)]
            except SinkError as exc:  # a row the router cannot place: a record error
                raise SinkError(f"sink {self.name}: {exc.reason}", exc.error_class) from None
        # One uncontended lock per row: worker threads seal lingering batches, so the
        # open batch is shared. acquire/release in try/finally costs less than `with`.
        lock = self._lock
        lock.acquire()
        try:
            batch = shard.open
            if batch is None:
                batch = self._open_batch(shard)
                if batch is None:
                    return Offer.REJECTED
            try:
                size = batch.buffer.append(row)
            except SinkError:
                self._record_error(shard, batch)
                raise
            except Exception as exc:
                self._record_error(shard, batch)
                raise SinkError(
                    f"sink {self.name}: cannot encode row: {exc!r}", ErrorClass.RECORD
                ) from exc
            batch.rows += 1
            nbytes = batch.nbytes + size
            batch.nbytes = nbytes
            if ack is not batch.last_ack:
                batch.hold(ack)
                self._acquire(batch)
            elif nbytes - batch.acquired >= BUDGET_CHUNK:
                self._acquire(batch)
            if batch.rows >= self._max_rows:
                self._seal(shard, "max_rows")
            elif nbytes >= self._max_bytes:
                self._seal(shard, "max_bytes")
        finally:
            lock.release()
        return ACCEPTED

    # -- a source batch's rows at once (RowBatchSink, B95) -----------------------------

    @property
    def takes_rows(self) -> bool:
        """Whether the chain may hand this pool a source batch's rows at once: the
        connector checks rows per column (``prepare_rows``), and each row is not placed by
        its own offset (effectively once stays per row)."""
        connector = self._row_connector
        return not self.effectively_once and connector is not None and connector.takes_rows is True

    def prepare_rows(
        self, rows: list[object], keys: Sequence[bytes | None], lane: Lane
    ) -> tuple[_PreparedRows, list[tuple[int, str]]]:
        """Place and check a source batch's rows (B95); hold nothing.

        Returns the rows to hand to :meth:`offer_rows` and the bad ones as ``(position,
        reason)``, with the reasons and counters :meth:`offer` has for them: a row the
        router cannot place, then a value the connector cannot encode (counted as a
        record error of the row's shard).
        """
        count = len(rows)
        bad: list[tuple[int, str]] = []
        shards: list[int] | None = None
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
            if shards is not None:
                dropped = {position for position, _ in refused}
                shards = [s for i, s in enumerate(shards) if i not in dropped]
            bad.sort()
        parts: list[tuple[int, RowBlock]]
        if shards is None or len(self._shards) == 1:
            parts = [(0, block)]
        else:
            by_shard: dict[int, list[int]] = {}
            for position, shard_index in enumerate(shards):
                by_shard.setdefault(shard_index, []).append(position)
            parts = [
                (i, block if len(positions) == len(block) else block.take(positions))
                for i, positions in sorted(by_shard.items())
            ]
        return _PreparedRows(parts), bad

    def offer_rows(self, prepared: object, lane: Lane, ack: AckToken) -> Offer:
        """Append prepared rows to their shards' open batches, all or nothing (B95).

        Admitted by :meth:`_admit`, the one rule rows, row batches and frames share
        (B7, B144): the whole is refused while a target shard has no room for its rows.
        """
        if not isinstance(prepared, _PreparedRows):
            raise SinkError(
                f"sink {self.name}: offer_rows takes what prepare_rows returned", ErrorClass.FATAL
            )
        parts = [(self._shards[index], block, len(block)) for index, block in prepared.parts]
        with self._cond:
            return self._admit(parts, ack, self._append_block)

    def _append_block(self, buffer: RowBuffer, block: object, start: int, stop: int) -> int:
        """Append rows ``start:stop`` of a prepared :class:`RowBlock` (lock held)."""
        if not isinstance(buffer, RowBlockBuffer) or not isinstance(block, RowBlock):
            raise SinkError(
                f"sink {self.name}: its buffers cannot take row blocks", ErrorClass.FATAL
            )
        whole = start == 0 and stop == len(block)
        return buffer.append_rows(block if whole else block.slice(start, stop))

    def _admit(
        self,
        parts: Sequence[tuple[Shard, object, int]],
        ack: AckToken,
        append: Callable[[RowBuffer, object, int, int], int],
    ) -> Offer:
        """Admit ``parts`` — ``(shard, rows, count)``, rows in any form ``append`` adds
        to a buffer — all or nothing (lock held; B7, B95, B144).

        The one room rule: a shard refuses ``count`` rows while it has sealed batches
        waiting and fewer than ``count`` rows of room (:meth:`_room`: what its open batch
        and its queue's free places may still take); a shard with nothing queued always
        takes them, so a batch larger than the room is taken once the queue has drained
        and never waits forever. Rows are cut at ``batch.max_rows`` (batches opened past
        the queue limit by an admitted part are forced); a batch seals on ``max_bytes``
        after the rows that reach it. Each batch holds ``ack`` once (:meth:`_hold`).
        :meth:`offer` is this routine for one row, written out for the per-row path: one
        row has no room exactly when its shard has no open batch and a full queue.
        """
        if self._closed:
            raise RuntimeError(f"sink {self.name} is closed")
        for shard, _part, count in parts:
            if shard.queue and self._room(shard) < count:
                return Offer.REJECTED
        max_rows = self._max_rows
        for shard, part, count in parts:
            start = 0
            while start < count:
                batch = shard.open
                if batch is None:
                    batch = self._open_batch(shard, force=True)
                    assert batch is not None
                # max(…, 1): never a negative room, whatever the limits were before.
                stop = min(count, start + max(max_rows - batch.rows, 1))
                batch.nbytes += append(batch.buffer, part, start, stop)
                batch.rows += stop - start
                start = stop
                self._hold(batch, ack)
                if batch.rows >= max_rows:
                    self._seal(shard, "max_rows")
                elif batch.nbytes >= self._max_bytes:
                    self._seal(shard, "max_bytes")
        return ACCEPTED

    def _hold(self, batch: PoolBatch, ack: AckToken) -> None:
        """``batch`` holds ``ack`` (retained once per batch) and the budget its rows
        count (lock held); rows, row batches and frames all hold their acks here."""
        if ack is not batch.last_ack:
            batch.hold(ack)
        self._acquire(batch)

    def _room(self, shard: Shard, batch: PoolBatch | None = None, lane: bool = False) -> int:
        """Rows ``shard`` takes now before refusing, as :meth:`offer` counts (lock held):
        its open batch's room and its queue's free places. ``lane``: the open batch is
        ``batch``, a lane block (effectively once), not the shard's."""
        free = self._queue_limit - len(shard.queue)
        if not lane:
            batch = shard.open
        if batch is None:
            return max(free, 0) * self._max_rows
        return self._max_rows - batch.rows + max(free - 1, 0) * self._max_rows

    # -- columnar path (frames from spate.ops._columnar) -------------------------------

    @property
    def takes_frames(self) -> bool:
        """Whether the connector takes columns (a sink that evolves its table does not)."""
        connector = self._frame_connector
        return connector is not None and connector.takes_frames is True

    @property
    def frame_needs_keys(self) -> bool:
        """Whether :meth:`offer_frame` needs the records' keys (a router placing by them)."""
        return self._router is not None and self._router.placed_by is None

    def prepare_frame(self, frame: object) -> tuple[object, list[tuple[int, str]]]:
        """The connector's per-column check of a frame: ``(frame to offer, bad rows)``.

        Bad rows (position, reason) are record errors for those records alone (B28).
        """
        connector = self._frame_connector
        if connector is None:
            raise SinkError(f"sink {self.name} cannot take columns", ErrorClass.FATAL)
        if not self.effectively_once:
            return connector.prepare_frame(frame)
        # Effectively once places each row by its record's offset: keep the rows' record
        # indexes (the frame's row column) past the connector's check, which drops it.
        if not isinstance(frame, _RowFrame) or ROW_COLUMN not in frame.columns:
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
        return _LaneFrame(table, records), bad

    def offer_frame(
        self,
        frame: object,
        keys: Sequence[bytes | None] | None,
        lane: Lane,
        ack: AckToken,
        shards: Sequence[int] | None = None,
    ) -> Offer:
        """Append a prepared frame to its shards' open batches, all or nothing.

        Each row goes to the shard the row path would pick (B13): ``shards`` when the
        caller placed the rows itself, else the router's :meth:`~spate.sink.Router.route_column`
        over the frame's :attr:`~spate.sink.Router.placed_by` column, or over ``keys`` when
        it places by the record key. Refuses the whole frame while any target shard is full
        (B7); the caller offers it again later. A value the router cannot place raises
        ``SinkError(RECORD)`` naming the sink (nothing is held).
        """
        if self.effectively_once:
            if not isinstance(frame, _LaneFrame):
                raise SinkError(
                    f"sink {self.name}: offer_frame takes what prepare_frame returned",
                    ErrorClass.FATAL,
                )
            return self._offer_lane_frame(frame, keys, lane, ack, shards)
        count = _rows_of(frame)
        if not count:
            return ACCEPTED
        router = self._router
        parts: list[tuple[Shard, object]]
        if shards is None and router is not None:
            shards = self._route_frame(router, frame, keys, count, lane)
        if shards is None:
            parts = [(self._shards[0], frame)]
        else:
            by_shard: dict[int, list[int]] = {}
            for position, shard_index in enumerate(shards):
                by_shard.setdefault(shard_index, []).append(position)
            take = self._take_rows
            parts = [
                (self._shards[i], frame if len(rows) == count else take(frame, rows))
                for i, rows in sorted(by_shard.items())
            ]
        with self._cond:
            return self._admit(
                [(shard, part, _rows_of(part)) for shard, part in parts], ack, self._append_frame
            )

    def _append_frame(self, buffer: RowBuffer, frame: object, start: int, stop: int) -> int:
        """Append rows ``start:stop`` of a prepared frame (lock held)."""
        if not isinstance(buffer, FrameBuffer):
            raise SinkError(f"sink {self.name}: its buffers cannot take frames", ErrorClass.FATAL)
        if start == 0 and stop == _rows_of(frame):
            return buffer.append_frame(frame)
        return buffer.append_frame(self._take_rows(frame, list(range(start, stop))))

    def _take_rows(self, frame: object, rows: list[int]) -> object:
        """The rows of a prepared frame at ``rows`` (the connector's ``take_rows``)."""
        connector = self._frame_connector
        if connector is None:
            raise SinkError(f"sink {self.name} cannot split frames", ErrorClass.FATAL)
        return connector.take_rows(frame, rows)

    def _route_frame(
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

    def _open_batch(self, shard: Shard, force: bool = False) -> PoolBatch | None:
        """A new open batch for ``shard``, or None while its queue is full (lock held);
        ``force`` opens one anyway (rows :meth:`offer_rows` has already taken)."""
        if self._closed:
            raise RuntimeError(f"sink {self.name} is closed")
        if not force and len(shard.queue) >= self._queue_limit:
            return None
        batch = shard.open = PoolBatch(
            shard.index, self._connector.new_buffer(shard.index), self._clock.monotonic()
        )
        self._cond.notify()  # a sleeping worker must learn the new linger deadline
        return batch

    def _record_error(self, shard: Shard, batch: PoolBatch) -> None:
        """The buffer refused a row: count it and drop a still-empty batch (lock held)."""
        shard.m_errors["record"].inc()
        if batch.rows == 0:
            shard.open = None

    def resize(self, *, max_rows: int, max_bytes: int, linger: float) -> None:
        """Change the limits open batches seal at (``batch.max_rows``, ``max_bytes``,
        ``linger``): a connector following its destination's health grows them and
        returns them (B225). Sealed batches keep their size. Any thread."""
        with self._cond:
            self._max_rows = max(int(max_rows), 1)
            self._max_bytes = max(int(max_bytes), 1)
            self._linger = max(float(linger), 0.0)
            for shard in self._shards:
                # An open batch already past the smaller limit is sealed now: cutting
                # the next rows into it would count from a negative room.
                batch = shard.open
                if batch is not None and batch.rows >= self._max_rows:
                    self._seal(shard, "max_rows")
            self._cond.notify_all()

    def tick(self) -> None:
        """Checkpoint tick: seal every partial batch so its acks can resolve (B10).

        Not the rows of an identified batch being offered (a spool's, which resolves as a
        whole anyway): they are cut by their rows alone, the same in every run (B56)."""
        with self._cond:
            if self._identity is None:
                for shard in self._shards:
                    self._seal(shard, "tick")
            self._seal_lanes("tick")
        if self._io_threads == 0:
            self.pump()

    def flush(self, deadline: float) -> bool:
        """Seal everything and wait until all is written or the clock reaches ``deadline``.

        Retries continue until the deadline (``max_attempts: 0``, B12). Returns True when
        nothing is left unwritten; what is left stays held until :meth:`abandon`.
        Called on drain; blocks.
        """
        with self._cond:
            for shard in self._shards:
                self._seal(shard, "drain")
            self._seal_lanes("drain")
            self._cond.notify_all()
        return self._wait_until(deadline, self._all_written)

    def flush_lanes(self, lanes: Collection[Lane], deadline: float) -> bool:
        """Seal only the open batches holding rows of ``lanes`` and wait until every batch
        holding their rows is written, or ``deadline`` (B40).

        Batches of other lanes stay open and keep filling: a revocation does not cut every
        shard's batch short. Rows of other lanes in a sealed batch are written along.
        Called on revocation; blocks.
        """
        lanes = frozenset(lanes)
        with self._cond:
            targets: list[PoolBatch] = []
            for shard in self._shards:
                batch = shard.open
                if batch is not None and batch.holds_any(lanes):
                    self._seal(shard, "drain")
                targets += [b for b in shard.queue if b.holds_any(lanes)]
                targets += [b for b in shard.writing if b.holds_any(lanes)]
            if self.effectively_once:
                self._seal_lanes("drain", lanes)
                targets += [b for s in self._shards for b in s.queue if b.lane in lanes]
            self._cond.notify_all()
        return self._wait_until(deadline, lambda: all(b.done for b in targets))

    def _wait_until(self, deadline: float, done: Callable[[], bool]) -> bool:
        """Let the writes run until ``done()`` (checked under the lock) or ``deadline``."""
        if self._io_threads == 0:
            return self._pump_until(deadline, done)
        with self._cond:
            while True:
                if done():
                    return True
                now = self._clock.monotonic()
                if now >= deadline:
                    return False
                self._cond.wait(min(deadline - now, 0.25))

    def abandon(self) -> int:
        """Fail the acks of every batch not yet written (B4); return how many rows.

        Writes still running finish in the background, but their outcome no longer
        changes anything: their batches are already failed.
        """
        settled: list[Settled] = []
        rows = 0
        with self._cond:
            for shard in self._shards:
                batches = list(shard.queue) + list(shard.writing)
                if shard.open is not None:
                    batches.append(shard.open)
                batches += self._lane_opens(shard.index)
                shard.open = None
                shard.queue.clear()
                for batch in batches:
                    if batch.done or batch.rows == 0:
                        continue
                    rows += batch.rows
                    shard.m_abandoned.inc(batch.rows)
                    settled.append(settle_batch(batch, False))
            for states in self._lanes.values():
                for state in states:
                    state.open = None
            self._cond.notify_all()
        release_settled(self._budget, settled)
        if rows:
            logger.warning("sink %s abandoned %d unwritten rows", self.name, rows)
        return rows

    def ready(self) -> bool:
        """Whether every endpoint's probe passed (feeds ``/readyz``)."""
        return self._ready

    def close(self) -> None:
        """Stop the workers, fail whatever is still held (B4) and close the writers."""
        with self._cond:
            if self._closed:
                return
            self._closed = True
            self._stopping = True
            self._cond.notify_all()
        for thread in self._threads:
            thread.join(_JOIN_TIMEOUT)
            if thread.is_alive():
                logger.warning("sink %s: worker %s did not stop in time", self.name, thread.name)
        self.abandon()
        for shard in self._shards:
            for replica in shard.replicas:
                if replica.writer is None:
                    continue
                try:
                    replica.writer.close()
                except Exception:
                    logger.warning(
                        "sink %s: closing %s failed", self.name, replica.endpoint, exc_info=True
                    )
        self._ready = False

    # -- effectively once (B88, B89) -------------------------------------------------------

    def _offer_lane(self, row: object, key: bytes | None, lane: Lane, ack: AckToken) -> Offer:
        """:meth:`offer` under ``effectively_once``: the row goes to its (shard, lane) block.

        The row's position is the chain's current record offset and the row's index among
        that record's rows for the shard. A lane seen for the first time loads its intents
        first (one read per shard, on this thread); while they cannot be read the row is
        refused (the chain stalls and offers it again). Replayed rows seal their block at
        exactly the recorded end; other blocks seal as in :meth:`offer`, and a free block
        always ends before the next recorded one begins.
        """
        router = self._router
        if router is None:
            shard = self._shards[0]
        else:
            try:
                shard = self._shards[router.route(row, key, lane)]
            except SinkError as exc:
                raise SinkError(f"sink {self.name}: {exc.reason}", exc.error_class) from None
        offset = self._position.offset
        states = self._lanes.get(lane)
        if states is None:
            states = self._load_lane(lane, offset)
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
                    self._seal_lane(shard, state, "replay")
                    batch = None
            if batch is None:
                if self._closed:
                    raise RuntimeError(f"sink {self.name} is closed")
                if len(shard.queue) >= self._queue_limit:
                    return Offer.REJECTED
                batch = self._open_lane_batch(shard, state, lane, pos)
            try:
                size = batch.buffer.append(row)
            except SinkError:
                self._lane_record_error(shard, state, batch)
                raise
            except Exception as exc:
                self._lane_record_error(shard, state, batch)
                raise SinkError(
                    f"sink {self.name}: cannot encode row: {exc!r}", ErrorClass.RECORD
                ) from exc
            state.last = pos
            batch.last = pos
            batch.rows += 1
            batch.nbytes += size
            if ack is not batch.last_ack:
                batch.hold(ack)
                self._acquire(batch)
            elif batch.nbytes - batch.acquired >= BUDGET_CHUNK:
                self._acquire(batch)
            if batch.plan_last is not None:
                if pos >= batch.plan_last:
                    self._seal_lane(shard, state, "replay")
            elif batch.rows >= self._max_rows:
                self._seal_lane(shard, state, "max_rows")
            elif batch.nbytes >= self._max_bytes:
                self._seal_lane(shard, state, "max_bytes")
        return Offer.ACCEPTED

    def _offer_lane_frame(
        self,
        prepared: _LaneFrame,
        keys: Sequence[bytes | None] | None,
        lane: Lane,
        ack: AckToken,
        shards: Sequence[int] | None,
    ) -> Offer:
        """:meth:`offer_frame` under ``effectively_once``: each row goes to its (shard,
        lane) block at the position its record's offset gives it, as :meth:`_offer_lane`
        places rows one at a time (B88, B89, B145).

        A row's offset is the batch's offset (:attr:`RecordPosition.offsets`) at the row's
        record index; its index among that record's rows for the shard counts on from the
        lane's last row. Rows are cut where one at a time they would be: a replayed block
        at exactly its recorded end, a free block before the next recorded one begins, on
        ``max_rows``, and on ``max_bytes`` after the run of rows that reaches it. The
        frame is admitted all or nothing by :meth:`_admit`'s room rule.
        """
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
        router = self._router
        if shards is None and router is not None:
            shards = self._route_frame(router, frame, keys, count, lane)
        by_shard: dict[int, list[int]] = {}
        if shards is None:
            by_shard[0] = list(range(count))
        else:
            for row, shard_index in enumerate(shards):
                by_shard.setdefault(shard_index, []).append(row)
        states = self._lanes.get(lane)
        if states is None:
            states = self._load_lane(lane, offsets[records[0]])
            if states is None:
                return Offer.REJECTED
        with self._cond:
            if self._closed:
                raise RuntimeError(f"sink {self.name} is closed")
            for index, rows in by_shard.items():
                shard = self._shards[index]
                if shard.queue and self._room(shard, states[index].open, lane=True) < len(rows):
                    return Offer.REJECTED
            for index, rows in sorted(by_shard.items()):
                shard = self._shards[index]
                self._place_lane_rows(shard, states[index], lane, ack, frame, records, rows)
        return ACCEPTED

    def _place_lane_rows(
        self,
        shard: Shard,
        state: _LaneBlocks,
        lane: Lane,
        ack: AckToken,
        frame: object,
        records: list[int],
        rows: list[int],
    ) -> None:
        """Append ``rows`` of ``frame`` (whose rows come from ``records``) to ``state``'s
        blocks, cut as rows one at a time would be (lock held; the frame was admitted)."""
        count = len(records)
        offsets = self._position.offsets
        run: list[int] = []
        batch: PoolBatch | None = state.open

        def flush(block: PoolBatch) -> None:
            part = frame if len(run) == count else self._take_rows(frame, run)
            buffer = block.buffer
            if not isinstance(buffer, FrameBuffer):
                raise SinkError(
                    f"sink {self.name}: its buffers cannot take frames", ErrorClass.FATAL
                )
            block.nbytes += buffer.append_frame(part)
            block.rows += len(run)
            self._hold(block, ack)
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
                    self._seal_lane(shard, state, "replay")
                    batch = None
            if batch is None:
                batch = self._open_lane_batch(shard, state, lane, pos)
            run.append(row)
            state.last = pos
            batch.last = pos
            if batch.plan_last is not None:
                if pos >= batch.plan_last:
                    flush(batch)
                    self._seal_lane(shard, state, "replay")
                    batch = None
            elif batch.rows + len(run) >= self._max_rows:
                flush(batch)
                self._seal_lane(shard, state, "max_rows")
                batch = None
        if run and batch is not None:
            flush(batch)
            if batch.plan_last is None and batch.nbytes >= self._max_bytes:
                self._seal_lane(shard, state, "max_bytes")

    def _open_lane_batch(
        self, shard: Shard, state: _LaneBlocks, lane: Lane, pos: Position
    ) -> PoolBatch:
        """Open the block of ``state`` starting at ``pos`` (lock held): a replayed one when
        ``pos`` is inside a recorded block, else a free one ending before the next."""
        plans = state.plans
        while plans and plans[0].last < pos:
            plans.popleft()  # recorded blocks that gave no row this time (nothing to rebuild)
        batch = PoolBatch(shard.index, self._connector.new_buffer(shard.index), 0.0)
        batch.opened_at = self._clock.monotonic()
        batch.lane = lane
        batch.first = pos
        batch.generation = self._generation.get(lane, 0)
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

    def _lane_record_error(self, shard: Shard, state: _LaneBlocks, batch: PoolBatch) -> None:
        shard.m_errors["record"].inc()
        if batch.rows == 0:
            state.open = None

    def _seal_lane(self, shard: Shard, state: _LaneBlocks, reason: SealReason) -> None:
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
        batch.token = batch.intent.token(self._pipeline, self.name)
        batch.seq = shard.next_seq
        shard.next_seq += 1
        batch.reason = reason
        self._acquire(batch)
        shard.queue.append(batch)
        shard.m_flushes[reason].inc()
        self._cond.notify()

    def _seal_lanes(self, reason: SealReason, lanes: frozenset[Lane] | None = None) -> None:
        """Seal every free lane block (of ``lanes`` when given); lock held."""
        for lane, states in self._lanes.items():
            if lanes is not None and lane not in lanes:
                continue
            for index, state in enumerate(states):
                if state.open is not None and state.open.plan_last is None:
                    self._seal_lane(self._shards[index], state, reason)

    def _lane_opens(self, shard: int, free_only: bool = False) -> list[PoolBatch]:
        """Open lane blocks of ``shard`` (lock held); ``free_only``: not replayed ones."""
        if not self._lanes:
            return []
        out = []
        for states in self._lanes.values():
            batch = states[shard].open
            if batch is not None and batch.rows and not (free_only and batch.plan_last):
                out.append(batch)
        return out

    def _load_lane(self, lane: Lane, since: int) -> list[_LaneBlocks] | None:
        """Read ``lane``'s intents from each shard (pipeline thread, lock NOT held).

        ``since`` is the lane's first offset this assignment, at or past its committed
        offset; intents ending before it are committed and are deleted (best effort).
        Returns None (and retries later) when a shard cannot be read.
        """
        now = self._clock.monotonic()
        if now < self._load_retry.get(lane, 0.0):
            return None
        states: list[_LaneBlocks] = []
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
            states.append(_LaneBlocks(plans, epoch))
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

    def lanes_revoked(self, lanes: Collection[Lane]) -> None:
        """Revocation: fail the replayed blocks still waiting for rows of ``lanes`` (the
        next owner rebuilds them) and forget the lanes' state (read again if assigned)."""
        settled: list[Settled] = []
        lanes = frozenset(lanes)
        with self._cond:
            for lane in lanes:
                self._generation[lane] = self._generation.get(lane, 0) + 1
                for state in self._lanes.pop(lane, ()):
                    batch = state.open
                    state.open = None
                    if batch is not None and batch.rows and not batch.done:
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
                    if not batch.done:
                        settled.append(settle_batch(batch, False))
        release_settled(self._budget, settled)

    def replaying_lanes(self) -> frozenset[Lane]:
        """Lanes with a replayed block that holds rows and waits for more (B121): the
        runtime keeps them fetching while it pauses the others, so the block completes."""
        if not self._lanes:
            return frozenset()
        with self._cond:
            return frozenset(
                lane
                for lane, states in self._lanes.items()
                if any(s.open is not None and s.open.plan_last and s.open.rows for s in states)
            )

    def on_committed(self, positions: Mapping[Lane, int]) -> None:
        """The source committed ``positions``: intents ending below them can go (later,
        on a worker, every few hundred intents)."""
        if self.effectively_once:
            with self._cond:
                self._committed.update(positions)

    def _record_intent(self, shard: Shard, writer: object, intent: Intent) -> None:
        """Record ``intent`` (worker thread, lock NOT held); now and then delete the
        intents the committed offsets have passed."""
        assert isinstance(writer, IntentWriter)
        writer.record_intent(self._pipeline, self.name, intent)
        self._recorded[shard.index] += 1
        if self._recorded[shard.index] % _FORGET_EVERY == 0:
            with self._cond:
                committed = dict(self._committed)
            for lane, offset in committed.items():
                self._forget(writer, lane, offset)

    def _fence(self, shard: Shard, writer: object, batch: PoolBatch, intent: Intent) -> None:
        """Record ``batch``'s intent, then make sure the lane is still this pool's before
        its insert (worker thread, lock NOT held; raises ``SinkError``).

        The intent may land long after it was sent (a slow request, a frozen process).
        If the lane was revoked meanwhile, or another member has claimed it (a frozen
        member's session expired), that owner may have read the intents without this one
        and cut the rows its own way: the block must not be inserted (B125). Once the
        check passes, any later owner reads the intent and rebuilds the block under the
        same token, so the insert may land at any time after.
        """
        assert isinstance(writer, IntentWriter)
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

    # -- identified batches (tiers) ------------------------------------------------------

    def begin_identified(self, identity: str) -> None:
        """Rows offered from now until :meth:`end_identified` form batches whose dedup
        tokens derive from ``identity`` (``{pipeline}-{identity}-{shard}-{start}-{rows}``)
        instead of the run nonce, so the same rows offered again under the same identity
        in a later run carry the same tokens (a spool's replay, B56).

        ``identity`` must be unique to one fixed sequence of rows across runs. Called by a
        tier on the pipeline thread; seals what is open first. Until
        :meth:`end_identified` the rows are cut on ``max_rows`` and ``max_bytes`` only,
        never by a tick or ``linger``, so the cuts depend on the rows alone and a replay
        repeats them whatever the queues held in the first run (B56).
        """
        with self._cond:
            for shard in self._shards:
                self._seal(shard, "tier")
            self._identity = identity
            self._identity_rows = {}

    def end_identified(self) -> None:
        """Seal the identified batch's rows and return to run-nonce tokens."""
        with self._cond:
            for shard in self._shards:
                self._seal(shard, "tier")
            self._identity = None
            self._identity_rows = {}

    # -- inline mode and introspection --------------------------------------------------

    def pump(self) -> int:
        """Run every write that is due now on the calling thread; return how many ran.

        With ``io_threads=0`` this (with :meth:`tick` and :meth:`flush`) is what writes.
        """
        attempts = 0
        while True:
            with self._cond:
                work = self._next_work(self._clock.monotonic())
            if work is None:
                return attempts
            self._workers.write(*work)
            attempts += 1

    def pending_rows(self) -> int:
        """Rows accepted but not yet resolved (open, queued and being written)."""
        with self._cond:
            total = 0
            for shard in self._shards:
                if shard.open is not None:
                    total += shard.open.rows
                total += sum(b.rows for b in self._lane_opens(shard.index))
                total += sum(b.rows for b in shard.queue)
                total += sum(b.rows for b in shard.writing)
            return total

    @property
    def router(self) -> Router | None:
        """The router placing rows on shards (``None`` with one shard and no router)."""
        return self._router

    def shard_of(self, key: bytes | None, lane: Lane, row: object = None) -> int:
        """The shard a row with this key and lane goes to."""
        return 0 if self._router is None else self._router.route(row, key, lane)

    # -- internals (called with the lock held unless said otherwise) --------------------

    def _acquire(self, batch: PoolBatch) -> None:
        delta = batch.nbytes - batch.acquired
        if delta > 0:
            batch.acquired = batch.nbytes
            self._budget.acquire(delta)

    def _seal(self, shard: Shard, reason: SealReason) -> None:
        batch = shard.open
        if batch is None:
            return
        shard.open = None
        if batch.rows == 0:
            return
        batch.seq = shard.next_seq
        shard.next_seq += 1
        if self._identity is None:
            batch.token = f"{self._token_prefix}-{shard.index}-{batch.seq}"
        else:
            # Rows of an identified batch (a spool tier's): the token names exactly
            # which rows these are, so a replay of the same batch gets the same token.
            start = self._identity_rows.get(shard.index, 0)
            self._identity_rows[shard.index] = start + batch.rows
            batch.token = f"{self._pipeline}-{self._identity}-{shard.index}-{start}-{batch.rows}"
        batch.reason = reason
        self._acquire(batch)
        shard.queue.append(batch)
        shard.m_flushes[reason].inc()
        self._cond.notify()

    def _seal_lingering(self, now: float) -> None:
        linger = self._linger
        for shard in self._shards if self._identity is None else ():  # B56, as in tick()
            batch = shard.open
            if batch is not None and batch.rows and now - batch.opened_at >= linger:
                self._seal(shard, "linger")
        for states in self._lanes.values():
            for index, state in enumerate(states):
                batch = state.open
                free = batch is not None and batch.plan_last is None
                if free and now - batch.opened_at >= linger:  # type: ignore[union-attr]
                    self._seal_lane(self._shards[index], state, "linger")

    def _next_work(self, now: float) -> Work | None:
        """Seal the batches that lingered long enough and pick one due now."""
        self._seal_lingering(now)
        return self._pick(now)

    def _stopped(self) -> bool:
        return self._stopping

    def _pick(self, now: float) -> Work | None:
        if not self._started or self._stopping:
            return None
        shards = self._shards
        n = len(shards)
        for step in range(n):
            shard = shards[(self._rr + step) % n]
            picked = shard.pick(now, self._max_inflight)
            if picked is not None:
                self._rr = (shard.index + 1) % n
                return shard, picked[0], picked[1]
        return None

    def _next_wake(self, now: float) -> float | None:
        times: list[float] = []
        for shard in self._shards:
            if shard.open is not None and shard.open.rows:
                times.append(shard.open.opened_at + self._linger)
            for batch in self._lane_opens(shard.index, free_only=True):
                times.append(batch.opened_at + self._linger)
            due = shard.next_wake(now, self._max_inflight)
            if due is not None:
                times.append(due)
        return min(times) if times else None

    def _all_written(self) -> bool:
        """Nothing left to write; a replayed block waiting for its rows is not waited for
        (it is never written short, B89)."""
        return all(
            shard.idle and shard.open is None and not self._lane_opens(shard.index, True)
            for shard in self._shards
        )

    def _pump_until(self, deadline: float, done: Callable[[], bool]) -> bool:
        while True:
            self.pump()
            with self._cond:
                if done():
                    return True
                now = self._clock.monotonic()
                if now >= deadline:
                    return False
                wake = self._next_wake(now)
            wait = deadline - now if wake is None else min(wake - now, deadline - now)
            self._clock.sleep(max(wait, 0.001))
