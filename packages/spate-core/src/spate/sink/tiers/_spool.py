"""The spool tier: a sink that fsyncs batches to a store, then hands them to the next tier.

Custody (ADR 0005): a row offered to the spool joins the open batch, which holds the
source batch's ack (B2); :meth:`SpoolTier.offer_rows` takes a whole source batch's rows
in one call, all or none. The batch seals on ``max_records``, on a checkpoint tick and on
drain; it is encoded (``bytes`` rows all at once then, other rows one by one as they are
offered, so a row that cannot be spooled is refused at once) and queued for the spool's
writer thread, which appends batches in the order they sealed and makes them durable
(``fsync: batch`` — after appending what was queued, so batches sealed during one fsync
share the next; ``fsync: segment`` — on segment rotation and every tick) while the
pipeline thread goes on filling the next batch (:mod:`spate.sink.tiers._spool_writer`).
At most two sealed batches wait for it (sealing another waits); a tick, flush or drain
waits until every queued batch is written and synced. Only once its fsync returned:

* with ``ack: spooled`` the source acks are released delivered (Kafka offsets move on
  while the terminal lags);
* with ``ack: terminal`` (the default) they stay held until the next tier durably
  accepted every record of the batch.

Every durable batch is offered to the next tier under an ack token of the spool's own
(one per spooled batch), each run of one lane's rows in one ``offer_rows`` call when the
next tier has that method, else row by row in a tight loop; when that token resolves
delivered the store releases the batch and deletes a segment once all of it is released
(B54). A batch the next tier failed
stays in the store: with ``ack: spooled`` it is handed on again within the run, from the
rows kept in memory, after a backoff of 1 s doubling up to 60 s (checked on every tick,
counted in ``spate_spool_retried_batches_total``, B66); with ``ack: terminal`` its
source batch fails (B4). A batch the next tier failed *for good* (its token's
``failure`` set: rows the destination refused under ``on_record_error: fail``) is
not retried: with ``ack: spooled`` the spool keeps it, hands nothing more on, is not
ready, and raises ``FatalError`` from its next tick, flush or replay (B322). Either way a
batch not yet accepted when the spool drains is replayed on the next start.

Rows the next tier refuses at write time (a ClickHouse sink under ``dead_letter`` or
``skip``) are charged to records the spool makes of the spooled rows — lane, key, the
row as payload, the source offset spooled with the row (-1 for a row spooled without
one) — noted in a record cell of its own while it hands them on one at a time
(:meth:`SpoolTier.bind_held_errors`, B323): the records the rows came from are gone. A
spooled frame is handed on whole with such a record for each of its rows — its lane and
key, the row's columns as a JSON object — its row column numbering them (B348). While
bound so, the spool reads each offered row's source offset from the chain's record cell
and keeps it with the row, in memory and in its segments (B421).

A next tier that is an :class:`~spate.sink.IdentifiedSink` (the sink pool) gets each
batch's identity (writing run, segment, position), from which it derives dedup tokens
that a replay repeats (B9, B56).

On :meth:`SpoolTier.start` the store is recovered (torn tails cut, corruption fails
start-up naming segment and byte offset, B55) and the batches found are handed on before
any new row is accepted, counted in ``spate_spool_replayed_records_total``; ``ready()``
stays False until the replay is delivered (B56). Over ``max_bytes`` held, or while a
sealed batch could not be written (a full disk), :meth:`SpoolTier.offer` answers
``REJECTED``, so the source pauses (B7, B57); the bytes of sealed batches not yet written
count toward ``max_bytes``. Hands rows on only from the pipeline thread (offer, tick,
flush); source acks of ``ack: spooled`` resolve on the writer thread, resolutions of the
next tier arrive on its worker threads.
"""

from __future__ import annotations

import functools
import logging
import threading
from collections import deque
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Literal

from spate._clock import Clock
from spate.checkpoint._ack import AckStatus, AckToken, release_all
from spate.config._decode import ByteSize, Duration
from spate.errors import ErrorClass, ErrorPolicy, FatalError, SinkError
from spate.metrics import names
from spate.metrics._meter import Meter
from spate.records import ROW_COLUMN, Lane, PayloadBatch
from spate.sink._attempts import retry_at
from spate.sink._contract import (
    ACCEPTED,
    REJECTED,
    IdentifiedSink,
    Offer,
    RowBatchSink,
    Sink,
    sink_record_policy,
    takes_rows,
)
from spate.sink._held import (
    HeldErrors,
    Origin,
    PendingDeadLetter,
    RecordCell,
    bind_held_errors,
)
from spate.sink._retry import Backoff
from spate.sink.config import RetryConfig
from spate.sink.tiers._frames import ForwardsFrames, frame_rows, frame_sink
from spate.sink.tiers._spool_codec import (
    FRAME_TAG,
    decode_positioned_frame,
    decode_runs,
    encode_batch,
    encode_frame,
    encode_record,
    row_payload,
)
from spate.sink.tiers._spool_writer import SpoolWriter
from spate.sink.tiers._store import BatchRef, SpoolCorruptError, SpoolStore

logger = logging.getLogger(__name__)

_SPOOL_LANE = Lane("spool", 0)

_IS_BYTES = bytes.__instancecheck__
"""``isinstance(row, bytes)`` without a Python-level call per row."""

_WRITER_JOIN = 5.0
"""Seconds :meth:`SpoolTier.abandon` waits for the writer thread's write or fsync to
return (a hung disk must not hang SIGTERM; what reached the disk stays for the next
start)."""

