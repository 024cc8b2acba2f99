"""JSON, Variant and Dynamic columns from the real broker into ClickHouse (B310-B315).

``spate run`` reads JSON messages from a real topic into a table of the ClickHouse HTTP
front with a ``JSON(a.b Int32)`` column (a typed path, sent as text or a number), a
``Variant(String, Int64, Float64)`` column (text, integers and floats in turn) and a
``Dynamic`` column (integers, floats, text, bools and NULL), once on the row path (a
chain that passes every record on) and once on the columnar path (no chain). One record's
Variant value is an object, which no member takes: under ``on_record_error:
dead_letter`` it reaches the dead-letter topic as read, under its own partition and
offset (B311), while every good row lands with its own member or type, read back with
``variantType()`` and ``dynamicType()`` (B310, B312, B313, B314); the group's committed
offsets reach the topic's end, and both paths store the same rows (B315).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest

from tests.kafka._pipeline import (
    JSON_VALUES,
    ROW_CHAIN,
    kafka_source,
    pipeline_document,
    write_document,
)
from tests.kafka.test_kafka_dead_letter import _dlq_records
from tests.support.cli_run import SpateRun
from tests.support.scale import scaled
from tests.support.services import (
    committed_offsets,
    create_topic,
    end_offsets,
    produce_keyed,
    unique_name,
)

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
COLUMNS = "id Int64, doc JSON(a.b Int32), v Variant(String, Int64, Float64), d Dynamic"
SELECT = (
    "SELECT id, toJSONString(doc), concat(ifNull(toString(v), 'NULL'), ':', variantType(v)), "
    "concat(ifNull(toString(d), 'NULL'), ':', dynamicType(d)) FROM {table} FINAL ORDER BY id"
)


def _variant(i: int) -> object:
    return (f"s{i}", i, i + 0.5)[i % 3]


def _dynamic(i: int) -> object:
    return (i, i + 0.25, f"t{i}", i % 2 == 0, None)[i % 5]


def _value(i: int, bad: int) -> bytes:
    doc = {"a": {"b": str(i) if i % 2 else i}, "tag": f"g{i % 3}"}
    variant = {"x": i} if i == bad else _variant(i)
    return json.dumps({"id": i, "doc": doc, "v": variant, "d": _dynamic(i)}).encode()


def _expected(i: int) -> tuple[object, ...]:
    variant = (f"s{i}:String", f"{i}:Int64", f"{i + 0.5}:Float64")[i % 3]
    dynamic = (
        f"{i}:Int64",
        f"{i + 0.25}:Float64",
        f"t{i}:String",
        f"{str(i % 2 == 0).lower()}:Bool",
        ":None",  # NULL: no type, and no text
    )[i % 5]
    return (
        i,
        json.dumps({"a": {"b": i}, "tag": f"g{i % 3}"}, separators=(",", ":")),
        variant,
        dynamic,
    )


def _run(
    tmp_path: Path, *, path: str, brokers: str, topic: str, front: str, table: str, dlq: str
) -> str:
    """Run ``spate run`` on ``path`` (rows or columns) to the topic's end; return its group."""
    group = unique_name(f"semi-{path}-g")
    sink = {
        "clickhouse": {
            "table": table,
            "columns": ["id", "doc", "v", "d"],
            "shards": [{"replicas": [front]}],
            "batch": {"max_rows": 50, "linger": "100ms"},
            "on_record_error": "dead_letter",
        }
    }
    document = pipeline_document(
        f"semi-{path}",
        kafka_source(brokers, topic, group, stop_at="end"),
        sink,
        deserializer=JSON_VALUES,
        dead_letter={"sink": {"kafka": {"brokers": brokers, "topic": dlq}}},
    )
    config = write_document(tmp_path / f"{path}.json", document)
    chain = ["--chain", ROW_CHAIN] if path == "rows" else []
    run = SpateRun(
        tmp_path,
        "run",
        *chain,
        str(config),
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert run.wait(300) == 0, run.text[-3000:]
    assert ("runs on the columnar path" in run.text) is (path == "columns"), run.text[-3000:]
    return group


def test_b310_b315_json_variant_dynamic_from_kafka_on_both_paths_dead_letter_the_misfit(
    kafka_bootstrap: str, clickhouse_url: str, tmp_path: Path
) -> None:
    import clickhouse_connect

    count = scaled(300, minimum=40)
    bad = count // 2 + 1
    topic = unique_name("semi")
    create_topic(kafka_bootstrap, topic, 2)
    positions = produce_keyed(kafka_bootstrap, topic, count, value=lambda i: _value(i, bad))
    database = unique_name("semidb").replace("-", "_")
    parts = urlsplit(clickhouse_url)
    client = clickhouse_connect.get_client(host=parts.hostname, port=parts.port)
    client.command(f"CREATE DATABASE IF NOT EXISTS {database}")
    stored: dict[str, list[tuple[Any, ...]]] = {}
    for path in ("rows", "columns"):
        table, dlq = f"{database}.events_{path}", unique_name(f"semi-{path}-dlq")
        create_topic(kafka_bootstrap, dlq, 1)
        # Replacing: a batch sent twice (at least once, a retry under load) is one row.
        client.command(f"CREATE TABLE {table} ({COLUMNS}) ENGINE = ReplacingMergeTree ORDER BY id")
        group = _run(
            tmp_path,
            path=path,
            brokers=kafka_bootstrap,
            topic=topic,
            front=clickhouse_url,
            table=table,
            dlq=dlq,
        )
        rows = [tuple(row) for row in client.query(SELECT.format(table=table)).result_rows]
        assert rows == [_expected(i) for i in range(count) if i != bad], path
        stored[path] = rows
        letters = _dlq_records(kafka_bootstrap, dlq)
        assert letters, f"{path}: the record no Variant member takes was not dead-lettered"
        partition, offset = positions[b"k%d" % bad]
        for key, value, headers in letters:  # at least once: every copy is that record
            assert (key, value) == (b"k%d" % bad, _value(bad, bad)), path
            assert headers["spate.error.stage"] == "sink", headers
            assert headers["spate.error.source.partition"] == str(partition), headers
            assert headers["spate.error.source.offset"] == str(offset), headers
            assert "v" in headers["spate.error.message"], headers
        assert committed_offsets(kafka_bootstrap, group, topic) == end_offsets(
            kafka_bootstrap, topic
        ), path
    assert stored["rows"] == stored["columns"]
