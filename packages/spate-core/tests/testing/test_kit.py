"""The test kit behaves like the real thing: sources, sinks with scripted outcomes (B2, B4)."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from collections.abc import Collection

from spate.checkpoint import AckStatus, PartitionTracker
from spate.records import Lane, PayloadBatch
from spate.sink import Offer
from spate.testing import (
    FileSink,
    ManualClock,
    SequenceSource,
    capture_sink,
    delay,
    memory_source,
    read_file_sink,
    read_offsets,
    sequence_payload,
)

from tests.support.scale import scaled


class _Events:
    def __init__(self) -> None:
        self.log: list[tuple[str, object]] = []

    def assigned(self, lanes: Collection[Lane]) -> None:
        self.log.append(("assigned", sorted(lanes)))

    def revoked(self, lanes: Collection[Lane]) -> None:
        self.log.append(("revoked", sorted(lanes)))

    def drained(self) -> None:
        self.log.append(("drained", None))


def _batch(lane: Lane, first: int, n: int) -> PayloadBatch:
    return PayloadBatch(
        lane, list(range(first, first + n)), [memoryview(b"p")] * n, [None] * n, [0] * n, first + n
    )


def test_memory_source_shares_one_buffer_honours_pause_and_drains() -> None:
    source, handle = memory_source({0: [b"a", b"bb"], 1: [b"ccc"]}, batch_size=1)
    events = _Events()
    source.start(events)
    lane0, lane1 = Lane("memory", 0), Lane("memory", 1)
    assert events.log == [("assigned", [lane0, lane1])]
    source.pause([lane1])
    first = source.poll(0)
    assert [b.lane for b in first] == [lane0]
    assert first[0].payloads[0].obj is handle.buffers[0]
    source.resume([lane1])
    second = source.poll(0)
    assert sorted((b.lane.partition, bytes(b.payloads[0])) for b in second) == [
        (0, b"bb"),
        (1, b"ccc"),
    ]
    assert source.poll(0) == []
    assert events.log[-1] == ("drained", None)


def test_memory_source_rebalance_rewinds_to_the_last_commit() -> None:
    source, handle = memory_source({0: [b"x"] * 10}, batch_size=4)
    events = _Events()
    source.start(events)
    source.poll(0)
    source.poll(0)  # handed out 0..7
    source.commit({Lane("memory", 0): 4}, sync=True)
    handle.rebalance(revoke=[0], assign=[0])
    (batch,) = source.poll(0)
    assert batch.first_offset == 4
    assert [e for e, _ in events.log] == ["assigned", "revoked", "assigned"]
    assert handle.last_committed(0) == 4


def test_capture_sink_retries_then_writes_once() -> None:
    clock = ManualClock()
    tracker = PartitionTracker(clock)
    sink, script = capture_sink(max_rows=2, clock=clock)
    script.then("retryable", 2)
    sink.start()
    lane = Lane("m", 0)
    ack = tracker.register(_batch(lane, 0, 2))
    sink.offer("r1", None, lane, ack)
    sink.offer("r2", None, lane, ack)
    ack.release()
    assert ack.status is AckStatus.PENDING and script.attempts == 1
    assert sink.flush(clock.monotonic() + 1)
    assert ack.status is AckStatus.DELIVERED
    assert script.rows == ["r1", "r2"] and script.writes == 1 and script.attempts == 3


def test_b2_capture_sink_fatal_outcome_fails_the_batch() -> None:
    clock = ManualClock()
    tracker = PartitionTracker(clock)
    sink, script = capture_sink(max_rows=10, clock=clock)
    script.then("fatal")
    sink.start()
    lane = Lane("m", 0)
    ack = tracker.register(_batch(lane, 0, 1))
    sink.offer("r", None, lane, ack)
    ack.release()
    assert sink.flush(clock.monotonic() + 1)
    assert ack.status is AckStatus.FAILED and script.rows == []


def test_b4_closing_a_sink_fails_the_acks_it_still_holds() -> None:
    clock = ManualClock()
    tracker = PartitionTracker(clock)
    sink, script = capture_sink(max_rows=10, clock=clock)
    script.always("stuck")
    sink.start()
    lane = Lane("m", 0)
    sealed = tracker.register(_batch(lane, 0, 1))
    sink.offer("a", None, lane, sealed)
    sink.tick()  # sealed and being written (forever)
    unsealed = tracker.register(_batch(lane, 1, 1))
    sink.offer("b", None, lane, unsealed)
    sealed.release()
    unsealed.release()
    assert not sink.flush(clock.monotonic() + 2)
    sink.close()
    assert sealed.status is AckStatus.FAILED and unsealed.status is AckStatus.FAILED
    assert sink.rows_failed == 2


def test_capture_sink_capacity_rejects_and_delay_completes_on_time() -> None:
    clock = ManualClock()
    tracker = PartitionTracker(clock)
    sink, script = capture_sink(max_rows=2, capacity=2, clock=clock)
    script.then(delay(5))
    sink.start()
    lane = Lane("m", 0)
    ack = tracker.register(_batch(lane, 0, 3))
    assert sink.offer(1, None, lane, ack) is Offer.ACCEPTED
    assert sink.offer(2, None, lane, ack) is Offer.ACCEPTED
    assert sink.offer(3, None, lane, ack) is Offer.REJECTED
    clock.advance(4.9)
    sink.tick()
    assert script.writes == 0
    clock.advance(0.1)
    sink.tick()
    assert script.writes == 1
    assert sink.offer(3, None, lane, ack) is Offer.ACCEPTED


def test_threaded_capture_sink_resolves_acks_on_its_worker_thread() -> None:
    tracker = PartitionTracker(ManualClock())
    sink, script = capture_sink("worker", max_rows=3, threaded=True)
    script.then(delay(0.05))  # real time: the chain's hold is gone before the write ends
    sink.start()
    lane = Lane("m", 0)
    ack = tracker.register(_batch(lane, 0, 3))
    resolved_on: list[str] = []
    original = ack._resolver
    ack._resolver = lambda t: (resolved_on.append(threading.current_thread().name), original(t))
    for i in range(3):
        sink.offer(i, None, lane, ack)
    ack.release()
    assert sink.flush(time.monotonic() + 10)
    sink.close()
    assert script.rows == [0, 1, 2]
    assert ack.status is AckStatus.DELIVERED
    assert resolved_on == ["sink-worker"]


_WRITER = """
import sys
from spate.checkpoint import PartitionTracker
from spate.records import Lane, PayloadBatch
from spate.testing import FileSink, ManualClock
path, who, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
tracker = PartitionTracker(ManualClock())
sink = FileSink(path, max_rows=7)
sink.start()
lane = Lane(who, 0)
ack = tracker.register(PayloadBatch(lane, list(range(n)), [memoryview(b"x")] * n,
                                    [None] * n, [0] * n, n))
