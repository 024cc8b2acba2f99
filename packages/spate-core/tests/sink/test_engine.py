"""The one write-behind engine on its own (B390-B395): a scripted client on a ManualClock.

The client queues items with a due time each; ``take`` hands out the first one due (the
client's own order), ``write`` logs it with the clock. Inline cases are exact on the
clock; threaded cases synchronise with events and the engine's own condition, never with
wall-clock bounds.
"""

from __future__ import annotations

import ast
import itertools
import logging
import threading
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from spate import AckStatus, AckToken, Lane, ManualClock
from spate.errors import ErrorClass, SinkError
from spate.sink import Backoff, BreakerConfig, BreakerState, RetryConfig
from spate.sink._breaker import Breaker
from spate.sink._engine import WriteBehind, claim, release, verdict

LANE = Lane("events", 0)
_seq = itertools.count(1)
SINK = Path(__file__).resolve().parents[2] / "src" / "spate" / "sink"


@dataclass(slots=True)
class Item:
    name: str
    due: float = 0.0


@dataclass
class Script:
    """A client: items in the order queued, each written when due; writes are logged."""

    clock: ManualClock
    cond: threading.Condition = field(default_factory=threading.Condition)
    queue: deque[Item] = field(default_factory=deque)
    log: list[tuple[str, float, str]] = field(default_factory=list)
    fail: set[str] = field(default_factory=set)
    """Names whose write raises an unexpected error (a client's bug)."""
    hang: threading.Event | None = None
    started: threading.Event = field(default_factory=threading.Event)

    def take(self, now: float) -> Item | None:
        if self.queue and self.queue[0].due <= now:
            return self.queue.popleft()
        return None

    def next_wake(self, now: float) -> float | None:
        return self.queue[0].due if self.queue else None

    def write(self, item: Item) -> None:
        self.started.set()
        if self.hang is not None:
            self.hang.wait(60)
        if item.name in self.fail:
            raise RuntimeError(f"bug writing {item.name}")
        with self.cond:
            self.log.append((item.name, self.clock.monotonic(), threading.current_thread().name))
            self.cond.notify_all()

    def add(self, name: str, due: float = 0.0) -> None:
        with self.cond:
            self.queue.append(Item(name, due))
            self.cond.notify_all()

    def written(self) -> list[str]:
        return [name for name, _, _ in self.log]


def _engine(clock: ManualClock, threads: int = 0, **kw: object) -> tuple[Script, WriteBehind[Item]]:
    script = Script(clock)
    engine: WriteBehind[Item] = WriteBehind(
        "test",
        script,
        cond=script.cond,
        clock=clock,
        threads=threads,
        poll=0.05,
        **kw,  # type: ignore[arg-type]
    )
    return script, engine


def _ack() -> AckToken:
    seq = next(_seq)
    return AckToken(LANE, 0, seq, seq, 1, lambda token: None)


# -- B390: inline mode and order ----------------------------------------------------------


def test_b390_inline_engine_writes_only_when_asked_in_the_clients_order() -> None:
    clock = ManualClock(start=100.0)
    script, engine = _engine(clock)
    engine.start("never")  # inline: no thread
    assert not engine.threaded and not engine.running
    for name in ("a", "b", "c"):
        script.add(name)
    script.add("later", due=105.0)
    assert script.log == []  # nothing runs in the background
    assert engine.pump() == 3
    assert [(n, t) for n, t, _ in script.log] == [("a", 100.0), ("b", 100.0), ("c", 100.0)]
    assert {thread for _, _, thread in script.log} == {threading.current_thread().name}
    assert engine.pump() == 0 and script.queue  # "later" is not due yet


def test_b390_inline_drain_sleeps_on_the_clock_toward_a_wake_before_its_deadline() -> None:
    clock = ManualClock(start=100.0)
    script, engine = _engine(clock)
    script.add("now")
    script.add("retry", due=103.0)
    assert engine.drain(110.0, lambda: not script.queue)
    assert [(n, t) for n, t, _ in script.log] == [("now", 100.0), ("retry", 103.0)]
    assert clock.monotonic() == 103.0


