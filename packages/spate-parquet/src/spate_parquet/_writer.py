"""The write queue of a windowed sink: sealed windows, one writer thread, acks after.

A windowed sink (Parquet, Hugging Face) keeps rows in open windows on the pipeline
thread and cuts them where its input says; a sealed window becomes a job of this queue.
One writer thread (or the pipeline thread itself, inline, without io threads) takes the
jobs in order and writes each; a write that fails with a RETRYABLE ``SinkError`` is
queued again at the front after a backoff, any other failure — or a retryable one once
the attempts run out — releases the window's acks failed. A written window releases its
acks delivered (B2). Each window is the holder of its acks (``ack.retain(window)``) and
releases each once, whoever gets there first: the writer, or :meth:`abandon` (B39, B4).

The sink supplies what differs: how its open windows are sealed (all, or those holding
some lanes), how one window is written, and what a failed window undoes.
"""

from __future__ import annotations

import collections
import logging
import threading
import time
from collections.abc import Callable, Collection, Hashable
from dataclasses import dataclass
from typing import Generic, Protocol, TypeVar

from spate.checkpoint._ack import AckToken, release_all
from spate.errors import ErrorClass, SinkError
from spate.records import Lane
from spate.sink import Backoff

logger = logging.getLogger(__name__)


class Sealed(Hashable, Protocol):
    """What the queue needs of a window."""

    acks: list[AckToken]
    settled: bool
    """Its acks were released (guarded by the queue's condition lock)."""

    def holds(self, lanes: Collection[Lane]) -> bool:
        """Whether the window holds rows of any of ``lanes``."""
        ...


W = TypeVar("W", bound=Sealed)


@dataclass(slots=True)
class Job(Generic[W]):
    window: W
    attempts: int = 0
    not_before: float = 0.0


