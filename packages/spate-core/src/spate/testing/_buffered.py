"""Shared machinery of the test-kit sinks: buffers, sealing, acks and the byte budget.

A :class:`BufferedSink` keeps one open buffer of rows; it seals at ``max_rows``, on
``tick()`` and on ``flush()``. Sealed batches are written in order by :meth:`_attempt`
(the subclass decides the outcome of each attempt) — inline on the calling thread, or by
one worker thread with ``threaded=True`` so that acks resolve on another thread as they
do with the real sink pool. A buffer retains each batch's ack once and releases it when
written (ok) or abandoned/failed (not ok) (B2, B4); rows count against the byte budget
until then (B7). With ``capacity`` set, ``offer`` answers ``REJECTED`` while that many
rows are buffered (B7, B8).
"""

from __future__ import annotations

import logging
import threading
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Literal

from spate._clock import Clock, SystemClock
from spate.checkpoint._ack import AckToken, release_all
from spate.flow._contract import ByteBudget
from spate.records import Lane
from spate.sink._contract import Offer

logger = logging.getLogger(__name__)

Attempt = Literal["ok", "retry", "fatal", "wait"]
"""Outcome of one write attempt: done, try again later, give up, still in progress."""

_WORKER_IDLE = 0.005
"""Real seconds a worker or a flush waits between attempts that made no progress."""


@dataclass(slots=True)
class Row:
    """One accepted row with its routing metadata."""

    row: object
    key: bytes | None
    lane: Lane


class Hold:
    """The holder a buffer names when it retains and releases acks (one per buffer)."""

    __slots__ = ("label",)

    def __init__(self, label: str) -> None:
        self.label = label

    def __repr__(self) -> str:
        return self.label


@dataclass(slots=True)
class SealedBatch:
    """Rows sealed together, the acks they hold (as ``holder``) and their budget bytes."""

    seq: int
    rows: list[Row]
    acks: list[AckToken]
    nbytes: int
    holder: Hold
    attempts: int = 0
    started_at: float | None = None
    notes: dict[str, object] = field(default_factory=dict)


