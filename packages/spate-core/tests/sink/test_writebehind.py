"""The write-behind engine of windowed sinks, on its own (B155, B156, B157, B4, B11, B12).

A toy windowed sink over a scripted destination: each write and each commit either
succeeds or raises what the script says. Retries and the breaker run on a
``ManualClock`` (inline, the clock's ``sleep`` advances it), so every attempt time is
exact; the threaded cases synchronise with events, never with wall-clock bounds.
"""

from __future__ import annotations

import itertools
import threading
import uuid
from collections.abc import Collection
from dataclasses import dataclass, field

import pytest
from spate import AckStatus, AckToken, Lane, ManualClock
from spate.errors import ErrorClass, SinkError
from spate.sink import Backoff, BreakerConfig, BreakerState, RetryConfig
from spate.sink.writebehind import CommitGate, CommitGates, WindowedWriter

LANE = Lane("events", 0)
OTHER = Lane("events", 1)
_seq = itertools.count(1)

Outcome = SinkError | Exception | None
"""What one write or commit attempt does: raise the error, or succeed (None)."""


@dataclass(slots=True, eq=False)
class ToyWindow:
    rows: int
    lane: Lane = LANE
    acks: list[AckToken] = field(default_factory=list)
    settled: bool = False

    def holds(self, lanes: Collection[Lane]) -> bool:
        return self.lane in lanes


class ToySink(WindowedWriter[ToyWindow]):
    """Open windows kept per lane; every write and commit is logged with the clock."""

    def __init__(
        self,
        clock: ManualClock,
        *,
        threaded: bool = False,
        retry: RetryConfig | None = None,
        breaker: BreakerConfig | None = None,
        gate: CommitGate | None = None,
    ) -> None:
        self.name = f"toy-{uuid.uuid4().hex[:6]}"
        self.clock = clock
        self.open: dict[Lane, ToyWindow] = {}
        self.writes: list[Outcome] = []
        """Scripted outcomes of the next write attempts (then: success)."""
        self.commits: list[Outcome] = []
        self.log: list[tuple[str, float]] = []
        self.unwritten: list[ToyWindow] = []
        self.write_started = threading.Event()
        self.write_may_finish = threading.Event()
        self.write_may_finish.set()
        backoff = Backoff(retry or RetryConfig(initial=1.0, max=8.0, jitter=0.0), lambda: 0.0)
        self._init_writer(
            clock=clock,
            threaded=threaded,
            backoff=backoff,
            join_timeout=30.0,
            gate=gate,
            breaker=breaker,
        )
        self._start_writer(self.name)

    def add(self, lane: Lane, ack: AckToken) -> None:
        """One row of ``ack``'s batch; then the chain is done with the batch (the
        runtime's release), so only the window holds it."""
        window = self.open.setdefault(lane, ToyWindow(0, lane))
        window.rows += 1
        if ack not in window.acks:
            ack.retain(window)
            window.acks.append(ack)
        ack.release()

    def seal(self, lane: Lane) -> None:
        self._queue(self.open.pop(lane))

    def close(self) -> None:
        self._stop_writer()

    # -- hooks -----------------------------------------------------------------------

    def _take_open(self) -> list[ToyWindow]:
        windows = list(self.open.values())
        self.open.clear()
        return windows

    def _seal_all(self) -> None:
        for lane in list(self.open):
            self.seal(lane)

    def _seal_lanes(self, lanes: Collection[Lane]) -> None:
        for lane in [lane for lane in self.open if lane in lanes]:
            self.seal(lane)

    def _write_window(self, window: ToyWindow) -> None:
        self.log.append(("write", self.clock.monotonic()))
        self.write_started.set()
        self.write_may_finish.wait(60)
        if self.writes:
            outcome = self.writes.pop(0)
            if outcome is not None:
                raise outcome

    def _commit_window(self, window: ToyWindow) -> None:
        self.log.append(("commit", self.clock.monotonic()))
        if self.commits:
            outcome = self.commits.pop(0)
            if outcome is not None:
                raise outcome

    def _rows(self, window: ToyWindow) -> int:
        return window.rows

    def _describe(self, window: ToyWindow) -> str:
        return f"write of {window.rows} toy rows"

    def _unwritten(self, window: ToyWindow) -> None:
        self.unwritten.append(window)


def _ack(lane: Lane = LANE) -> AckToken:
    seq = next(_seq)
    return AckToken(lane, 0, seq, seq, 1, lambda token: None)