class WindowedWriter(Generic[W]):
    """The queue, the writer thread and the ack settlement of a windowed sink.

    Subclasses call :meth:`_init_writer` in ``__init__`` and implement
    :meth:`_take_open`, :meth:`_seal_all`, :meth:`_seal_lanes`, :meth:`_write_window` and
    :meth:`_describe`; :meth:`_unwritten` and :meth:`_retry_delay` are optional.
    """

    name: str

    def _init_writer(self, threaded: bool, backoff: Backoff, join_timeout: float) -> None:
        self._threaded = threaded
        self._backoff = backoff
        self._join_timeout = join_timeout
        self._jobs: collections.deque[Job[W]] = collections.deque()
        self._busy = 0
        """Jobs being written (0 or 1)."""
        self._writing: W | None = None
        self._cond = threading.Condition()
        self._thread: threading.Thread | None = None
        self._stopping = False
        self.write_retries = 0
        """Write attempts that failed and were tried again."""
        self.windows_failed = 0
        """Windows whose write failed for good (their acks were released failed)."""

    # -- hooks -----------------------------------------------------------------------

    def _take_open(self) -> list[W]:
        """Every open (unsealed) window, forgotten by the sink."""
        raise NotImplementedError

    def _seal_all(self) -> None:
        """Seal every open window (each through :meth:`_queue`)."""
        raise NotImplementedError

    def _seal_lanes(self, lanes: Collection[Lane]) -> None:
        """Seal the open windows holding rows of ``lanes``."""
        raise NotImplementedError

    def _write_window(self, window: W) -> None:
        """Write one window durably; raise ``SinkError`` when it could not be.

        May settle the window itself (then the queue's delivered settlement is a no-op).
        """
        raise NotImplementedError

    def _describe(self, window: W) -> str:
        """The window in a log line (``write of …``)."""
        raise NotImplementedError

    def _unwritten(self, window: W) -> None:
        """A window's acks are being released failed (called under the lock)."""

    def _retry_delay(self, exc: SinkError, attempts: int) -> float:
        return self._backoff.delay(attempts)

    # -- lifecycle -------------------------------------------------------------------

    def _start_writer(self, thread_name: str) -> None:
        if self._threaded and self._thread is None:
            self._stopping = False
            self._thread = threading.Thread(target=self._run, name=thread_name, daemon=True)
            self._thread.start()

    def _stop_writer(self) -> None:
        """Fail what is not written (B4) and stop the writer thread."""
        self.abandon()
        with self._cond:
            self._stopping = True
            self._cond.notify_all()
        if self._thread is not None:
            self._thread.join(timeout=self._join_timeout)
            self._thread = None

    # -- the queue (pipeline thread) -------------------------------------------------

    def _queue(self, window: W) -> None:
        """Hand a sealed window to the writer."""
        with self._cond:
            self._jobs.append(Job(window))
            self._cond.notify_all()

    def _pending(self) -> int:
        """Sealed windows not yet written."""
        return len(self._jobs) + self._busy

    def flush(self, deadline: float) -> bool:
        """Seal every window and wait until each is written or failed, or ``deadline``."""
        self._seal_all()
        return self._wait(lambda: bool(self._jobs) or self._busy > 0, deadline)

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

        return self._wait(pending, deadline)

    def _wait(self, pending: Callable[[], bool], deadline: float) -> bool:
        """Wait until ``pending()`` is false (checked under the lock), or ``deadline``."""
        if not self._threaded:
            return self._drain_inline(deadline)
        with self._cond:
            while pending():
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return False
                self._cond.wait(min(remaining, 0.5))
        return True

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

    def _rows(self, window: W) -> int:
        """The rows a window holds (what :meth:`abandon` counts)."""
        raise NotImplementedError

    # -- writing (writer thread, or inline without io threads) -----------------------

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._stopping and (
                    not self._jobs or self._jobs[0].not_before > time.monotonic()
                ):
                    wait = self._jobs[0].not_before - time.monotonic() if self._jobs else None
                    self._cond.wait(wait)
                if self._stopping:
                    return
                job = self._jobs.popleft()
                self._busy += 1
                self._writing = job.window
            try:
                self._attempt(job)
            finally:
                with self._cond:
                    self._busy -= 1
                    self._writing = None
                    self._cond.notify_all()

    def _drain_inline(self, deadline: float) -> bool:
        """Write the queued jobs on this thread; False if ``deadline`` came first."""
        while self._jobs:
            job = self._jobs[0]
            wait = job.not_before - time.monotonic()
            if wait > 0:
                if time.monotonic() + wait > deadline:
                    return False
                time.sleep(wait)
            self._jobs.popleft()
            self._busy += 1
            self._writing = job.window
            try:
                self._attempt(job)
            finally:
                self._busy -= 1
                self._writing = None
        return True

    def _attempt(self, job: Job[W]) -> None:
        """Write one window; on a failure that can pass, queue it again after a backoff."""
        window = job.window
        if window.settled:
            return  # abandoned while queued
        job.attempts += 1
        try:
            self._write_window(window)
        except SinkError as exc:
            if exc.error_class is ErrorClass.RETRYABLE and not self._backoff.exhausted(
                job.attempts
            ):
                delay = self._retry_delay(exc, job.attempts)
                self.write_retries += 1
                logger.warning(
                    "sink %s: %s failed (attempt %d), retrying in %.1fs: %s",
                    self.name,
                    self._describe(window),
                    job.attempts,
                    delay,
                    exc.reason,
                )
                job.not_before = time.monotonic() + delay
                with self._cond:
                    self._jobs.appendleft(job)
                return
            self._failed(window, job.attempts, exc.reason)
            return
        except Exception as exc:
            logger.exception("sink %s: %s failed", self.name, self._describe(window))
            self._failed(window, job.attempts, f"{type(exc).__name__}: {exc}")
            return
        self._settle(window, ok=True)

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
            if window.settled:
                return
            window.settled = True
            if not ok:
                self._unwritten(window)
        release_all(window.acks, ok, window)
