"""Readiness and liveness seen by the admin server (B22), and attached services."""

from __future__ import annotations

from spate.config.models import CheckpointConfig
from spate.pipeline import Pipeline, PipelineHealth
from spate.records import Lane
from spate.testing import (
    CopyToSinkProcessor,
    ManualClock,
    MemorySource,
    capture_sink,
    delay,
    memory_source,
)


def test_b22_readiness_needs_assigned_lanes_and_ready_sinks(runtime_factory) -> None:
    clock = ManualClock()
    source, _handle = memory_source({0: [b"x"] * 5}, batch_size=5, bounded=False)
    sink, _ = capture_sink("out", clock=clock)
    runtime, _ = runtime_factory(source, {"out": sink}, CopyToSinkProcessor(sink), clock)
    assert runtime.readiness() == (False, "pipeline starting")
    runtime.start()
    assert runtime.readiness() == (True, "ready")
    sink.close()
    ready, why = runtime.readiness()
    assert not ready and "out" in why


def test_b22_liveness_turns_false_when_a_watermark_is_stuck_while_data_flows(
    runtime_factory,
) -> None:
    clock = ManualClock()
    source, _handle = memory_source({0: [b"x"] * 20}, batch_size=5, bounded=False)
    sink, script = capture_sink("out", max_rows=5, clock=clock)
    script.then(delay(100))
    checkpoint = CheckpointConfig(interval=1.0, stalled_fail_after=1e6)
    runtime, _ = runtime_factory(
        source, {"out": sink}, CopyToSinkProcessor(sink), clock, checkpoint=checkpoint
    )
    runtime.start()
    for _ in range(10):
        runtime.step()
    assert runtime.liveness(30.0) == (True, "alive")
    for _ in range(400):  # 40 s of manual time with the first write still in progress
        runtime.step()
    alive, why = runtime.liveness(30.0)
    assert not alive and ("resolved" in why or "watermark" in why)
    clock.advance(100)
    for _ in range(50):
        runtime.step()
    assert runtime.liveness(30.0) == (True, "alive")


def test_b22_liveness_turns_false_when_the_pipeline_thread_stops_turning(runtime_factory) -> None:
    clock = ManualClock()
    source, _ = memory_source({0: [b"x"]}, bounded=False)
    sink, _ = capture_sink("out", clock=clock)
    runtime, _ = runtime_factory(source, {"out": sink}, CopyToSinkProcessor(sink), clock)
    runtime.start()
    runtime.step()
    clock.advance(31)  # nobody called step(): the loop is wedged
    alive, why = runtime.liveness(30.0)
    assert not alive and "pipeline thread" in why


def test_services_start_with_the_run_and_see_its_health() -> None:
    clock = ManualClock()
    source, _ = memory_source({0: [b"x"] * 3})
    sink, _ = capture_sink("out", clock=clock)
    events: list[str] = []
    seen: list[PipelineHealth] = []

    def start(health: PipelineHealth) -> None:
        events.append("start")
        seen.append(health)
        assert health.readiness()[0] is False  # nothing started yet

    pipeline = Pipeline(
        "svc",
        source,
        {"out": sink},
        processor=CopyToSinkProcessor(sink),
        clock=clock,
        handle_signals=False,
    ).add_service(start, lambda: events.append("stop"))
    report = pipeline.run()
    assert report.exit_code == 0
    assert events == ["start", "stop"]
    assert seen[0] is pipeline.health
    assert pipeline.health.readiness() == (False, "pipeline finished")


def test_b29_a_sink_that_cannot_start_fails_run_before_anything_is_consumed(tmp_path) -> None:
    from spate.errors import SinkError
    from spate.testing import FileSink

    source, handle = memory_source({0: [b"x"] * 3})
    sink = FileSink(tmp_path / "missing-dir" / "out.jsonl", "out")
    pipeline = Pipeline(
        "b29", source, {"out": sink}, processor=CopyToSinkProcessor(sink), handle_signals=False
    )
    try:
        pipeline.run()
    except SinkError as exc:
        assert "missing-dir" in str(exc)
    else:
        raise AssertionError("expected a SinkError")
    assert handle.polls == 0 and handle.commits == []


class _LaggingSource(MemorySource):
    """A memory source that reports records waiting on lane 1 it never hands out."""

    def __init__(self) -> None:
        super().__init__("memory", 2, bounded=False, batch_size=5)
        self.lag = 7

    def fetch_lag(self) -> dict[Lane, int]:
        return {Lane("memory", 1): self.lag}


def _silent_lane_runtime(runtime_factory, *, steps: int, lane_stall_after: float | None = None):
    """A runtime over a source whose lane 1 is behind and paused behind spate's back,
    after ``steps`` loop turns (0.1 s of manual time each)."""
    clock = ManualClock()
    source = _LaggingSource()
    source.pause([Lane("memory", 1)])  # the runtime never paused it
    sink, _ = capture_sink("out", clock=clock)
    runtime, _ = runtime_factory(source, {"out": sink}, CopyToSinkProcessor(sink), clock)
    runtime._lane_stall_after = lane_stall_after
    runtime.start()
    for _ in range(steps):
        runtime.step()
    return runtime, source


def test_b32_liveness_names_an_owned_lane_that_is_behind_and_silent_while_not_paused(
    runtime_factory,
) -> None:
    runtime, source = _silent_lane_runtime(runtime_factory, steps=200)  # 20 s
    assert runtime.liveness(30.0) == (True, "alive")
    for _ in range(200):
        runtime.step()
    alive, why = runtime.liveness(30.0)
    assert not alive and "memory[1]" in why and "7 record(s) behind" in why
    source.lag = 0  # nothing left to fetch: a quiet lane is fine
    assert runtime.liveness(30.0) == (True, "alive")


def test_b32_a_lane_spate_paused_is_not_silent(runtime_factory) -> None:
    runtime, _ = _silent_lane_runtime(runtime_factory, steps=400)
    assert not runtime.liveness(30.0)[0]
    runtime._paused.add(Lane("memory", 1))  # as backpressure does: spate's own pause
    assert runtime.liveness(30.0) == (True, "alive")


def test_b32_lane_stall_after_overrides_stall_after(runtime_factory) -> None:
    runtime, _ = _silent_lane_runtime(runtime_factory, steps=100, lane_stall_after=5.0)  # 10 s
    alive, why = runtime.liveness(30.0)
    assert not alive and "memory[1]" in why
