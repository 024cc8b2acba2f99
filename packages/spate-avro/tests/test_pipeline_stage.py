"""The Avro deserializer inside a real pipeline: outcomes counted by the stage (B21, B28).

The deserializer stage of spate-core applies ``on_error`` and counts
``spate_deser_records_total{outcome}``; these tests run a memory source through it (its
payload views are slices of one shared buffer) into a capture sink.
"""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest
from spate import ManualClock, SystemClock
from spate.config.models import CheckpointConfig
from spate.metrics._meter import Meter
from spate.pipeline import Pipeline
from spate.testing import capture_sink, memory_source

from tests.support.schema_registry import SchemaRegistryServer

USER = {"type": "record", "name": "U", "fields": [{"name": "id", "type": "long"}]}


def _count(meter: Meter, family: str, **labels: str) -> float:
    value = meter.registry.get_sample_value(
        family,
        {"pipeline": meter.pipeline, "component": "deserializer", "component_type": "deserializer"}
        | labels,
    )
    return value or 0.0


def _run(name: str, source: Any, sink: Any, deser: Any, **extra: Any) -> tuple[Any, Meter]:
    """Run ``source`` → ``deser`` → ``sink`` as pipeline ``name``; its report and meter."""
    meter = Meter(name)
    pipeline = Pipeline(
        name, source, {"out": sink}, deserializer=deser, meter=meter, handle_signals=False, **extra
    )
    return pipeline.run(), meter


def _confluent(url: str, **extra: Any) -> dict[str, Any]:
    """A confluent-mode section with fast retries, on the real clock."""
    registry = {"url": url, "retry_backoff": "50ms", **extra.pop("registry", {})}
    return {"mode": "confluent", "registry": registry, "fetch_wait": "20ms", **extra}


def _events(kit: Any, n: int) -> list[tuple[str, dict[str, Any]]]:
    out = []
    for i in range(n):
        if i % 2:
            out.append(("spate.datagen.PaymentCaptured", {"order_id": i, "amount_cents": i * 10}))
        else:
            out.append(
                ("spate.datagen.RefundIssued", {"order_id": i, "amount_cents": 1, "reason": "r"})
            )
    return out


def test_bad_avro_records_are_skipped_and_counted_b28(kit: Any) -> None:
    events = _events(kit, 30)
    good = [kit.encode(kit.union, e) for e in events]
    bad = [good[0][:-2], b"\x0a" + good[1][1:], good[2] + b"\x00"]  # truncated, branch 5, trailing
    payloads = good[:10] + bad[:1] + good[10:20] + bad[1:] + good[20:]
    source, handle = memory_source({0: payloads}, batch_size=7)
    clock = ManualClock()
    sink, script = capture_sink("out", clock=clock)
    meter = Meter("avro-skip")
    deser = kit.build({"mode": "raw", "schema": kit.inline(kit.union)})
    report = Pipeline(
        "avro-skip",
        source,
        {"out": sink},
        deserializer=deser,
        clock=clock,
        meter=meter,
        handle_signals=False,
    ).run()
    assert report.exit_code == 0
    assert script.rows == events
    assert [row.kind for row in script.rows[:2]] == ["RefundIssued", "PaymentCaptured"]
    assert handle.last_committed(0) == len(payloads)  # skipped records never stall (B3)
    deser_total = "spate_deser_records_total"
    assert _count(meter, deser_total, outcome="ok") == 30
    assert _count(meter, deser_total, outcome="skipped") == 3
    assert _count(meter, "spate_deser_dropped_total", reason="malformed") == 3


def test_bad_avro_record_under_fail_policy_fails_the_pipeline_b28(kit: Any) -> None:
    good = [kit.encode(kit.union, e) for e in _events(kit, 10)]
    payloads = [*good[:5], b"\x00", *good[5:]]
    source, handle = memory_source({0: payloads}, batch_size=5)
    clock = ManualClock()
    sink, _ = capture_sink("out", clock=clock)
    meter = Meter("avro-fail")
    deser = kit.build({"mode": "raw", "schema": kit.inline(kit.union), "on_error": "fail"})
    report = Pipeline(
        "avro-fail",
        source,
        {"out": sink},
        deserializer=deser,
        clock=clock,
        meter=meter,
        handle_signals=False,
    ).run()
    assert report.exit_code == 1
    assert "malformed Avro payload" in report.reason
    assert _count(meter, "spate_deser_records_total", outcome="failed") == 1
    committed = handle.last_committed(0)
    assert committed is None or committed <= 5  # never past the bad record (B1)