_RETRY = RetryConfig(initial=1.0, max=60.0, multiplier=2.0, jitter=0.2)
"""Backoff between the attempts of a batch the next tier failed (``ack: spooled``, B66)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class SpoolConfig:
    """``spool:`` — a write-ahead tier of fsynced, checksummed segments."""

    dir: str
    """Directory of the spool's segments: one spool per directory, locked while it runs;
    worker ``i`` of ``spate run --processes`` uses ``<dir>/w<i>`` (B114)."""
    ack: Literal["terminal", "spooled"] = "terminal"
    """Where the source's ack resolves: ``terminal`` once the next tier durably accepted
    the records, ``spooled`` once they are fsynced in the spool."""
    fsync: Literal["batch", "segment"] = "batch"
    """``batch`` fsyncs every batch before accepting it; ``segment`` fsyncs on segment
    rotation and on every checkpoint tick (acks wait for that fsync)."""
    max_records: int = 10_000
    """Rows per spooled batch at most (one append, and with ``fsync: batch`` one fsync)."""
    max_bytes: ByteSize = 1024 * 1024 * 1024
    """Bytes held on disk at which the spool stops accepting (the source pauses, B7);
    checked as each batch opens, so the spool may pass it by up to one batch."""
    segment_bytes: ByteSize = 64 * 1024 * 1024
    """Size at which a segment is closed and a new one started."""
    store: str = "jsonl"
    """The spool store (entry point in ``spate.stores``); ``jsonl`` is built in."""
    replay_timeout: Duration = 300.0
    """How long start-up may take to hand the replayed records to the next tier."""

    def config_errors(self) -> Iterator[tuple[str, str]]:
        if not self.dir.strip():
            yield "dir", "must not be empty"
        if self.max_records < 1:
            yield "max_records", "must be at least 1"
        if self.segment_bytes < 1:
            yield "segment_bytes", "must be positive"
        if self.max_bytes < 2 * self.segment_bytes:
            yield "max_bytes", "must be at least twice segment_bytes"
        if self.replay_timeout <= 0:
            yield "replay_timeout", "must be positive"


SpooledFrame = tuple[object, list[bytes | None] | None, Lane, list[int] | None]
"""A spooled frame: the frame, its keys (when the next tier needs them), its lane and its
rows' source offsets (when kept, B421)."""


def _load(batch: _Batch, records: Iterable[bytes]) -> None:
    """Fill a replayed batch from its stored records (rows, or frames: B151)."""
    for payload in records:
        if payload[:1] == FRAME_TAG.to_bytes(1, "little"):
            batch.add_frame(*decode_positioned_frame(payload))
        else:
            for rows, keys, lane, offsets in decode_runs((payload,)):
                batch.extend(rows, keys, lane, offsets)


@dataclass(slots=True, eq=False)
class _Batch:
    """One spooled batch: its rows (until handed on), source acks and own token.

    The rows are kept as parallel lists with the lanes as runs, so taking a row is two
    appends and handing a batch on needs no per-row unpacking."""

    rows: list[object] = field(default_factory=list)
    keys: list[bytes | None] = field(default_factory=list)
    runs: list[tuple[int, Lane]] = field(default_factory=list)
    """``(first row, lane)`` of each run of rows of one lane, in order."""
    lane: Lane | None = None
    """The lane of the last run."""
    encoded: dict[int, bytes] = field(default_factory=dict)
    """Rows that are not ``bytes``, encoded as they were offered (by index)."""
    offsets: list[int] | None = None
    """The source offset of each row (-1 where unknown), while the spool keeps them
    (B421); None while no row has one."""
    frames: list[SpooledFrame] = field(default_factory=list)
    """Prepared frames with their keys, lane and rows' source offsets (a batch holds rows
    or frames, B151)."""
    frame_rows: int = 0
    """Rows of ``frames``."""
    records: list[bytes] = field(default_factory=list)
    """The encoded rows, from sealing until they are durable."""
    acks: list[AckToken] = field(default_factory=list)
    last: AckToken | None = None
    """The ack held last (rows of one source batch come in a run)."""
    ref: BatchRef | None = None
    token: AckToken | None = None
    handed: int = 0
    """Rows already offered to the next tier (a prefix of ``rows``), or frames of a
    frame batch (a prefix of ``frames``)."""
    prepared: tuple[int, object] | None = None
    """The next tier's prepared rows from ``handed`` on, which it refused for now."""
    failed: bool = False
    replayed: bool = False
    failures: int = 0
    """Times the next tier failed this batch in this run (``ack: spooled``, B66)."""
    due: float = 0.0
    """When a failed batch is handed on again."""
    created: float = 0.0
    size: int = 0
    """Bytes the batch counts toward ``max_bytes`` while it waits for its write."""
    holder: object = field(default_factory=object)
    """This batch's identity as a holder of its source acks (B39)."""

    def add(self, row: object, key: bytes | None, lane: Lane, offset: int | None = None) -> None:
        """Append one row (its ``bytes`` encoding, if any, is already in ``encoded``)."""
        if lane is not self.lane and lane != self.lane:
            self.runs.append((len(self.rows), lane))
            self.lane = lane
        if offset is not None or self.offsets is not None:
            self._positions(1, None if offset is None else (offset,))
        self.rows.append(row)
        self.keys.append(key)

    def extend(
        self,
        rows: Sequence[object],
        keys: Sequence[bytes | None],
        lane: Lane,
        offsets: Sequence[int] | None = None,
    ) -> None:
        """Append rows of one lane (none of them encoded on offer)."""
        if lane is not self.lane and lane != self.lane:
            self.runs.append((len(self.rows), lane))
            self.lane = lane
        if offsets is not None or self.offsets is not None:
            self._positions(len(rows), offsets)
        self.rows.extend(rows)
        self.keys.extend(keys)

    def _positions(self, count: int, offsets: Sequence[int] | None) -> None:
        """Keep the offsets of ``count`` rows about to be appended (-1 for unknown)."""
        kept = self.offsets
        if kept is None:
            kept = self.offsets = [-1] * len(self.rows)
        kept.extend([-1] * count if offsets is None else offsets)

    @property
    def count(self) -> int:
        """The records of the batch (rows, or the rows of its frames)."""
        return len(self.rows) + self.frame_rows

    def add_frame(
        self,
        frame: object,
        keys: Sequence[bytes | None] | None,
        lane: Lane,
        offsets: list[int] | None = None,
    ) -> None:
        """Append one prepared frame of ``lane`` (with its keys when the next tier needs
        them, and its rows' source offsets when known)."""
        self.frames.append((frame, None if keys is None else list(keys), lane, offsets))
        self.frame_rows += frame_rows(frame)

    def drop_rows(self) -> None:
        """Forget the rows (handed on for good, or left to the next run's replay)."""
        self.rows, self.keys, self.runs, self.lane = [], [], [], None
        self.offsets = None
        self.frames, self.frame_rows = [], 0
        self.prepared = None

    def hold(self, ack: AckToken) -> None:
        """Retain ``ack`` once for this batch, however its rows interleave with others'."""
        self.last = ack
        if ack not in self.acks:
            ack.retain(self.holder)
            self.acks.append(ack)

    def release_acks(self, ok: bool) -> None:
        """Release every source ack this batch holds (B4, B39)."""
        acks, self.acks, self.last = self.acks, [], None
        release_all(acks, ok, self.holder)


