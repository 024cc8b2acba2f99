"""B59 from a JSON Schema: ``deserializer: {json: {schema: ...}}`` describes the records,
``spate schema ddl`` prints the table, and ``create_table: if_missing`` creates it on the
ClickHouse HTTP front (B29: a schema that cannot describe records is named)."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import pytest
from spate.cli._main import main
from spate.schema import FieldKind
from spate_json._jsonschema import JsonSchemaError, record_fields

SCHEMA: dict[str, Any] = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "type": "object",
    "required": ["order_id", "region", "at", "lines"],
    "properties": {
        "order_id": {"type": "integer"},
        "qty": {"type": "integer", "format": "int32"},
        "region": {"type": "string", "enum": ["eu", "us"]},
        "at": {"type": "string", "format": "date-time"},
        "day": {"type": "string", "format": "date"},
        "ref": {"type": "string", "format": "uuid"},
        "total": {"type": ["number", "null"]},
        "ok": {"type": "boolean", "default": True},
        "note": {"anyOf": [{"type": "string"}, {"type": "null"}]},
        "lines": {"type": "array", "items": {"$ref": "#/$defs/line"}},
        "tags": {"type": "object", "additionalProperties": {"type": "string"}},
        "extra": {},
    },
    "$defs": {
        "line": {
            "type": "object",
            "required": ["sku", "cents"],
            "properties": {"sku": {"type": "string"}, "cents": {"type": "integer"}},
        }
    },
}


def test_json_schema_types_map_as_documented() -> None:
    fields = {f.name: f for f in record_fields(SCHEMA)}
    kinds = {name: (f.type.kind, f.type.nullable) for name, f in fields.items()}
    assert kinds == {
        "order_id": (FieldKind.INT64, False),
        "qty": (FieldKind.INT32, True),  # not required
        "region": (FieldKind.ENUM, False),
        "at": (FieldKind.TIMESTAMP_MICROS, False),
        "day": (FieldKind.DATE, True),
        "ref": (FieldKind.UUID, True),
        "total": (FieldKind.FLOAT64, True),
        "ok": (FieldKind.BOOL, True),
        "note": (FieldKind.STRING, True),
        "lines": (FieldKind.ARRAY, False),
        "tags": (FieldKind.MAP, True),
        "extra": (FieldKind.JSON, True),
    }
    assert fields["region"].type.symbols == ("eu", "us")
    assert fields["ok"].has_default and fields["ok"].default is True
    line = fields["lines"].type.items
    assert line is not None and line.kind is FieldKind.RECORD
    assert [(f.name, f.type.kind, f.type.nullable) for f in line.fields] == [
        ("sku", FieldKind.STRING, False),
        ("cents", FieldKind.INT64, False),
    ]


def test_a_reference_cycle_stops_and_foreign_references_are_named() -> None:
    tree = {
        "type": "object",
        "properties": {"node": {"$ref": "#/$defs/node"}},
        "$defs": {"node": {"type": "object", "properties": {"child": {"$ref": "#/$defs/node"}}}},
    }
    (node,) = record_fields(tree)
    (child,) = node.type.fields
    assert child.type.kind is FieldKind.JSON
    with pytest.raises(JsonSchemaError, match="only local references"):
        record_fields({"type": "object", "properties": {"a": {"$ref": "other.json#/a"}}})
    with pytest.raises(JsonSchemaError, match="an object with properties"):
        record_fields({"type": "array"})


def _config(
    tmp_path: Path, schema: str, front: str = "http://127.0.0.1:1", extra: str = ""
) -> Path:
    path = tmp_path / "pipeline.yaml"
    path.write_text(
        f"""
pipeline: {{name: ddl}}
source:
  kafka: {{brokers: "127.0.0.1:1", topic: t, group_id: g}}
deserializer:
  json:
    schema: {schema}
sink:
  clickhouse:
    table: orders_json
    columns: [order_id, region, at, total, note, lines, tags]
    shards: [{{replicas: ["{front}"]}}]
    table_options: {{order_by: [order_id]}}
{extra}"""
    )
    return path


def test_b59_spate_schema_ddl_from_a_json_schema(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    schema_file = tmp_path / "orders.schema.json"
    schema_file.write_text(json.dumps(SCHEMA))
    code = main(
        ["schema", "ddl", str(_config(tmp_path, f'{{path: "{schema_file}"}}'))],
        stdout=io.StringIO(),
        stderr=io.StringIO(),
    )
    printed = capsys.readouterr()
    assert code == 0, printed.err
    out = printed.out
    assert "CREATE TABLE IF NOT EXISTS `orders_json`" in out
    for line in (
        "`order_id` Int64,",
        "`region`   Enum8('eu' = 0, 'us' = 1),",
        "`at`       DateTime64(6, 'UTC'),",
        "`total`    Nullable(Float64),",
        "`note`     Nullable(String),",
        "`lines`    Array(Tuple(`sku` String, `cents` Int64)),",
        "`tags`     Map(String, String)",
    ):
        assert line in out, out
    # ClickHouse's own engine takes the statement, and a record of the schema as a row.
    chdb = pytest.importorskip("chdb.session")
    session = chdb.Session(str(tmp_path / "chdb"))
    try:
        session.query(out.split("\n", 1)[1])
        row = {
            "order_id": 7,
            "region": "eu",
            "at": "2026-12-01 05:00:00.123456",
            "total": None,
            "note": "n",
            "lines": [{"sku": "a", "cents": 5}],
            "tags": {"k": "v"},
        }
        session.query(f"INSERT INTO orders_json FORMAT JSONEachRow {json.dumps(row)}")
        got = session.query("SELECT order_id, region, lines FROM orders_json", "CSV")
        assert str(got).strip() == '7,"eu","[(\'a\',5)]"'
    finally:
        session.close()


def test_b29_a_json_schema_that_is_not_json_is_named(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(
        ["schema", "ddl", str(_config(tmp_path, "{inline: '{not json'}"))],
        stdout=io.StringIO(),
        stderr=io.StringIO(),
    )
    err = capsys.readouterr().err
    assert code == 2
    assert "deserializer.json.schema.inline: not JSON" in err, err