class BufferedSink:
    """Base of the test-kit sinks; subclasses implement :meth:`_attempt`."""

    def __init__(
        self,
        name: str,
        *,
        max_rows: int = 100,
        capacity: int | None = None,
        row_bytes: int = 64,
        budget: ByteBudget | None = None,
        clock: Clock | None = None,
        threaded: bool = False,
    ) -> None:
        if max_rows < 1:
            raise ValueError("max_rows must be at least 1")
        self.name = name
        self.max_rows = max_rows
        self.capacity = capacity
        self.row_bytes = row_bytes
        self.budget = budget
        self.clock: Clock = clock if clock is not None else SystemClock()
        self.threaded = threaded
        self._lock = threading.Condition()
        self._open: list[Row] = []
        self._open_acks: list[AckToken] = []
        self._last_ack: AckToken | None = None
        self._sealed: deque[SealedBatch] = deque()
        self._buffered_rows = 0
        self._seq = 0
        self._holder = Hold(f"sink {name} buffer 1")
        self._stop = False
        self._worker: threading.Thread | None = None
        self._writing = False
        self.started = False
        self.closed = False
        self.rows_failed = 0
        self.batches_failed = 0
        self.offers_rejected = 0

    # -- subclass hook --------------------------------------------------------------

    def _attempt(self, batch: SealedBatch) -> Attempt:
        """Try to write ``batch``; called without the lock, one batch at a time."""
        raise NotImplementedError

    # -- Sink -----------------------------------------------------------------------

    def start(self) -> None:
        self.started = True
        if self.threaded and self._worker is None:
            self._worker = threading.Thread(
                target=self._work, name=f"sink-{self.name}", daemon=True
            )
            self._worker.start()

    def offer(self, row: object, key: bytes | None, lane: Lane, ack: AckToken) -> Offer:
        with self._lock:
            if self.closed:
                raise RuntimeError(f"sink {self.name} is closed")
            if self.capacity is not None and self._buffered_rows >= self.capacity:
                self.offers_rejected += 1
                return Offer.REJECTED
            self._open.append(Row(row, key, lane))
            self._buffered_rows += 1
            if ack is not self._last_ack and ack not in self._open_acks:
                ack.retain(self._holder)
                self._open_acks.append(ack)
            self._last_ack = ack
            sealed = len(self._open) >= self.max_rows
            if sealed:
                self._seal_locked()
        if self.budget is not None:
            self.budget.acquire(self.row_bytes)
        if sealed:
            self._kick()
        return Offer.ACCEPTED

    def tick(self) -> None:
        with self._lock:
            self._seal_locked()
        self._kick()

    def flush(self, deadline: float) -> bool:
        with self._lock:
            self._seal_locked()
        while True:
            if not self.threaded:
                self._pump()
            with self._lock:
                if not self._sealed and not self._writing:
                    return True
                if self.clock.monotonic() >= deadline:
                    return False
                if self.threaded:
                    self._lock.notify_all()
                    self._lock.wait(_WORKER_IDLE)
                    continue
            self.clock.sleep(min(_WORKER_IDLE, max(0.0, deadline - self.clock.monotonic())))

    def abandon(self) -> int:
        with self._lock:
            self._seal_locked()
            batches = list(self._sealed)
            self._sealed.clear()
        return self._fail_batches(batches)

    def ready(self) -> bool:
        return self.started and not self.closed

    def close(self) -> None:
        abandoned = self.abandon()
        if abandoned:
            logger.warning("sink %s closed with %d unwritten rows", self.name, abandoned)
        with self._lock:
            self.closed = True
            self._stop = True
            self._lock.notify_all()
        if self._worker is not None:
            self._worker.join(timeout=5)

    # -- internals ------------------------------------------------------------------

    @property
    def buffered_rows(self) -> int:
        with self._lock:
            return self._buffered_rows

    def _seal_locked(self) -> None:
        if not self._open:
            return
        self._seq += 1
        self._sealed.append(
            SealedBatch(
                seq=self._seq,
                rows=self._open,
                acks=self._open_acks,
                nbytes=len(self._open) * self.row_bytes,
                holder=self._holder,
            )
        )
        self._open = []
        self._open_acks = []
        self._last_ack = None
        self._holder = Hold(f"sink {self.name} buffer {self._seq + 1}")

    def _kick(self) -> None:
        if self.threaded:
            with self._lock:
                self._lock.notify_all()
        else:
            self._pump()

    def _pump(self) -> bool:
        """Write sealed batches in order until one is not done; True if any finished."""
        progressed = False
        while True:
            with self._lock:
                if not self._sealed or self._writing:
                    return progressed
                batch = self._sealed[0]
                self._writing = True
            try:
                if batch.started_at is None:
                    batch.started_at = self.clock.monotonic()
                outcome = self._attempt(batch)
            except Exception:
                logger.exception("sink %s write attempt raised; treating it as fatal", self.name)
                outcome = "fatal"
            with self._lock:
                self._writing = False
                if outcome in ("retry", "wait"):
                    if outcome == "retry":
                        batch.started_at = None
                    self._lock.notify_all()
                    return progressed
                if self._sealed and self._sealed[0] is batch:
                    self._sealed.popleft()
                else:  # abandoned while being written
                    return progressed
                self._lock.notify_all()
            progressed = True
            if outcome == "ok":
                self._resolve([batch], ok=True)
            else:
                self._fail_batches([batch])

    def _fail_batches(self, batches: Iterable[SealedBatch]) -> int:
        rows = 0
        failed = list(batches)
        for batch in failed:
            rows += len(batch.rows)
        if failed:
            with self._lock:
                self.rows_failed += rows
                self.batches_failed += len(failed)
        self._resolve(failed, ok=False)
        return rows

    def _resolve(self, batches: list[SealedBatch], *, ok: bool) -> None:
        for batch in batches:
            with self._lock:
                self._buffered_rows -= len(batch.rows)
                self._lock.notify_all()
            if self.budget is not None:
                self.budget.release(batch.nbytes)
            release_all(batch.acks, ok, batch.holder)  # every one, even if one raises (B4)

    def _work(self) -> None:
        while True:
            with self._lock:
                while not self._stop and not self._sealed:
                    self._lock.wait()
                if self._stop:
                    return
            if not self._pump():
                with self._lock:
                    if not self._stop:
                        self._lock.wait(_WORKER_IDLE)
