"""The spool's writer thread: appends sealed batches to the store and makes them durable.

The spool tier (:mod:`spate.sink.tiers._spool`) seals batches on the pipeline thread and
queues them here; one writer thread of the write-behind engine (:mod:`spate.sink._engine`,
ADR 0028: this class is its client) appends them in the order they sealed and fsyncs as
the policy says (``fsync: batch`` — after appending what was queued, so batches sealed
during one fsync share the next; ``fsync: segment`` — when the tier asks, on segment
rotation and every tick). At most ``_QUEUED`` sealed batches wait (queueing another
waits). Once an fsync returned, the tier's ``on_durable`` callback runs on the writer
thread (it releases source acks with ``ack: spooled``) and the batches wait in
:meth:`SpoolWriter.take_durable` for the pipeline thread to hand them on.

A failed append stalls the writer with the batch still queued (unacknowledged) until the
pipeline thread asks again (:meth:`SpoolWriter.retry`, B57); a failed fsync fails the
batches it covered (their source acks are released failed, B2). Does not own: batches'
contents, tokens, handing on or the store's layout (the tier and the store do).
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Generic, Literal, Protocol, TypeVar

from spate._clock import Clock
from spate.errors import SinkError
from spate.metrics import names
from spate.metrics._meter import Meter
from spate.sink._engine import WriteBehind
from spate.sink.tiers._store import BatchRef, SpoolStore

logger = logging.getLogger(__name__)

_QUEUED = 2
"""Sealed batches that may wait for the writer thread before queueing blocks (the write
and fsync of one batch overlap with filling the next ones; memory stays bounded)."""


class SealedBatch(Protocol):
    """What the writer needs of a sealed batch."""

    records: list[bytes]
    ref: BatchRef | None
    size: int

    @property
    def count(self) -> int: ...

    def release_acks(self, ok: bool) -> None: ...


B = TypeVar("B", bound=SealedBatch)


class SpoolWriter(Generic[B]):
    """One spool's writer thread and the queue in front of it (started on first use)."""

    def __init__(
        self,
        name: str,
        store: SpoolStore,
        *,
        fsync: Literal["batch", "segment"],
        on_durable: Callable[[list[B]], None],
        meter: Meter,
        clock: Clock,
    ) -> None:
        """``on_durable``: called on the writer thread with the batches an fsync made
        durable, before they are offered to :meth:`take_durable`."""
        self.name = name
        self._store = store
        self._per_batch = fsync == "batch"
        self._on_durable = on_durable
        self._clock = clock
        self.cond = threading.Condition(threading.Lock())
        """Guards the state below (``queued`` to ``error``) and the engine's wake-ups."""
        self.queued: deque[B] = deque()
        """Sealed batches waiting to be appended, in seal order."""
        self.queued_bytes = 0
        """Bytes of ``queued`` (they count toward the spool's ``max_bytes``, B7)."""
        self.unsynced: list[B] = []
        """Batches appended and not yet fsynced (the writer thread's own)."""
        self.durable: deque[B] = deque()
        """Batches made durable, for the pipeline thread to hand on."""
        self.notice = False
        """News for the pipeline thread: durable batches or a failed write."""
        self._busy = False
        self.stalled = False
        """An append failed: the writer waits until the pipeline thread asks it to retry."""
        self._sync_wanted = False
        self._engine: WriteBehind[tuple[list[B], bool]] = WriteBehind(
            f"spool {name}", self, cond=self.cond, clock=clock, threads=1, on_exit=self._exited
        )
        self._abandoned = False
        """The batches in flight were failed: an fsync returning late hands nothing on
        (its batches stay on disk for the next start)."""
        self.stuck: threading.Thread | None = None
        """A writer thread :meth:`stop` left in a write or fsync that did not return."""
        self.close_store_later = False
        """The store is closed by the stuck writer thread on its way out."""
        self.error: str | None = None
        kw = {"component": name, "component_type": "spool"}
        self._m_fsync = meter.histogram(names.SPOOL_FSYNC_SECONDS, **kw)
        self._m_errors = meter.counter(names.SPOOL_WRITE_ERRORS, **kw)

    def enqueue(self, batch: B) -> None:
        """Queue a sealed batch (starting the thread on first use); wait while more than
        ``_QUEUED`` batches are ahead of it, unless the writer is stalled."""
        size = sum(map(len, batch.records)) + 4 * len(batch.records) + 20
        with self.cond:
            if not self._engine.running:
                self._engine.start(f"spool-{self.name}")
            self.queued.append(batch)
            self.queued_bytes += size
            batch.size = size
            self.cond.notify_all()
            while len(self.queued) > _QUEUED and not self.stalled:
                self.cond.wait()

    def settle(self, *, sync: bool, deadline: float | None = None) -> bool:
        """Wait until every queued batch is appended (``sync``: and what was appended is
        fsynced); False if an append failed (the batch stays queued) or ``deadline``
        passed first (see :meth:`writing`)."""
        with self.cond:
            if not self._engine.running:
                return not self.queued
            if sync:
                self._sync_wanted = True
                self.cond.notify_all()
        until = math.inf if deadline is None else deadline
        if not self._engine.wait(until, self._settled):
            return False
        with self.cond:
            return not self.stalled

    def _settled(self) -> bool:
        """Nothing in flight and nothing left to do but a failed append (lock held)."""
        return not (self._busy or (not self.stalled and (self.queued or self._sync_wanted)))

    def writing(self) -> bool:
        """Whether work is unfinished (a write or fsync in flight, or batches queued)
        rather than a failed append."""
        with self.cond:
            return self._busy or (not self.stalled and bool(self.queued or self._sync_wanted))

    def retry(self, deadline: float | None = None) -> bool:
        """Ask the stalled writer to append again and wait for it; True once it worked."""
        with self.cond:
            self.stalled = False
            self.cond.notify_all()
        return self.settle(sync=False, deadline=deadline)

    def take_durable(self) -> deque[B]:
        """The batches made durable since the last call (pipeline thread)."""
        with self.cond:
            self.notice = self.stalled  # a failed append is news until it is retried
            done, self.durable = self.durable, deque()
        return done

    def stop(self, timeout: float | None = None) -> bool:
        """Stop the thread once its current write and fsync returned; False when that
        took longer than ``timeout`` (the thread is left behind, its batches abandoned:
        a late fsync hands nothing on)."""
        if not self._engine.running:
            return True
        left = self._engine.stop(timeout)
        if not left:
            return True
        with self.cond:
            self._abandoned = True
            self.stuck = left[0]
            self._busy = False
        return False

    def take_pending(self) -> list[B]:
        """Forget the batches queued or appended and not yet durable, and any failed
        append (the tier fails their acks, B4); the writer must be stopped."""
        pending = [*self.queued, *self.unsynced]
        self.queued.clear()
        self.queued_bytes = 0
        self.unsynced = []
        self.error = None
        self.stalled = self.notice = self._sync_wanted = False
        return pending

    # -- the engine's client (spool appends in seal order, one writer thread) --------

    def take(self, now: float) -> tuple[list[B], bool] | None:
        """What is queued (a snapshot, in seal order) and whether to fsync after it;
        None while stalled or idle (lock held)."""
        if self.stalled or not (self.queued or self._sync_wanted):
            return None
        self._busy = True
        sync = self._per_batch or self._sync_wanted
        self._sync_wanted = False
        return list(self.queued), sync

    def next_wake(self, now: float) -> float | None:
        """Never on time: only news (a batch queued, a retry, a sync asked) wakes it."""
        return None

    def write(self, item: tuple[list[B], bool]) -> None:
        """Append the batches, then fsync if asked (lock NOT held)."""
        batches, sync = item
        try:
            self._write(batches, sync)
        except Exception as exc:  # a store's own bug: the batch stays queued, unacked
            logger.exception("spool %s: the store failed unexpectedly", self.name)
            self.error = str(exc)
            with self.cond:
                self.stalled = self.notice = True
        finally:
            with self.cond:
                self._busy = False
                self.cond.notify_all()

    def _exited(self) -> None:
        """The writer thread returns: one that :meth:`stop` left behind closes the store
        if the tier was closed meanwhile (its hung write or fsync returned after close)."""
        with self.cond:
            close_store = self._abandoned and self.close_store_later
            if self._abandoned:
                self.stuck = None
                self.close_store_later = False
        if close_store:
            self._store.close()

    def _write(self, batches: list[B], sync: bool) -> None:
        """Append ``batches`` (a snapshot of the queue), then fsync if ``sync``."""
        for batch in batches:
            try:
                batch.ref = self._store.append(batch.records)
            except SinkError as exc:
                self._failed_write(exc)
                with self.cond:
                    self.stalled = self.notice = True
                break
            with self.cond:
                if self._abandoned:
                    return  # returned too late: the tier failed this batch (B4)
                self.queued.popleft()
                self.queued_bytes -= batch.size
            self.unsynced.append(batch)
        else:
            if self.error is not None:
                logger.info("spool %s: writing works again", self.name)
                self.error = None
        if not (sync and self.unsynced):
            return
        started = time.perf_counter()
        try:
            self._store.sync()
            with self.cond:
                if self._abandoned:
                    return  # returned too late: the tier failed these batches (B4)
        except SinkError as exc:
            # After a failed fsync the kernel may have dropped the pages and a retry
            # could report success without them: these batches are not durable and
            # are never acknowledged; their source batches fail (B2, B57).
            self._failed_write(exc)
            failed, self.unsynced = self.unsynced, []
            rows = 0
            for batch in failed:
                rows += batch.count
                batch.release_acks(False)
            logger.error(
                "spool %s: %d rows could not be made durable; their source batches fail",
                self.name,
                rows,
            )
            if not self.stalled:
                self.error = None
            return
        self._m_fsync.observe(time.perf_counter() - started)
        durable, self.unsynced = self.unsynced, []
        self._on_durable(durable)
        with self.cond:
            self.durable.extend(durable)
            self.notice = True

    def _failed_write(self, exc: SinkError) -> None:
        self._m_errors.inc()
        if self.error != exc.reason:
            logger.error(
                "spool %s: %s; the batch stays unaccepted and intake pauses until it can be "
                "written",
                self.name,
                exc.reason,
            )
        self.error = exc.reason
