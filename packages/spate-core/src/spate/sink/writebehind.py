"""The write-behind engine of windowed sinks, and the one commit gate (ADR 0012).

A windowed sink (Parquet, Hugging Face, or a third-party file or lake sink) keeps rows
in open windows on the pipeline thread and cuts them where its input says; it hands a
sealed window to :class:`WindowedWriter`, which owns everything after the cut:

* **the queue and the writer thread**: one thread of the engine (or the pipeline thread
  itself, inline, when the pipeline has no io threads) takes the sealed windows in order
  and writes each;
* **retries on the pipeline clock** (B12): a write that fails with a RETRYABLE
  ``SinkError`` is queued again at the front after the :class:`~spate.sink.Backoff`
  delay, measured on the pipeline's :class:`~spate.Clock` (a test drives it with a
  ``ManualClock``); any other failure, or a retryable one once the attempts run out,
  fails the window;
* **a breaker** (B11), optional: after ``failure_threshold`` retryable failures in a row
  the writer waits ``open_for`` before one trial write;
* **the commit gate**: what makes a written window visible (a manifest, a Hub commit)
  runs through :class:`CommitGate`, which serializes the commits of one destination
  among the gates of one :class:`CommitGates` registry (the pipeline's, from
  :attr:`BuildContext.commit_gates <spate.plugins.BuildContext.commit_gates>`; B157,
  B231; defined in :mod:`spate.sink._gate` and exported here);
* **ack settlement** (B2, B4, B39): each window is the holder of its acks
  (``ack.retain(window)``, done by the sink when a row joins it) and the engine releases
  them once, whoever gets there first: delivered after the write *and* the commit
  returned, failed when the write fails for good, or by :meth:`WindowedWriter.abandon`
  and close for every window not yet written.

The sink supplies what differs, as protected hooks: how its open windows are sealed
(all, or those holding some lanes), how one window is written and committed, and what a
failed window undoes. Connectors subclass :class:`WindowedWriter`, call
:meth:`~WindowedWriter._init_writer` in ``__init__``, :meth:`~WindowedWriter._queue` for
each sealed window, and get ``flush``, ``flush_lanes`` and ``abandon`` of the
:class:`~spate.sink.Sink` contract.

The threads, their wake-ups on the pipeline clock, inline mode, the verdict of an
attempt and the once-only settlement are the one write-behind engine's
(:mod:`spate.sink._engine`, ADR 0028), which the :class:`~spate.sink.SinkPool`
(ClickHouse, Kafka) and the spool's writer run on too; this module keeps the queue of
sealed windows (in seal order, a retry at the front) and how a window is written and
committed.
"""

from __future__ import annotations

import collections
import logging
import threading
from collections.abc import Collection, Hashable
from dataclasses import dataclass
from typing import Generic, Protocol, TypeVar

from spate._clock import Clock
from spate.checkpoint._ack import AckToken
from spate.errors import SinkError
from spate.records import Lane
from spate.sink._breaker import Breaker
from spate.sink._engine import WriteBehind, claim, release, verdict
from spate.sink._gate import CommitGate, CommitGates
from spate.sink._retry import Backoff
from spate.sink.config import BreakerConfig

__all__ = ["CommitGate", "CommitGates", "SealedWindow", "WindowedWriter"]

logger = logging.getLogger(__name__)

_POLL = 0.25
"""Longest real wait of the writer thread for a due retry: a ``ManualClock`` moved by a
test is seen within this, as the flush wait sees it."""


class SealedWindow(Hashable, Protocol):
    """What the engine needs of a window: its acks, its settlement flag, its lanes.

    The window is the holder of its acks by identity (``eq=False`` dataclasses hash by
    identity), so two windows with equal contents are two holders.
    """

    acks: list[AckToken]
    settled: bool
    """Its acks were released (guarded by the engine's lock)."""

    def holds(self, lanes: Collection[Lane]) -> bool:
        """Whether the window holds rows of any of ``lanes``."""
        ...


W = TypeVar("W", bound=SealedWindow)


@dataclass(slots=True)
class _Job(Generic[W]):
    window: W
    attempts: int = 0
    not_before: float = 0.0
    """When the next attempt may start, on the pipeline clock."""


