"""What ``evolve: add_columns`` decides for a new writer schema: the documented matrix
(B60: new fields become columns, Nullable or with the schema default; B61: a changed
type, a field that became optional for a non-Nullable column, an enum symbol the column
lacks and a removed required field are refused, each with one clause)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from spate.schema import Field
from spate_avro._describe import record_fields
from spate_avro._schema import parse_schema_text
from spate_clickhouse._encoder import NO_FILL, Column, RowEncoder
from spate_clickhouse._evolve import alter_sql, plan
from spate_clickhouse._types import ChType, parse_type
from spate_clickhouse.config import TableOptions


def _fields(*fields: dict[str, Any]) -> tuple[Field, ...]:
    schema = {"type": "record", "name": "R", "fields": list(fields)}
    described = record_fields(parse_schema_text(json.dumps(schema)))
    assert described is not None
    return described


def _types(**columns: str) -> dict[str, ChType]:
    return {name: parse_type(t) for name, t in columns.items()}


ID = {"name": "id", "type": "long"}
TABLE = _types(id="Int64", shop="String")


def test_b60_new_fields_are_added_nullable_or_with_their_default() -> None:
    fields = _fields(
        ID,
        {"name": "shop", "type": "string"},
        {"name": "channel", "type": "string", "default": "web"},
        {"name": "discount", "type": ["null", "double"], "default": None},
        {"name": "qty", "type": "int"},
        {"name": "tags", "type": {"type": "array", "items": "string"}, "default": []},
    )
    decided = plan(fields, TABLE, {}, TABLE, {"id", "shop"}, TableOptions())
    assert decided.problems == []
    assert decided.add == [
        ("channel", "String DEFAULT 'web'"),
        ("discount", "Nullable(Float64)"),
        ("qty", "Nullable(Int32)"),
        ("tags", "Array(String)"),
    ]
    assert decided.write == ["channel", "discount", "qty", "tags"]
    assert decided.fills == {"channel": "web", "discount": None, "qty": None, "tags": []}
    assert alter_sql("`db`.`t`", decided.add[:2], "c1") == (
        "ALTER TABLE `db`.`t` ON CLUSTER `c1` ADD COLUMN IF NOT EXISTS `channel` String "
        "DEFAULT 'web', ADD COLUMN IF NOT EXISTS `discount` Nullable(Float64)"
    )


def test_b60_a_column_the_table_has_is_written_from_then_on_without_adding_it() -> None:
    """After a restart the sink writes the columns it added before (none to add)."""
    table = {**TABLE, **_types(channel="String")}
    fields = _fields(
        ID,
        {"name": "shop", "type": "string"},
        {"name": "channel", "type": "string", "default": "web"},
    )
    decided = plan(fields, TABLE, {}, table, set(), TableOptions())
    assert (decided.add, decided.write, decided.problems) == ([], ["channel"], [])
    assert decided.fills == {"channel": "web"}


@pytest.mark.parametrize(
    ("field", "column", "clause"),
    [
        ({"name": "shop", "type": "long"}, "String", "field shop changed type: it is now Int64"),
        (
            {"name": "shop", "type": ["null", "string"]},
            "String",
            "field shop may now be null, but column shop is String, not Nullable",
        ),
        (
            {"name": "shop", "type": {"type": "enum", "name": "S", "symbols": ["A", "Z"]}},
            "Enum8('A' = 0, 'B' = 1)",
            "enum field shop has symbols Z that column shop",
        ),
    ],
)
def test_b61_a_field_that_no_longer_fits_its_column_is_refused(
    field: dict[str, Any], column: str, clause: str
) -> None:
    written = _types(id="Int64", shop=column)
    decided = plan(_fields(ID, field), written, {}, written, {"id", "shop"}, TableOptions())
    assert decided.add == [] and decided.write == []
    (problem,) = decided.problems
    assert clause in problem, problem


@pytest.mark.parametrize(
    ("field", "column"),
    [
        ({"name": "shop", "type": "int"}, "Int64"),  # widened
        ({"name": "shop", "type": "string"}, "Nullable(String)"),
        ({"name": "shop", "type": "string"}, "LowCardinality(String)"),
        ({"name": "shop", "type": {"type": "enum", "name": "S", "symbols": ["A"]}}, "String"),
        (
            {"name": "shop", "type": {"type": "enum", "name": "S", "symbols": ["B"]}},
            "Enum8('A' = 0, 'B' = 1)",
        ),
    ],
)
def test_b61_compatible_fields_are_taken(field: dict[str, Any], column: str) -> None:
    written = _types(id="Int64", shop=column)
    decided = plan(_fields(ID, field), written, {}, written, {"id", "shop"}, TableOptions())
    assert decided.problems == []


def test_b61_a_removed_required_field_is_refused_an_optional_one_is_not() -> None:
    written = _types(id="Int64", shop="String", note="Nullable(String)", channel="String")
    fills = {"id": NO_FILL, "shop": NO_FILL, "note": NO_FILL, "channel": "web"}
    seen = {"id", "shop", "note", "channel"}
    decided = plan(_fields(ID), written, fills, written, seen, TableOptions())
    (problem,) = decided.problems
    assert problem == (
        "field shop was removed or renamed, but column shop is String, not Nullable and "
        "without a default"
    )
    # A column no schema ever had (filled by the chain, say) is not a removed field.
    decided = plan(_fields(ID), written, fills, written, {"id"}, TableOptions())
    assert decided.problems == []


def test_b60_rows_without_an_added_field_are_written_with_its_fill() -> None:
    encoder = RowEncoder(
        [
            Column("id", parse_type("Int64")),
            Column("channel", parse_type("String"), "web"),
            Column("discount", parse_type("Nullable(Float64)"), None),
        ]
    )
    buffer = encoder.new_buffer()
    buffer.append({"id": 1})
    buffer.append({"id": 2, "channel": "app", "discount": 0.5})
    assert buffer.encoder is encoder
    assert buffer.columns(3) == [[1, 2], ["web", "app"], [None, 0.5]]


def test_b61_a_renamed_field_is_refused() -> None:
    """An Avro field whose aliases name a column is a rename, not a new column."""
    written = _types(id="Int64", shop="Nullable(String)")
    renamed = {"name": "store", "type": ["null", "string"], "default": None, "aliases": ["shop"]}
    decided = plan(_fields(ID, renamed), written, {}, written, {"id", "shop"}, TableOptions())
    assert decided.add == [] and decided.write == []
    assert decided.problems == [
        "field store renames shop: rename column shop by hand (ClickHouse would keep the "
        "old rows under the old name)"
    ]