def test_b390_inline_drain_gives_up_at_once_when_the_next_wake_lies_past_its_deadline() -> None:
    clock = ManualClock(start=100.0)
    script, engine = _engine(clock, give_up_early=True)
    script.add("retry", due=103.0)
    assert not engine.drain(102.0, lambda: not script.queue)
    assert script.log == [] and clock.monotonic() == 100.0  # no sleep that could not help
    assert engine.wait(104.0, lambda: not script.queue)  # wait is drain when inline
    assert script.written() == ["retry"]


def test_b390_inline_drain_otherwise_waits_out_its_deadline_as_a_thread_would() -> None:
    clock = ManualClock(start=100.0)
    script, engine = _engine(clock)
    script.add("retry", due=103.0)
    assert not engine.drain(102.0, lambda: not script.queue)
    assert script.log == [] and clock.monotonic() == 102.0
    assert engine.drain(110.0, lambda: not script.queue)
    assert [(n, t) for n, t, _ in script.log] == [("retry", 103.0)]


def test_b390_drain_runs_the_callers_work_between_writes_until_it_is_done() -> None:
    clock = ManualClock(start=0.0)
    _, engine = _engine(clock)
    left = [3]

    def between() -> bool:
        left[0] = max(left[0] - 1, 0)
        return left[0] > 0

    assert engine.drain(1.0, lambda: left[0] == 0, between=between)
    assert left == [0] and 0 < clock.monotonic() < 1.0


# -- B391: writer threads -----------------------------------------------------------------


def test_b391_a_writer_thread_wakes_on_the_pipeline_clock_and_keeps_order() -> None:
    clock = ManualClock(start=100.0)
    script, engine = _engine(clock, threads=1)
    engine.start("spate-test-writer")
    try:
        script.add("first")
        script.add("second", due=150.0)
        with script.cond:
            assert script.cond.wait_for(lambda: len(script.log) == 1, 60)
        assert script.queue  # the second waits for the pipeline clock, not real time
        clock.advance(50.0)
        with script.cond:
            script.cond.notify_all()
            assert script.cond.wait_for(lambda: len(script.log) == 2, 60)
        assert script.written() == ["first", "second"]
        assert {thread for _, _, thread in script.log} == {"spate-test-writer"}
    finally:
        assert engine.stop(60) == []


def test_b391_an_error_escaping_a_write_is_logged_and_the_thread_goes_on(
    caplog: pytest.LogCaptureFixture,
) -> None:
    clock = ManualClock()
    script, engine = _engine(clock, threads=2)
    script.fail = {"bad"}
    engine.start("w-{i}")
    with caplog.at_level(logging.ERROR, logger="spate.sink._engine"):
        script.add("bad")
        script.add("good")
        with script.cond:
            assert script.cond.wait_for(lambda: script.written() == ["good"], 60)
        assert engine.stop(60) == []  # both threads returned: the bad write is over
    assert engine.errors == 1
    assert any("writer error" in r.getMessage() for r in caplog.records)
    assert {thread for _, _, thread in script.log} <= {"w-0", "w-1"}


def test_b391_stop_leaves_a_hung_write_behind_and_it_takes_nothing_more() -> None:
    clock = ManualClock()
    exited = threading.Event()
    script, engine = _engine(clock, threads=1, on_exit=exited.set)
    script.hang = threading.Event()
    engine.start("hung")
    script.add("stuck")
    assert script.started.wait(60)
    left = engine.stop(0.01)
    assert [t.name for t in left] == ["hung"] and not engine.running
    script.add("after")
    script.hang.set()  # the hung write returns: the thread exits, "after" stays queued
    left[0].join(60)
    assert exited.is_set() and not left[0].is_alive()
    assert script.written() == ["stuck"] and [i.name for i in script.queue] == ["after"]


# -- B392: one verdict per attempt --------------------------------------------------------