for i in range(n):
    sink.offer({"who": who, "i": i, "pad": "x" * 300}, None, lane, ack)
ack.release()
assert sink.flush(1e12)
sink.close()
"""


def test_file_sink_lines_from_several_processes_never_interleave(tmp_path) -> None:
    path = tmp_path / "out.jsonl"
    n = scaled(2000, minimum=50)
    procs = [
        subprocess.Popen([sys.executable, "-c", _WRITER, str(path), f"w{k}", str(n)])
        for k in range(3)
    ]
    for proc in procs:
        assert proc.wait(timeout=60) == 0
    rows = read_file_sink(path)
    assert len(rows) == 3 * n
    for k in range(3):
        assert sorted(r["i"] for r in rows if r["who"] == f"w{k}") == list(range(n))


def test_file_sink_reader_skips_a_torn_last_line(tmp_path) -> None:
    path = tmp_path / "out.jsonl"
    path.write_bytes(b'{"a":1}\n{"a":2}\n{"a":')
    assert read_file_sink(path) == [{"a": 1}, {"a": 2}]


def test_sequence_source_resumes_from_its_committed_offsets(tmp_path) -> None:
    offsets = tmp_path / "offsets.json"
    events = _Events()
    first = SequenceSource(offsets, partitions=2, records_per_lane=10, batch_size=4)
    first.start(events)
    batches = first.poll(0)
    assert bytes(batches[0].payloads[1]) == sequence_payload("seq", 0, 1).encode()
    first.commit({Lane("seq", 0): 4}, sync=True)
    assert read_offsets(offsets) == {0: 4}
    second = SequenceSource(offsets, partitions=2, records_per_lane=10, batch_size=4)
    second.start(events)
    starts = {b.lane.partition: b.first_offset for b in second.poll(0)}
    assert starts == {0: 4, 1: 0}


def test_file_sink_acks_only_after_the_rows_are_in_the_file(tmp_path) -> None:
    path = tmp_path / "out.jsonl"
    clock = ManualClock()
    tracker = PartitionTracker(clock)
    sink = FileSink(path, max_rows=100, clock=clock)
    sink.start()
    lane = Lane("m", 0)
    ack = tracker.register(_batch(lane, 0, 2))
    sink.offer({"k": 1}, None, lane, ack)
    sink.offer({"k": 2}, None, lane, ack)
    ack.release()
    assert ack.status is AckStatus.PENDING and read_file_sink(path) == []
    sink.tick()
    assert ack.status is AckStatus.DELIVERED
    assert read_file_sink(path) == [{"k": 1}, {"k": 2}]
    sink.close()
