"""The sink pool under ``delivery: effectively_once`` (B88, B89), offline.

The endpoints are the scripted ones plus an in-memory intent table standing in for the
ClickHouse state table (the real one is proven in tests/flagship/test_effectively_once.py
against the HTTP front); the endpoints drop a second insert with a token they have seen,
as ClickHouse's insert deduplication does.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import pytest
from prometheus_client import CollectorRegistry
from spate import AckStatus, AckToken, Lane, ManualClock
from spate.checkpoint import Committer, PartitionTracker
from spate.config.models import BackpressureConfig, CheckpointConfig
from spate.metrics import Meter
from spate.pipeline import Pipeline
from spate.sink import (
    BatchConfig,
    Intent,
    IntentWriter,
    ListRowBuffer,
    Offer,
    PoolConfig,
    RecordPosition,
    ShardConfig,
    SinkPool,
)
from spate.testing import memory_source
from spate.testing._scripted import ScriptedEndpoints, ScriptedWriter, _UnboundedBudget

LANE = Lane("t", 0)


class IntentEndpoints(ScriptedEndpoints):
    """Scripted endpoints with a shared intent table and token deduplication."""

    def __init__(self, clock: ManualClock, intents: list[tuple[str, str, Intent]]) -> None:
        super().__init__(clock)
        self.intents = intents
        self.epochs: dict[tuple[str, str, Lane, int], int] = {}
        self.tokens: set[str] = set()
        self.kept: list[object] = []

    def open_writer(self, shard: int, replica: int, endpoint: str) -> ScriptedWriter:
        return IntentWriterDouble(self, endpoint, shard)


class IntentWriterDouble(ScriptedWriter):
    def __init__(self, endpoints: IntentEndpoints, endpoint: str, shard: int) -> None:
        super().__init__(endpoints, endpoint)
        self.ends = endpoints
        self.shard = shard

    def write(self, batch: object) -> None:
        super().write(batch)  # type: ignore[arg-type]
        token = batch.token  # type: ignore[attr-defined]
        if token not in self.ends.tokens:  # ClickHouse drops a token it has seen
            self.ends.tokens.add(token)
            self.ends.kept.extend(batch.buffer.rows)  # type: ignore[attr-defined]

    def record_intent(self, pipeline: str, sink: str, intent: Intent) -> None:
        if self.endpoint in self.ends._down:
            from spate import ErrorClass, SinkError

            raise SinkError("down", ErrorClass.RETRYABLE)
        self.ends.intents.append((pipeline, sink, intent))

    def load_intents(self, pipeline: str, sink: str, lane: Lane, since: int) -> list[Intent]:
        return sorted(
            i
            for p, s, i in self.ends.intents
            if (p, s, i.lane, i.shard) == (pipeline, sink, lane, self.shard) and i.last[0] >= since
        )

    def claim_lane(self, pipeline: str, sink: str, lane: Lane) -> int:
        key = (pipeline, sink, lane, self.shard)
        epoch = self.ends.epochs[key] = self.ends.epochs.get(key, 0) + 1
        return epoch

    def owns_lane(self, pipeline: str, sink: str, lane: Lane, epoch: int) -> bool:
        return self.ends.epochs.get((pipeline, sink, lane, self.shard), 0) <= epoch

    def forget_intents(self, pipeline: str, sink: str, lane: Lane, below: int) -> None:
        self.ends.intents[:] = [
            (p, s, i)
            for p, s, i in self.ends.intents
            if not ((p, s, i.lane) == (pipeline, sink, lane) and i.last[0] < below)
        ]


def eo_pool(
    intents: list[tuple[str, str, Intent]], max_rows: int, shards: int = 1
) -> tuple[SinkPool, IntentEndpoints, RecordPosition]:
    clock = ManualClock()
    ends = IntentEndpoints(clock, intents)
    position = RecordPosition()
    pool = SinkPool(
        "events",
        ends,
        shards=[ShardConfig(replicas=(f"s{i}",)) for i in range(shards)],
        pipeline="p",
        run_nonce="run1",
        meter=Meter("p", CollectorRegistry()),
        clock=clock,
        budget=_UnboundedBudget(),
        io_threads=0,
        config=PoolConfig(batch=BatchConfig(max_rows=max_rows)),
        rng=lambda: 0.0,
        delivery="effectively_once",
        position=position,
    )
    pool.start()
    return pool, ends, position


def ack_for(offset: int, status: dict[int, AckStatus]) -> AckToken:
    return AckToken(LANE, 0, offset, offset + 1, 1, lambda t: status.__setitem__(t.seq, t.status))


def offer_record(
    pool: SinkPool, position: RecordPosition, offset: int, rows: int, status: dict[int, AckStatus]
) -> AckToken:
    ack = ack_for(offset, status)
    position.offset = offset
    for k in range(rows):
        assert pool.offer((offset, k), None, LANE, ack) is Offer.ACCEPTED
    ack.release()
    return ack


def test_b88_blocks_are_per_lane_with_tokens_from_positions_and_intents_first() -> None:
    intents: list[tuple[str, str, Intent]] = []
    pool, ends, position = eo_pool(intents, max_rows=3)
    status: dict[int, AckStatus] = {}
    ack_b = AckToken(Lane("t", 1), 0, 1, 1, 1, lambda t: None)
    position.offset = 0
    pool.offer("a", None, LANE, ack_for(0, status))
    pool.offer("b", None, Lane("t", 1), ack_b)  # another lane: another block
    pool.tick()
    tokens = sorted(w.token for w in ends.written)
    assert tokens == ["spate:p:events:0:t:0:0.0-0.0", "spate:p:events:0:t:1:0.0-0.0"]
    assert len(intents) == 2  # recorded before the inserts
    assert all(isinstance(w, IntentWriter) for w in [pool._shards[0].replicas[0].writer])


def test_b89_replay_rebuilds_the_recorded_blocks_whatever_cuts_them_now() -> None:
    """A second run with other batch sizes and a tick after every record rebuilds the
    first run's blocks (same rows, same tokens): nothing is inserted twice."""
    intents: list[tuple[str, str, Intent]] = []
    pool, ends, position = eo_pool(intents, max_rows=3)
    status: dict[int, AckStatus] = {}
    for offset in range(5):
        offer_record(pool, position, offset, 2 if offset == 1 else 1, status)
        if offset == 3:
            pool.tick()  # blocks: [0.0-1.1] (max_rows 3), [2.0-3.0] (tick)
    pool.pump()
    first_run = [w.token for w in ends.written]
    assert first_run == ["spate:p:events:0:t:0:0.0-1.1", "spate:p:events:0:t:0:2.0-3.0"]
    # Offset 4 sits in an open block; a crash now loses it. The second block's insert
    # "landed" but its commit did not: the replay starts at offset 2.
    pool2, ends2, position2 = eo_pool(intents, max_rows=1)
    ends2.tokens = set(ends.tokens)
    ends2.kept = list(ends.kept)
    status2: dict[int, AckStatus] = {}
    for offset in range(2, 7):
        offer_record(pool2, position2, offset, 1, status2)
        pool2.tick()
    pool2.pump()
    assert ends2.written[0].token == "spate:p:events:0:t:0:2.0-3.0"
    assert sorted(ends2.kept) == [(0, 0), (1, 0), (1, 1), (2, 0), (3, 0), (4, 0), (5, 0), (6, 0)]
    assert all(s is AckStatus.DELIVERED for s in status2.values())


