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
* **rows refused at write time** (B245-B247): with a connector that may refuse rows
  on their own once the rest of the batch is written
  (:class:`~spate.sink.RowRefusingConnector`, the ClickHouse sink under ``dead_letter``
  or ``skip``) the pool is a :class:`~spate.sink._held.HoldingSink`: each batch keeps its
  rows' records (under ``skip`` their positions only, B349), a write ending in
  :class:`~spate.sink.RowsRefused` queues the batch, and on
  the pipeline thread (``tick``, ``flush``, frame and row-batch offers) each refused row
  is charged to its own record through the chain's record policy — its dead letter is
  offered with the row's source ack, again later while the dead-letter sink is full —
  and only then is the batch settled, so no offset passes a row that is neither written
  nor dead-lettered;
* **effectively once** (``delivery="effectively_once"``, B88, B89): one open block per
  (shard, lane) instead of per shard; each row's position comes from the chain's
  :class:`~spate.sink._intents.RecordPosition`; a block's intent is recorded through its
  writer before the insert and its token derives from its positions; the first row of a
  lane loads the lane's intents and replayed rows are sealed at exactly the recorded
  boundaries (never by size, linger, tick or drain); a replayed block that cannot be
  completed is failed, never written short (:mod:`spate.sink._intents`).

The pool is composed of collaborators that import downward only and share its lock:
admission (:mod:`spate.sink._admission`: placement, the one room rule, holding acks,
sealing), the effectively-once lanes (:mod:`spate.sink._lanes`) and the workers
(:mod:`spate.sink._workers`); the pool keeps the lifecycle (start, tick, flush,
revocation, abandon, close) and the :class:`~spate.sink.Sink` face (ADR 0018).

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
from collections.abc import Callable, Collection, Mapping, Sequence
from typing import TYPE_CHECKING

from spate._clock import Clock
from spate.checkpoint._ack import AckToken
from spate.errors import ErrorClass, ErrorPolicy, FatalError, SinkError
from spate.flow._contract import ByteBudget
from spate.metrics._meter import Meter
from spate.records import ROW_COLUMN, Lane, MetaColumn
from spate.sink._admission import Admission, PreparedRows
from spate.sink._batching import Origin, PoolBatch
from spate.sink._contract import Offer
from spate.sink._engine import WriteBehind
from spate.sink._freshness import WriteFreshness
from spate.sink._held import HeldErrors, PendingDeadLetter
from spate.sink._intents import IntentWriter, RecordPosition
from spate.sink._lanes import EffectivelyOnceLanes, RowFrame
from spate.sink._retry import Backoff
from spate.sink._router import Router, StartingRouter, WeightedHashRouter
from spate.sink._shard import Replica, Shard
from spate.sink._workers import PoolWorkers, Settled, Work, release_settled, settle_batch
from spate.sink._writer import RowError, RowRefusingConnector, RowsRefused, SinkConnector
from spate.sink.config import PoolConfig, ShardConfig

if TYPE_CHECKING:
    from spate._context import BuildContext

logger = logging.getLogger(__name__)


class _Refused:
    """A written batch whose refused rows are being charged to their records (B245)."""

    __slots__ = ("batch", "error", "next", "pending")

    def __init__(self, batch: PoolBatch, error: RowsRefused) -> None:
        self.batch = batch
        self.error = error
        self.next = 0
        self.pending: PendingDeadLetter | None = None


_JOIN_TIMEOUT = 5.0
"""Real seconds :meth:`SinkPool.close` waits for each worker (a stuck write may never end)."""

_FORGET_EVERY = 256
"""Intents a shard records between two deletions of committed intents (read when a pool
is built)."""


