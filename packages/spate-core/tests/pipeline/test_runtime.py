"""The runtime loop on a manual clock: commits, stalls, pauses, drains (B1, B2, B4-B8, B14-B16)."""

from __future__ import annotations

import contextlib
from collections.abc import Callable

from spate.config.models import BackpressureConfig, CheckpointConfig
from spate.errors import AckError
from spate.flow import InflightBudget
from spate.pipeline import Pipeline, PipelineRuntime, ShutdownHandle
from spate.records import Lane
from spate.sink import BatchConfig, PoolConfig, Sink
from spate.testing import (
    CaptureScript,
    CaptureSink,
    CopyToSinkProcessor,
    ManualClock,
    SealedBatch,
    capture_sink,
    delay,
    memory_source,
    scripted_pool,
)


def payloads(prefix: str, n: int) -> list[bytes]:
    return [f"{prefix}{i}".encode() for i in range(n)]


def run_steps(runtime: object, n: int, check: Callable[[], None] | None = None) -> None:
    for _ in range(n):
        if not runtime.step():  # type: ignore[attr-defined]
            return
        if check is not None:
            check()


def test_b16_bounded_source_completes_with_exit_code_0_and_commits_everything() -> None:
    clock = ManualClock()
    source, handle = memory_source({0: payloads("a", 250), 1: payloads("b", 75)}, batch_size=40)
    sink, script = capture_sink("out", max_rows=33, clock=clock)
    report = Pipeline(
        "b16ok",
        source,
        {"out": sink},
        processor=CopyToSinkProcessor(sink),
        clock=clock,
        handle_signals=False,
    ).run()
    assert report.exit_code == 0 and report.state == "completed"
    assert report.records_in == report.records_delivered == 325
    assert sorted(script.rows) == sorted(payloads("a", 250) + payloads("b", 75))
    assert handle.last_committed(0) == 250 and handle.last_committed(1) == 75
    assert handle.commits[-1][1] is True  # the final commit is synchronous (B14)
    assert report.final_watermarks == {Lane("memory", 0): 250, Lane("memory", 1): 75}
    assert handle.closed and sink.closed


def test_b1_commits_follow_out_of_order_deliveries_without_passing_a_pending_batch(
    runtime_factory,
) -> None:
    clock = ManualClock()
    source, handle = memory_source({0: payloads("a", 40)}, batch_size=10, bounded=False)
    sink, script = capture_sink("out", max_rows=10, clock=clock)
    # Batch 1 is slow; batches 2-4 are fast. The sink writes batches in order, so use a
    # second sink for the slow one to get out-of-order resolution.
    slow, slow_script = capture_sink("slow", max_rows=10, clock=clock)
    slow_script.then(delay(30))

    class FirstBatchSlow:
        def process(self, batch, ack, resume=None):  # type: ignore[no-untyped-def]
            target = slow if batch.first_offset == 0 else sink
            for p in batch.payloads:
                target.offer(bytes(p), None, batch.lane, ack)
            return None

    runtime, _ = runtime_factory(source, {"out": sink, "slow": slow}, FirstBatchSlow(), clock)
    runtime.start()

    def never_past_pending() -> None:
        if slow_script.writes == 0:
            assert handle.last_committed(0) in (None, 0)

    run_steps(runtime, 50, never_past_pending)
    assert script.writes == 3 and slow_script.writes == 0
    assert handle.last_committed(0) == 0
    clock.advance(30)
    run_steps(runtime, 30)
    assert handle.last_committed(0) == 40


def test_b2_a_batch_split_to_two_sinks_fails_when_one_branch_fails(
    runtime_factory, fan_out
) -> None:
    clock = ManualClock()
    source, handle = memory_source({0: payloads("a", 20)}, batch_size=10, bounded=False)
    good, good_script = capture_sink("good", max_rows=10, clock=clock)
    bad, bad_script = capture_sink("bad", max_rows=10, clock=clock)
    bad_script.then("ok").then("fatal")
    runtime, _ = runtime_factory(source, {"good": good, "bad": bad}, fan_out([good, bad]), clock)
    runtime.start()
    run_steps(runtime, 30)
    assert good_script.writes == 2  # the good branch wrote both batches ...
    assert handle.last_committed(0) == 10  # ... but batch 2 failed in the other branch
    assert runtime.tracker.stalled_lanes()