@pytest.mark.timeout(60)
def test_registry_outage_stalls_records_until_it_returns_never_drops_b21(
    kit: Any, schema_registry: SchemaRegistryServer
) -> None:
    schema_id = schema_registry.register("users-value", USER)
    payloads = [kit.confluent(schema_id, kit.encode(USER, {"id": i})) for i in range(40)]
    source, handle = memory_source({0: payloads[:20], 1: payloads[20:]}, batch_size=6)
    sink, script = capture_sink("out")
    meter = Meter("avro-outage")
    deser = kit.build(
        {
            "mode": "confluent",
            "registry": {"url": schema_registry.url, "retry_backoff": "50ms"},
            "fetch_wait": "20ms",
        },
        clock=SystemClock(),  # the fetch backoff runs on real time here
    )
    schema_registry.stop()  # down after start-up: the first fetch fails
    restarted = threading.Event()

    def restart_when_stalled() -> None:
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            if _count(meter, "spate_deser_records_total", outcome="not_ready") >= 3:
                schema_registry.start()
                restarted.set()
                return
            time.sleep(0.01)

    helper = threading.Thread(target=restart_when_stalled, daemon=True)
    helper.start()
    try:
        report = Pipeline(
            "avro-outage",
            source,
            {"out": sink},
            deserializer=deser,
            meter=meter,
            handle_signals=False,
        ).run()
    finally:
        helper.join(25)
        deser.close()
    assert restarted.is_set()
    assert report.exit_code == 0, report.reason
    assert sorted(row["id"] for row in script.rows) == list(range(40))  # type: ignore[index]
    assert handle.last_committed(0) == 20 and handle.last_committed(1) == 20
    assert _count(meter, "spate_deser_records_total", outcome="ok") == 40
    assert _count(meter, "spate_deser_records_total", outcome="skipped") == 0
    assert _count(meter, "spate_deser_records_total", outcome="not_ready") >= 3


class CommitWatch:
    """Samples a memory source's commits while the registry hides a schema id.

    Each sample reads the committed offsets first and keeps them only if the id is still
    hidden afterwards, so every kept sample was taken before the record could decode.
    """

    def __init__(self, handle: Any, registry: SchemaRegistryServer, schema_id: int) -> None:
        self.samples: list[dict[Any, int]] = []
        self._stop = threading.Event()

        def loop() -> None:
            while not self._stop.wait(0.005):
                committed = handle.committed
                if registry.hidden(schema_id):
                    self.samples.append(committed)

        self._thread = threading.Thread(target=loop, daemon=True)

    def __enter__(self) -> CommitWatch:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(10)


@pytest.mark.timeout(120)
def test_schema_id_a_lagging_registry_serves_late_delivers_every_record_b21(
    kit: Any, schema_registry: SchemaRegistryServer
) -> None:
    """B21, B1: the registry answers 404 for a just-registered id for its first seconds
    (a follower catching up). Every record arrives, the run exits 0, and no commit taken
    while the id was missing passes the first record that needs it."""
    old_id = schema_registry.register("users-value", USER)
    new_schema = {**USER, "fields": [*USER["fields"], {"name": "n", "type": "string"}]}
    new_id = schema_registry.register("users-value", new_schema)
    lanes: dict[int, list[bytes]] = {0: [], 1: []}
    first_new: dict[int, int] = {}
    for i in range(60):
        lane = lanes[i % 2]
        if i < 20:
            lane.append(kit.confluent(old_id, kit.encode(USER, {"id": i})))
        else:
            first_new.setdefault(i % 2, len(lane))
            lane.append(kit.confluent(new_id, kit.encode(new_schema, {"id": i, "n": "x"})))
    source, handle = memory_source(lanes, batch_size=4)
    sink, script = capture_sink("out")
    deser = kit.build(
        _confluent(schema_registry.url, registry={"retry_backoff_max": "200ms"}),
        clock=SystemClock(),
    )
    schema_registry.hide(new_id, seconds=2.0)
    with CommitWatch(handle, schema_registry, new_id) as watch:
        report, meter = _run(
            "avro-lagging", source, sink, deser, checkpoint=CheckpointConfig(interval=0.1)
        )
    assert report.exit_code == 0, report.reason
    assert sorted(row["id"] for row in script.rows) == list(range(60))  # type: ignore[index]
    assert handle.last_committed(0) == 30 and handle.last_committed(1) == 30
    assert watch.samples  # the id was missing for a while during the run
    for committed in watch.samples:
        for lane, offset in committed.items():
            assert offset <= first_new[lane.partition], (lane, committed)
    assert schema_registry.requests[f"GET /schemas/ids/{new_id}"] >= 2
    assert _count(meter, "spate_deser_records_total", outcome="ok") == 60
    assert _count(meter, "spate_deser_records_total", outcome="skipped") == 0
    assert _count(meter, "spate_deser_records_total", outcome="not_ready") >= 1


