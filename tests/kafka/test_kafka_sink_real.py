"""The Kafka sink on the real broker: every record lands, and a broker outage mid-run is
ridden out by retries while the source is backpressured (B7, B12)."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest
from spate import Pipeline, SystemClock, load_config
from spate.config import decode
from spate.config.models import BackpressureConfig, CheckpointConfig
from spate.metrics import Meter
from spate.pipeline import ExitReport
from spate.plugins import BuildContext
from spate.testing import SequenceSource
from spate_kafka import KafkaSinkConfig, KafkaSinkFactory

from tests.kafka._pipeline import pipeline_document, write_document
from tests.support.scale import scaled
from tests.support.services import (
    consume,
    create_topic,
    start_kafka,
    stop_kafka,
    unique_name,
)

pytestmark = [pytest.mark.integration, pytest.mark.e2e]

PARTITIONS = 4


def metric(pipeline: Pipeline, name: str) -> float:
    total = 0.0
    for family in pipeline.meter.registry.collect():
        for sample in family.samples:
            if sample.name == name:
                total += sample.value
    return total


def build(tmp_path: Path, bootstrap: str, topic: str, per_partition: int) -> Pipeline:
    config = tmp_path / "sink.json"
    source = {
        "memory": {
            "stream": "in",
            "partitions": PARTITIONS,
            "records": per_partition,
            "batch_size": 500,
        }
    }
    sink = {
        "kafka": {
            "brokers": bootstrap,
            "topic": topic,
            "delivery_timeout": "5m",
            "batch": {"max_rows": 2000, "linger": "100ms"},
            "retry": {"initial": "200ms", "max": "2s"},
        }
    }
    document = pipeline_document(
        unique_name("kafka-sink"),
        source,
        sink,
        drain_timeout="60s",
        backpressure={"max_inflight_bytes": "1MiB"},
    )
    write_document(config, document)
    return Pipeline.from_config(load_config(config), handle_signals=False)


def run_in_thread(pipeline: Pipeline) -> tuple[threading.Thread, list[ExitReport]]:
    reports: list[ExitReport] = []
    thread = threading.Thread(target=lambda: reports.append(pipeline.run()), daemon=True)
    thread.start()
    return thread, reports


def expected_payloads(per_partition: int) -> set[bytes]:
    return {f"{p}:{o}".encode() for p in range(PARTITIONS) for o in range(per_partition)}


def test_every_record_lands_in_the_topic(kafka_bootstrap: str, tmp_path: Path) -> None:
    topic = unique_name("sink-happy")
    create_topic(kafka_bootstrap, topic, 3)
    per_partition = scaled(100_000, minimum=4_000) // PARTITIONS
    pipeline = build(tmp_path, kafka_bootstrap, topic, per_partition)
    thread, reports = run_in_thread(pipeline)
    thread.join(300)
    assert reports and reports[0].exit_code == 0, reports
    records = consume(kafka_bootstrap, topic, unique_name("reader"), per_partition * PARTITIONS)
    assert {r.value for r in records} == expected_payloads(per_partition)


def test_broker_outage_backpressures_and_loses_nothing(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    """B7, B12: a paced source keeps feeding the sink while the broker is down; the sink
    retries, the source is paused, and everything lands once the broker is back."""
    topic = unique_name("sink-outage")
    create_topic(kafka_bootstrap, topic, 3)
    per_partition = scaled(100_000, minimum=10_000) // PARTITIONS
    name = unique_name("kafka-sink-outage")
    meter = Meter(name)
    backpressure = BackpressureConfig(max_inflight_bytes=256 * 1024)
    budget = Pipeline.new_budget(backpressure)
    context = BuildContext(
        pipeline=name,
        component="out",
        meter=meter,
        clock=SystemClock(),
        run_nonce="outage",
        budget=budget,
    )
    config = decode(
        KafkaSinkConfig,
        {
            "brokers": kafka_bootstrap,
            "topic": topic,
            "delivery_timeout": "5m",
            "batch": {"max_rows": 500, "linger": "50ms"},
            "retry": {"initial": "200ms", "max": "2s"},
        },
        "sink.kafka",
    )
    sink = KafkaSinkFactory.build(config, context)
    # About 4,000 records a second, so the outage lands mid-stream at any scale.
    source = SequenceSource(
        tmp_path / "offsets.json",
        stream="in",
        partitions=PARTITIONS,
        records_per_lane=per_partition,
        batch_size=50,
        pace=0.05,
    )
    pipeline = Pipeline(
        name,
        source,
        {"out": sink},
        checkpoint=CheckpointConfig(interval=0.2, drain_timeout=60.0),
        backpressure=backpressure,
        meter=meter,
        budget=budget,
        handle_signals=False,
    )
    thread, reports = run_in_thread(pipeline)
    deadline = time.monotonic() + 120
    while metric(pipeline, "spate_sink_records_total") < per_partition // 4:
        assert thread.is_alive() and time.monotonic() < deadline, "no write before the outage"
        time.sleep(0.02)
    stop_kafka()
    try:
        paused_seen = False
        outage_end = time.monotonic() + 8
        while time.monotonic() < outage_end:
            paused_seen = paused_seen or metric(pipeline, "spate_backpressure_paused") >= 1
            time.sleep(0.1)
        assert thread.is_alive(), "the pipeline must wait for the broker, not finish or fail"
        assert paused_seen, "the source was not paused while the sink could not write"
    finally:
        start_kafka()
    thread.join(300)
    assert reports and reports[0].exit_code == 0, reports
    assert metric(pipeline, "spate_backpressure_pause_events_total") >= 1
    records = consume(kafka_bootstrap, topic, unique_name("reader"), per_partition * PARTITIONS)
    expected = {f"in:{p}:{o}".encode() for p in range(PARTITIONS) for o in range(per_partition)}
    assert {r.value for r in records} >= expected