class ReleasesTwice(CaptureSink):
    """A sink that releases every ack twice once written, and swallows the error."""

    def _resolve(self, batches: list[SealedBatch], *, ok: bool) -> None:
        super()._resolve(batches, ok=ok)
        for sealed in batches:
            for ack in sealed.acks:
                with contextlib.suppress(AckError):
                    ack.release(ok, holder=sealed.holder)


def test_b39_a_sink_releasing_twice_fails_the_run_and_never_commits_ahead(fan_out) -> None:
    """One branch of a split releases twice while the other branch has not written yet:
    the batch used to resolve delivered and the run committed past unwritten rows, exit 0."""
    clock = ManualClock()
    source, handle = memory_source({0: payloads("a", 20)}, batch_size=10)
    slow, slow_script = capture_sink("slow", max_rows=10, clock=clock)
    slow_script.then(delay(1e6))  # never done within the run
    twice = ReleasesTwice("twice", CaptureScript(), max_rows=10, clock=clock)
    report = Pipeline(
        "b2twice",
        source,
        {"slow": slow, "twice": twice},
        processor=fan_out([slow, twice]),
        clock=clock,
        checkpoint=CheckpointConfig(interval=1.0, drain_timeout=5.0),
        handle_signals=False,
    ).run()
    assert slow_script.writes == 0
    assert handle.last_committed(0) in (None, 0)
    assert report.exit_code == 1
    assert "released by sink twice buffer 1, which does not hold it" in report.reason


def test_b5_failed_head_batch_fails_the_pipeline_after_stalled_fail_after() -> None:
    clock = ManualClock()
    source, handle = memory_source({0: payloads("a", 30)}, batch_size=10, bounded=False)
    sink, script = capture_sink("out", max_rows=10, clock=clock)
    script.then("ok").then("fatal")
    checkpoint = CheckpointConfig(interval=1.0, stalled_fail_after=20.0)
    started = clock.monotonic()
    report = Pipeline(
        "b5",
        source,
        {"out": sink},
        processor=CopyToSinkProcessor(sink),
        clock=clock,
        checkpoint=checkpoint,
        handle_signals=False,
    ).run()
    assert report.exit_code == 1
    assert "stalled_fail_after" in report.reason
    assert clock.monotonic() - started >= 20.0
    assert handle.last_committed(0) == 10  # never past the failed batch
    assert report.final_watermarks[Lane("memory", 0)] == 10
    assert script.writes == 2  # the batch after the failed one was written, not committed


def test_b5_slow_batches_never_fail_the_pipeline(runtime_factory) -> None:
    clock = ManualClock()
    source, handle = memory_source({0: payloads("a", 30)}, batch_size=10, bounded=False)
    sink, script = capture_sink("out", max_rows=10, clock=clock)
    script.then(delay(100), 3)
    checkpoint = CheckpointConfig(interval=1.0, stalled_fail_after=5.0)
    runtime, shutdown = runtime_factory(
        source, {"out": sink}, CopyToSinkProcessor(sink), clock, checkpoint=checkpoint
    )
    runtime.start()
    for _ in range(4000):  # ~400 s of manual time, far beyond stalled_fail_after
        assert runtime.step()
        if handle.last_committed(0) == 30:
            break
    assert runtime.failure is None
    assert handle.last_committed(0) == 30
    shutdown.request("test over")
    assert not runtime.step()
    assert runtime.finish("test over").exit_code == 0