@pytest.mark.timeout(60)
def test_schema_id_unknown_past_the_timeout_fails_naming_id_lane_and_offset_b30(
    kit: Any, schema_registry: SchemaRegistryServer
) -> None:
    """B21, B28, B30: an id the registry never serves stalls its record (nothing committed
    past it) until ``unknown_schema_timeout``, then fails the run with one line naming the
    schema id, the topic and partition, and the offset; ``on_error: skip`` does not
    apply to it."""
    schema_id = schema_registry.register("users-value", USER)
    good = [kit.confluent(schema_id, kit.encode(USER, {"id": i})) for i in range(6)]
    unknown = kit.confluent(999, kit.encode(USER, {"id": 99}))
    source, handle = memory_source(
        {0: [*good[:3], unknown, *good[3:]]}, stream="orders", batch_size=2
    )
    sink, script = capture_sink("out")
    deser = kit.build(
        _confluent(schema_registry.url, unknown_schema_timeout="300ms"), clock=SystemClock()
    )
    report, meter = _run("avro-unknown-fail", source, sink, deser)
    assert report.exit_code == 1
    assert "\n" not in report.reason
    for part in ("schema id 999", "orders[0]", "offset 3", "unknown_schema_timeout"):
        assert part in report.reason, report.reason
    committed = handle.last_committed(0)
    assert committed is None or committed <= 3  # never past the missing record (B1)
    assert [row["id"] for row in script.rows] == [0, 1, 2]  # type: ignore[index]
    assert _count(meter, "spate_deser_records_total", outcome="skipped") == 0
    assert _count(meter, "spate_deser_records_total", outcome="failed") == 1
    assert _count(meter, "spate_deser_records_total", outcome="not_ready") >= 1


def test_unknown_schema_id_is_skipped_only_on_opt_in_counted_apart_b30(
    kit: Any, schema_registry: SchemaRegistryServer
) -> None:
    """B28, B30: with ``on_unknown_schema: skip`` a record whose id is still unknown after
    ``unknown_schema_timeout`` is dropped and counted under ``unknown_schema``, apart
    from malformed payloads."""
    schema_id = schema_registry.register("users-value", USER)
    good = [kit.confluent(schema_id, kit.encode(USER, {"id": i})) for i in range(6)]
    unknown = kit.confluent(999, kit.encode(USER, {"id": 99}))
    wrong_magic = b"\x01" + good[0][1:]
    source, handle = memory_source({0: [*good[:3], unknown, wrong_magic, *good[3:]]}, batch_size=4)
    sink, script = capture_sink("out")
    deser = kit.build(
        _confluent(schema_registry.url, unknown_schema_timeout="0s", on_unknown_schema="skip"),
        clock=SystemClock(),
    )
    report, meter = _run("avro-unknown-skip", source, sink, deser)
    assert report.exit_code == 0, report.reason
    assert script.rows == [{"id": i} for i in range(6)]
    assert handle.last_committed(0) == 8
    assert _count(meter, "spate_deser_records_total", outcome="skipped") == 2
    assert _count(meter, "spate_deser_dropped_total", reason="unknown_schema") == 1
    assert _count(meter, "spate_deser_dropped_total", reason="malformed") == 1
    assert _count(meter, "spate_deser_dropped_total", reason="schema_unavailable") == 0