def _store_order(batch: _Batch) -> tuple[int, int]:
    """Where ``batch`` sits in the store: older batches sort first."""
    ref = batch.ref
    assert ref is not None
    return ref.segment, ref.position


@dataclass(slots=True)
class SpoolRows:
    """A source batch's rows prepared for :meth:`SpoolTier.offer_rows`: the rows, their
    keys, the encoded payload of each row that is not ``bytes`` (by position), and the
    rows' source offsets while the spool keeps them (B421)."""

    rows: list[object]
    keys: list[bytes | None]
    encoded: dict[int, bytes]
    offsets: list[int] | None = None


class SpoolTier(ForwardsFrames):
    """A :class:`~spate.sink.Sink` that spools batches durably in front of ``next``."""

    def __init__(
        self,
        name: str,
        config: SpoolConfig,
        next_tier: Sink,
        store: SpoolStore,
        *,
        meter: Meter,
        clock: Clock,
        pipeline: str = "",
        writer_join: float = _WRITER_JOIN,
    ) -> None:
        """``writer_join``: how long :meth:`abandon` waits for a write or fsync in flight."""
        self.name = name
        self.config = config
        self.next = next_tier
        self.on_record_error: ErrorPolicy = sink_record_policy(next_tier)
        self._store = store
        self._clock = clock
        self._lock = threading.Lock()
        self._open: _Batch | None = None
        self._writer: SpoolWriter[_Batch] = SpoolWriter(
            name,
            store,
            fsync=config.fsync,
            on_durable=self._durable,
            meter=meter,
            clock=clock,
        )
        self._writer_join = writer_join
        self._handing: deque[_Batch] = deque()
        """Durable batches not yet fully offered to the next tier, oldest first."""
        self._inflight: set[_Batch] = set()
        """Durable batches whose token has not resolved yet (guarded by the lock)."""
        self._retrying: list[_Batch] = []
        """Batches the next tier failed, waiting for their retry (guarded by the lock)."""
        self._backoff = Backoff(_RETRY)
        self._errors: HeldErrors | None = None
        """Where the next tier charges the rows it refuses at write time, over the
        spool's own record cell (B323); None while it charges none."""
        self._chain: RecordCell | None = None
        """The chain's record cell while the next tier charges refused rows: the spool
        keeps each row's source offset from it (B421); None otherwise."""
        self._lettered: set[AckToken] = set()
        """Tokens of batches with a refused row charged to the dead-letter sink, which
        holds them until it wrote the letter (guarded by the lock, B323)."""
        self._stopped: str | None = None
        """Why the spool stopped handing on: the next tier failed a batch for good under
        ``ack: spooled`` (B322); set once, on any thread."""
        self._replaying = 0
        self._started = False
        self._closed = False
        self._next_started = False
        self._start_error: str | None = None
        kw = {"component": name, "component_type": "spool"}
        self._m_records = meter.gauge(names.TIER_HELD_RECORDS, **kw)
        self._m_bytes = meter.gauge(names.TIER_HELD_BYTES, **kw)
        self._m_segments = meter.gauge(names.SPOOL_SEGMENTS, **kw)
        self._m_oldest = meter.gauge(names.TIER_OLDEST_AGE, **kw)
        self._m_flushes = meter.counter(names.TIER_FLUSHES, **kw)
        self._m_replayed = meter.counter(names.SPOOL_REPLAYED, **kw)
        self._m_retried = meter.counter(names.SPOOL_RETRIED, **kw)
        self._held_records = 0
        self._max_records = config.max_records

    # -- Sink protocol ----------------------------------------------------------------

    def bind_held_errors(self, errors: HeldErrors) -> bool:
        """Let the next tier charge the rows it refuses at write time (a ClickHouse sink
        under ``dead_letter`` or ``skip``, B245, B349) to records the spool makes of its
        spooled rows: the records the rows came from are gone once spooled (B323), but
        the spool keeps each row's source offset with it (B421), which the chain's
        record cell names as the row is offered: True then (the chain notes the record
        of each offer), else False."""
        lettered = self._lettered
        letters = not errors.positions_only

        def report(origin: Origin, exc: SinkError, ack: AckToken) -> object | None:
            pending = errors.report(origin, exc, ack)
            if letters:
                with self._lock:
                    lettered.add(ack)  # its dead letter holds it now, or will
            return None if pending is None else pending.row

        def again(row: object, origin: Origin, ack: AckToken) -> bool:
            return errors.offer_again(PendingDeadLetter(row, origin, ack))

        inner = HeldErrors(RecordCell(), report, again, positions_only=errors.positions_only)
        if bind_held_errors(self.next, inner):
            self._errors = inner
            self._chain = errors.cell
            return True
        return False

    def start(self) -> None:
        """Start the next tier, recover the store and replay what it holds (B56).

        Called once by the runtime before anything is consumed; blocks until the replayed
        records were all offered to the next tier (or ``replay_timeout`` passed). With
        ``ack: spooled`` a next tier that cannot start (its endpoint is down) does not stop
        the spool: it takes custody meanwhile and retries the start on every tick; the
        replay then follows, still ahead of every newer batch.
        """
        if self._started:
            return
        self._start_next(at_start=True)
        found = self._store.recover()
        replayed = 0
        for stored in found:
            batch = _Batch(ref=stored.ref, replayed=True)
            try:
                _load(batch, stored.records)
            except ValueError as exc:
                raise SpoolCorruptError(
                    f"spool {self.config.dir}: batch {stored.ref}", f"unreadable record ({exc})"
                ) from exc
            batch.created = self._clock.monotonic()
            batch.token = self._token(batch)
            self._handing.append(batch)
            with self._lock:
                self._inflight.add(batch)
                self._held_records += batch.count
            replayed += batch.count
        self._replaying = len(found)
        self._started = True
        self._gauges()
        if found:
            logger.info(
                "spool %s: replaying %d records in %d batches from %s",
                self.name,
                replayed,
                len(found),
                self.config.dir,
            )
            self._m_replayed.inc(replayed)
            if not self._next_started:
                return
            deadline = self._clock.monotonic() + self.config.replay_timeout
            while self._handing:
                self._hand_on()
                self._raise_stopped()
                if not self._handing:
                    break
                self.next.tick()
                if self._clock.monotonic() >= deadline:
                    raise SinkError(
                        f"spool {self.name}: the next tier did not take the "
                        f"{replayed} replayed records within {self.config.replay_timeout}s",
                        ErrorClass.FATAL,
                    )
                self._clock.sleep(0.01)
            self.next.tick()
            self._raise_stopped()

    def offer(self, row: object, key: bytes | None, lane: Lane, ack: AckToken) -> Offer:
        """Add ``row`` to the open batch, or refuse it while the spool is full (B7, B57).

        Called on the pipeline thread; encodes, appends and fsyncs when the batch seals
        (a row that is not ``bytes`` is encoded here, so one that cannot be spooled
        raises ``SinkError(RECORD)`` for the chain's record error policy).
        """
        batch = self._open
        if batch is None or self._handing or self._writer.notice or batch.frames:
            batch = self._opened()
            if batch is None:
                return REJECTED
        rows = batch.rows
        chain = self._chain
        if chain is not None:  # the row's source offset goes with it (B421)
            offset = _offset_of(chain)
            if type(row) is not bytes:
                batch.encoded[len(rows)] = encode_record(row, key, lane, offset)
            batch.add(row, key, lane, offset)
        else:
            if type(row) is not bytes:
                batch.encoded[len(rows)] = encode_record(row, key, lane)
            if lane is not batch.lane:
                batch.add(row, key, lane)
            else:
                rows.append(row)
                batch.keys.append(key)
        if batch.last is not ack:
            batch.hold(ack)
        if len(rows) >= self._max_records:
            self._seal()
        return ACCEPTED

    takes_rows = True
    """The chain hands the spool a source batch's rows in one call (B95, B57)."""

    def prepare_rows(
        self, rows: list[object], keys: Sequence[bytes | None], lane: Lane
    ) -> tuple[SpoolRows, list[tuple[int, str]]]:
        """Encode the rows that are not ``bytes``; hold nothing (B95).

        A source batch of ``bytes`` rows only (the common case) is checked in one C-level
        pass and nothing is encoded; otherwise each row that is not ``bytes`` is encoded.

        Returns the rows to hand to :meth:`offer_rows` and the ones that cannot be
        spooled as ``(position, reason)``, each a record error for that row alone, with
        the reason :meth:`offer` raises for it.
        """
        bad: list[tuple[int, str]] = []
        offsets = None if self._chain is None else _offsets_of(self._chain, len(rows))
        if all(map(_IS_BYTES, rows)):
            return SpoolRows(rows, list(keys), {}, offsets), bad  # nothing to encode now
        encoded: dict[int, bytes] = {}
        for i, row in enumerate(rows):
            if type(row) is not bytes:
                try:
                    offset = None if offsets is None else offsets[i]
                    encoded[i] = encode_record(row, keys[i], lane, offset)
                except SinkError as exc:
                    bad.append((i, exc.reason))
        if not bad:
            return SpoolRows(rows, list(keys), encoded, offsets), bad
        refused = {i for i, _ in bad}
        kept = [i for i in range(len(rows)) if i not in refused]
        return (
            SpoolRows(
                [rows[i] for i in kept],
                [keys[i] for i in kept],
                {n: encoded[i] for n, i in enumerate(kept) if i in encoded},
                None if offsets is None else [offsets[i] for i in kept],
            ),
            bad,
        )

    def offer_rows(self, prepared: object, lane: Lane, ack: AckToken) -> Offer:
        """Take the prepared rows of one source batch (one lane) at once, or none of them.

        The batch form of :meth:`offer` (same thread, never blocks): ``REJECTED`` means
        no row was taken and the caller offers the same rows again later (B7, B57). The
        rows may pass ``max_records`` of the open batch: they are split over batches, and
        a batch opened for the rest does not check ``max_bytes`` again.
        """
        assert isinstance(prepared, SpoolRows)
        rows, keys = prepared.rows, prepared.keys
        if not rows:
            return ACCEPTED
        batch = self._open
        if batch is None or self._handing or self._writer.notice or batch.frames:
            batch = self._opened()
            if batch is None:
                return REJECTED
        encoded, offsets = prepared.encoded, prepared.offsets
        done = 0
        total = len(rows)
        while True:
            room = self._max_records - len(batch.rows)
            take = min(room, total - done)
            start = len(batch.rows)
            batch.extend(
                rows[done : done + take],
                keys[done : done + take],
                lane,
                None if offsets is None else offsets[done : done + take],
            )
            for i, record in encoded.items():
                if done <= i < done + take:
                    batch.encoded[start + i - done] = record
            batch.hold(ack)
            done += take
            if len(batch.rows) >= self._max_records:
                self._seal()
            if done >= total:
                return ACCEPTED
            batch = self._open = _Batch(created=self._clock.monotonic())

    # -- columnar path (B151) ------------------------------------------------------------

    def prepare_frame(self, frame: object) -> tuple[object, list[tuple[int, str]]]:
        """The chain's frame as it is, with no bad rows; hold nothing (B151).

        The spool stores the frame itself: the next tier checks it (``prepare_frame``)
        only when the spool hands it on, since with ``ack: spooled`` the spool takes
        custody while the next tier is down and cannot check anything (as with rows,
        B102)."""
        return frame, []

    def offer_frame(
        self,
        frame: object,
        keys: Sequence[bytes | None] | None,
        lane: Lane,
        ack: AckToken,
        shards: Sequence[int] | None = None,
    ) -> Offer:
        """Take a frame into the open batch whole, or refuse it while the spool is full
        (B7, B57). Pipeline thread; never blocks on I/O.

        The frame is stored (Arrow IPC, with its keys and lane) when the batch seals on
        ``max_records`` (counting the frames' rows; a frame is never split), a tick or a
        drain; it is handed on whole, under the batch's identity (B56). ``shards`` is not
        kept: the next tier places the rows itself.
        """
        if not frame_rows(frame):
            return ACCEPTED
        batch = self._open
        if batch is None or self._handing or self._writer.notice or batch.rows:
            batch = self._opened(frames=True)
            if batch is None:
                return REJECTED
        chain = self._chain
        batch.add_frame(frame, keys, lane, None if chain is None else _frame_offsets(chain, frame))
        batch.hold(ack)
        if batch.count >= self._max_records:
            self._seal()
        return ACCEPTED

    def _opened(self, frames: bool = False) -> _Batch | None:
        """The open batch after handing on what waits; None while the spool is full.

        ``frames``: the batch takes frames (an open batch of the other kind is sealed:
        a batch holds rows or frames, B151)."""
        if self._writer.notice:
            self._take_durable()
            if self._writer.stalled and not self._writer.retry():
                return None
        if self._handing:
            self._hand_on()
        batch = self._open
        if batch is not None and batch.count and bool(batch.frames) is not frames:
            self._seal()
            batch = None
        if batch is None:
            # Checked once per batch: a batch that fits starts, so the spool can pass
            # max_bytes by at most one batch. Sealed batches the writer has not appended
            # yet count too (B7).
            if self.held_bytes() >= self.config.max_bytes:
                self._store.collect()
                if self.held_bytes() >= self.config.max_bytes:
                    return None
            batch = self._open = _Batch(created=self._clock.monotonic())
        return batch

    def tick(self) -> None:
        """Checkpoint tick: seal and sync the open batch, hand on what is durable (B10)."""
        self._seal(force_sync=True)
        self._take_durable()
        if self._next_started or self._start_next(at_start=False):
            self._retry_due()
            self._hand_on()
            self.next.tick()
        self._gauges()
        self._raise_stopped()

    def flush(self, deadline: float) -> bool:
        """Seal, sync and hand everything on; wait until the next tier wrote it all.

        Called on drain and revocation; blocks until ``deadline`` at most. On success the
        store reclaims every segment (a clean run leaves the directory empty). A write or
        fsync that has not returned by ``deadline`` (a hung disk) makes it return False.
        """
        if not self._seal(force_sync=True, deadline=deadline) and self._writer.writing():
            return False
        if not self._next_started and not self._start_next(at_start=False):
            return False
        while True:
            if self._writer.stalled and not self._writer.retry(deadline) and self._writer.writing():
                return False
            self._take_durable()
            self._hand_on()
            self._raise_stopped()
            left = self._clock.monotonic()
            if not self._handing and not self._writer.queued:
                break
            if left >= deadline:
                return False
            self.next.tick()
            self._clock.sleep(min(0.01, max(deadline - left, 0.0)))
        done = self.next.flush(deadline)
        while done:
            with self._lock:
                # A batch whose refused row's dead letter the dead-letter sink holds is
                # written once that sink is flushed, after this one (B323).
                if all(b.token in self._lettered for b in self._inflight):
                    break
            if self._clock.monotonic() >= deadline:
                done = False
                break
            self._clock.sleep(0.005)
        if done:
            self._store.collect()
        self._gauges()
        self._raise_stopped()
        return done

    def abandon(self) -> int:
        """Fail every source ack not yet durably passed on (B4); return how many rows.

        Spooled records stay in the store and are replayed on the next start, as do
        batches waiting for their retry (B66). Waits at most ``writer_join`` seconds for
        a write or fsync in flight: one that does not return (a hung disk) is left
        behind, and what it holds is failed like any batch not yet durable.
        """
        rows = 0
        writer = self._writer
        if not writer.stop(self._writer_join):
            with writer.cond:
                stuck = len(writer.queued) + len(writer.unsynced)
            logger.error(
                "spool %s: a write or fsync of the spool's store did not return within "
                "%.1fs; abandoning %d batch(es) not yet durable (what reached %s stays "
                "there for the next start)",
                self.name,
                self._writer_join,
                stuck,
                self.config.dir,
            )
        self._take_durable()
        batch = self._open
        self._open = None
        pending = [*([batch] if batch is not None else []), *writer.take_pending()]
        for b in pending:
            rows += b.count
            b.release_acks(False)
        while self._handing:
            b = self._handing.popleft()
            b.drop_rows()
            assert b.token is not None
            b.token.release(False)
        with self._lock:
            waiting, self._retrying = self._retrying, []
            self._held_records -= sum(b.count for b in waiting)
        for b in waiting:
            b.drop_rows()
        rows += self.next.abandon()
        if rows:
            logger.warning("spool %s abandoned %d rows not yet passed on", self.name, rows)
        return rows

    def ready(self) -> bool:
        """False while a replay runs (B56) and until the next tier is ready."""
        return (
            self._started
            and self._next_started
            and self._replaying == 0
            and self._stopped is None
            and self.next.ready()
        )

    def close(self) -> None:
        """Close the next tier and the store; held segments stay for the next run."""
        if self._closed:
            return
        self._closed = True
        if (
            self._open is not None
            or self._writer.queued
            or self._writer.unsynced
            or self._writer.durable
            or self._handing
            or self._retrying
        ):
            self.abandon()
        writer = self._writer
        writer.stop()
        self.next.close()
        with writer.cond:
            stuck = writer.close_store_later = writer.stuck is not None
        if stuck:
            logger.warning(
                "spool %s: the store is closed once its hung write or fsync returns", self.name
            )
        else:
            with self._lock:
                idle = not self._inflight and not self._retrying
            if idle and self._stopped is None:
                # Batches released after the drain's flush (their dead letters written
                # once the dead-letter sink flushed, B323) are reclaimed too.
                self._store.collect()
            self._store.close()

    # -- introspection -----------------------------------------------------------------

    def held_bytes(self) -> int:
        """Bytes the store holds on disk, and of sealed batches waiting for their write."""
        return self._store.held_bytes() + self._writer.queued_bytes

    # -- internals --------------------------------------------------------------------

    def _seal(self, force_sync: bool = False, deadline: float | None = None) -> bool:
        """Seal the open batch and queue it for the writer thread; with ``force_sync``
        (tick, flush) wait until every queued batch is appended and fsynced (until
        ``deadline`` at most); False when that did not happen."""
        batch = self._open
        if batch is not None and batch.frames:
            self._open = None
            batch.records = [encode_frame(*spooled) for spooled in batch.frames]
            self._m_flushes.inc()
            self._writer.enqueue(batch)
        elif batch is not None and batch.rows:
            self._open = None
            batch.records = encode_batch(
                batch.rows, batch.keys, batch.runs, batch.encoded, batch.offsets
            )
            batch.encoded = {}
            self._m_flushes.inc()
            self._writer.enqueue(batch)
        if not force_sync:
            return True
        if self._writer.stalled:
            self._writer.retry(deadline)
        return self._writer.settle(sync=self.config.fsync == "segment", deadline=deadline)

    def _take_durable(self) -> None:
        """Queue the batches the writer made durable for handing on (pipeline thread)."""
        self._handing.extend(self._writer.take_durable())

    def _durable(self, batches: list[_Batch]) -> None:
        """Batches now fsynced (writer thread): give them tokens and release their source
        acks (``ack: spooled``); the writer then passes them to the pipeline thread."""
        spooled = self.config.ack == "spooled"
        for batch in batches:
            batch.records = []
            batch.token = self._token(batch)
            with self._lock:
                self._inflight.add(batch)
                self._held_records += batch.count
            if spooled:
                batch.release_acks(True)

    def _token(self, batch: _Batch) -> AckToken:
        ref = batch.ref
        assert ref is not None
        return AckToken(
            _SPOOL_LANE,
            0,
            ref.segment,
            ref.position,
            batch.count,
            functools.partial(self._resolved, batch),
        )

    def _start_next(self, *, at_start: bool) -> bool:
        """Start the next tier; with ``ack: spooled`` a failure is logged, not raised."""
        try:
            self.next.start()
        except Exception as exc:
            if self.config.ack != "spooled" or (not at_start and self._start_error is None):
                raise
            reason = str(exc)
            if reason != self._start_error:
                logger.warning(
                    "spool %s: the next tier cannot start (%s); spooling meanwhile and "
                    "retrying on every checkpoint tick",
                    self.name,
                    reason,
                )
            self._start_error = reason
            return False
        if self._start_error is not None:
            logger.info("spool %s: the next tier started; handing spooled records on", self.name)
        self._start_error = None
        self._next_started = True
        return True

    def _hand_on(self) -> None:
        """Offer durable rows to the next tier, oldest batch first, until it refuses.

        Each run of one lane's rows goes in one call to the next tier's ``offer_rows``
        when it has one (all or nothing), else in a tight loop over its ``offer``."""
        if not self._next_started or self._stopped is not None:
            return
        handing = self._handing
        nxt = self.next
        # A next tier that can name batches (the sink pool) gets each spooled batch's
        # identity, so its dedup tokens are the same when the batch is replayed (B56).
        identified = nxt if isinstance(nxt, IdentifiedSink) else None
        # Rows whose refusals are charged to records are offered one by one, each with
        # the record the spool makes of it (B323).
        batched = (
            nxt
            if isinstance(nxt, RowBatchSink) and takes_rows(nxt) and self._errors is None
            else None
        )
        while handing and self._stopped is None:
            batch = handing[0]
            token = batch.token
            assert token is not None and batch.ref is not None
            if batch.handed == 0 and identified is not None and batch.ref.origin:
                identified.begin_identified(batch.ref.identity)
            if batch.frames:
                if not self._offer_frames(batch, token):
                    return
            elif not self._offer_runs(batch, token, batched):
                return
            if identified is not None and batch.ref.origin:
                identified.end_identified()
            handing.popleft()
            if self.config.ack != "spooled" or batch.failed:
                batch.drop_rows()  # no retry within the run: nothing to re-read (B66)
            token.release(not batch.failed)

    def _offer_runs(
        self,
        batch: _Batch,
        token: AckToken,
        batched: RowBatchSink | None,
    ) -> bool:
        """Offer ``batch``'s rows from ``batch.handed`` on; False once the next tier refuses."""
        rows, keys, runs = batch.rows, batch.keys, batch.runs
        n = len(rows)
        for r, (start, lane) in enumerate(runs):
            stop = runs[r + 1][0] if r + 1 < len(runs) else n
            i = max(start, batch.handed)
            if i >= stop:
                continue
            if batched is not None:
                nxt = batched
                pending = batch.prepared
                prepared = pending[1] if pending is not None and pending[0] == i else None
                if prepared is None:
                    try:
                        prepared, bad = nxt.prepare_rows(rows[i:stop], keys[i:stop], lane)
                    except SinkError:
                        prepared = None  # a whole-run refusal: row by row below
                    else:
                        if bad:
                            # The next tier counted these record errors: they fail the
                            # batch; its other rows go on (B102).
                            logger.error(
                                "spool %s: the next tier refused %d spooled rows of batch %s: %s",
                                self.name,
                                len(bad),
                                batch.ref,
                                bad[0][1],
                            )
                            batch.failed = True
                if prepared is not None:
                    if nxt.offer_rows(prepared, lane, token) is REJECTED:
                        batch.prepared = (i, prepared)  # offered again, not prepared again
                        return False
                    batch.prepared = None
                    batch.handed = stop
                    continue
            if not self._offer_each(batch, token, i, start, stop, lane):
                return False
        return True

    def _offer_each(
        self, batch: _Batch, token: AckToken, i: int, start: int, stop: int, lane: Lane
    ) -> bool:
        """Offer rows ``i:stop`` of the run ``start:stop`` one by one; False once the next
        tier refuses one for now. A row it refuses as bad fails the batch (B102).

        While the next tier charges the rows it refuses at write time to records (B323),
        the spool's cell names for each row the record the spool makes of it: its lane
        and key, the row as its payload (:func:`row_payload`), the source offset spooled
        with it (B421; -1 for a row spooled without one) and no timestamp, since the
        records it came from were acknowledged when spooled, or are read back from disk."""
        rows, keys = batch.rows, batch.keys
        cell = None if self._errors is None else self._errors.cell
        records: PayloadBatch | None = None
        if cell is not None:
            offsets = batch.offsets
            records = _spooled_records(
                lane,
                [row_payload(row) for row in rows[start:stop]],
                keys[start:stop],
                None if offsets is None else offsets[start:stop],
            )
        offer = self.next.offer
        try:
            while i < stop:
                if cell is not None:
                    cell.batch, cell.index = records, i - start
                try:
                    offered = offer(rows[i], keys[i], lane, token)
                except SinkError as exc:
                    logger.error(
                        "spool %s: the next tier refused a spooled row: %s", self.name, exc.reason
                    )
                    batch.failed = True
                    offered = ACCEPTED
                if offered is REJECTED:
                    batch.handed = i
                    return False
                i += 1
        finally:
            if cell is not None:
                cell.batch = None
        batch.handed = stop
        return True

    def _offer_frames(self, batch: _Batch, token: AckToken) -> bool:
        """Offer ``batch``'s frames from ``batch.handed`` on, each whole; False once the
        next tier refuses one for now (B151).

        The next tier prepares each frame here. Rows it refuses as bad are one record
        error each (logged with the batch): the frame's other rows go on and the batch
        counts as failed, so it stays in the spool, as with rows (B102). A frame it
        refuses for now is offered again later as prepared, not prepared again; a frame
        it cannot take at all (``SinkError`` from ``prepare_frame``, or a record error
        from ``offer_frame``) fails the batch and the other frames go on."""
        frames = batch.frames
        nxt = frame_sink(self.next, f"spool {self.name}")
        cell = None if self._errors is None else self._errors.cell
        while batch.handed < len(frames):
            frame, keys, lane, offsets = frames[batch.handed]
            records = None if cell is None else _frame_records(frame, keys, lane, offsets)
            if records is not None:
                frame = _numbered(frame)
            pending = batch.prepared
            if pending is not None and pending[0] == batch.handed:
                prepared, keys = pending[1]  # type: ignore[misc]
            else:
                try:
                    prepared, bad = nxt.prepare_frame(frame)
                except SinkError as exc:
                    self._refused_frame(batch, exc.reason)
                    batch.handed += 1
                    continue
                if bad:
                    self._refused_frame(batch, f"{len(bad)} rows, the first: {bad[0][1]}")
                    if keys is not None:
                        dropped = {position for position, _ in bad}
                        keys = [k for i, k in enumerate(keys) if i not in dropped]
            if cell is not None:
                cell.batch = records
            try:
                offered = nxt.offer_frame(prepared, keys, lane, token)
            except SinkError as exc:
                if exc.error_class is not ErrorClass.RECORD:
                    raise
                self._refused_frame(batch, exc.reason)
                offered = ACCEPTED
            finally:
                if cell is not None:
                    cell.batch = None
            if offered is REJECTED:
                batch.prepared = (batch.handed, (prepared, keys))
                return False
            batch.prepared = None
            batch.handed += 1
        return True

    def _refused_frame(self, batch: _Batch, reason: str) -> None:
        """The next tier refused rows of a spooled frame as bad: the batch fails (B102)."""
        logger.error(
            "spool %s: the next tier refused spooled rows of batch %s: %s",
            self.name,
            batch.ref,
            reason,
        )
        batch.failed = True

    def _raise_stopped(self) -> None:
        """Stop the pipeline once the next tier failed a batch for good (B322)."""
        if self._stopped is not None:
            raise FatalError(f"spool {self.name}", self._stopped)

    def _retry_due(self) -> None:
        """Queue failed batches whose backoff passed ahead of newer ones, oldest first."""
        with self._lock:
            if not self._retrying:
                return
            now = self._clock.monotonic()
            due = [b for b in self._retrying if b.due <= now]
            if not due:
                return
            self._retrying = [b for b in self._retrying if b.due > now]
        due.sort(key=_store_order)
        for batch in due:
            batch.handed = 0
            batch.prepared = None
            batch.token = self._token(batch)
            with self._lock:
                self._inflight.add(batch)
        handing = self._handing
        # A batch partly offered keeps its place: its rows form one identified batch.
        keep = [handing.popleft()] if handing and handing[0].handed else []
        handing.extendleft(reversed([*keep, *due]))
        self._m_retried.inc(len(due))

    def _resolved(self, batch: _Batch, token: AckToken, /) -> None:
        """The next tier settled a spooled batch (any thread)."""
        ok = token.status is AckStatus.DELIVERED
        spooled = self.config.ack == "spooled"
        # A batch failed for good (rows the destination refused under `fail`) would fail
        # again: kept, not retried, and the spool stops (B322).
        final = None if ok or not spooled else token.failure
        retry = not ok and spooled and not batch.failed and not self._closed and final is None
        with self._lock:
            self._inflight.discard(batch)
            self._lettered.discard(token)
            if batch.replayed:
                self._replaying -= 1
                batch.replayed = False
            if retry:
                batch.failures += 1
                now = self._clock.monotonic()
                due = retry_at(self._backoff, batch.failures, now)
                assert due is not None  # the spool's retry has no attempt limit (B66)
                batch.due = due
                delay = due - now
                self._retrying.append(batch)
            else:
                self._held_records -= token.records
        if ok:
            assert batch.ref is not None
            batch.drop_rows()
            self._store.release(batch.ref)
        elif final is not None:
            batch.drop_rows()
            if self._stopped is None:
                self._stopped = (
                    f"the next tier failed batch {batch.ref} ({token.records} records) for "
                    f"good: {final}. Its records were acknowledged once spooled (ack: "
                    "spooled), so the spool keeps the batch and every batch after it, stops "
                    "handing on and stops the pipeline; they are replayed on the next start"
                )
                logger.error("spool %s: %s", self.name, self._stopped)
        elif retry:
            logger.error(
                "spool %s: the next tier failed batch %s (%d records, failure %d); it stays "
                "in the spool and is handed on again in %.1fs",
                self.name,
                batch.ref,
                token.records,
                batch.failures,
                delay,
            )
        else:
            batch.drop_rows()
            logger.error(
                "spool %s: the next tier failed batch %s (%d records); it stays in the spool "
                "and is replayed on the next start",
                self.name,
                batch.ref,
                token.records,
            )
        batch.release_acks(ok)

    def _gauges(self) -> None:
        self._m_bytes.set(self.held_bytes())
        self._m_segments.set(self._store.segments())
        with self._lock:
            self._m_records.set(self._held_records)
            oldest = min((b.created for b in (*self._inflight, *self._retrying)), default=None)
        self._m_oldest.set(0.0 if oldest is None else self._clock.monotonic() - oldest)