def test_b6_pending_bound_per_lane_pauses_only_that_lane(runtime_factory, lane_router) -> None:
    clock = ManualClock()
    source, handle = memory_source(
        {0: payloads("a", 100), 1: payloads("b", 100)}, batch_size=10, bounded=False
    )
    stuck, stuck_script = capture_sink("l0", max_rows=10, clock=clock)
    stuck_script.always(delay(1000))
    free, _ = capture_sink("l1", max_rows=10, clock=clock)
    checkpoint = CheckpointConfig(interval=1.0, max_pending_batches=3, stalled_fail_after=1e6)
    runtime, _ = runtime_factory(
        source,
        {"l0": stuck, "l1": free},
        lane_router({0: stuck, 1: free}),
        clock,
        checkpoint=checkpoint,
    )
    runtime.start()
    lane0 = Lane("memory", 0)

    def bound_holds() -> None:
        assert runtime.tracker.pending(lane0) <= 3

    run_steps(runtime, 100, bound_holds)
    assert handle.position[lane0] == 30  # exactly the bound was taken from lane 0
    assert lane0 in handle.paused
    assert handle.last_committed(1) == 100  # the other lane kept flowing
    assert handle.last_committed(0) == 0
    clock.advance(1000)  # the first slow write finishes; the lane reopens under the bound
    run_steps(runtime, 20, bound_holds)
    assert handle.position[lane0] > 30


def test_b7_budget_pauses_the_source_keeps_polling_and_resumes_with_hysteresis(
    runtime_factory,
) -> None:
    clock = ManualClock()
    bp = BackpressureConfig(max_inflight_bytes=1000, high_ratio=0.8, low_ratio=0.5, min_pause=2.0)
    budget = InflightBudget(bp.max_inflight_bytes)
    source, handle = memory_source({0: payloads("a", 40)}, batch_size=5, bounded=False)
    sink, script = capture_sink("out", max_rows=5, row_bytes=100, budget=budget, clock=clock)
    script.then(delay(10), 2)  # the first two batches are slow; rows pile up in the budget
    runtime, _ = runtime_factory(
        source,
        {"out": sink},
        CopyToSinkProcessor(sink),
        clock,
        backpressure=bp,
        budget=budget,
        checkpoint=CheckpointConfig(interval=1.0),  # ticks let the inline sink progress
    )
    runtime.start()
    lane0 = Lane("memory", 0)
    run_steps(runtime, 5)
    assert budget.used >= 800
    assert handle.paused == {lane0}
    polls_when_paused = handle.polls
    position = handle.position[lane0]
    run_steps(runtime, 20)
    assert handle.polls > polls_when_paused  # still polling while paused (group stays alive)
    assert handle.position[lane0] == position  # ... but nothing more fetched
    clock.advance(10)
    run_steps(runtime, 400)
    assert handle.paused == frozenset()
    assert handle.position[lane0] == 40
    assert budget.peak < 1000 + 5 * 100  # bounded by the high mark plus one poll's rows


def test_b8_a_stalled_batch_resumes_where_it_stopped_without_rerunning_operators(
    runtime_factory,
) -> None:
    clock = ManualClock()
    source, handle = memory_source(
        {0: payloads("a", 60), 1: payloads("b", 45)}, batch_size=20, bounded=True
    )
    sink, script = capture_sink("out", max_rows=1000, capacity=7, clock=clock)
    processor = CopyToSinkProcessor(sink)
    runtime, _shutdown = runtime_factory(
        source, {"out": sink}, processor, clock, checkpoint=CheckpointConfig(interval=0.5)
    )
    runtime.start()
    saw_pause = False

    def watch() -> None:
        nonlocal saw_pause
        saw_pause = saw_pause or len(handle.paused) == 2

    run_steps(runtime, 2000, watch)
    report = runtime.finish("drained")
    assert saw_pause  # the whole source was paused while the batch was stalled
    assert sink.offers_rejected > 0
    assert processor.transforms == 105  # every record transformed exactly once
    assert sorted(script.rows) == sorted(payloads("a", 60) + payloads("b", 45))
    assert report.exit_code == 0


def test_b14_stop_request_drains_flushes_and_commits_synchronously(runtime_factory) -> None:
    clock = ManualClock()
    source, handle = memory_source({0: payloads("a", 35)}, batch_size=10, bounded=False)
    sink, script = capture_sink("out", max_rows=1000, clock=clock)  # only flush writes
    runtime, shutdown = runtime_factory(
        source,
        {"out": sink},
        CopyToSinkProcessor(sink),
        clock,
        checkpoint=CheckpointConfig(interval=1000.0),
    )
    runtime.start()
    run_steps(runtime, 10)
    assert script.writes == 0 and handle.commits == []
    shutdown.request("signal SIGTERM")
    assert not runtime.step()
    report = runtime.finish("signal SIGTERM")
    assert report.exit_code == 0
    assert len(script.rows) == 35
    assert handle.commits == [({Lane("memory", 0): 35}, True)]