def test_b89_a_crash_between_intent_and_insert_writes_the_block_once() -> None:
    intents: list[tuple[str, str, Intent]] = []
    pool, ends, position = eo_pool(intents, max_rows=2)
    status: dict[int, AckStatus] = {}
    ends.script("s0", "retryable", times=5)
    for offset in range(2):
        offer_record(pool, position, offset, 1, status)
    pool.pump()  # intent recorded, the insert failed: crash here
    assert [i for _, _, i in intents] == [Intent(0, LANE, (0, 0), (1, 0), 1)]
    assert ends.kept == []
    pool2, ends2, position2 = eo_pool(intents, max_rows=100)
    for offset in range(3):
        offer_record(pool2, position2, offset, 1, status)
    pool2.pump()
    assert [w.token for w in ends2.written] == ["spate:p:events:0:t:0:0.0-1.0"]
    pool2.tick()
    assert ends2.kept == [(0, 0), (1, 0), (2, 0)]


def test_b89_a_replayed_block_is_never_written_short() -> None:
    """A drain or revocation before the replayed block's last row fails the block's acks
    (the next owner rebuilds it); it is never inserted under a shorter range."""
    intents = [("p", "events", Intent(0, LANE, (0, 0), (9, 0)))]
    pool, ends, position = eo_pool(intents, max_rows=100)
    status: dict[int, AckStatus] = {}
    offer_record(pool, position, 0, 1, status)
    pool.tick()
    assert pool.flush(deadline=10.0) is True  # nothing free is left to write
    assert ends.attempts == []
    pool.lanes_revoked([LANE])
    assert status == {0: AckStatus.FAILED}
    assert ends.attempts == []


