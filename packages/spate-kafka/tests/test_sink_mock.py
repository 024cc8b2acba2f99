"""Kafka sink on librdkafka's mock cluster: rows land, oversized rows follow the record
policy (B28), owned producer keys are refused (B19), commits trail the writes (B1)."""

from __future__ import annotations

import uuid

import pytest
from confluent_kafka import Consumer
from spate import Pipeline, SystemClock
from spate.config import decode
from spate.config.models import BackpressureConfig
from spate.errors import ConfigError
from spate.metrics import Meter
from spate.plugins import BuildContext
from spate.testing import memory_source
from spate_kafka import KafkaSinkConfig, KafkaSinkFactory

from .conftest import MockCluster


def sink_config(cluster: MockCluster, topic: str, **extra: object) -> KafkaSinkConfig:
    return decode(
        KafkaSinkConfig,
        {"brokers": cluster.bootstrap, "topic": topic, "batch": {"max_rows": 300}, **extra},
        "sink.kafka",
    )


def run_into_kafka(
    cluster: MockCluster, topic: str, payloads: dict[int, list[bytes]], **extra: object
) -> tuple[int, dict[int, int]]:
    name = f"kafka-sink-{uuid.uuid4().hex[:6]}"
    meter = Meter(name)
    budget = Pipeline.new_budget(BackpressureConfig())
    context = BuildContext(
        pipeline=name,
        component="out",
        meter=meter,
        clock=SystemClock(),
        run_nonce="n1",
        budget=budget,
    )
    sink = KafkaSinkFactory.build(sink_config(cluster, topic, **extra), context)
    source, handle = memory_source(payloads, stream="in", batch_size=200)
    pipeline = Pipeline(
        name, source, {"out": sink}, meter=meter, budget=budget, handle_signals=False
    ).chains(lambda ctx: ctx.chain().map(lambda view: (b"key", bytes(view))).sink("out"))
    report = pipeline.run()
    committed = {lane.partition: off for lane, off in handle.committed.items()}
    return report.exit_code, committed


def read_topic(cluster: MockCluster, topic: str, want: int) -> list[bytes]:
    consumer = Consumer(
        {
            "bootstrap.servers": cluster.bootstrap,
            "group.id": f"reader-{uuid.uuid4().hex[:6]}",
            "auto.offset.reset": "earliest",
        }
    )
    consumer.subscribe([topic])
    values: list[bytes] = []
    try:
        for _ in range(120):
            for message in consumer.consume(1_000, timeout=0.5):
                if message.error() is None:
                    values.append(message.value())
            if len(values) >= want:
                break
    finally:
        consumer.close()
    return values


def test_every_row_lands_and_commits_reach_the_end(mock_cluster: MockCluster, topic: str) -> None:
    mock_cluster.produce(topic, 1, partitions=1)  # create the topic
    payloads = {p: [f"row-{p}-{i}".encode() for i in range(1_000)] for p in range(2)}
    code, committed = run_into_kafka(mock_cluster, topic, payloads)
    assert code == 0
    assert committed == {0: 1_000, 1: 1_000}
    values = read_topic(mock_cluster, topic, 2_001)
    expected = {v for rows in payloads.values() for v in rows}
    assert expected <= set(values)


def test_b28_oversized_row_is_skipped_and_counted_under_skip_policy(
    mock_cluster: MockCluster, topic: str
) -> None:
    mock_cluster.produce(topic, 1, partitions=1)
    payloads = {0: [b"small", b"x" * 5_000, b"also-small"]}
    code, committed = run_into_kafka(
        mock_cluster, topic, payloads, max_message_bytes=1_000, on_record_error="skip"
    )
    assert code == 0
    assert committed == {0: 3}
    values = read_topic(mock_cluster, topic, 3)
    assert b"small" in values and b"also-small" in values
    assert not any(len(v) >= 5_000 for v in values)


def test_b28_oversized_row_fails_the_pipeline_under_fail_policy(
    mock_cluster: MockCluster, topic: str
) -> None:
    mock_cluster.produce(topic, 1, partitions=1)
    payloads = {0: [b"small", b"x" * 5_000, b"also-small"]}
    code, committed = run_into_kafka(mock_cluster, topic, payloads, max_message_bytes=1_000)
    assert code == 1
    assert committed.get(0, 0) == 0


@pytest.mark.parametrize(
    "key",
    ["enable.idempotence", "acks", "transactional.id", "bootstrap.servers", "compression.type"],
)
def test_b19_owned_producer_keys_are_refused(key: str) -> None:
    with pytest.raises(ConfigError) as info:
        decode(
            KafkaSinkConfig,
            {"brokers": "b:9092", "topic": "t", "rdkafka": {key: "x"}},
            "sink.kafka",
        )
    assert info.value.path == f"sink.kafka.rdkafka.{key}"