def test_b4_b14_drain_abandons_what_a_stuck_sink_never_wrote(runtime_factory) -> None:
    clock = ManualClock()
    source, handle = memory_source({0: payloads("a", 30)}, batch_size=10, bounded=False)
    sink, script = capture_sink("out", max_rows=10, clock=clock)
    script.then("ok").always("stuck")
    checkpoint = CheckpointConfig(interval=1.0, drain_timeout=5.0)
    runtime, shutdown = runtime_factory(
        source, {"out": sink}, CopyToSinkProcessor(sink), clock, checkpoint=checkpoint
    )
    runtime.start()
    run_steps(runtime, 10)
    shutdown.request("signal SIGTERM")
    runtime.step()
    before = clock.monotonic()
    report = runtime.finish("signal SIGTERM")
    assert clock.monotonic() - before <= 5.0 + 0.1
    assert report.exit_code == 1
    assert report.abandoned_rows == 20 and report.abandoned_batches == 2
    assert report.records_failed == 20  # abandoned buffers failed their acks (B4)
    assert handle.last_committed(0) == 10  # nothing past the stuck batch


def test_b15_revocation_commits_synchronously_before_the_barrier_returns() -> None:
    clock = ManualClock()
    source, handle = memory_source({0: payloads("a", 50), 1: payloads("b", 50)}, batch_size=10)
    sink, script = capture_sink("out", max_rows=1000, clock=clock)  # only tick/flush write
    taken: list[tuple[int, int]] = []

    class RevokeAfterFourBatches(CopyToSinkProcessor):
        def process(self, batch, ack, resume=None):  # type: ignore[no-untyped-def]
            taken.append((batch.lane.partition, batch.first_offset))
            if len(taken) == 4:  # two polls: lane 0 has handed out offsets 0..19
                handle.rebalance(revoke=[0], assign=[0])
            return super().process(batch, ack, resume)

    report = Pipeline(
        "b15",
        source,
        {"out": sink},
        processor=RevokeAfterFourBatches(sink),
        clock=clock,
        checkpoint=CheckpointConfig(interval=1000.0),
        handle_signals=False,
    ).run()
    lane0 = Lane("memory", 0)
    # Before the barrier returned, the sink was flushed and lane 0's delivered prefix
    # was committed synchronously; lane 0 was then assigned again from there.
    assert handle.commits[0] == ({lane0: 20}, True)
    assert sorted(taken[4:6]) == [(0, 20), (1, 20)]  # lane 0 resumed at its commit
    assert report.exit_code == 0
    assert handle.last_committed(0) == 50 and handle.last_committed(1) == 50
    assert sorted(script.rows) == sorted(payloads("a", 50) + payloads("b", 50))


def revoke_lane_0_after_two_polls(
    runtime_factory: Callable[..., tuple[PipelineRuntime, ShutdownHandle]],
    sink: Sink,
    clock: ManualClock,
) -> tuple[PipelineRuntime, ShutdownHandle]:
    """Lanes 0 and 1 hand out 20 rows each to ``sink`` (no checkpoint tick seals
    anything), then lane 0 is revoked and assigned again; lane 0's commit is checked."""
    source, handle = memory_source(
        {0: payloads("a", 40), 1: payloads("b", 40)}, batch_size=10, bounded=False
    )
    runtime, shutdown = runtime_factory(
        source,
        {"out": sink},
        CopyToSinkProcessor(sink),
        clock,
        checkpoint=CheckpointConfig(interval=1000.0),
    )
    runtime.start()
    run_steps(runtime, 2)
    handle.rebalance(revoke=[0], assign=[0])
    run_steps(runtime, 1)
    assert handle.commits[0] == ({Lane("memory", 0): 20}, True)  # before the barrier returned
    return runtime, shutdown