class WindowedWriter(Generic[W]):
    """The queue, the writer thread, the retries and the ack settlement of a windowed sink.

    Subclasses call :meth:`_init_writer` in ``__init__`` and implement
    :meth:`_take_open`, :meth:`_seal_all`, :meth:`_seal_lanes`, :meth:`_write_window`,
    :meth:`_rows` and :meth:`_describe`; :meth:`_commit_window`, :meth:`_unwritten` and
    :meth:`_retry_delay` are optional.
    """

    name: str

    def _init_writer(
        self,
        *,
        clock: Clock,
        threaded: bool,
        backoff: Backoff,
        join_timeout: float,
        gate: CommitGate | None = None,
        breaker: BreakerConfig | None = None,
    ) -> None:
        """Set the engine up: ``threaded`` (a writer thread, else writes happen inline on
        the pipeline thread during ``tick``/``flush``), the ``backoff`` between attempts,
        how long ``close`` waits for the writer thread, the commit ``gate`` that
        :meth:`_commit_window` runs under, and an optional ``breaker``."""
        self._wb_clock = clock
        self._threaded = threaded
        self._backoff = backoff
        self._join_timeout = join_timeout
        self._commit_gate = gate
        self._breaker = Breaker(breaker, f"sink {self.name}") if breaker is not None else None
        self._jobs: collections.deque[_Job[W]] = collections.deque()
        self._busy = 0
        """Jobs being written (0 or 1)."""
        self._writing: W | None = None
        self._cond = threading.Condition()
        self._engine: WriteBehind[_Job[W]] = WriteBehind(
            f"sink {self.name}",
            _Windows(self),
            cond=self._cond,
            clock=clock,
            threads=1 if threaded else 0,
            poll=_POLL,
            give_up_early=True,
        )
        self.write_retries = 0
        """Write attempts that failed and were tried again."""
        self.windows_failed = 0
        """Windows whose write failed for good (their acks were released failed)."""

    # -- hooks -----------------------------------------------------------------------

    def _take_open(self) -> list[W]:
        """Every open (unsealed) window, forgotten by the sink (pipeline thread)."""
        raise NotImplementedError

    def _seal_all(self) -> None:
        """Seal every open window (each through :meth:`_queue`)."""
        raise NotImplementedError

    def _seal_lanes(self, lanes: Collection[Lane]) -> None:
        """Seal the open windows holding rows of ``lanes``."""
        raise NotImplementedError

    def _write_window(self, window: W) -> None:
        """Write one window durably; raise ``SinkError`` when it could not be.

        Called on the writer thread (or inline); may block. May settle the window itself
        (then nothing more happens to it: no commit, no second settlement).
        """
        raise NotImplementedError

    def _commit_window(self, window: W) -> None:
        """Make a written window visible (a manifest, a repository commit); raise
        ``SinkError`` when it could not be. Runs under the commit gate, after
        :meth:`_write_window`; a retry runs both again. Nothing by default."""

    def _rows(self, window: W) -> int:
        """The rows a window holds (what :meth:`abandon` counts)."""
        raise NotImplementedError

    def _describe(self, window: W) -> str:
        """The window in a log line (``write of …``)."""
        raise NotImplementedError

    def _unwritten(self, window: W) -> None:
        """A window's acks are being released failed (called under the engine's lock)."""

    def _retry_delay(self, exc: SinkError, attempts: int) -> float:
        """The wait before the next attempt after ``attempts`` failed ones."""
        return self._backoff.delay(attempts)

    # -- lifecycle -------------------------------------------------------------------

    def _start_writer(self, thread_name: str) -> None:
        """Start the writer thread (nothing without io threads). Called by ``start``."""
        self._engine.start(thread_name)

    def _stop_writer(self) -> None:
        """Fail what is not written (B4) and stop the writer thread. Called by ``close``."""
        self.abandon()
        self._engine.stop(self._join_timeout)
        if self._commit_gate is not None:
            self._commit_gate.close()

    # -- the queue (pipeline thread) -------------------------------------------------

    def _queue(self, window: W) -> None:
        """Hand a sealed window to the writer."""
        with self._cond:
            self._jobs.append(_Job(window))
            self._cond.notify_all()

    def _pending(self) -> int:
        """Sealed windows not yet written."""
        return len(self._jobs) + self._busy

    def _has_room(self, limit: int, deadline: float) -> bool:
        """Whether fewer than ``limit`` sealed windows wait; without a writer thread the
        queue is written inline first, until ``deadline`` (pipeline clock)."""
        if self._pending() >= limit and not self._threaded:
            self._engine.drain(deadline, self._all_written)
        return self._pending() < limit

    def _write_due(self) -> None:
        """Write inline what is due now (no writer thread); called from ``tick``."""
        if not self._threaded:
            self._engine.drain(self._wb_clock.monotonic(), self._all_written)

    def _all_written(self) -> bool:
        return not self._jobs and self._busy == 0

    def flush(self, deadline: float) -> bool:
        """Seal every window and wait until each is written or failed, or ``deadline``
        (on the pipeline clock). Pipeline thread; blocks."""
        self._seal_all()
        return self._engine.wait(deadline, self._all_written)

    def flush_lanes(self, lanes: Collection[Lane], deadline: float) -> bool:
        """Seal the windows holding rows of ``lanes`` and wait until written (B40, B15).

        Other windows stay open, so their files are cut where the input says.
        """
        wanted = set(lanes)
        self._seal_lanes(wanted)

        def pending() -> bool:
            writing = self._writing
            if writing is not None and writing.holds(wanted):
                return True
            return any(job.window.holds(wanted) for job in self._jobs)

        if not self._threaded:  # inline: write the whole queue, in order
            return self._engine.drain(deadline, self._all_written)
        return self._engine.wait(deadline, lambda: not pending())

    def abandon(self) -> int:
        """Fail the acks of every window not yet written (B4); return their rows."""
        windows = self._take_open()
        with self._cond:
            windows.extend(job.window for job in self._jobs)
            self._jobs.clear()
            if self._writing is not None:
                windows.append(self._writing)  # its write may still land: failing is safe
            self._cond.notify_all()
        for window in windows:
            self._settle(window, ok=False)
        return sum(self._rows(w) for w in windows)

    # -- writing (writer thread, or inline without io threads) -----------------------

    def _due(self, job: _Job[W], now: float) -> float:
        """When ``job`` may be tried: its backoff, or later while the breaker is open."""
        breaker = self._breaker
        if breaker is not None and not breaker.available(now):
            reopens = breaker.reopens_at()
            if reopens is not None:
                return max(job.not_before, reopens)
        return job.not_before

    def _attempt(self, job: _Job[W]) -> None:
        """Write and commit one window; on a failure that can pass, queue it again after
        a backoff; settle its acks once it is written or failed for good."""
        window = job.window
        if window.settled:
            return  # abandoned while queued
        job.attempts += 1
        breaker = self._breaker
        if breaker is not None:
            with self._cond:
                breaker.acquire(self._wb_clock.monotonic())

        def write() -> None:
            self._write_window(window)
            if not window.settled:  # the write may settle it (an audit's skip or fail)
                if self._commit_gate is not None:
                    self._commit_gate.run(lambda: self._commit_window(window))
                else:
                    self._commit_window(window)

        judged = verdict(
            write,
            what=f"sink {self.name}: {self._describe(window)}",
            clock=self._wb_clock,
            backoff=self._backoff,
            attempts=job.attempts,
            breaker=breaker,
            cond=self._cond,
            delay=self._retry_delay,
        )
        if judged.error is None:
            self._settle(window, ok=True)
        elif judged.retry_at is not None:
            self._retry(job, judged.error, judged.retry_at)
        else:
            self._failed(window, job.attempts, judged.error.reason)

    def _retry(self, job: _Job[W], exc: SinkError, due: float) -> None:
        self.write_retries += 1
        logger.warning(
            "sink %s: %s failed (attempt %d), retrying in %.1fs: %s",
            self.name,
            self._describe(job.window),
            job.attempts,
            max(due - self._wb_clock.monotonic(), 0.0),
            exc.reason,
        )
        job.not_before = due
        with self._cond:
            self._jobs.appendleft(job)
            self._cond.notify_all()

    def _failed(self, window: W, attempts: int, reason: str) -> None:
        self.windows_failed += 1
        logger.error(
            "sink %s: %s failed after %d attempt(s); its records stay upstream: %s",
            self.name,
            self._describe(window),
            attempts,
            reason,
        )
        self._settle(window, ok=False)

    def _settle(self, window: W, ok: bool) -> None:
        """Release the window's acks once, whoever gets there first (writer or abandon)."""
        with self._cond:
            if not claim(window):
                return
            if not ok:
                self._unwritten(window)
        release(window, ok, window.acks)


class _Windows(Generic[W]):
    """The windowed writer as the engine's client: sealed windows in seal order, one at
    a time, a retry at the front after its backoff (or while the breaker is open)."""

    def __init__(self, writer: WindowedWriter[W]) -> None:
        self._w = writer

    def take(self, now: float) -> _Job[W] | None:
        w = self._w
        if w._busy or not w._jobs or w._due(w._jobs[0], now) > now:
            return None
        job = w._jobs.popleft()
        w._busy += 1
        w._writing = job.window
        return job

    def next_wake(self, now: float) -> float | None:
        w = self._w
        return w._due(w._jobs[0], now) if w._jobs and not w._busy else None

    def write(self, job: _Job[W]) -> None:
        w = self._w
        try:
            w._attempt(job)
        finally:
            with w._cond:
                w._busy -= 1
                w._writing = None
                w._cond.notify_all()