class SinkPool:
    """A sink made of shards of replicas, written by a small pool of worker threads."""

    meta_columns: tuple[MetaColumn, ...] = ()
    """Columns the chain fills from each row's record (a
    :class:`~spate.sink.MetaColumnsSink`, B252); set by the connector's factory."""

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
        self._clock = clock
        self._budget = budget
        self._io_threads = io_threads
        self._max_inflight = cfg.inflight.max_per_shard
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
        self._started = False
        self._ready = False
        self._stopping = False
        self._rr = 0
        self.effectively_once = delivery == "effectively_once"
        if self.effectively_once and position is None:
            raise ValueError(f"sink {name}: effectively_once needs the record position")
        self._admission = Admission(
            name,
            connector,
            shards=self._shards,
            router=router,
            cond=self._cond,
            clock=clock,
            budget=budget,
            config=cfg,
            pipeline=pipeline,
            run_nonce=run_nonce,
        )
        self._lanes = EffectivelyOnceLanes(
            name,
            connector,
            admission=self._admission,
            shards=self._shards,
            cond=self._cond,
            clock=clock,
            budget=budget,
            pipeline=pipeline,
            position=position if position is not None else RecordPosition(),
            forget_every=_FORGET_EVERY,
        )
        # The per-row path goes straight to the collaborator that places the row.
        self.offer = (  # type: ignore[method-assign]
            self._lanes.offer if self.effectively_once else self._admission.offer
        )
        self._workers = PoolWorkers(
            name,
            cond=self._cond,
            clock=clock,
            backoff=self._backoff,
            budget=budget,
            next_work=self._next_work,
            next_wake=self._next_wake,
            fence=self._lanes.fence,
            freshness=WriteFreshness(meter, name, component_type, connector),
            refused=self._queue_refused,
        )
        self._refused: deque[_Refused] = deque()
        """Written batches whose refused rows wait to be charged (pipeline thread)."""
        self._engine: WriteBehind[Work] = WriteBehind(
            f"sink {name}", self._workers, cond=self._cond, clock=clock, threads=io_threads
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
        self._engine.start(f"spate-sink-{self.name}-{{i}}")
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
        place (nothing is held). The pool binds this name to the collaborator that
        places rows (:meth:`Admission.offer <spate.sink._admission.Admission.offer>`, or
        the effectively-once lanes' offer), so a row costs no extra call.
        """
        if self.effectively_once:
            return self._lanes.offer(row, key, lane, ack)
        return self._admission.offer(row, key, lane, ack)

    # -- a source batch's rows at once (RowBatchSink, B95) -----------------------------

    @property
    def takes_rows(self) -> bool:
        """Whether the chain may hand this pool a source batch's rows at once: the
        connector checks rows per column (``prepare_rows``), and each row is not placed by
        its own offset (effectively once stays per row)."""
        return not self.effectively_once and self._admission.takes_rows()

    def prepare_rows(
        self, rows: list[object], keys: Sequence[bytes | None], lane: Lane
    ) -> tuple[PreparedRows, list[tuple[int, str]]]:
        """Place and check a source batch's rows (B95); hold nothing.

        Returns the rows to hand to :meth:`offer_rows` and the bad ones as ``(position,
        reason)``, with the reasons and counters :meth:`offer` has for them: a row the
        router cannot place, then a value the connector cannot encode (counted as a
        record error of the row's shard).
        """
        return self._admission.prepare_rows(rows, keys, lane)

    def offer_rows(self, prepared: object, lane: Lane, ack: AckToken) -> Offer:
        """Append prepared rows to their shards' open batches, all or nothing (B95).

        Admitted by :meth:`Admission.admit <spate.sink._admission.Admission.admit>`, the
        one rule rows, row batches and frames share (B7, B144): the whole is refused while
        a target shard has no room for its rows.
        """
        if self._refused:
            self.charge_refused()
        return self._admission.offer_rows(prepared, ack)

    # -- columnar path (frames from spate.ops._columnar) -------------------------------

    @property
    def takes_frames(self) -> bool:
        """Whether the connector takes columns (a sink that evolves its table does not)."""
        return self._admission.takes_frames()

    @property
    def frame_needs_keys(self) -> bool:
        """Whether :meth:`offer_frame` needs the records' keys (a router placing by them)."""
        return self._router is not None and self._router.placed_by is None

    def prepare_frame(self, frame: object) -> tuple[object, list[tuple[int, str]]]:
        """The connector's per-column check of a frame: ``(frame to offer, bad rows)``.

        Bad rows (position, reason) are record errors for those records alone (B28).
        Under effectively once the rows' record indexes are kept past the check (each
        row is placed by its record's offset).
        """
        connector = self._admission.frame_connector()
        if self.effectively_once:
            return self._lanes.prepare_frame(connector, frame)
        if (
            self._admission.errors is not None
            and isinstance(frame, RowFrame)
            and ROW_COLUMN in frame.columns
        ):
            return self._lanes.prepare_frame(connector, frame)  # keeps the rows' records
        return connector.prepare_frame(frame)

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
        if self._refused:
            self.charge_refused()
        if self.effectively_once:
            return self._lanes.offer_frame(frame, keys, lane, ack, shards)
        return self._admission.offer_frame(frame, keys, lane, ack, shards)

    def resize(self, *, max_rows: int, max_bytes: int, linger: float) -> None:
        """Change the limits open batches seal at (``batch.max_rows``, ``max_bytes``,
        ``linger``): a connector following its destination's health grows them and
        returns them (B225). Sealed batches keep their size. Any thread."""
        admission = self._admission
        with self._cond:
            admission.max_rows = max(int(max_rows), 1)
            admission.max_bytes = max(int(max_bytes), 1)
            admission.linger = max(float(linger), 0.0)
            for shard in self._shards:
                # An open batch already past the smaller limit is sealed now: cutting
                # the next rows into it would count from a negative room.
                batch = shard.open
                if batch is not None and batch.rows >= admission.max_rows:
                    admission.seal(shard, "max_rows")
            self._cond.notify_all()

    def tick(self) -> None:
        """Checkpoint tick: seal every partial batch so its acks can resolve (B10).

        Not the rows of an identified batch being offered (a spool's, which resolves as a
        whole anyway): they are cut by their rows alone, the same in every run (B56)."""
        with self._cond:
            if self._admission.identity is None:
                self._admission.seal_all("tick")
            self._lanes.seal_all("tick")
        if self._io_threads == 0:
            self.pump()
        if self._refused:
            self.charge_refused()

    def flush(self, deadline: float) -> bool:
        """Seal everything and wait until all is written or the clock reaches ``deadline``.

        Retries continue until the deadline (``max_attempts: 0``, B12). Returns True when
        nothing is left unwritten; what is left stays held until :meth:`abandon`.
        Called on drain; blocks.
        """
        with self._cond:
            self._admission.seal_all("drain")
            self._lanes.seal_all("drain")
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
                    self._admission.seal(shard, "drain")
                targets += [b for b in shard.queue if b.holds_any(lanes)]
                targets += [b for b in shard.writing if b.holds_any(lanes)]
            if self.effectively_once:
                self._lanes.seal_all("drain", lanes)
                targets += [b for s in self._shards for b in s.queue if b.lane in lanes]
            self._cond.notify_all()
        return self._wait_until(deadline, lambda: all(b.settled for b in targets))

    def _wait_until(self, deadline: float, done: Callable[[], bool]) -> bool:
        """Let the writes run until ``done()`` (checked under the lock) or ``deadline``;
        the refused rows of written batches are charged meanwhile (pipeline thread)."""
        return self._engine.wait(deadline, done, between=self._charge_between)

    def _charge_between(self) -> bool:
        """Charge refused rows between writes; True while some wait (a dead-letter sink
        that is full now: offered again after a short pause)."""
        if self._refused:
            self.charge_refused()
        return bool(self._refused)

    def abandon(self) -> int:
        """Fail the acks of every batch not yet written (B4); return how many rows.

        Writes still running finish in the background, but their outcome no longer
        changes anything: their batches are already failed.
        """
        settled: list[Settled] = []
        rows = 0
        with self._cond:
            while self._refused:
                batch = self._refused.popleft().batch
                if not batch.settled:
                    rows += batch.rows
                    settled.append(settle_batch(batch, False))
            for shard in self._shards:
                batches = list(shard.queue) + list(shard.writing)
                if shard.open is not None:
                    batches.append(shard.open)
                batches += self._lanes.opens(shard.index)
                shard.open = None
                shard.queue.clear()
                for batch in batches:
                    if batch.settled or batch.rows == 0:
                        continue
                    rows += batch.rows
                    shard.m_abandoned.inc(batch.rows)
                    settled.append(settle_batch(batch, False))
            self._lanes.drop_opens()
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
            if self._admission.closed:
                return
            self._admission.closed = True
            self._stopping = True
            self._cond.notify_all()
        for thread in self._engine.stop(_JOIN_TIMEOUT):
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

    # -- rows refused at write time (B245-B247) -------------------------------------

    def bind_held_errors(self, errors: HeldErrors) -> bool:
        """Charge the rows the connector's writers refuse at write time to their own
        records through ``errors`` (:class:`~spate.sink._held.HoldingSink`). Called once
        by the chain before the first offer. A connector that never refuses rows at
        write time binds nothing and keeps no records: False (B249)."""
        connector = self._connector
        if isinstance(connector, RowRefusingConnector) and connector.refuses_rows:
            self._admission.errors = errors
            return True
        return False

    def _queue_refused(self, batch: PoolBatch, error: RowsRefused) -> str | None:
        """A worker wrote ``batch`` but for ``error.rows`` (lock held): queue it for
        :meth:`charge_refused`, or say why its rows cannot be charged."""
        origins = batch.origins
        if self._admission.errors is None:
            return "no chain record policy is bound to the sink, so they cannot be charged"
        if origins is None or len(origins) != batch.rows:
            return "the records of its rows are not known, so they cannot be charged"
        if any(not 0 <= row.row < batch.rows for row in error.rows):
            return "the writer named rows beyond the batch"
        self._refused.append(_Refused(batch, error))
        return None

    def charge_refused(self) -> None:
        """Charge each refused row of the written batches to its own record (B245): the
        chain applies its record policy — under ``dead_letter`` the row's record goes to
        the dead-letter sink with its source ack, so the source batch is delivered only
        once that is written too (B71). A batch is settled once all its rows are
        charged; a dead letter the dead-letter sink refuses for now is offered again at
        the next call, before anything else (B7, B8). Raises ``FatalError`` when the
        policy fails the record (``fail``, a dead-letter limit, B72), after failing the
        batch. Pipeline thread."""
        errors = self._admission.errors
        while True:
            with self._cond:
                if not self._refused:
                    return
                item = self._refused[0]
            origins = item.batch.origins
            if item.batch.settled or errors is None or origins is None:
                self._settle_refused(item, False)  # abandoned meanwhile: nothing to charge
                continue
            try:
                if not self._charge(errors, item, origins):
                    return
            except FatalError:
                self._settle_refused(item, False)
                raise
            self._settle_refused(item, True)

    def _charge(self, errors: HeldErrors, item: _Refused, origins: list[Origin]) -> bool:
        """Charge ``item``'s rows from where it stopped; False while a dead letter waits."""
        if item.pending is not None:
            if not errors.offer_again(item.pending):
                return False
            item.pending = None
            item.next += 1
        rows = item.error.rows
        while item.next < len(rows):
            row = rows[item.next]
            source, index, ack = origins[row.row]
            pending = errors.report((source, index), RowError(row.reason, row.fields), ack)
            if pending is not None:
                item.pending = pending
                return False
            item.next += 1
        return True

    def _settle_refused(self, item: _Refused, ok: bool) -> None:
        settled: list[Settled] = []
        with self._cond:
            if self._refused and self._refused[0] is item:
                self._refused.popleft()
            if not item.batch.settled:
                settled.append(settle_batch(item.batch, ok))
            self._cond.notify_all()
        release_settled(self._budget, settled)

    # -- effectively once (B88, B89; spate.sink._lanes) ------------------------------

    def lanes_revoked(self, lanes: Collection[Lane]) -> None:
        """Revocation: fail the replayed blocks still waiting for rows of ``lanes`` (the
        next owner rebuilds them) and forget the lanes' state (read again if assigned)."""
        self._lanes.revoked(lanes)

    def replaying_lanes(self) -> frozenset[Lane]:
        """Lanes with a replayed block that holds rows and waits for more (B121): the
        runtime keeps them fetching while it pauses the others, so the block completes."""
        return self._lanes.replaying()

    def on_committed(self, positions: Mapping[Lane, int]) -> None:
        """The source committed ``positions``: intents ending below them can go (later,
        on a worker, every few hundred intents)."""
        if self.effectively_once:
            self._lanes.committed(positions)

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
            self._admission.set_identity(identity)

    def end_identified(self) -> None:
        """Seal the identified batch's rows and return to run-nonce tokens."""
        with self._cond:
            self._admission.set_identity(None)

    # -- inline mode and introspection --------------------------------------------------

    def pump(self) -> int:
        """Run every write that is due now on the calling thread; return how many ran.

        With ``io_threads=0`` this (with :meth:`tick` and :meth:`flush`) is what writes.
        """
        return self._engine.pump()

    def pending_rows(self) -> int:
        """Rows accepted but not yet resolved (open, queued and being written)."""
        with self._cond:
            total = 0
            for shard in self._shards:
                if shard.open is not None:
                    total += shard.open.rows
                total += sum(b.rows for b in self._lanes.opens(shard.index))
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

    def _next_work(self, now: float) -> Work | None:
        """Seal the batches that lingered long enough and pick one due now."""
        self._admission.seal_lingering(now)
        self._lanes.seal_lingering(now)
        return self._pick(now)

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
        linger = self._admission.linger
        for shard in self._shards:
            if shard.open is not None and shard.open.rows:
                times.append(shard.open.opened_at + linger)
            for batch in self._lanes.opens(shard.index, free_only=True):
                times.append(batch.opened_at + linger)
            due = shard.next_wake(now, self._max_inflight)
            if due is not None:
                times.append(due)
        return min(times) if times else None

    def _all_written(self) -> bool:
        """Nothing left to write; a replayed block waiting for its rows is not waited for
        (it is never written short, B89)."""
        return not self._refused and all(
            shard.idle and shard.open is None and not self._lanes.opens(shard.index, True)
            for shard in self._shards
        )