def test_b40_revoking_a_lane_writes_its_rows_and_leaves_other_lanes_buffers_open(
    runtime_factory,
) -> None:
    """Lane 0's rows go to shard s0 and lane 1's to s1 (keyless rows spread by partition).
    Revoking lane 0 writes s0's batch and commits lane 0 before the barrier returns (B15),
    and leaves s1's batch open: it used to flush every buffer on every revocation."""
    clock = ManualClock()
    pool, ends = scripted_pool(
        "out", shards=2, clock=clock, config=PoolConfig(batch=BatchConfig(linger=1000.0))
    )
    runtime, shutdown = revoke_lane_0_after_two_polls(runtime_factory, pool, clock)
    assert [len(a.rows) for a in ends.attempts_on("s0")] == [20]
    assert ends.attempts_on("s1") == []  # lane 1's batch was not cut short
    shutdown.request("test over")
    report = runtime.finish("test over")
    assert report.exit_code == 0
    assert [len(a.rows) for a in ends.attempts_on("s1")] == [
        report.final_watermarks[Lane("memory", 1)]
    ]


def test_b40_a_sink_without_per_lane_flush_is_flushed_in_full_on_revocation(
    runtime_factory,
) -> None:
    """A sink written before flush_lanes existed still gets every revoked row written."""
    clock = ManualClock()
    sink, script = capture_sink("out", max_rows=1000, clock=clock)
    assert not hasattr(sink, "flush_lanes")
    revoke_lane_0_after_two_polls(runtime_factory, sink, clock)
    assert script.writes == 1 and len(script.rows) == 40  # everything, as before


def test_b15_late_acks_of_a_revoked_epoch_are_ignored(runtime_factory) -> None:
    clock = ManualClock()
    source, handle = memory_source({0: payloads("a", 20)}, batch_size=10, bounded=False)
    sink, script = capture_sink("out", max_rows=10, clock=clock)
    script.then(delay(50))  # the first batch's write outlives the revocation drain
    checkpoint = CheckpointConfig(interval=1.0, drain_timeout=5.0)
    runtime, shutdown = runtime_factory(
        source, {"out": sink}, CopyToSinkProcessor(sink), clock, checkpoint=checkpoint
    )
    runtime.start()
    run_steps(runtime, 3)
    handle.rebalance(revoke=[0], assign=[0])
    run_steps(runtime, 3)  # the barrier runs inside this poll and gives up after 5 s
    assert handle.last_committed(0) in (None, 0)  # nothing delivered in the old epoch
    clock.advance(60)
    run_steps(runtime, 50)  # the old write lands: ignored; the replay is committed
    assert runtime.tracker.ignored_resolutions >= 1
    assert handle.last_committed(0) == 20
    assert script.rows.count(b"a0") == 2  # replayed after the rebalance: a duplicate, not a loss
    shutdown.request("done")
    assert runtime.finish("done").exit_code == 0


def test_processor_error_fails_the_batch_and_the_run_with_exit_1() -> None:
    clock = ManualClock()
    source, handle = memory_source({0: payloads("a", 30)}, batch_size=10)
    sink, _script = capture_sink("out", max_rows=10, clock=clock)

    class Boom(CopyToSinkProcessor):
        def process(self, batch, ack, resume=None):  # type: ignore[no-untyped-def]
            if batch.first_offset == 10:
                raise ValueError("operator bug")
            return super().process(batch, ack, resume)

    report = Pipeline(
        "boom", source, {"out": sink}, processor=Boom(sink), clock=clock, handle_signals=False
    ).run()
    assert report.exit_code == 1
    assert "operator bug" in report.reason
    assert handle.last_committed(0) == 10


def test_b23_revoked_lanes_report_zero_lag_and_pending(runtime_factory) -> None:
    clock = ManualClock()
    source, handle = memory_source({0: payloads("a", 20)}, batch_size=10, bounded=False)
    sink, _ = capture_sink("out", max_rows=10, clock=clock)
    runtime, _ = runtime_factory(source, {"out": sink}, CopyToSinkProcessor(sink), clock)
    runtime.start()
    run_steps(runtime, 3)
    registry = runtime._meter.registry
    labels = {
        "pipeline": runtime.name,
        "component": "source",
        "component_type": "source",
        "lane": "memory[0]",
    }
    runtime._lane_metrics[Lane("memory", 0)].lag.set(7)
    handle.rebalance(revoke=[0])
    run_steps(runtime, 2)
    assert registry.get_sample_value("spate_source_lag_records", labels) == 0
    assert registry.get_sample_value("spate_source_records_total", labels) == 20