@pytest.mark.parametrize("below", [5])
def test_b89_committed_intents_are_forgotten_on_assignment(below: int) -> None:
    intents = [
        ("p", "events", Intent(0, LANE, (0, 0), (4, 0))),
        ("p", "events", Intent(0, LANE, (5, 0), (6, 0))),
    ]
    pool, _ends, position = eo_pool(intents, max_rows=100)
    offer_record(pool, position, below, 1, {})
    assert [i for _, _, i in intents] == [Intent(0, LANE, (5, 0), (6, 0))]


def test_b91_rows_are_refused_while_the_intents_cannot_be_read() -> None:
    intents = [("p", "events", Intent(0, LANE, (0, 0), (1, 0)))]
    pool, ends, position = eo_pool(intents, max_rows=100)
    failing = pool._shards[0].replicas[0].writer
    assert isinstance(failing, IntentWriterDouble)
    real_load = failing.load_intents

    def unreadable(*args: object) -> list[Intent]:
        from spate import ErrorClass, SinkError

        raise SinkError("connection refused", ErrorClass.RETRYABLE)

    failing.load_intents = unreadable  # type: ignore[method-assign]
    position.offset = 0
    ack = ack_for(0, {})
    assert pool.offer((0, 0), None, LANE, ack) is Offer.REJECTED
    failing.load_intents = real_load  # type: ignore[method-assign]
    assert pool.offer((0, 0), None, LANE, ack) is Offer.REJECTED  # asks again after 1 s
    pool._clock.advance(1.0)  # type: ignore[attr-defined]
    assert pool.offer((0, 0), None, LANE, ack) is Offer.ACCEPTED
    position.offset = 1
    assert pool.offer((1, 0), None, LANE, ack) is Offer.ACCEPTED
    ack.release()
    pool.pump()
    assert [w.token for w in ends.written] == ["spate:p:events:0:t:0:0.0-1.0"]


class StoringSource:
    """A source whose asynchronous commits are only stored until ``confirm()`` (Kafka's
    commit cadence: sent later, answered later, possibly refused)."""

    def __init__(self) -> None:
        self.stored: dict[Lane, int] = {}
        self.confirmed: dict[Lane, int] = {}

    def commit(self, offsets: Mapping[Lane, int], *, sync: bool) -> None:
        self.stored.update(offsets)
        if sync:
            self.confirm()

    def confirm(self) -> None:
        self.confirmed.update(self.stored)

    def durable_commits(self) -> dict[Lane, int]:
        return dict(self.confirmed)


def test_b89_intents_are_kept_until_the_source_confirms_the_commit() -> None:
    """An asynchronous commit the source only stored does not delete the intents below
    it: a kill -9 before the broker took it replays from the older commit, and the
    replay needs those intents to rebuild the same blocks (no duplicates)."""
    intents: list[tuple[str, str, Intent]] = []
    pool, _ends, position = eo_pool(intents, max_rows=1)
    source = StoringSource()
    clock = ManualClock()
    committer = Committer(
        tracker=PartitionTracker(clock),
        source=source,  # type: ignore[arg-type]
        sinks={"events": pool},
        clock=clock,
        interval=1.0,
        meter=Meter("p", CollectorRegistry()),
    )
    status: dict[int, AckStatus] = {}
    for offset in range(100):
        offer_record(pool, position, offset, 1, status)
        pool.pump()
    assert committer.commit_now(sync=False, positions={LANE: 100})
    for offset in range(100, 300):  # the 256th intent deletes what is known committed
        offer_record(pool, position, offset, 1, status)
        pool.pump()
    assert min(i.first[0] for _, _, i in intents) == 0  # the commit is not durable yet
    source.confirm()  # the broker's answer
    clock.advance(1.0)
    committer.maybe_commit()
    for offset in range(300, 520):  # the 512th deletes again
        offer_record(pool, position, offset, 1, status)
        pool.pump()
    assert min(i.first[0] for _, _, i in intents) == 100


