"""The one write-behind engine of the sink: the loop every writer behind the pipeline runs.

Three clients write behind the pipeline thread — the :class:`~spate.sink.SinkPool`'s
workers (ClickHouse, Kafka), the spool tier's writer
(:mod:`spate.sink.tiers._spool_writer`) and the windowed writer of file and dataset sinks
(:mod:`spate.sink.writebehind`). Each keeps only what differs — what a work item is and
how one is written (a pool batch fenced and sent to a shard replica; a spool append with
its fsync policy and ``on_durable``; a window written and committed through the gate) —
as a :class:`Client`. This module owns, once for all three (ADR 0028):

* **the writer threads or inline mode**: :class:`WriteBehind` starts ``threads`` writer
  threads, each taking the next due item under the client's lock and writing it outside
  the lock, until it is stopped; an error escaping a write is logged and the thread goes
  on. With no threads, nothing runs in the background: :meth:`WriteBehind.pump` and
  :meth:`WriteBehind.drain` write on the calling thread (the pipeline's, during ``tick``,
  ``flush`` and admission), so a ``ManualClock`` makes every timing deterministic;
* **waiting and wake-ups on the pipeline clock**: a writer thread sleeps until the
  client's next wake (:meth:`Client.next_wake`, on the pipeline
  :class:`~spate.Clock`), at most ``poll`` real seconds at a time so a ``ManualClock``
  moved by a test is seen; inline, :meth:`WriteBehind.drain` sleeps with the clock's
  ``sleep`` toward a wake at or before its deadline, and gives up at once when the next
  wake lies beyond it (no retry could run in time);
* **waiting for work to finish**: :meth:`WriteBehind.wait` blocks until a condition holds
  (checked under the lock) or a deadline passes, writing inline when there are no
  threads;
* **the verdict of one attempt**: :func:`verdict` runs a write under the attempt rule of
  :mod:`spate.sink._attempts` (ADR 0014), tells the breaker, and answers delivered, retry
  at a time on the pipeline clock, or failed;
* **once-only settlement**: :func:`claim` marks a holder of acks settled under the lock
  (False when it already was: the writer and ``abandon`` may race) and :func:`release`
  releases the claimed holder's acks outside it, every one even if one raises (B2, B4,
  B39).

Order is the client's: each picks the next item in its own order (the spool in seal
order, a pool shard's queue front first, windows in the order they sealed) and the
engine never reorders what a client hands it.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Hashable, Iterable
from dataclasses import dataclass
from typing import Generic, Literal, Protocol, TypeVar

from spate._clock import Clock
from spate.checkpoint._ack import AckToken, release_all
from spate.errors import SinkError
from spate.sink._attempts import attempt, judge_breaker, outcome
from spate.sink._breaker import Breaker
from spate.sink._retry import Backoff

__all__ = [
    "Client",
    "Holder",
    "Verdict",
    "WriteBehind",
    "claim",
    "release",
    "verdict",
]

logger = logging.getLogger(__name__)

J = TypeVar("J")

_MIN_WAIT = 0.001
"""Shortest wait: a wake that is due now still yields the lock for a moment."""

_WAIT = 0.25
"""Longest real wait for writer threads before the condition and the deadline are checked
again (a ``ManualClock`` moved by a test is seen within it)."""

_BETWEEN = 0.01
"""Pause, on the pipeline clock, before the caller's own work between writes runs again."""


class Client(Protocol[J]):
    """What differs between the engine's clients: which item is next, and how it is written.

    ``take`` and ``next_wake`` are called with the engine's lock held; ``write`` without.
    """

    def take(self, now: float) -> J | None:
        """The next item due at ``now`` (on the pipeline clock), marked as being written,
        or None when nothing is due. Lock held."""
        ...

    def next_wake(self, now: float) -> float | None:
        """When something may come due, on the pipeline clock (None: not before something
        changes and the lock's condition is notified). Lock held."""
        ...

    def write(self, item: J) -> None:
        """Write ``item`` and record its outcome (lock NOT held; takes it as needed)."""
        ...


