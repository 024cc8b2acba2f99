"""The ClickHouse sink under faults injected into the HTTP fronts (B7, B9, B11, B12).

A replica answering 503, a replica hanging past the timeout, a shard with both replicas
down, a connection dropped after the insert landed, and a fatal server error under a
whole pipeline. Fault durations scale with ``SPATE_TEST_SCALE`` (60 s of 503s, 30 s / 20 s
for the others at scale 1, at least 3 s / 2 s), the behaviour shown is the same.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from spate import Pipeline
from spate.config.models import BackpressureConfig, CheckpointConfig
from spate.metrics import Meter
from spate.records import Lane
from spate.testing import memory_source

from tests.clickhouse.sinkkit import BuiltSink, Driver, GaugeWatcher, build_sink, ids_on
from tests.support.chfront_fixtures import ChFront
from tests.support.scale import current_scale, scaled

pytestmark = [pytest.mark.integration, pytest.mark.e2e]

FAST_RETRY = {"initial": "50ms", "max": "500ms", "multiplier": 2.0, "jitter": 0.2}
BREAKER = {"failure_threshold": 1, "open_for": "500ms"}


@pytest.fixture(scope="module")
def fronts(chfront_module: Callable[..., ChFront]) -> Iterator[list[ChFront]]:
    """Four replicas: shard 0 is fronts 0 and 1, shard 1 is fronts 2 and 3."""
    started = [chfront_module() for _ in range(4)]
    yield started


@pytest.fixture(autouse=True)
def healed(fronts: list[ChFront]) -> Iterator[None]:
    yield
    for front in fronts:
        front.recover()


def _table(fronts: list[ChFront], name: str, settings: str = "") -> list[Any]:
    extra = f" SETTINGS {settings}" if settings else ""
    clients = [f.client() for f in fronts]
    for client in clients:
        client.command(
            f"CREATE TABLE {name} (id UInt64, key String, at DateTime) "
            f"ENGINE = MergeTree ORDER BY id{extra}"
        )
    return clients


def _sink(fronts: list[ChFront], table: str, **extra: Any) -> BuiltSink:
    body: dict[str, Any] = {
        "table": table,
        "columns": ["id", "key", "at"],
        "shards": [
            {"replicas": [fronts[0].url, fronts[1].url]},
            {"replicas": [fronts[2].url, fronts[3].url]},
        ],
        "batch": {"max_rows": 1_000, "linger": "100ms"},
        "retry": FAST_RETRY,
        "breaker": BREAKER,
        "timeouts": {"connect": "1s", "send_receive": "5s"},
    }
    body.update(extra)
    return build_sink(body)


def _rows(count: int) -> tuple[list[tuple[int, str, int]], list[bytes]]:
    keys = [f"k{i}".encode() for i in range(count)]
    return [(i, keys[i].decode(), 1_700_000_000 + i) for i in range(count)], keys


def _assert_all_on_own_shard(built: BuiltSink, clients: list[Any], table: str, count: int) -> None:
    keys = [f"k{i}".encode() for i in range(count)]
    want = [set(), set()]  # type: list[set[int]]
    for i, key in enumerate(keys):
        want[built.sink.shard_of(key, Lane("test", 0))].add(i)
    got = [set(ids_on(clients[0:2], table)), set(ids_on(clients[2:4], table))]
    assert got[0] == want[0], f"missing on shard 0: {len(want[0] - got[0])}"
    assert got[1] == want[1], f"missing on shard 1: {len(want[1] - got[1])}"


def _paced(driver: Driver, rows: list[Any], keys: list[bytes], seconds: float) -> None:
    """Offer the rows in steps spread over ``seconds`` so writes go on for that long."""
    steps = 20
    size = max(1, len(rows) // steps)
    for start in range(0, len(rows), size):
        driver.offer_all(rows[start : start + size], keys[start : start + size])
        time.sleep(seconds / steps)


def test_b11_a_replica_answering_503_fails_over_within_its_shard_and_loses_nothing(
    fronts: list[ChFront],
) -> None:
    """B11, B12: 60 s of 503s at scale 1 (6 s at 0.1)."""
    outage = max(3.0, 60.0 * current_scale())
    clients = _table(fronts, "f503")
    built = _sink(fronts, "f503")
    built.sink.start()
    count = scaled(200_000, minimum=20_000)
    rows, keys = _rows(count)
    labels = {"shard": "0", "replica": fronts[0].url}
    breaker = GaugeWatcher(built, "spate_sink_breaker_open", **labels)
    fronts[0].inject("5xx", seconds=outage)
    driver = Driver(built.sink)
    _paced(driver, rows, keys, outage)
    assert driver.finish()
    assert breaker.stop() == 1.0  # the breaker of the failing replica opened
    assert driver.all_delivered
    built.sink.close()
    _assert_all_on_own_shard(built, clients, "f503", count)
    assert built.metric("spate_sink_retries_total", shard="0") > 0
    assert built.metric("spate_sink_errors_total", shard="0", error_class="retryable") > 0
    assert built.metric("spate_sink_errors_total", shard="1", error_class="retryable") == 0
    assert fronts[0].status()["fault"]["mode"] in ("none", "5xx")


def test_b12_a_replica_hanging_past_the_timeout_is_retried_on_its_sibling(
    fronts: list[ChFront],
) -> None:
    outage = max(3.0, 30.0 * current_scale())
    clients = _table(fronts, "fslow")
    built = _sink(fronts, "fslow", timeouts={"connect": "1s", "send_receive": "1s"})
    built.sink.start()
    count = scaled(100_000, minimum=10_000)
    rows, keys = _rows(count)
    breaker = GaugeWatcher(built, "spate_sink_breaker_open", shard="1", replica=fronts[2].url)
    fronts[2].inject("slow", seconds=outage, delay=outage + 2, only="insert")
    driver = Driver(built.sink)
    _paced(driver, rows, keys, outage)
    assert driver.finish()
    assert breaker.stop() == 1.0  # the hanging replica's breaker opened
    assert driver.all_delivered
    built.sink.close()
    fronts[2].recover()
    _assert_all_on_own_shard(built, clients, "fslow", count)
    assert built.metric("spate_sink_errors_total", shard="1", error_class="retryable") > 0
    assert (
        built.metric("spate_sink_write_duration_seconds_count", shard="1", outcome="retryable") > 0
    )


def test_b7_b11_a_shard_with_both_replicas_down_holds_its_rows_and_backpressures(
    fronts: list[ChFront],
) -> None:
    outage = max(2.0, 20.0 * current_scale())
    clients = _table(fronts, "fdown")
    built = _sink(fronts, "fdown")
    built.sink.start()
    count = scaled(100_000, minimum=10_000)
    rows, keys = _rows(count)
    watchers = [
        GaugeWatcher(built, "spate_sink_breaker_open", shard="1", replica=fronts[i].url)
        for i in (2, 3)
    ]
    fronts[2].inject("refuse")
    fronts[3].inject("refuse")
    driver = Driver(built.sink)
    failure: list[BaseException] = []

    def run() -> None:
        try:
            driver.offer_all(rows, keys, timeout=outage + 120)
        except BaseException as exc:  # surfaced below
            failure.append(exc)

    feeder = threading.Thread(target=run, daemon=True)
    feeder.start()
    time.sleep(outage)
    # While the shard is down its batches are held (nothing is rerouted to shard 0) and
    # the sink refuses rows, which is what pauses the source.
    assert driver.rejections > 0
    assert feeder.is_alive()
    assert not driver.statuses or all(s.value == "delivered" for s in driver.statuses)
    on_shard0 = set(ids_on(clients[0:2], "fdown"))
    assert all(built.sink.shard_of(f"k{i}".encode(), Lane("test", 0)) == 0 for i in on_shard0)
    assert built.metric("spate_sink_records_total", shard="1") == 0
    fronts[2].recover()
    fronts[3].recover()
    feeder.join(outage + 180)
    assert not failure, failure
    assert driver.finish()
    assert [w.stop() for w in watchers] == [1.0, 1.0]
    assert driver.all_delivered
    built.sink.close()
    _assert_all_on_own_shard(built, clients, "fdown", count)
    assert built.metric("spate_sink_records_total", shard="1") > 0


@pytest.mark.parametrize(
    ("settings", "copies"), [("non_replicated_deduplication_window = 100", 1), ("", 3)]
)
def test_b9_a_retried_batch_to_the_same_replica_leaves_one_copy_with_dedup(
    fronts: list[ChFront], settings: str, copies: int
) -> None:
    table = f"fdedup{copies}"
    (client,) = _table([fronts[1]], table, settings)
    built = build_sink(
        {
            "table": table,
            "columns": ["id", "key", "at"],
            "shards": [{"replicas": [fronts[1].url]}],
            "batch": {"max_rows": 5_000, "linger": "5s"},
            "retry": FAST_RETRY,
        }
    )
    built.sink.start()
    # The insert runs, then the connection is reset: the client never hears it landed.
    # clickhouse-connect replays a remotely closed insert once itself (same body, same
    # settings, so the same token); the second reset reaches the pool, which retries.
    fronts[1].inject("drop", count=2, when="after", only="insert")
    rows, keys = _rows(5_000)
    driver = Driver(built.sink, batch_rows=5_000)
    driver.offer_all(rows, keys)
    assert driver.finish()
    assert driver.all_delivered
    built.sink.close()
    assert built.metric("spate_sink_retries_total", shard="0") == 1
    # with a dedup window the retry (same rows, same token) is dropped by the server;
    # without one those are the at-least-once duplicates that ReplacingMergeTree folds
    assert client.query(f"SELECT count() FROM {table}").result_rows[0][0] == 5_000 * copies
    assert client.query(f"SELECT uniqExact(id) FROM {table}").result_rows[0][0] == 5_000


def _pipeline(front: ChFront, table: str, per_partition: int) -> tuple[Pipeline, Any]:
    data = {p: [f"{p * 1_000_000 + i}".encode() for i in range(per_partition)] for p in range(2)}
    source, handle = memory_source(data, stream="orders", batch_size=250)
    name = f"fatal-{table}"
    budget = Pipeline.new_budget(BackpressureConfig())
    meter = Meter(name)
    built = build_sink(
        {
            "table": table,
            "columns": ["id", "key", "at"],
            "shards": [{"replicas": [front.url]}],
            "batch": {"max_rows": 500, "linger": "50ms"},
            "retry": FAST_RETRY,
        },
        pipeline=name,
        meter=meter,
        budget=budget,
    )

    def chains(ctx: Any) -> Any:
        return ctx.chain().map(lambda v: (int(bytes(v)), "k", 1_700_000_000)).sink("events")

    pipeline = Pipeline(
        name,
        source,
        {"events": built.sink},
        checkpoint=CheckpointConfig(interval=0.1, drain_timeout=5.0, stalled_fail_after=1.0),
        budget=budget,
        meter=meter,
        handle_signals=False,
    ).chains(chains)
    return pipeline, handle


def test_b1_b12_a_pipeline_through_the_sink_commits_what_the_fronts_hold(
    fronts: list[ChFront],
) -> None:
    (client,) = _table([fronts[3]], "fpipe")
    per_partition = scaled(20_000, minimum=2_000)
    pipeline, handle = _pipeline(fronts[3], "fpipe", per_partition)
    report = pipeline.run()
    assert report.exit_code == 0, report
    assert handle.last_committed(0) == per_partition
    assert handle.last_committed(1) == per_partition
    assert client.query("SELECT uniqExact(id) FROM fpipe").result_rows[0][0] == 2 * per_partition


def test_b12_a_fatal_server_error_fails_the_pipeline_without_committing_past_the_batch(
    fronts: list[ChFront],
) -> None:
    (client,) = _table([fronts[2]], "ffatal")
    pipeline, handle = _pipeline(fronts[2], "ffatal", scaled(5_000, minimum=1_000))
    # every INSERT answers TYPE_MISMATCH (code 53): retrying cannot help
    fronts[2].inject("5xx", status=500, code=53, only="insert")
    report = pipeline.run()
    assert report.exit_code == 1
    # nothing past the start (position 0) was ever committed on either lane
    assert (handle.last_committed(0) or 0) == 0 and (handle.last_committed(1) or 0) == 0
    assert report.records_failed > 0
    fronts[2].recover()
    assert client.query("SELECT count() FROM ffatal").result_rows[0][0] == 0


def test_b1_b7_a_pipeline_pauses_while_its_shard_is_down_and_commits_only_what_is_written(
    fronts: list[ChFront],
) -> None:
    outage = max(2.0, 20.0 * current_scale())
    clients = _table(fronts[0:2], "fbp")
    per_partition = scaled(50_000, minimum=5_000)
    source, handle = memory_source(partitions=2, stream="orders", batch_size=250, bounded=False)
    name = "pausing-pipeline"
    budget = Pipeline.new_budget(BackpressureConfig())
    meter = Meter(name)
    built = build_sink(
        {
            "table": "fbp",
            "columns": ["id", "key", "at"],
            "shards": [{"replicas": [fronts[0].url, fronts[1].url]}],
            "batch": {"max_rows": 500, "linger": "50ms"},
            "inflight": {"max_per_shard": 1},
            "retry": FAST_RETRY,
            "breaker": BREAKER,
            "timeouts": {"connect": "1s", "send_receive": "5s"},
        },
        pipeline=name,
        meter=meter,
        budget=budget,
    )
    pipeline = Pipeline(
        name,
        source,
        {"events": built.sink},
        checkpoint=CheckpointConfig(interval=0.1, drain_timeout=60.0, stalled_fail_after=300.0),
        budget=budget,
        meter=meter,
        handle_signals=False,
    ).chains(
        lambda ctx: ctx.chain().map(lambda v: (int(bytes(v)), "k", 1_700_000_000)).sink("events")
    )
    sink_full = {
        "pipeline": name,
        "component": "backpressure",
        "component_type": "flow",
        "cause": "sink_full",
    }
    reports: list[Any] = []
    runner = threading.Thread(target=lambda: reports.append(pipeline.run()), daemon=True)
    runner.start()
    deadline = time.monotonic() + 60
    while not built.sink.ready():  # started: the replicas were probed
        assert runner.is_alive() and time.monotonic() < deadline, reports
        time.sleep(0.02)
    fronts[0].inject("refuse")
    fronts[1].inject("refuse")
    for p in range(2):
        handle.append(p, [f"{p * 1_000_000 + i}".encode() for i in range(per_partition)])

    def check_commits_are_written() -> None:
        # committed offsets first, then the destination: every record below them is there
        committed = [handle.last_committed(p) or 0 for p in range(2)]
        for p, upto in enumerate(committed):
            low = p * 1_000_000
            held: set[int] = set()
            for client in clients:
                sql = f"SELECT id FROM fbp WHERE id >= {low} AND id < {low + upto}"
                held.update(int(r[0]) for r in client.query(sql).result_rows)
            assert len(held) == upto, f"partition {p}: committed {upto}, written {len(held)}"

    paused_lanes: set[int] = set()
    deadline = time.monotonic() + outage
    while time.monotonic() < deadline:
        paused_lanes.update(lane.partition for lane in handle.paused)
        assert (handle.last_committed(0) or 0) == 0 and (handle.last_committed(1) or 0) == 0
        time.sleep(0.05)
    # the sink refused rows, so the pipeline paused its source (and kept polling)
    assert paused_lanes == {0, 1}
    pauses = meter.registry.get_sample_value("spate_backpressure_pause_events_total", sink_full)
    assert (pauses or 0) >= 1
    assert runner.is_alive()
    fronts[0].recover()
    fronts[1].recover()
    handle.end_input()
    while runner.is_alive():
        check_commits_are_written()
        runner.join(0.5)
    (report,) = reports
    assert report.exit_code == 0, report
    assert handle.last_committed(0) == per_partition == handle.last_committed(1)
    check_commits_are_written()
