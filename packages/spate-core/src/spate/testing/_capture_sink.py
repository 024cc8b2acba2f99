"""A capture sink with scripted write outcomes, for pipeline tests without a database.

``capture_sink(name)`` returns ``(sink, script)``. Rows that are written successfully are
kept in order (:attr:`CaptureScript.rows`). Each write attempt of a sealed batch takes
the next scripted outcome, and once the script is used up the default (``ok`` unless
:meth:`CaptureScript.always` changed it):

* ``ok`` — written; the batch's acks are released as delivered;
* ``retryable`` — not written, tried again later (on the next tick, offer or flush, or
  by the worker thread);
* ``fatal`` — abandoned at once; its acks fail (B2, B4);
* ``delay(seconds)`` — the attempt completes as ``ok`` once the clock has moved on by
  ``seconds`` (slow, never failed: B5 must not fire);
* ``stuck`` — never completes (a sink that never succeeds).
"""

from __future__ import annotations

import threading
from collections import deque
from dataclasses import dataclass

from spate._clock import Clock
from spate.flow._contract import ByteBudget
from spate.testing._buffered import Attempt, BufferedSink, Row, SealedBatch


@dataclass(frozen=True, slots=True)
class Outcome:
    """One scripted write outcome."""

    kind: str
    delay: float = 0.0


OK = Outcome("ok")
RETRYABLE = Outcome("retryable")
FATAL = Outcome("fatal")
STUCK = Outcome("stuck")


def delay(seconds: float) -> Outcome:
    """An attempt that succeeds ``seconds`` after it started."""
    return Outcome("delay", seconds)


class CaptureScript:
    """The test's side of a capture sink: script outcomes, read what was written."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._queue: deque[Outcome] = deque()
        self._default = OK
        self.rows: list[object] = []
        self.records: list[Row] = []
        self.writes = 0
        self.attempts = 0
        self.write_sizes: list[int] = []

    def then(self, outcome: Outcome | str, times: int = 1) -> CaptureScript:
        """Queue ``outcome`` for the next ``times`` attempts."""
        item = _outcome(outcome)
        with self._lock:
            self._queue.extend([item] * times)
        return self

    def always(self, outcome: Outcome | str) -> CaptureScript:
        """The outcome of every attempt once the queue is used up."""
        with self._lock:
            self._default = _outcome(outcome)
        return self

    def _next(self) -> Outcome:
        with self._lock:
            self.attempts += 1
            return self._queue.popleft() if self._queue else self._default

    def _written(self, batch: SealedBatch) -> None:
        with self._lock:
            self.writes += 1
            self.write_sizes.append(len(batch.rows))
            self.records.extend(batch.rows)
            self.rows.extend(r.row for r in batch.rows)


def _outcome(value: Outcome | str) -> Outcome:
    if isinstance(value, Outcome):
        return value
    table = {"ok": OK, "retryable": RETRYABLE, "fatal": FATAL, "stuck": STUCK}
    try:
        return table[value]
    except KeyError:
        raise ValueError(f"unknown outcome {value!r}; expected one of {sorted(table)}") from None


class CaptureSink(BufferedSink):
    """Implements ``Sink``; keeps written rows in its :class:`CaptureScript`."""

    def __init__(
        self,
        name: str,
        script: CaptureScript,
        *,
        max_rows: int = 100,
        capacity: int | None = None,
        row_bytes: int = 64,
        budget: ByteBudget | None = None,
        clock: Clock | None = None,
        threaded: bool = False,
    ) -> None:
        super().__init__(
            name,
            max_rows=max_rows,
            capacity=capacity,
            row_bytes=row_bytes,
            budget=budget,
            clock=clock,
            threaded=threaded,
        )
        self.script = script

    def _attempt(self, batch: SealedBatch) -> Attempt:
        noted = batch.notes.get("pending")
        if isinstance(noted, Outcome):
            pending = noted
        else:
            pending = self.script._next()
            batch.attempts += 1
        if pending.kind == "ok":
            self.script._written(batch)
            return "ok"
        if pending.kind == "retryable":
            return "retry"
        if pending.kind == "fatal":
            return "fatal"
        batch.notes["pending"] = pending
        if pending.kind == "stuck":
            return "wait"
        started = batch.started_at if batch.started_at is not None else self.clock.monotonic()
        if self.clock.monotonic() - started >= pending.delay:
            del batch.notes["pending"]
            self.script._written(batch)
            return "ok"
        return "wait"


def capture_sink(
    name: str = "sink",
    *,
    max_rows: int = 100,
    capacity: int | None = None,
    row_bytes: int = 64,
    budget: ByteBudget | None = None,
    clock: Clock | None = None,
    threaded: bool = False,
) -> tuple[CaptureSink, CaptureScript]:
    """A capture sink and its script.

    ``max_rows`` seals a buffer; ``capacity`` makes ``offer`` refuse rows while that
    many are buffered; ``row_bytes`` is the size counted against ``budget`` per row;
    ``threaded`` writes on a worker thread instead of inline.
    """
    script = CaptureScript()
    sink = CaptureSink(
        name,
        script,
        max_rows=max_rows,
        capacity=capacity,
        row_bytes=row_bytes,
        budget=budget,
        clock=clock,
        threaded=threaded,
    )
    return sink, script
