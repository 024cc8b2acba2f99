"""examples/kafka_protobuf_to_clickhouse.py on the real broker and the ClickHouse HTTP front.

confluent-kafka's own ``ProtobufSerializer`` writes the events (registering the schema in
the registry test server and framing each message with the schema id and message
indexes); the example's pipeline decodes them with spate-protobuf and loads them into
ClickHouse. Every event lands once with its values, and the run exits 0 (B1, B21).
"""

from __future__ import annotations

import importlib.util
from datetime import UTC
from pathlib import Path
from typing import Any

import pytest
from spate import Pipeline, load_config

from tests.support.scale import scaled
from tests.support.schema_registry import SchemaRegistryServer
from tests.support.services import create_topic, unique_name

pytestmark = pytest.mark.integration

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def _load(name: str) -> Any:
    spec = importlib.util.spec_from_file_location(name, EXAMPLES / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_protobuf_example_loads_every_event_into_clickhouse(
    kafka_bootstrap: str, clickhouse_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    example = _load("kafka_protobuf_to_clickhouse")
    avro_example = _load("kafka_avro_to_clickhouse")
    topic, database = unique_name("proto"), unique_name("protodb").replace("-", "_")
    create_topic(kafka_bootstrap, topic, 3)
    count = scaled(5_000, minimum=500)
    with SchemaRegistryServer() as registry:
        sent = example.produce(kafka_bootstrap, topic, registry.url, count)
        assert registry.requests[f"POST /subjects/{topic}-value/versions"] == 1
        env = {
            "KAFKA_BROKERS": kafka_bootstrap,
            "KAFKA_TOPIC": topic,
            "KAFKA_GROUP": unique_name("g"),
            "SCHEMA_REGISTRY_URL": registry.url,
            "CLICKHOUSE_URL": clickhouse_url,
            "CLICKHOUSE_DATABASE": database,
            "STOP_AT": "end",
            "SPATE_ADMIN_LISTEN": "none",
        }
        for key, value in env.items():
            monkeypatch.setenv(key, value)
        client = avro_example.clickhouse_client(clickhouse_url)
        client.command(f"CREATE DATABASE IF NOT EXISTS {database}")
        client.command(example.TABLE.format(db=database))
        pipeline = Pipeline.from_config(load_config(example.CONFIG), handle_signals=False)
        report = pipeline.chains(example.chains).run()
    assert report.exit_code == 0, report.summary()
    rows = client.query(
        "SELECT order_id, customer_id, region, placed_at, channel, line_count, total_cents,"
        f" coupon FROM {database}.proto_orders FINAL ORDER BY order_id"
    ).result_rows
    assert len(rows) == count
    channels = {1: "WEB", 2: "APP", 3: "STORE"}
    for row, order in zip(rows, sent, strict=True):
        assert row[:3] == (order.order_id, order.customer_id, order.region)
        assert row[3].replace(tzinfo=UTC) == order.placed_at.ToDatetime(tzinfo=UTC)
        assert row[4] == channels[order.channel]
        assert row[5:7] == (len(order.lines), sum(li.qty * li.unit_cents for li in order.lines))
        assert row[7] == (order.coupon if order.HasField("coupon") else None)
