"""Committer: cadence, moved-only commits, sink ticks, synchronous commits, commits skipped
on revocation (B1, B10, B14, B36)."""

from __future__ import annotations

from spate.checkpoint import Committer, PartitionTracker
from spate.errors import ErrorClass, SourceError
from spate.metrics import Meter
from spate.records import Lane, PayloadBatch
from spate.testing import ManualClock, capture_sink, memory_source


def _batch(lane: Lane, first: int, count: int) -> PayloadBatch:
    return PayloadBatch(
        lane=lane,
        offsets=list(range(first, first + count)),
        payloads=[memoryview(b"x")] * count,
        keys=[None] * count,
        timestamps=[0] * count,
        next_offset=first + count,
    )


def _setup() -> tuple[ManualClock, PartitionTracker, Committer, object, object]:
    clock = ManualClock()
    source, handle = memory_source(partitions=1)
    sink, script = capture_sink("s", clock=clock)
    tracker = PartitionTracker(clock)
    committer = Committer(
        tracker=tracker,
        source=source,
        sinks={"s": sink},
        clock=clock,
        interval=5.0,
        meter=Meter("test_committer"),
    )
    return clock, tracker, committer, handle, (sink, script)


def test_commits_on_the_interval_only_what_moved_after_ticking_sinks() -> None:
    clock, tracker, committer, handle, (sink, script) = _setup()
    lane = Lane("memory", 0)
    token = tracker.register(_batch(lane, 0, 3))
    sink.start()
    for i in range(3):
        sink.offer(i, None, lane, token)
    token.release()
    committer.maybe_commit()
    assert handle.commits == []  # interval not reached
    clock.advance(5)
    committer.maybe_commit()  # tick seals and writes the partial buffer, then commits
    assert script.rows == [0, 1, 2]
    assert handle.commits == [({lane: 3}, False)]
    clock.advance(5)
    committer.maybe_commit()
    assert len(handle.commits) == 1  # nothing moved: nothing handed over


def test_b1_commit_never_passes_pending_batch() -> None:
    _clock, tracker, committer, handle, _ = _setup()
    lane = Lane("memory", 0)
    first = tracker.register(_batch(lane, 0, 3))
    second = tracker.register(_batch(lane, 3, 3))
    second.release()
    committer.commit_now(sync=True)
    assert handle.last_committed(0) == 0
    first.release()
    committer.commit_now(sync=True)
    assert handle.last_committed(0) == 6
    assert handle.commits[-1] == ({lane: 6}, True)


def test_a_sync_commit_repeats_positions_an_async_commit_only_stored() -> None:
    _clock, tracker, committer, handle, _ = _setup()
    lane = Lane("memory", 0)
    tracker.register(_batch(lane, 0, 3)).release()
    committer.commit_now(sync=False)
    committer.commit_now(sync=True)
    assert handle.commits == [({lane: 3}, False), ({lane: 3}, True)]


def test_b15_revocation_commits_synchronously_even_when_nothing_moved() -> None:
    _clock, tracker, committer, handle, _ = _setup()
    lane = Lane("memory", 0)
    tracker.assign([lane])
    tracker.register(_batch(lane, 0, 3)).release()
    committer.commit_now(sync=False)  # only stored by a source with its own cadence
    final = tracker.revoke([lane])
    assert committer.commit_now(sync=True, positions=final)
    assert handle.commits == [({lane: 3}, False), ({lane: 3}, True)]


class _RefusingSource:
    """A source whose commit raises ``error`` (only ``commit`` is used by the committer)."""

    def __init__(self, error: SourceError) -> None:
        self.error = error

    def commit(self, offsets: object, *, sync: bool) -> None:
        raise self.error


def _refusing(error: SourceError) -> tuple[PartitionTracker, Committer, Meter]:
    clock = ManualClock()
    tracker = PartitionTracker(clock)
    meter = Meter("test_committer_refusing")
    committer = Committer(
        tracker=tracker,
        source=_RefusingSource(error),  # type: ignore[arg-type]
        sinks={},
        clock=clock,
        interval=5.0,
        meter=meter,
    )
    return tracker, committer, meter


def _count(meter: Meter, outcome: str) -> float:
    labels = {"pipeline": meter.pipeline, "component": "checkpoint"}
    value = meter.registry.get_sample_value(
        "spate_checkpoint_commits_total",
        {**labels, "component_type": "checkpoint", "outcome": outcome},
    )
    return value or 0.0


def test_b36_a_revocation_commit_the_source_cannot_make_now_is_skipped() -> None:
    tracker, committer, meter = _refusing(SourceError("coordinator unavailable"))
    lane = Lane("memory", 0)
    tracker.assign([lane])
    tracker.register(_batch(lane, 0, 3)).release()
    final = tracker.revoke([lane])
    assert committer.commit_now(sync=True, positions=final, revoking=True)
    assert committer.committed == {}
    assert _count(meter, "skipped") == 1 and _count(meter, "error") == 0
    # Outside a revocation (the final drain) the same error fails the commit.
    assert not committer.commit_now(sync=True, positions=final)
    assert _count(meter, "error") == 1


def test_b36_a_fatal_commit_error_on_revocation_still_fails() -> None:
    tracker, committer, meter = _refusing(SourceError("not authorized", ErrorClass.FATAL))
    lane = Lane("memory", 0)
    tracker.assign([lane])
    tracker.register(_batch(lane, 0, 3)).release()
    final = tracker.revoke([lane])
    assert not committer.commit_now(sync=True, positions=final, revoking=True)
    assert _count(meter, "error") == 1 and _count(meter, "skipped") == 0
