"""``create_table: if_missing`` on the real broker and the ClickHouse HTTP front.

The table does not exist; the sink creates it at start-up from the Avro schema (types
derived, one declared) before ``validate_schema: full`` checks it (B59, B20), and
every record lands with its values.
"""

from __future__ import annotations

import io
import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import fastavro
import pytest
from spate import Pipeline, load_config

from tests.kafka._pipeline import source_yaml
from tests.support.scale import scaled
from tests.support.services import create_topic, produce_keyed, unique_name

pytestmark = pytest.mark.integration

SCHEMA: dict[str, Any] = {
    "type": "record",
    "name": "Reading",
    "fields": [
        {"name": "id", "type": "long"},
        {"name": "sensor", "type": "string"},
        {"name": "at", "type": {"type": "long", "logicalType": "timestamp-millis"}},
        {"name": "note", "type": ["null", "string"], "default": None},
        {"name": "level", "type": {"type": "enum", "name": "Level", "symbols": ["LOW", "HIGH"]}},
    ],
}


def _encode(i: int) -> bytes:
    out = io.BytesIO()
    record = {
        "id": i,
        "sensor": f"s{i % 7}",
        "at": datetime(2026, 1, 1, tzinfo=UTC).timestamp() * 1000 + i,
        "note": None if i % 3 else f"n{i}",
        "level": "HIGH" if i % 2 else "LOW",
    }
    record["at"] = int(record["at"])
    fastavro.schemaless_writer(out, fastavro.parse_schema(SCHEMA), record)
    return out.getvalue()


def test_b59_create_table_if_missing_creates_then_validates_and_loads_b20(
    kafka_bootstrap: str, clickhouse_url: str, tmp_path: Path
) -> None:
    from urllib.parse import urlsplit

    import clickhouse_connect

    topic, database = unique_name("ct"), unique_name("ctdb").replace("-", "_")
    create_topic(kafka_bootstrap, topic, 2)
    count = scaled(3_000, minimum=300)
    produce_keyed(kafka_bootstrap, topic, count, value=_encode)
    parts = urlsplit(clickhouse_url)
    client = clickhouse_connect.get_client(host=parts.hostname, port=parts.port)
    client.command(f"CREATE DATABASE IF NOT EXISTS {database}")
    config = tmp_path / "pipeline.yaml"
    config.write_text(
        f"""
pipeline: {{name: {unique_name("ct")}}}
admin: {{listen: none}}
{source_yaml(kafka_bootstrap, topic, unique_name("g"))}
deserializer:
  avro:
    mode: raw
    schema: {{inline: '{json.dumps(SCHEMA)}'}}
sink:
  clickhouse:
    table: {database}.readings
    columns: [id, sensor, at, note, level, {{source: LowCardinality(String)}}]
    shards: [{{replicas: ["{clickhouse_url}"]}}]
    validate_schema: full
    create_table: if_missing
    table_options: {{order_by: [sensor, id], partition_by: toYYYYMM(at)}}
"""
    )

    def chains(ctx: Any) -> Any:
        return ctx.chain().map(lambda r: {**r, "source": "kafka"})

    report = Pipeline.from_config(load_config(config), handle_signals=False).chains(chains).run()
    assert report.exit_code == 0, report.summary()
    types = dict(
        client.query(
            "SELECT name, type FROM system.columns WHERE database = {db:String} "
            "AND table = 'readings'",
            parameters={"db": database},
        ).result_rows
    )
    assert types == {
        "id": "Int64",
        "sensor": "String",
        "at": "DateTime64(3, 'UTC')",
        "note": "Nullable(String)",
        "level": "Enum8('LOW' = 0, 'HIGH' = 1)",
        "source": "LowCardinality(String)",
    }
    engine = client.command(
        f"SELECT engine_full FROM system.tables WHERE database = '{database}' AND name = 'readings'"
    )
    assert str(engine).startswith(
        "ReplacingMergeTree PARTITION BY toYYYYMM(at) ORDER BY (sensor, id)"
    )
    rows = client.query(
        f"SELECT id, note, level, source FROM {database}.readings FINAL ORDER BY id"
    ).result_rows
    assert len(rows) == count
    assert rows[3] == (3, "n3", "HIGH", "kafka") and rows[4] == (4, None, "LOW", "kafka")