class WatchdogClock(ManualClock):
    """A manual clock that asks ``stop`` once ``limit`` manual seconds have passed: a
    wedged run idles forever, and this ends it without any wall-clock bound."""

    def __init__(self, limit: float) -> None:
        super().__init__()
        self.deadline = self.monotonic() + limit
        self.stop: Callable[[str], None] | None = None

    def sleep(self, seconds: float) -> None:
        super().sleep(seconds)
        if self.stop is not None and self.monotonic() >= self.deadline:
            self.stop("wedged")


class MiBEndpoints(IntentEndpoints):
    """Every row counts as one MiB against the byte budget (no MiB is allocated)."""

    def new_buffer(self, shard: int) -> ListRowBuffer:
        return ListRowBuffer(row_bytes=MIB)


MIB = 1 << 20


@pytest.mark.parametrize(
    ("batch_size", "max_pending", "block"),
    [
        # Nine blocks of 32 rows (one MiB each, as a first run sealed them at the shipped
        # max_bytes) wait together for rows: 270 MiB crosses the shipped budget's
        # 230 MiB before any completes.
        (5, CheckpointConfig().max_pending_batches, 32),
        # The first run read a block in one batch; the replay reads it in ten, and
        # max_pending_batches is 4.
        (1, 4, 10),
    ],
)
def test_b121_replaying_several_partitions_into_a_split_always_completes(
    batch_size: int, max_pending: int, block: int
) -> None:
    """Three partitions replayed into a three-sink split under the shipped byte budget
    (and a small max_pending_batches): every recorded block is rebuilt and written once,
    every offset committed; before B121 every lane stayed paused for good."""
    sinks = ("orders", "payments", "refunds")
    partitions = 3
    records = block + 3
    intents: list[tuple[str, str, Intent]] = [
        ("p", name, Intent(0, Lane("memory", part), (0, 0), (block - 1, 0)))
        for name in sinks
        for part in range(partitions)
    ]
    clock = WatchdogClock(limit=600.0)
    backpressure = BackpressureConfig()  # the shipped budget
    budget = Pipeline.new_budget(backpressure)
    position = RecordPosition()
    ends = MiBEndpoints(clock, intents)
    pools = {
        name: SinkPool(
            name,
            ends,
            shards=[ShardConfig(replicas=("s0",))],
            pipeline="p",
            run_nonce="run2",
            meter=Meter("p", CollectorRegistry()),
            clock=clock,
            budget=budget,
            io_threads=0,
            rng=lambda: 0.0,
            delivery="effectively_once",
            position=position,
        )
        for name in sinks
    }
    data = {p: [f"{p}:{o}".encode() for o in range(records)] for p in range(partitions)}
    source, handle = memory_source(data, batch_size=batch_size)

    def chains(ctx: Any) -> Any:
        targets = [(name, ctx.sink(name)) for name in sinks]

        def route(value: Any, out: Any) -> None:
            for name, target in targets:
                out.emit(target, (name, bytes(value)))

        return ctx.chain().split().route(route)

    pipeline = Pipeline(
        "p",
        source,
        pools,
        checkpoint=CheckpointConfig(interval=1.0, max_pending_batches=max_pending),
        backpressure=backpressure,
        clock=clock,
        meter=Meter("p", CollectorRegistry()),
        budget=budget,
        handle_signals=False,
        position=position,
    ).chains(chains)
    clock.stop = pipeline.request_stop
    report = pipeline.run()
    assert handle.committed == {Lane("memory", p): records for p in range(partitions)}, report
    expected = sorted((n, f"{p}:{o}".encode()) for n in sinks for p in data for o in range(records))
    assert sorted(ends.kept) == expected  # each row once
    recorded = {w.token for w in ends.written if w.token.endswith(f"0.0-{block - 1}.0")}
    assert len(recorded) == len(sinks) * partitions  # the recorded blocks, rebuilt
