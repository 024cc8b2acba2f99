"""``evolve: add_columns`` on the real broker, the registry test server and ClickHouse (B60, B61).

A ``spate run`` process reads Confluent Avro or Protobuf from the broker into a ClickHouse
table that has only the first schema's columns. Mid-stream the producers move to schema
v2 (two new fields: one with a default, one optional; one producer stays on v1): the sink
adds both columns before the first v2 record is decoded, and every v1 and v2 row lands,
v1 rows with the default (Avro; NULL for proto3, which has none) and NULL. Then
v3 changes a field's type: its records wait as not ready with one line naming the field,
and no committed offset passes the first of them.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest

from tests.kafka._pipeline import (
    kafka_source,
    pipeline_document,
    start_pipeline,
    stop_pipeline,
    write_document,
)
from tests.kafka._registry import FORMATS, Fields, Format
from tests.support.scale import scaled
from tests.support.schema_registry import SchemaRegistryServer
from tests.support.services import committed_offsets, create_topic, produce_keyed, unique_name

pytestmark = pytest.mark.integration

V1: Fields = (("id", "long"), ("shop", "string"))
V2: Fields = (*V1, ("channel", "string=web"), ("discount", "double?"))
V3: Fields = (("id", "long"), ("shop", "long"), *V2[2:])  # shop was a string: refused
CHANNEL = {"avro": ("String", "web"), "protobuf": ("Nullable(String)", None)}
"""The added column and what older rows read: Avro keeps the field's default, proto3 has
none (a field without presence is added Nullable)."""


def _wait(what: str, check: Any, proc: Any, log: Path, timeout: float = 240) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if proc.poll() is not None:
            raise AssertionError(f"the run ended while waiting for {what}:\n{log.read_text()}")
        assert time.monotonic() < deadline, f"never: {what}\n{log.read_text()[-3000:]}"
        time.sleep(0.3)


@pytest.mark.parametrize("fmt", FORMATS, ids=lambda f: f.name)
@pytest.mark.timeout(600)
def test_b60_new_fields_become_columns_mid_stream_and_b61_a_type_change_waits(
    kafka_bootstrap: str,
    clickhouse_url: str,
    tmp_path: Path,
    schema_registry: SchemaRegistryServer,
    fmt: Format,
) -> None:
    import clickhouse_connect

    topic, group = unique_name("evolve"), unique_name("g")
    database = unique_name("evolvedb").replace("-", "_")
    parts = urlsplit(clickhouse_url)
    client = clickhouse_connect.get_client(host=parts.hostname, port=parts.port)
    client.command(f"CREATE DATABASE IF NOT EXISTS {database}")
    client.command(
        f"CREATE TABLE {database}.orders (id Int64, shop String) "
        "ENGINE = ReplacingMergeTree ORDER BY id"
    )
    create_topic(kafka_bootstrap, topic, 2)
    v1_id = fmt.register(schema_registry, "orders-value", V1)
    n1 = scaled(2_000, minimum=200)
    produce_keyed(
        kafka_bootstrap,
        topic,
        n1,
        value=lambda i: fmt.encode(v1_id, V1, {"id": i, "shop": f"s{i % 5}"}),
    )
    config = tmp_path / "pipeline.yaml"
    sink = {
        "clickhouse": {
            "table": f"{database}.orders",
            "columns": ["id", "shop"],
            "shards": [{"replicas": [clickhouse_url]}],
            "evolve": "add_columns",
            "batch": {"max_rows": 500, "linger": "200ms"},
        }
    }
    source = kafka_source(kafka_bootstrap, topic, group, session_timeout_ms=None)
    document = pipeline_document(
        unique_name("evolve"), source, sink, deserializer=fmt.section(schema_registry.url)
    )
    write_document(config, document)
    log = tmp_path / "run.log"
    proc = start_pipeline(config, log)

    def rows() -> int:
        return int(client.command(f"SELECT count() FROM {database}.orders FINAL"))

    try:
        _wait("the v1 rows", lambda: rows() >= n1, proc, log)
        v2_id = fmt.register(schema_registry, "orders-value", V2)
        n2 = scaled(2_000, minimum=200)
        produce_keyed(
            kafka_bootstrap,
            topic,
            n2,
            key=lambda i: b"k%d" % (n1 + i),
            value=lambda i: (
                fmt.encode(v1_id, V1, {"id": n1 + i, "shop": "s"})
                if i % 4 == 3  # a producer still on v1
                else fmt.encode(
                    v2_id,
                    V2,
                    {"id": n1 + i, "shop": "s", "channel": f"c{i % 3}", "discount": i / 2},
                )
            ),
        )
        _wait("the v2 rows", lambda: rows() >= n1 + n2, proc, log)
        v3_id = fmt.register(schema_registry, "orders-value", V3)
        n3 = 50
        positions = produce_keyed(
            kafka_bootstrap,
            topic,
            n3,
            key=lambda i: b"k%d" % (n1 + n2 + i),
            value=lambda i: fmt.encode(
                v3_id, V3, {"id": n1 + n2 + i, "shop": i, "channel": "x", "discount": None}
            ),
        )
        first_v3: dict[int, int] = {}
        for partition, offset in positions.values():
            first_v3[partition] = min(offset, first_v3.get(partition, offset))
        refusal = f"records of schema id {v3_id} wait"
        _wait("the v3 refusal", lambda: refusal in log.read_text(), proc, log)
        time.sleep(2)  # several checkpoint intervals while v3 waits
        committed = committed_offsets(kafka_bootstrap, group, topic, timeout=10)
    finally:
        stop_pipeline(proc)
    text = log.read_text()
    assert "Traceback" not in text, text[-3000:]
    (line,) = {line for line in text.splitlines() if refusal in line}
    assert "field shop changed type" in line and "column shop is String" in line, line
    for partition, offset in first_v3.items():
        assert committed.get(partition, 0) <= offset, (committed, first_v3)
    final = committed_offsets(kafka_bootstrap, group, topic, timeout=10)
    for partition, offset in first_v3.items():
        assert final.get(partition, 0) <= offset, (final, first_v3)

    types = dict(
        client.query(
            "SELECT name, type FROM system.columns WHERE database = {db:String} "
            "AND table = 'orders' ORDER BY position",
            parameters={"db": database},
        ).result_rows
    )
    channel_type, channel_default = CHANNEL[fmt.name]
    assert types == {
        "id": "Int64",
        "shop": "String",
        "channel": channel_type,
        "discount": "Nullable(Float64)",
    }
    landed = client.query(
        f"SELECT id, shop, channel, discount FROM {database}.orders FINAL ORDER BY id"
    ).result_rows
    assert [r[0] for r in landed] == list(range(n1 + n2))  # no loss, nothing of v3
    assert landed[0] == (0, "s0", channel_default, None)  # v1 rows read the default, NULL
    assert landed[n1 + 4] == (n1 + 4, "s", "c1", 2.0)
    assert landed[n1 + 3] == (n1 + 3, "s", channel_default, None)  # v1 after v2
    assert all(r[2] == channel_default and r[3] is None for r in landed[:n1])