class WriteBehind(Generic[J]):
    """Writer threads (or inline writes) over one client's items."""

    def __init__(
        self,
        name: str,
        client: Client[J],
        *,
        cond: threading.Condition,
        clock: Clock,
        threads: int,
        poll: float | None = None,
        on_exit: Callable[[], None] | None = None,
        give_up_early: bool = False,
    ) -> None:
        """``cond``: the client's lock and condition (shared, notified on every change);
        ``threads``: writer threads (0: inline); ``poll``: longest real wait of a thread
        for a timed wake (None: the wake itself); ``on_exit``: run by a writer thread as
        it returns (lock NOT held); ``give_up_early``: an inline drain whose deadline
        comes before anything can run returns false at once instead of sleeping the
        clock to the deadline (windowed sinks, B156; the pool waits it out, B12)."""
        self.name = name
        self._client = client
        self._cond = cond
        self._clock = clock
        self._count = threads
        self._poll = poll
        self._on_exit = on_exit
        self._give_up_early = give_up_early
        self._threads: list[threading.Thread] = []
        self._stop: threading.Event | None = None
        self.errors = 0
        """Errors that escaped a write (a bug of the client); the thread went on."""

    @property
    def threaded(self) -> bool:
        """Whether writes run on writer threads (else inline, on the calling thread)."""
        return self._count > 0

    @property
    def running(self) -> bool:
        """Whether writer threads were started and not stopped since."""
        return self._stop is not None

    # -- threads ------------------------------------------------------------------------

    def start(self, thread_name: str) -> None:
        """Start the writer threads, named ``thread_name`` with ``{i}`` replaced by each
        one's index; nothing inline or when already running."""
        if not self._count or self._stop is not None:
            return
        stop = threading.Event()
        self._stop = stop
        self._threads = []
        for i in range(self._count):
            label = thread_name.replace("{i}", str(i))
            thread = threading.Thread(target=self._run, args=(stop,), name=label, daemon=True)
            self._threads.append(thread)
            thread.start()

    def stop(self, timeout: float | None) -> list[threading.Thread]:
        """Ask the writer threads to return once their current write has, and wait up to
        ``timeout`` real seconds for each; return those that did not (left behind: they
        return when their write does, and take nothing more)."""
        stop, self._stop = self._stop, None
        if stop is None:
            return []
        with self._cond:
            stop.set()
            self._cond.notify_all()
        left = []
        for thread in self._threads:
            if thread is not threading.current_thread():
                thread.join(timeout)
            if thread.is_alive():
                left.append(thread)
        self._threads = []
        return left

    def _run(self, stop: threading.Event) -> None:
        """A writer thread: take the next due item, write it, until stopped."""
        client, cond, clock = self._client, self._cond, self._clock
        try:
            while True:
                with cond:
                    item = None
                    while item is None:
                        if stop.is_set():
                            return
                        now = clock.monotonic()
                        item = client.take(now)
                        if item is None:
                            cond.wait(self._wait_for(client.next_wake(now), now))
                self._write(item)
        finally:
            if self._on_exit is not None:
                self._on_exit()

    def _wait_for(self, wake: float | None, now: float) -> float | None:
        if wake is None:
            return None
        wait = max(wake - now, _MIN_WAIT)
        return wait if self._poll is None else min(wait, self._poll)

    def _write(self, item: J) -> None:
        try:
            self._client.write(item)
        except Exception:  # a bug in the client itself: keep the writer alive, say so
            self.errors += 1
            logger.exception("%s: writer error", self.name)

    # -- inline (no writer threads) and waiting ---------------------------------------------

    def pump(self) -> int:
        """Write every item due now on the calling thread; return how many were written."""
        written = 0
        while True:
            with self._cond:
                item = self._client.take(self._clock.monotonic())
            if item is None:
                return written
            self._write(item)
            written += 1

    def drain(
        self,
        deadline: float,
        done: Callable[[], bool],
        *,
        between: Callable[[], bool] | None = None,
    ) -> bool:
        """Write inline until ``done()`` (checked under the lock) or ``deadline`` (on the
        pipeline clock), sleeping with the clock toward the next wake; False at the
        deadline (at once when the next wake lies beyond it and the engine gives up
        early). ``between``: the caller's own work between writes (True while some is left
        that only time can move: then the engine sleeps a little and calls it again)."""
        return self._until(deadline, done, between, inline=True)

    def wait(
        self,
        deadline: float,
        done: Callable[[], bool],
        *,
        between: Callable[[], bool] | None = None,
    ) -> bool:
        """Wait until ``done()`` (checked under the lock) or ``deadline`` (pipeline clock)
        for the writer threads; without threads, write meanwhile (:meth:`drain`).
        ``between`` as for :meth:`drain`, run on the waiting thread."""
        return self._until(deadline, done, between, inline=not self.threaded)

    def _until(
        self,
        deadline: float,
        done: Callable[[], bool],
        between: Callable[[], bool] | None,
        *,
        inline: bool,
    ) -> bool:
        clock = self._clock
        while True:
            if inline:
                self.pump()
            busy = between() if between is not None else False
            with self._cond:
                if done():
                    return True
                now = clock.monotonic()
                if now >= deadline:
                    return False
                if not inline and not busy:
                    self._cond.wait(min(deadline - now, _WAIT))
                    continue
                wake = self._client.next_wake(now) if inline else None
            if busy:  # the caller's work needs time: come back soon, by the deadline
                wake = min(now + _BETWEEN, deadline, *(() if wake is None else (wake,)))
            if wake is None or wake > deadline:
                if self._give_up_early:
                    return False
                wake = deadline  # nothing can run before it: wait it out, as a thread would
            clock.sleep(max(wake - now, _MIN_WAIT))


