"""Property test of the whole runtime loop (B1, B2, B15): under random sink outcomes,
batch sizes, refusals and rebalances, a committed offset never passes a record the sink
does not hold, and a run that completes has committed everything it took."""

from __future__ import annotations

import threading

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from spate.config.models import BackpressureConfig, CheckpointConfig
from spate.flow import InflightBudget
from spate.metrics import Meter
from spate.pipeline import PipelineRuntime, ShutdownHandle
from spate.testing import CopyToSinkProcessor, ManualClock, capture_sink, delay, memory_source

outcomes = st.one_of(
    st.sampled_from(["ok", "retryable", "fatal"]),
    st.integers(1, 20).map(lambda s: delay(float(s))),
)

actions = st.lists(
    st.one_of(
        st.tuples(st.just("step"), st.integers(1, 30)),
        st.tuples(st.just("advance"), st.integers(1, 30)),
        st.tuples(st.just("rebalance"), st.sampled_from([0, 1])),
    ),
    max_size=25,
)


@settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
@given(
    records=st.integers(1, 60),
    batch_size=st.integers(1, 12),
    max_rows=st.integers(1, 15),
    capacity=st.one_of(st.none(), st.integers(1, 20)),
    script=st.lists(outcomes, max_size=12),
    plan=actions,
)
def test_b1_b15_committed_offsets_never_pass_what_the_sink_holds(
    records: int,
    batch_size: int,
    max_rows: int,
    capacity: int | None,
    script: list[object],
    plan: list[tuple[str, int]],
) -> None:
    clock = ManualClock()
    data = {p: [f"{p}:{o}".encode() for o in range(records)] for p in range(2)}
    source, handle = memory_source(data, batch_size=batch_size, bounded=False)
    sink, captured = capture_sink("out", max_rows=max_rows, capacity=capacity, clock=clock)
    for outcome in script:
        captured.then(outcome)  # type: ignore[arg-type]
    wake = threading.Event()
    shutdown = ShutdownHandle(wake)
    runtime = PipelineRuntime(
        name="prop",
        source=source,
        sinks={"out": sink},
        processor=CopyToSinkProcessor(sink),
        checkpoint=CheckpointConfig(
            interval=1.0, drain_timeout=5.0, stalled_fail_after=50.0, max_pending_batches=4
        ),
        backpressure=BackpressureConfig(),
        clock=clock,
        meter=Meter("prop"),
        budget=InflightBudget(1 << 20),
        shutdown=shutdown,
        wake=wake,
    )

    def check() -> None:
        written = set(captured.rows)
        for offsets, _sync in handle.commits:
            for lane, upto in offsets.items():
                for o in range(upto):
                    assert f"{lane.partition}:{o}".encode() in written, (lane, upto, o)

    runtime.start()
    running = True
    for action, arg in plan:
        if not running:
            break
        if action == "step":
            for _ in range(arg):
                running = runtime.step()
                check()
                if not running:
                    break
        elif action == "advance":
            clock.advance(arg)
        else:
            handle.rebalance(revoke=[arg], assign=[arg])
    if running:
        for _ in range(3000):  # let it settle: all outcomes after the script are ok
            running = runtime.step()
            check()
            if not running or (
                not runtime.tracker.total_pending()
                and all(handle.last_committed(p) == records for p in range(2))
            ):
                break
    shutdown.request("test over")
    report = runtime.finish("test over")
    check()
    if report.exit_code == 0:
        # Completed: everything taken from the source was committed (and, by check(),
        # is in the sink).
        for lane, taken in handle.position.items():
            assert handle.committed.get(lane, 0) == taken
