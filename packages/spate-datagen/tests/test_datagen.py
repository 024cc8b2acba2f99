"""spate-datagen: deterministic storefront events, their encodings and the datagen source."""

from __future__ import annotations

import io
import json

import fastavro
from confluent_kafka import Consumer
from spate.records import Lane
from spate_datagen import (
    DatagenSource,
    DatagenSourceConfig,
    encode_avro,
    encode_json,
    manifest_of,
    storefront_events,
    storefront_schema_text,
)
from spate_datagen.cli import produce_events
from spate_kafka.testing import MockKafkaCluster


class Recorder:
    def __init__(self) -> None:
        self.assigned_lanes: list[Lane] = []
        self.drained_calls = 0

    def assigned(self, lanes: object) -> None:
        self.assigned_lanes.extend(lanes)  # type: ignore[call-overload]

    def revoked(self, lanes: object) -> None:
        raise AssertionError("datagen never revokes")

    def drained(self) -> None:
        self.drained_calls += 1


def test_same_seed_same_events_and_exact_count() -> None:
    first = list(storefront_events(5_000, seed=7))
    second = list(storefront_events(5_000, seed=7))
    assert first == second
    assert len(first) == 5_000
    assert list(storefront_events(5_000, seed=8)) != first


def test_follow_ups_come_after_their_order() -> None:
    placed: set[int] = set()
    paid: set[int] = set()
    for event in storefront_events(20_000, seed=3):
        if event.kind == "OrderPlaced":
            placed.add(event.order_id)
        elif event.kind == "PaymentCaptured":
            assert event.order_id in placed
            paid.add(event.order_id)
        else:
            assert event.order_id in paid
    manifest = manifest_of(20_000, seed=3)
    assert manifest.total == 20_000
    assert all(manifest.counts[k] > 0 for k in ("OrderPlaced", "PaymentCaptured", "RefundIssued"))


def test_avro_payload_is_the_raw_union_and_decodes_with_fastavro() -> None:
    union = fastavro.parse_schema(json.loads(storefront_schema_text()))
    for event in storefront_events(500, seed=2):
        name, record = fastavro.schemaless_reader(
            io.BytesIO(encode_avro(event)), union, return_record_name=True
        )
        assert name == f"spate.datagen.{event.kind}"
        assert record["order_id"] == event.order_id
        if event.kind == "OrderPlaced":
            assert record["lines"] == event.record["lines"]


def test_json_payload_carries_kind() -> None:
    event = next(iter(storefront_events(1)))
    decoded = json.loads(encode_json(event))
    assert decoded["kind"] == "OrderPlaced"
    assert decoded["order_id"] == event.order_id


def test_source_is_bounded_and_keeps_orders_in_one_lane() -> None:
    source = DatagenSource(DatagenSourceConfig(count=3_000, partitions=3, batch_size=250))
    events = Recorder()
    source.start(events)
    assert events.assigned_lanes == [Lane("storefront", p) for p in range(3)]
    seen: list[tuple[Lane, int, bytes]] = []
    polls = 0
    while events.drained_calls == 0:
        polls += 1
        assert polls < 1_000
        for batch in source.poll(0.0):
            assert len(batch) <= 250
            assert batch.offsets == list(range(batch.offsets[0], batch.next_offset))
            for offset, key, view in zip(batch.offsets, batch.keys, batch.payloads, strict=True):
                assert isinstance(view, memoryview)
                assert key is not None
                assert int(key) % 3 == batch.lane.partition
                seen.append((batch.lane, offset, bytes(view)))
    assert len(seen) == 3_000
    assert source.poll(0.0) == []
    expected = sorted(encode_avro(e) for e in storefront_events(3_000))
    assert sorted(p for _l, _o, p in seen) == expected


def test_paused_lane_holds_its_events_until_resumed() -> None:
    source = DatagenSource(DatagenSourceConfig(count=400, partitions=2, batch_size=50))
    events = Recorder()
    source.start(events)
    source.pause([Lane("storefront", 0)])
    got = [b for _ in range(20) for b in source.poll(0.0)]
    assert got and all(b.lane.partition == 1 for b in got)
    assert events.drained_calls == 0
    source.resume([Lane("storefront", 0)])
    total = sum(len(b) for b in got)
    for _ in range(100):
        total += sum(len(b) for b in source.poll(0.0))
    assert total == 400
    assert events.drained_calls == 1


def test_produce_events_delivers_every_event_to_kafka() -> None:
    # Groups form at once (no 3 s initial rebalance delay).
    cluster = MockKafkaCluster()
    brokers = cluster.bootstrap
    manifest = produce_events(brokers, "storefront-test", 2_000, seed=5)
    assert manifest.total == 2_000
    consumer = Consumer(
        {"bootstrap.servers": brokers, "group.id": "check", "auto.offset.reset": "earliest"}
    )
    consumer.subscribe(["storefront-test"])
    keys: list[bytes] = []
    try:
        for _ in range(200):
            for message in consumer.consume(1_000, timeout=0.5):
                if message.error() is None:
                    keys.append(message.key())
            if len(keys) >= 2_000:
                break
    finally:
        consumer.close()
        cluster.close()
    assert len(keys) == 2_000
    assert sorted(keys) == sorted(e.key for e in storefront_events(2_000, seed=5))


def _closed_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port  # nothing listens there any more: connections are refused


def test_b29_datagen_against_an_unreachable_broker_fails_with_one_line() -> None:
    import subprocess
    import sys

    port = _closed_port()
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "spate.cli",
            "datagen",
            "--brokers",
            f"127.0.0.1:{port}",
            "--topic",
            "t",
            "--count",
            "10",
            "--connect-timeout",
            "2",
        ],
        capture_output=True,
        text=True,
        timeout=120,  # a hang fails here instead of blocking the suite
    )
    assert result.returncode == 1
    assert result.stderr.count("\n") == 1, result.stderr  # no librdkafka log flood
    expected = f"spate datagen: brokers 127.0.0.1:{port} unreachable within 2s"
    assert result.stderr.startswith(expected), result.stderr


def test_datagen_help_describes_the_command() -> None:
    import subprocess
    import sys

    result = subprocess.run(
        [sys.executable, "-m", "spate.cli", "datagen", "--help"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0
    assert "produce synthetic storefront or wide events into a Kafka topic" in result.stdout
    assert "--events" in result.stdout
    assert "--connect-timeout" in result.stdout
