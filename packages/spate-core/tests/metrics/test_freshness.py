"""End-to-end freshness on a manual clock: event time → written per sink and table
(B220), written → committed (B221), ``readiness.max_freshness`` on ``/readyz`` (B222)
and the status line's p50/p99 (B223). No wall clock: every age is set by the test.
"""

from __future__ import annotations

import itertools
import logging

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from spate import Lane, ManualClock
from spate.checkpoint import Committer, PartitionTracker
from spate.config import ReadinessConfig, parse_config
from spate.errors import ConfigError
from spate.metrics import FRESHNESS_BUCKETS, Meter, names
from spate.metrics._freshness import quantile
from spate.pipeline._status import StatusLine
from spate.records import PayloadBatch
from spate.sink import BatchConfig, PoolConfig
from spate.testing import scripted_pool

LANE = Lane("orders", 0)
EVENT_TO_WRITTEN = names.SINK_EVENT_TO_WRITTEN.name
WRITTEN_TO_COMMITTED = names.CKPT_WRITTEN_TO_COMMITTED.name


class Source:
    """Takes commits (the committer's source)."""

    def __init__(self) -> None:
        self.commits: list[dict[Lane, int]] = []

    def commit(self, offsets: dict[Lane, int], *, sync: bool) -> None:
        self.commits.append(dict(offsets))


def batch(first: int, count: int, stamp_ms: list[int]) -> PayloadBatch:
    return PayloadBatch(
        lane=LANE,
        offsets=list(range(first, first + count)),
        payloads=[memoryview(b"x")] * count,
        keys=[None] * count,
        timestamps=stamp_ms,
        next_offset=first + count,
    )


def sample(meter: Meter, name: str, **labels: str) -> float:
    value = meter.registry.get_sample_value(name, {"pipeline": meter.pipeline, **labels})
    return 0.0 if value is None else value


def test_b220_b221_rows_are_counted_at_their_age_when_written_and_when_committed() -> None:
    clock = ManualClock()
    meter = Meter("fresh", CollectorRegistry())
    tracker = PartitionTracker(clock)
    pool, ends = scripted_pool(
        "events", meter=meter, clock=clock, config=PoolConfig(batch=BatchConfig(max_rows=1000))
    )
    pool.start()
    now_ms = int(clock.time() * 1000)
    # The oldest record of the source batch is 30 s old when it is polled.
    ack = tracker.register(batch(0, 10, [now_ms - 30_000] + [now_ms - 1_000] * 9))
    assert ack.event_time == pytest.approx(clock.time() - 30)
    for i in range(10):
        pool.offer(i, None, LANE, ack)
    ack.release()
    clock.advance(5)  # the insert completes 5 s later: the rows are 35 s old
    pool.tick()
    assert len(ends.written) == 1
    labels = {"component": "events", "component_type": "scripted", "table": "events"}
    assert sample(meter, f"{EVENT_TO_WRITTEN}_count", **labels) == 10
    assert sample(meter, f"{EVENT_TO_WRITTEN}_sum", **labels) == pytest.approx(350)
    # 35 s falls in the bucket (32.0, 45.25]: nothing at or below 32 s.
    assert sample(meter, f"{EVENT_TO_WRITTEN}_bucket", le="32.0", **labels) == 0
    assert sample(meter, f"{EVENT_TO_WRITTEN}_bucket", le="+Inf", **labels) == 10

    committer = Committer(
        tracker=tracker, source=Source(), sinks={"events": pool}, clock=clock, interval=1.0,
        meter=meter,
    )  # fmt: skip
    committed = labels | {"component_type": "sink"}
    clock.advance(2)  # committed 2 s after the write
    assert committer.commit_now(sync=False)
    assert (
        sample(meter, f"{WRITTEN_TO_COMMITTED}_count", **labels | {"component_type": "sink"}) == 10
    )
    assert sample(meter, f"{WRITTEN_TO_COMMITTED}_sum", **committed) == pytest.approx(20)
    # Nothing passed since: a second commit adds nothing.
    committer.commit_now(sync=True)
    assert (
        sample(meter, f"{WRITTEN_TO_COMMITTED}_count", **labels | {"component_type": "sink"}) == 10
    )
    text = generate_latest(meter.registry).decode()
    assert f"# TYPE {EVENT_TO_WRITTEN} histogram" in text


