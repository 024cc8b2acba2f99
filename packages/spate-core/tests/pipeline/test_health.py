"""Readiness and liveness seen by the admin server (B22), and attached services."""

from __future__ import annotations

from spate.config.models import CheckpointConfig
from spate.pipeline import Pipeline, PipelineHealth
from spate.testing import CopyToSinkProcessor, ManualClock, capture_sink, delay, memory_source


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