def _spooled_records(
    lane: Lane, payloads: list[bytes], keys: Sequence[bytes | None], offsets: list[int] | None
) -> PayloadBatch:
    """The records the spool makes of spooled rows (B323, B348): their lane, keys and
    payloads, the source offsets spooled with them (-1 where none, B421), no timestamp."""
    count = len(payloads)
    kept = [-1] * count if offsets is None else offsets
    return PayloadBatch.lazy(
        lane,
        payloads,
        first_offset=kept[0] if kept else -1,
        next_offset=kept[-1] + 1 if kept and kept[-1] >= 0 else -1,
        offsets=kept,
        keys=list(keys),
        timestamps=lambda: [0] * count,
    )


def _frame_records(
    frame: object,
    keys: Sequence[bytes | None] | None,
    lane: Lane,
    offsets: list[int] | None = None,
) -> PayloadBatch | None:
    """The records the spool makes of a spooled frame's rows for the next tier to charge
    the rows it refuses at write time to (B348): as for rows (B323), the frame's lane and
    keys, each row as its payload — a JSON object of its columns (:func:`row_payload`) —
    the rows' source offsets (-1 when not kept, B421) and no timestamp. None for a frame
    that is not a polars DataFrame."""
    import polars as pl

    if not isinstance(frame, pl.DataFrame):
        return None
    count = frame.height
    columns = [c for c in frame.columns if c != ROW_COLUMN]
    return _spooled_records(
        lane,
        [row_payload(row) for row in frame.select(columns).to_dicts()],
        list(keys) if keys is not None else [None] * count,
        offsets,
    )


