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


def test_unknown_schema_id_and_wrong_magic_byte_are_skipped_and_counted_b28(
    kit: Any, schema_registry: SchemaRegistryServer
) -> None:
    schema_id = schema_registry.register("users-value", USER)
    good = [kit.confluent(schema_id, kit.encode(USER, {"id": i})) for i in range(6)]
    unknown = kit.confluent(999, kit.encode(USER, {"id": 99}))
    wrong_magic = b"\x01" + good[0][1:]
    source, handle = memory_source({0: [*good[:3], unknown, wrong_magic, *good[3:]]}, batch_size=4)
    sink, script = capture_sink("out")
    meter = Meter("avro-unknown")
    deser = kit.build(
        {"mode": "confluent", "registry": {"url": schema_registry.url}, "fetch_wait": "5s"},
        clock=SystemClock(),
    )
    try:
        report = Pipeline(
            "avro-unknown",
            source,
            {"out": sink},
            deserializer=deser,
            meter=meter,
            handle_signals=False,
        ).run()
    finally:
        deser.close()
    assert report.exit_code == 0, report.reason
    assert script.rows == [{"id": i} for i in range(6)]
    assert handle.last_committed(0) == 8
    assert _count(meter, "spate_deser_records_total", outcome="skipped") == 2
    assert _count(meter, "spate_deser_dropped_total", reason="schema_unavailable") == 1
    assert _count(meter, "spate_deser_dropped_total", reason="malformed") == 1