def _backoff(**kw: object) -> Backoff:
    return Backoff(RetryConfig(initial=1.0, max=8.0, jitter=0.0, **kw), lambda: 0.0)  # type: ignore[arg-type]


def test_b392_a_retryable_failure_is_due_again_after_the_backoff_on_the_pipeline_clock() -> None:
    clock = ManualClock(start=10.0)

    def outage() -> None:
        clock.advance(0.5)
        raise SinkError("down", ErrorClass.RETRYABLE)

    judged = verdict(outage, what="w", clock=clock, backoff=_backoff(), attempts=2)
    assert judged.result == "retryable" and judged.retry_at == 10.5 + 2.0
    assert judged.elapsed == 0.5 and not judged.ok
    spent = verdict(outage, what="w", clock=clock, backoff=_backoff(max_attempts=2), attempts=2)
    assert spent.retry_at is None  # attempts ran out: the item fails


@pytest.mark.parametrize(
    ("error", "result"),
    [
        (SinkError("refused", ErrorClass.FATAL), "fatal"),
        (SinkError("bad row", ErrorClass.RECORD), "record"),
        (ValueError("a bug"), "fatal"),
    ],
    ids=["fatal", "record", "unexpected"],
)
def test_b392_only_a_retryable_failure_is_retried_or_opens_the_breaker(
    error: Exception, result: str
) -> None:
    clock = ManualClock()
    breaker = Breaker(BreakerConfig(failure_threshold=1, open_for=5.0), "test")

    def write() -> None:
        raise error

    judged = verdict(write, what="w", clock=clock, backoff=_backoff(), attempts=1, breaker=breaker)
    assert judged.result == result and judged.retry_at is None
    assert breaker.state is BreakerState.CLOSED

    def outage() -> None:
        raise SinkError("down", ErrorClass.RETRYABLE)

    verdict(outage, what="w", clock=clock, backoff=_backoff(), attempts=1, breaker=breaker)
    assert breaker.state is BreakerState.OPEN


# -- B393: once-only settlement -----------------------------------------------------------


@dataclass(slots=True, eq=False)
class Held:
    acks: list[AckToken]
    settled: bool = False


def test_b393_a_holder_is_settled_once_whoever_claims_it_first() -> None:
    ack = _ack()
    holder = Held([ack])
    ack.retain(holder)
    ack.release()  # the chain is done with it: only the holder keeps it
    assert claim(holder)
    assert not claim(holder)  # the writer and abandon raced: the second does nothing
    release(holder, False, holder.acks)
    assert ack.status is AckStatus.FAILED and ack.fault is None


def test_b393_release_releases_every_ack_even_when_one_raises() -> None:
    def broken(token: AckToken) -> None:
        raise RuntimeError("a resolver's bug")

    seq = next(_seq)
    bad = AckToken(LANE, 0, seq, seq, 1, broken)
    good = _ack()
    holder = Held([bad, good])
    for ack in holder.acks:
        ack.retain(holder)
        ack.release()
    assert claim(holder)
    release(holder, True, holder.acks)
    assert good.status is AckStatus.DELIVERED


# -- B394: the three clients share the one engine -----------------------------------------


@pytest.mark.parametrize(
    "module", ["_workers.py", "_pool.py", "writebehind.py", "tiers/_spool_writer.py"]
)
def test_b394_no_write_behind_client_runs_threads_of_its_own(module: str) -> None:
    """The pool, the spool's writer and the windowed writer start, wake and stop their
    writers only through :mod:`spate.sink._engine`: none creates a thread."""
    tree = ast.parse((SINK / module).read_text())
    threads = [
        node.lineno
        for node in ast.walk(tree)
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute | ast.Name)
        and (node.func.attr if isinstance(node.func, ast.Attribute) else node.func.id) == "Thread"
    ]
    assert threads == [], f"{module} creates threads at lines {threads}"
    assert "WriteBehind" in (SINK / module).read_text() or module == "_workers.py"