def test_b23_runtime_metrics_cover_source_checkpoint_and_backpressure() -> None:
    clock = ManualClock()
    bp = BackpressureConfig(max_inflight_bytes=1000, high_ratio=0.5, low_ratio=0.2, min_pause=0)
    source, _ = memory_source({0: payloads("a", 40)}, batch_size=10)
    budget = Pipeline.new_budget(bp)  # created first: the sinks count against it
    sink, _ = capture_sink("out", max_rows=10, row_bytes=60, budget=budget, clock=clock)
    pipeline = Pipeline(
        "metrics",
        source,
        {"out": sink},
        processor=CopyToSinkProcessor(sink),
        backpressure=bp,
        budget=budget,
        clock=clock,
        handle_signals=False,
    )
    report = pipeline.run()
    assert report.exit_code == 0
    registry = pipeline.meter.registry
    base = {"pipeline": "metrics"}
    src = {**base, "component": "source", "component_type": "source", "lane": "memory[0]"}
    ckpt = {**base, "component": "checkpoint", "component_type": "checkpoint"}
    bpl = {**base, "component": "backpressure", "component_type": "flow"}
    assert registry.get_sample_value("spate_source_records_total", src) == 40
    assert registry.get_sample_value("spate_source_bytes_total", src) == sum(
        map(len, payloads("a", 40))
    )
    assert registry.get_sample_value("spate_checkpoint_commits_total", {**ckpt, "outcome": "ok"})
    assert (
        registry.get_sample_value("spate_checkpoint_pending_batches", {**ckpt, "lane": "memory[0]"})
        is not None
    )
    assert registry.get_sample_value("spate_backpressure_inflight_bytes", bpl) is not None
    assert registry.get_sample_value("spate_backpressure_paused", bpl) == 0


def test_a_retryable_poll_error_is_retried_and_a_fatal_one_fails_the_run() -> None:
    from spate.errors import ErrorClass, SourceError

    clock = ManualClock()
    source, handle = memory_source({0: payloads("a", 10)}, batch_size=5)
    sink, script = capture_sink("out", clock=clock)
    handle.fail_next_poll(SourceError("broker hiccup", ErrorClass.RETRYABLE))
    report = Pipeline(
        "retry",
        source,
        {"out": sink},
        processor=CopyToSinkProcessor(sink),
        clock=clock,
        handle_signals=False,
    ).run()
    assert report.exit_code == 0 and len(script.rows) == 10

    source, handle = memory_source({0: payloads("a", 10)}, batch_size=5, bounded=False)
    sink, _ = capture_sink("out", clock=clock)
    handle.fail_next_poll(SourceError("authentication failed", ErrorClass.FATAL))
    report = Pipeline(
        "fatal",
        source,
        {"out": sink},
        processor=CopyToSinkProcessor(sink),
        clock=clock,
        handle_signals=False,
    ).run()
    assert report.exit_code == 1 and "authentication failed" in report.reason


def test_b34_a_source_that_takes_back_drained_keeps_the_run_going(runtime_factory) -> None:
    clock = ManualClock()
    source, _handle = memory_source({0: payloads("a", 5)}, bounded=False)
    sink, _ = capture_sink("out", clock=clock)
    runtime, _ = runtime_factory(source, {"out": sink}, CopyToSinkProcessor(sink), clock)
    runtime.start()
    runtime.drained()
    assert runtime.should_stop()
    runtime.undrained()  # a rebalance handed the drained source a lane it has not read
    assert not runtime.should_stop()
    run_steps(runtime, 3)
    assert runtime.records_in == 5
    runtime.drained()
    assert not runtime.step()
    assert runtime.finish("source drained").exit_code == 0