def _flushed(sink: ToySink, within: float = 60.0) -> tuple[AckToken, bool]:
    """One batch's row in a window of its own; then a flush with ``within`` seconds of
    the sink's clock. Returns the batch's ack and what the flush returned."""
    ack = _ack()
    sink.add(LANE, ack)
    return ack, sink.flush(sink.clock.monotonic() + within)


def _retryable(n: int) -> list[Outcome]:
    return [SinkError(f"outage {i}", ErrorClass.RETRYABLE) for i in range(n)]


@pytest.mark.parametrize(
    ("failed_writes", "failed_commits", "log"),
    [
        # initial 1s, then 2s (multiplier 2, no jitter): the clock moved only by sleeping.
        (2, 0, [("write", 100.0), ("write", 101.0), ("write", 103.0), ("commit", 103.0)]),
        # B155: a failed commit is retried with its write.
        (0, 1, [("write", 100.0), ("commit", 100.0), ("write", 101.0), ("commit", 101.0)]),
    ],
    ids=["write", "commit"],
)
def test_b156_retries_wait_the_backoff_on_the_pipeline_clock(
    failed_writes: int, failed_commits: int, log: list[tuple[str, float]]
) -> None:
    clock = ManualClock(start=100.0)
    sink = ToySink(clock)
    sink.writes = _retryable(failed_writes)
    sink.commits = _retryable(failed_commits)
    ack, flushed = _flushed(sink)
    assert flushed
    assert sink.log == log
    assert ack.status is AckStatus.DELIVERED
    assert sink.write_retries == failed_writes + failed_commits


def test_b156_a_flush_deadline_before_the_next_retry_returns_false_without_writing() -> None:
    clock = ManualClock(start=100.0)
    sink = ToySink(clock)
    sink.writes = _retryable(1)
    ack, flushed = _flushed(sink, 0.5)
    assert not flushed  # the retry is due at 101
    assert sink.log == [("write", 100.0)] and clock.monotonic() == 100.0
    assert ack.status is AckStatus.PENDING
    assert sink.flush(clock.monotonic() + 5)
    assert ack.status is AckStatus.DELIVERED


def test_b12_retries_that_run_out_fail_the_window_once() -> None:
    clock = ManualClock()
    sink = ToySink(clock, retry=RetryConfig(initial=1.0, max=1.0, jitter=0.0, max_attempts=3))
    sink.writes = _retryable(5)
    ack, flushed = _flushed(sink)
    assert flushed
    assert [what for what, _ in sink.log] == ["write"] * 3
    assert ack.status is AckStatus.FAILED and ack.fault is None
    assert sink.windows_failed == 1 and len(sink.unwritten) == 1


@pytest.mark.parametrize(
    "error",
    [SinkError("refused", ErrorClass.FATAL), ValueError("a bug in the connector")],
    ids=["fatal", "unexpected"],
)
def test_b155_a_failure_that_cannot_pass_fails_the_acks_after_one_attempt(
    error: Exception,
) -> None:
    clock = ManualClock()
    sink = ToySink(clock)
    sink.writes = [error]
    ack, flushed = _flushed(sink)
    assert flushed  # nothing propagates out of the engine
    assert sink.log == [("write", clock.monotonic())]
    assert ack.status is AckStatus.FAILED and sink.write_retries == 0


def test_b11_an_open_breaker_holds_the_next_attempt_until_it_half_opens() -> None:
    clock = ManualClock(start=0.0)
    breaker = BreakerConfig(failure_threshold=2, open_for=60.0)
    sink = ToySink(clock, breaker=breaker)
    sink.writes = _retryable(3)
    ack, flushed = _flushed(sink, 1000)
    assert flushed
    # Failures at 0 and 1 open the breaker at 1: the third attempt waits for 61, not
    # for its backoff (1 + 2); it fails, the breaker opens again until 121.
    writes = [at for what, at in sink.log if what == "write"]
    assert writes == [0.0, 1.0, 61.0, 121.0]
    assert ack.status is AckStatus.DELIVERED
    assert sink._breaker is not None and sink._breaker.state is BreakerState.CLOSED


