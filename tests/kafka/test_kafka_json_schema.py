"""Confluent JSON Schema from the real broker into ClickHouse, table created and evolved
(B300-B303, B306, B59, B60).

confluent-kafka's own ``JSONSerializer`` writes the records against the registry test
server. A YAML-only pipeline (``json: {mode: confluent, validate: true}``, no chain) reads
them into the ClickHouse HTTP front over chDB: the table is created from the prewarmed
subject's JSON Schema, a record with a schema id the registry never knew is skipped
under ``on_unknown_schema: skip`` and one its schema refuses is skipped under
``on_error``; the good rows land with exact values, decoded as columns. Then the producer
moves to a schema with a new optional property: a second run, with ``evolve:
add_columns`` (on rows), adds its column before the first such record is decoded, and
older rows read ``NULL`` there.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson
import pytest
from confluent_kafka.schema_registry import SchemaRegistryClient as ConfluentRegistry
from confluent_kafka.schema_registry.json_schema import JSONSerializer
from confluent_kafka.serialization import MessageField, SerializationContext

from tests.support.chfront_fixtures import ChFront
from tests.support.columnar_run import deser_count, run_yaml
from tests.support.scale import scaled
from tests.support.schema_registry import SchemaRegistryServer
from tests.support.services import committed_offsets, create_topic, produce_keyed, unique_name

pytestmark = pytest.mark.integration

V1: dict[str, Any] = {
    "$schema": "http://json-schema.org/draft-07/schema#",
    "title": "Order",
    "type": "object",
    "properties": {
        "id": {"type": "integer"},
        "shop": {"type": "string"},
        "amount": {"type": "number", "minimum": 0},
        "tags": {"type": "array", "items": {"type": "string"}},
        "paid": {"type": "boolean"},
        "note": {"type": ["string", "null"]},
    },
    "required": ["id", "shop", "amount", "tags", "paid"],
}
V2: dict[str, Any] = {**V1, "properties": {**V1["properties"], "channel": {"type": "string"}}}

YAML = """
pipeline: {name: %(name)s}
admin: {listen: none}
source:
  kafka: {brokers: "%(brokers)s", topic: %(topic)s, group_id: %(group)s, stop_at: end}
deserializer:
  json:
    mode: confluent
    registry: {url: "%(registry)s", retry_backoff: 100ms, retry_backoff_max: 500ms}
    prewarm_subjects: [%(topic)s-value]
    validate: true
    fetch_wait: 5s
    unknown_schema_timeout: 0s
    on_unknown_schema: skip
sink:
  clickhouse:
    table: orders
    columns: [id, shop, amount, tags, paid, note]
    shards: [{replicas: ["%(front)s"]}]
    create_table: if_missing
    table_options: {order_by: [id]}
    evolve: %(evolve)s
    batch: {linger: 100ms}
"""


def _record(i: int) -> dict[str, Any]:
    return {
        "id": i,
        "shop": f"s{i % 5}",
        "amount": i / 4,
        "tags": [f"t{i % 2}"],
        "paid": i % 3 == 0,
        "note": None if i % 2 else f"n{i}",
    }


def test_b306_confluent_json_schema_into_clickhouse_creates_and_evolves_the_table(
    kafka_bootstrap: str, chfront: Callable[..., ChFront], tmp_path: Path
) -> None:
    with SchemaRegistryServer() as registry:
        _run(kafka_bootstrap, chfront, tmp_path, registry)


def _run(
    kafka_bootstrap: str,
    chfront: Callable[..., ChFront],
    tmp_path: Path,
    registry: SchemaRegistryServer,
) -> None:
    confluent = ConfluentRegistry({"url": registry.url})
    try:
        _produce_and_run(kafka_bootstrap, chfront, tmp_path, registry, confluent)
    finally:
        confluent.close()


def _produce_and_run(
    kafka_bootstrap: str,
    chfront: Callable[..., ChFront],
    tmp_path: Path,
    registry: SchemaRegistryServer,
    confluent: ConfluentRegistry,
) -> None:
    topic, group = unique_name("jsonschema"), unique_name("jsonschema-g")
    create_topic(kafka_bootstrap, topic, partitions=2)
    context = SerializationContext(topic, MessageField.VALUE)
    v1 = JSONSerializer(json.dumps(V1), confluent, conf={"auto.register.schemas": True})
    n1 = scaled(2_000, minimum=200)
    first = v1(_record(0), context)
    assert first is not None
    header = first[:5]
    bad = {
        7: b"\x00\x00\x00\x03\xe7" + orjson.dumps(_record(7)),  # schema id 999: never known
        11: header + orjson.dumps({**_record(11), "amount": -1}),  # refused by its schema
    }

    def encode_v1(i: int) -> bytes:
        if i in bad:
            return bad[i]
        wire = v1(_record(i), context)
        assert wire is not None
        return wire

    produce_keyed(kafka_bootstrap, topic, n1, value=encode_v1)
    front = chfront()
    client = front.client()
    path = tmp_path / "pipeline.yaml"
    params = {
        "brokers": kafka_bootstrap,
        "topic": topic,
        "group": group,
        "front": front.url,
        "registry": registry.url,
    }
    path.write_text(YAML % {"name": "jsonschema1", "evolve": "off", **params})
    pipeline, report, columnar = run_yaml(path)
    assert report.exit_code == 0, report.summary()
    assert columnar  # a YAML-only pipeline into ClickHouse decodes batches as columns
    types = dict(
        client.query(
            "SELECT name, type FROM system.columns WHERE table = 'orders' ORDER BY position"
        ).result_rows
    )
    assert types == {
        "id": "Int64",
        "shop": "String",
        "amount": "Float64",
        "tags": "Array(String)",
        "paid": "Bool",
        "note": "Nullable(String)",
    }
    rows = client.query(
        "SELECT id, shop, amount, tags, paid, note FROM orders FINAL ORDER BY id"
    ).result_rows
    assert [r[0] for r in rows] == [i for i in range(n1) if i not in bad]
    assert rows[4] == (4, "s4", 1.0, ["t0"], False, "n4")
    assert rows[3] == (3, "s3", 0.75, ["t1"], True, None)
    assert deser_count(pipeline, "jsonschema1", "skipped") == len(bad)
    assert sum(committed_offsets(kafka_bootstrap, group, topic).values()) == n1

    # The producer moves to v2 (a new optional property); a later run adds its column.
    v2 = JSONSerializer(json.dumps(V2), confluent, conf={"auto.register.schemas": True})
    n2 = scaled(500, minimum=50)

    def encode_v2(i: int) -> bytes:
        wire = v2({**_record(n1 + i), "channel": f"c{i % 3}"}, context)
        assert wire is not None
        return wire

    produce_keyed(kafka_bootstrap, topic, n2, key=lambda i: b"k%d" % (n1 + i), value=encode_v2)
    path.write_text(YAML % {"name": "jsonschema2", "evolve": "add_columns", **params})
    _, report, columnar = run_yaml(path)
    assert not columnar  # a sink that evolves its table takes rows
    assert report.exit_code == 0, report.summary()
    column = client.command(
        "SELECT type FROM system.columns WHERE table = 'orders' AND name = 'channel'"
    )
    assert column == "Nullable(String)"
    landed = client.query("SELECT id, channel FROM orders FINAL ORDER BY id").result_rows
    assert len(landed) == n1 - len(bad) + n2
    assert landed[0] == (0, None)  # written before the column existed
    assert landed[-1] == (n1 + n2 - 1, f"c{(n2 - 1) % 3}")
    assert sum(committed_offsets(kafka_bootstrap, group, topic).values()) == n1 + n2