def _offset_of(cell: RecordCell) -> int:
    """The source offset of the record the chain offers now (-1 when not known)."""
    batch = cell.batch
    if batch is None:
        return -1
    offsets = batch.offsets
    index = cell.index
    return offsets[index] if 0 <= index < len(offsets) else -1


def _offsets_of(cell: RecordCell, count: int) -> list[int] | None:
    """The source offsets of ``count`` rows the chain hands on at once (B95): by the
    records the chain noted for them; None when it noted none."""
    batch, records = cell.batch, cell.records
    if batch is None or records is None or len(records) != count:
        return None
    offsets = batch.offsets
    return [offsets[r] for r in records]


def _frame_offsets(cell: RecordCell, frame: object) -> list[int] | None:
    """The source offsets of a frame's rows, by its row column (the record of each row);
    None without one or without the chain's source batch."""
    import polars as pl

    batch = cell.batch
    if batch is None or not isinstance(frame, pl.DataFrame) or ROW_COLUMN not in frame.columns:
        return None
    offsets = batch.offsets
    return [offsets[r] for r in frame.get_column(ROW_COLUMN).to_list()]


def _numbered(frame: object) -> object:
    """``frame`` whose row column numbers its rows from 0 — the indexes of their records
    in :func:`_frame_records` — in place of the chain's, which named records long gone."""
    import polars as pl

    assert isinstance(frame, pl.DataFrame)
    rows = pl.int_range(0, frame.height, dtype=pl.UInt32, eager=True).alias(ROW_COLUMN)
    return frame.with_columns(rows)