def test_b155_acks_are_released_only_after_the_write_and_the_commit_gate() -> None:
    clock = ManualClock()
    destination = f"toy-{uuid.uuid4().hex}"
    gates = CommitGates()
    gate = gates.gate(destination, timeout=600.0, when_held="retry")
    elsewhere = gates.gate(destination, timeout=0.0)  # another writer of the destination
    released_with_gate_free: list[bool] = []

    def resolved(token: AckToken) -> None:
        free = elsewhere.acquire(0.0)
        if free:
            elsewhere.release()
        released_with_gate_free.append(free)

    ack = AckToken(LANE, 0, 1, 1, 1, resolved)
    sink = ToySink(clock, threaded=True, gate=gate)
    try:
        assert elsewhere.acquire(0.0)
        sink.add(LANE, ack)
        sink.seal(LANE)
        assert sink.write_started.wait(60)
        # Written, but the commit waits for the gate: nothing is acknowledged yet.
        assert ack.status is AckStatus.PENDING and ("commit", clock.monotonic()) not in sink.log
        elsewhere.release()
        assert sink.flush(clock.monotonic() + 600)  # a ManualClock: this never times out
    finally:
        sink.close()
    assert [what for what, _ in sink.log] == ["write", "commit"]
    assert ack.status is AckStatus.DELIVERED and released_with_gate_free == [True]


def test_b4_abandon_fails_every_held_ack_once_even_the_one_being_written() -> None:
    clock = ManualClock()
    sink = ToySink(clock, threaded=True)
    sink.write_may_finish.clear()
    writing, queued, still_open = _ack(), _ack(), _ack(OTHER)
    try:
        sink.add(LANE, writing)
        sink.seal(LANE)
        assert sink.write_started.wait(60)
        sink.add(LANE, queued)
        sink.seal(LANE)
        sink.add(OTHER, still_open)
        assert sink.abandon() == 3
        assert [a.status for a in (writing, queued, still_open)] == [AckStatus.FAILED] * 3
        sink.write_may_finish.set()  # the write lands after the abandon: no second release
        assert sink.flush(clock.monotonic() + 600)
    finally:
        sink.close()
    assert [what for what, _ in sink.log] == ["write"], "an abandoned window was committed"
    assert all(a.fault is None for a in (writing, queued, still_open))


def test_b4_close_fails_the_acks_of_unwritten_windows() -> None:
    clock = ManualClock()
    sink = ToySink(clock)
    sealed, still_open = _ack(), _ack(OTHER)
    sink.add(LANE, sealed)
    sink.seal(LANE)
    sink.add(OTHER, still_open)
    sink.close()
    assert sealed.status is AckStatus.FAILED and still_open.status is AckStatus.FAILED
    assert sink.log == []


def test_b155_flush_lanes_writes_only_the_windows_of_those_lanes() -> None:
    clock = ManualClock()
    sink = ToySink(clock)
    mine, other = _ack(), _ack(OTHER)
    sink.add(LANE, mine)
    sink.add(OTHER, other)
    assert sink.flush_lanes([LANE], clock.monotonic() + 60)
    assert mine.status is AckStatus.DELIVERED and other.status is AckStatus.PENDING
    sink.close()
    assert other.status is AckStatus.FAILED


def test_b157_a_gate_held_past_its_timeout_retries_or_proceeds_as_configured() -> None:
    destination = f"toy-{uuid.uuid4().hex}"
    gates = CommitGates()
    holder = gates.gate(destination, timeout=0.0)
    assert holder.acquire(0.0)
    try:
        retry = CommitGate(destination, timeout=0.0, gates=gates, when_held="retry")
        with pytest.raises(SinkError, match=destination) as caught:
            retry.run(lambda: "committed")
        assert caught.value.error_class is ErrorClass.RETRYABLE
        proceed = gates.gate(destination, timeout=0.0)
        assert proceed.run(lambda: "committed") == "committed"
        # Another destination has a gate of its own.
        assert gates.gate(f"{destination}-b", timeout=0.0, when_held="retry").run(lambda: 1) == 1
    finally:
        holder.release()
    assert retry.run(lambda: "committed") == "committed"


@pytest.mark.parametrize(
    "error",
    [ValueError("a bug in the connector"), SinkError("refused", ErrorClass.FATAL)],
    ids=["unexpected", "fatal"],
)
def test_b160_an_attempt_that_cannot_pass_leaves_the_breaker_closed(error: Exception) -> None:
    """B160: the windowed engine ends an attempt by the pool's rule: a writer's unexpected
    exception fails the window at once as FATAL, and like a fatal error it does not count
    against the breaker (the destination answered); the next window is written at once."""
    clock = ManualClock(start=0.0)
    sink = ToySink(clock, breaker=BreakerConfig(failure_threshold=1, open_for=60.0))
    sink.writes = [error]
    ack, flushed = _flushed(sink)
    assert flushed and ack.status is AckStatus.FAILED and sink.write_retries == 0
    assert sink._breaker is not None and sink._breaker.state is BreakerState.CLOSED
    second, flushed = _flushed(sink, 1.0)
    assert flushed and second.status is AckStatus.DELIVERED
    assert [at for what, at in sink.log if what == "write"] == [0.0, 0.0]
