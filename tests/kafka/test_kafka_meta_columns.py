"""Kafka metadata and headers as ClickHouse columns, on the real broker and the ClickHouse
HTTP front over chDB (B252-B257, ADR 0020).

Records with keys, timestamps and headers (a repeated key, an empty value, a header
without a value, bytes that are not UTF-8, a record without the header) go through a
YAML pipeline whose ``columns:`` list maps metadata to columns; the table is created
from it (B254) and checked with ``validate_schema: full`` (B253). Every path writes the
same rows: the row path one batch of rows at a time (B95), the row path row by row under
``effectively_once`` (B255), and the columnar path (no chain, B256).
"""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
from spate import Pipeline, load_config

from tests.kafka._pipeline import source_yaml
from tests.support.columnar_run import watch_columnar
from tests.support.scale import scaled
from tests.support.services import consume, create_topic, produce_keyed, unique_name

pytestmark = pytest.mark.integration

BASE_MS = 1_700_000_000_000


def _headers(i: int) -> list[tuple[str, bytes | None]] | None:
    match i % 6:
        case 0:  # a repeated key: the last value is the column's
            return [("tenant", b"first"), ("other", b"\xff\xfe"), ("tenant", b"t%d" % i)]
        case 1:
            return [("tenant", b"")]
        case 2:
            return None
        case 3:
            return [("tenant", None)]
        case 4:
            return [("other", b"x")]
        case _:
            return [("tenant", b"\xff\x00")]


def _tenant(i: int) -> str | bytes | None:
    return {0: f"t{i}", 1: "", 2: None, 3: None, 4: None, 5: b"\xff\x00"}[i % 6]


def _bad(i: int) -> bool:
    """Records whose ``amount`` no Float64 column takes (dead-letter runs only)."""
    return i % 25 == 7


def _value(i: int, bad: bool = False) -> bytes:
    amount: object = "not a number" if bad and _bad(i) else i / 4
    return json.dumps({"id": i, "amount": amount}).encode()


@pytest.mark.parametrize(
    "path",
    ["rows", "rows-effectively-once", "columnar", "rows-dead-letter", "columnar-dead-letter"],
)
def test_b252_kafka_metadata_and_headers_land_as_columns_on_every_path_b254_b256(
    kafka_bootstrap: str, clickhouse_url: str, tmp_path: Path, path: str
) -> None:
    import clickhouse_connect

    if path.startswith("columnar"):
        pytest.importorskip("polars")
    dead_letter = path.endswith("dead-letter")
    topic, database = unique_name("meta"), unique_name("metadb").replace("-", "_")
    create_topic(kafka_bootstrap, topic, 2)
    count = scaled(600, minimum=60)
    positions = produce_keyed(
        kafka_bootstrap,
        topic,
        count,
        value=lambda i: _value(i, dead_letter),
        headers=_headers,
        timestamp=lambda i: BASE_MS + i,
    )
    parts = urlsplit(clickhouse_url)
    client = clickhouse_connect.get_client(host=parts.hostname, port=parts.port)
    client.command(f"CREATE DATABASE IF NOT EXISTS {database}")
    delivery = "effectively_once" if path == "rows-effectively-once" else "at_least_once"
    # Effectively once is read from a plain MergeTree without FINAL: each record once.
    engine = "MergeTree" if delivery == "effectively_once" else "ReplacingMergeTree"
    final = "" if delivery == "effectively_once" else "FINAL"
    dlq = unique_name("meta-dlq")
    if dead_letter:
        create_topic(kafka_bootstrap, dlq, 1)
    dead_letter_yaml = (
        f"""
    on_record_error: dead_letter
dead_letter:
  sink: {{kafka: {{brokers: "{kafka_bootstrap}", topic: {dlq}}}}}
"""
        if dead_letter
        else ""
    )
    config = tmp_path / "pipeline.yaml"
    config.write_text(
        f"""
pipeline: {{name: {unique_name("meta")}, delivery: {delivery}}}
admin: {{listen: none}}
{source_yaml(kafka_bootstrap, topic, unique_name("g"), json_values=True)}
sink:
  clickhouse:
    database: {database}
    table: events
    columns:
      - {{id: Int64}}
      - {{amount: Float64}}
      - {{kafka_offset: $offset}}
      - {{kafka_partition: $partition}}
      - {{kafka_ts: $timestamp}}
      - {{kafka_topic: $topic}}
      - {{kafka_key: $key}}
      - {{tenant: $header.tenant}}
      - {{raw: $value}}
    shards: [{{replicas: ["{clickhouse_url}"]}}]
    validate_schema: full
    create_table: if_missing
    table_options: {{order_by: [id], engine: {engine}}}
    batch: {{linger: 100ms}}{dead_letter_yaml}
"""
    )
    with watch_columnar() as seen:
        pipeline = Pipeline.from_config(load_config(config), handle_signals=False)
        if not path.startswith("columnar"):
            pipeline = pipeline.chains(lambda ctx: ctx.chain())
        report = pipeline.run()
    assert report.exit_code == 0, report.summary()
    assert seen.columnar is path.startswith("columnar")
    types = dict(
        client.query(
            "SELECT name, type FROM system.columns WHERE database = {db:String} "
            "AND table = 'events'",
            parameters={"db": database},
        ).result_rows
    )
    assert types == {
        "id": "Int64",
        "amount": "Float64",
        "kafka_offset": "Int64",
        "kafka_partition": "Int32",
        "kafka_ts": "DateTime64(3, 'UTC')",
        "kafka_topic": "LowCardinality(String)",
        "kafka_key": "Nullable(String)",
        "tenant": "Nullable(String)",
        "raw": "String",
    }
    rows = client.query(
        f"SELECT id, amount, kafka_offset, kafka_partition, kafka_ts, kafka_topic, "
        f"kafka_key, tenant, raw FROM {database}.events {final} ORDER BY id",
        column_formats={"tenant": "bytes", "kafka_key": "bytes", "raw": "bytes"},
    ).result_rows
    written = [i for i in range(count) if not (dead_letter and _bad(i))]
    assert [row[0] for row in rows] == written
    if dead_letter:
        # The refused records reach the dead-letter topic as read: key and value (B257).
        letters = consume(kafka_bootstrap, dlq, unique_name("g"), count - len(written))
        assert sorted((r.key, r.value) for r in letters) == sorted(
            (b"k%d" % i, _value(i, True)) for i in range(count) if _bad(i)
        )
    for i, row in zip(written, rows, strict=True):
        partition, offset = positions[b"k%d" % i]
        tenant = _tenant(i)
        expected = (
            i,
            i / 4,
            offset,
            partition,
            dt.datetime.fromtimestamp((BASE_MS + i) / 1000, dt.UTC),
            topic,
            b"k%d" % i,
            tenant.encode() if isinstance(tenant, str) else tenant,
            _value(i, dead_letter),
        )
        got: Any = list(row)
        if got[4].tzinfo is None:
            got[4] = got[4].replace(tzinfo=dt.UTC)
        assert tuple(got) == expected, f"record {i}"