# -- one attempt ----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Verdict:
    """How one attempt ended, for the client to act on."""

    result: Literal["ok", "retryable", "record", "fatal"]
    error: SinkError | None
    retry_at: float | None
    """When to try again on the pipeline clock (a retryable failure with attempts left)."""
    now: float
    """The pipeline clock when the attempt returned."""
    elapsed: float
    """Pipeline-clock seconds the attempt took."""

    @property
    def ok(self) -> bool:
        return self.error is None


def verdict(
    write: Callable[[], None],
    *,
    what: str,
    clock: Clock,
    backoff: Backoff | None,
    attempts: int,
    breaker: Breaker | None = None,
    cond: threading.Condition | None = None,
    delay: Callable[[SinkError, int], float] | None = None,
) -> Verdict:
    """Run one attempt (``attempts`` counts it) and judge it: a ``SinkError`` is its
    verdict, any other exception a FATAL bug of the writer (ADR 0014); the ``breaker``
    hears a retryable failure as the endpoint's (under ``cond`` when given); a retryable
    failure is retried after the backoff's delay (or ``delay(error, attempts)``) on the
    pipeline clock until ``retry.max_attempts`` (``backoff`` None: never retried)."""
    started = clock.monotonic()
    error = attempt(write, logger, what)
    result = outcome(error)
    now = clock.monotonic()
    if breaker is not None:
        if cond is None:
            judge_breaker(breaker, result, now)
        else:
            with cond:
                judge_breaker(breaker, result, now)
    due = None
    if (
        error is not None
        and result == "retryable"
        and backoff is not None
        and not backoff.exhausted(attempts)
    ):
        wait = delay(error, attempts) if delay is not None else backoff.delay(attempts)
        due = now + wait
    return Verdict(result, error, due, now, max(now - started, 0.0))


# -- settlement -----------------------------------------------------------------------------


class Holder(Hashable, Protocol):
    """A holder of acks (a pool batch, a window): settled once, by identity."""

    settled: bool
    """Its acks were claimed for release (guarded by the engine's lock)."""


def claim(holder: Holder) -> bool:
    """Mark ``holder`` settled (engine lock held); False when it already was — whoever
    got there first (the writer, ``abandon``, a failed fsync) releases its acks."""
    if holder.settled:
        return False
    holder.settled = True
    return True


def release(holder: Hashable, ok: bool, acks: Iterable[AckToken]) -> None:
    """Release ``acks`` held by a claimed ``holder``, delivered (``ok``) or failed,
    outside the lock. Every ack is released even when one raises (a resolver's bug, or
    ``AckError`` for a second release): stopping at the first would leave the rest held
    forever (B4)."""
    release_all(acks, ok, holder)