def test_b220_records_without_timestamps_are_not_counted() -> None:
    clock = ManualClock()
    meter = Meter("fresh0", CollectorRegistry())
    tracker = PartitionTracker(clock)
    pool, _ = scripted_pool("events", meter=meter, clock=clock)
    pool.start()
    ack = tracker.register(batch(0, 3, [0, 0, 0]))
    assert ack.event_time is None
    for i in range(3):
        pool.offer(i, None, LANE, ack)
    ack.release()
    pool.tick()
    labels = {"component": "events", "component_type": "scripted", "table": "events"}
    assert sample(meter, f"{EVENT_TO_WRITTEN}_count", **labels) == 0


def test_b220_quantiles_follow_prometheus_histogram_quantile() -> None:
    counts = [0.0] * (len(FRESHNESS_BUCKETS) + 1)
    index = FRESHNESS_BUCKETS.index(1.28)  # (0.905097, 1.28]
    counts[index] = 100
    p50 = quantile(FRESHNESS_BUCKETS, counts, 0.5)
    assert p50 is not None
    assert FRESHNESS_BUCKETS[index - 1] < p50 < 1.28
    assert quantile(FRESHNESS_BUCKETS, [0.0] * len(counts), 0.5) is None
    # Ratios of √2 between bounds: a quantile is read within about 20 %.
    for low, high in itertools.pairwise(FRESHNESS_BUCKETS):
        assert high / low == pytest.approx(2**0.5, rel=1e-3)


def test_b222_readyz_fails_while_recent_p99_freshness_exceeds_the_bound() -> None:
    from spate.pipeline._runtime import PipelineRuntime

    clock = ManualClock()
    meter = Meter("ready", CollectorRegistry())
    series = meter.freshness.series(
        EVENT_TO_WRITTEN, component="events", component_type="clickhouse", table="db.t"
    )
    runtime = PipelineRuntime.__new__(PipelineRuntime)
    runtime._meter = meter
    runtime._clock = clock
    runtime._readiness = ReadinessConfig(max_freshness=10.0, freshness_window=60.0)
    assert runtime._fresh_enough() == (True, "ready")
    series.observe(2.0, 1000, clock.time())
    assert runtime._fresh_enough()[0]
    series.observe(40.0, 50, clock.time())  # 5 % of the rows: p99 is above 10 s
    ready, why = runtime._fresh_enough()
    assert not ready
    assert "events/db.t" in why and "readiness.max_freshness" in why
    clock.advance(120)  # the window moves past them
    series.observe(1.0, 10, clock.time())
    assert runtime._fresh_enough() == (True, "ready")


def test_b222_max_freshness_is_validated_with_its_dotted_path() -> None:
    base = "source: {memory: {}}\nsink: {capture: {}}\n"
    config = parse_config(base + "readiness: {max_freshness: 30s}\n")
    assert config.readiness.max_freshness == 30.0
    with pytest.raises(ConfigError, match=r"readiness\.max_freshness"):
        parse_config(base + "readiness: {max_freshness: 0s}\n")
    with pytest.raises(ConfigError, match=r"readiness\.freshness_window"):
        parse_config(base + "readiness: {freshness_window: 1h}\n")


def test_b223_status_line_shows_p50_and_p99_freshness(caplog: pytest.LogCaptureFixture) -> None:
    clock = ManualClock()
    meter = Meter("status", CollectorRegistry())
    series = meter.freshness.series(
        EVENT_TO_WRITTEN, component="events", component_type="clickhouse", table="db.t"
    )
    status = StatusLine(
        "status", interval=30.0, meter=meter, now=clock.monotonic(), wall=clock.time
    )
    series.observe(0.3, 980, clock.time())
    series.observe(20.0, 20, clock.time())
    clock.advance(30)
    with caplog.at_level(logging.INFO, logger="spate.pipeline.status"):
        status.maybe_report(clock.monotonic(), records_in=1000, records_out=1000, paused=0, lanes=1)
    line = caplog.records[-1].getMessage()
    assert "freshness p50 " in line and "ms p99 " in line, line
    p99 = float(line.rsplit("p99 ", 1)[1].removesuffix("s"))
    assert 16 < p99 <= 22.7, line  # read within the bucket (16, 22.6]
