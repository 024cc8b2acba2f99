"""Reader-schema resolution: added fields, removed fields, promotions, refused narrowing."""

from __future__ import annotations

from typing import Any

import pytest
from spate import ConfigError, DeserError, DeserErrorKind

from tests.support.schema_registry import SchemaRegistryServer

V1 = {
    "type": "record",
    "name": "Order",
    "namespace": "shop",
    "fields": [
        {"name": "id", "type": "int"},
        {"name": "total", "type": "float"},
        {"name": "note", "type": "string"},
        {"name": "legacy", "type": "string"},
    ],
}
V2 = {
    "type": "record",
    "name": "Order",
    "namespace": "shop",
    "fields": [
        {"name": "id", "type": "long"},  # int -> long
        {"name": "total", "type": "double"},  # float -> double
        {"name": "note", "type": "bytes"},  # string -> bytes
        {"name": "currency", "type": "string", "default": "EUR"},  # added with a default
        # "legacy" removed
    ],
}


def test_reader_schema_applies_promotions_defaults_and_removals(kit: Any) -> None:
    deser = kit.build({"mode": "raw", "schema": kit.inline(V1), "reader_schema": kit.inline(V2)})
    payload = kit.encode(V1, {"id": 7, "total": 1.5, "note": "hi", "legacy": "x"})
    assert deser.deserialize(memoryview(payload)) == {
        "id": 7,
        "total": 1.5,
        "note": b"hi",
        "currency": "EUR",
    }


def test_union_reader_resolves_each_branch_by_name(kit: Any) -> None:
    reader = [dict(branch) for branch in kit.union]
    reader[1] = {
        **reader[1],
        "fields": [*reader[1]["fields"], {"name": "currency", "type": "string", "default": "EUR"}],
    }
    deser = kit.build(
        {"mode": "raw", "schema": kit.inline(kit.union), "reader_schema": kit.inline(reader)}
    )
    event = ("spate.datagen.PaymentCaptured", {"order_id": 3, "amount_cents": 10})
    value = deser.deserialize(memoryview(kit.encode(kit.union, event)))
    assert value == ("spate.datagen.PaymentCaptured", {**event[1], "currency": "EUR"})


def test_union_reader_without_a_branch_is_refused_at_build(kit: Any) -> None:
    with pytest.raises(ConfigError, match="RefundIssued has no match in the reader schema"):
        kit.build(
            {
                "mode": "raw",
                "schema": kit.inline(kit.union),
                "reader_schema": kit.inline(kit.union[:2]),
            }
        )


def test_registry_union_without_a_reader_branch_fails_only_that_branch(
    kit: Any, schema_registry: SchemaRegistryServer
) -> None:
    schema_id = schema_registry.register("events-value", kit.union)
    deser = kit.build(
        {
            "mode": "confluent",
            "registry": {"url": schema_registry.url},
            "reader_schema": kit.inline(kit.union[:2]),
            "fetch_wait": "2s",
        }
    )
    try:
        refund = ("spate.datagen.RefundIssued", {"order_id": 1, "amount_cents": 2, "reason": "r"})
        payload = kit.confluent(schema_id, kit.encode(kit.union, refund))
        with pytest.raises(DeserError, match="RefundIssued has no match") as info:
            deser.deserialize(memoryview(payload))
        assert info.value.kind is DeserErrorKind.SCHEMA_UNAVAILABLE
        payment = ("spate.datagen.PaymentCaptured", {"order_id": 1, "amount_cents": 2})
        payload = kit.confluent(schema_id, kit.encode(kit.union, payment))
        assert deser.deserialize(memoryview(payload)) == payment
    finally:
        deser.close()


@pytest.mark.parametrize(
    ("writer_type", "reader_type"),
    [("long", "int"), ("double", "float"), ("long", "string")],
)
def test_narrowing_reader_schema_is_refused_at_build_never_wrapped(
    kit: Any, writer_type: str, reader_type: str
) -> None:
    writer = {"type": "record", "name": "N", "fields": [{"name": "v", "type": writer_type}]}
    reader = {"type": "record", "name": "N", "fields": [{"name": "v", "type": reader_type}]}
    with pytest.raises(ConfigError, match=rf"reader_schema: cannot read .*{writer_type}"):
        kit.build(
            {"mode": "raw", "schema": kit.inline(writer), "reader_schema": kit.inline(reader)}
        )


def test_added_field_without_default_is_refused_at_build(kit: Any) -> None:
    reader = {**V1, "fields": [*V1["fields"], {"name": "new", "type": "int"}]}
    with pytest.raises(ConfigError, match="new: the writer has no such field and the reader gives"):
        kit.build({"mode": "raw", "schema": kit.inline(V1), "reader_schema": kit.inline(reader)})


def test_confluent_writer_that_would_overflow_the_reader_is_a_record_error(
    kit: Any, schema_registry: SchemaRegistryServer
) -> None:
    """A registry writer with ``long`` read as ``int``: an error, never a wrapped value."""
    writer = {"type": "record", "name": "N", "fields": [{"name": "v", "type": "long"}]}
    reader = {"type": "record", "name": "N", "fields": [{"name": "v", "type": "int"}]}
    schema_id = schema_registry.register("n-value", writer)
    deser = kit.build(
        {
            "mode": "confluent",
            "registry": {"url": schema_registry.url},
            "reader_schema": kit.inline(reader),
            "fetch_wait": "2s",
        }
    )
    try:
        payload = kit.confluent(schema_id, kit.encode(writer, {"v": 2**40}))
        with pytest.raises(DeserError, match=f"schema id {schema_id} cannot be read") as info:
            deser.deserialize(memoryview(payload))
        assert info.value.kind is DeserErrorKind.SCHEMA_UNAVAILABLE
    finally:
        deser.close()


def test_prewarm_checks_the_reader_schema_at_start_up(
    kit: Any, schema_registry: SchemaRegistryServer
) -> None:
    schema_registry.register("orders-value", V1)
    narrow = {**V1, "fields": [{"name": "id", "type": "string"}]}
    with pytest.raises(ConfigError, match=r"reader_schema: cannot read subject 'orders-value'"):
        kit.build(
            {
                "mode": "confluent",
                "registry": {"url": schema_registry.url},
                "prewarm_subjects": ["orders-value"],
                "reader_schema": kit.inline(narrow),
            }
        )


def _rec(name: str, *fields: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {"type": "record", "name": name, "fields": list(fields), **extra}


@pytest.mark.parametrize(
    ("writer", "reader", "message"),
    [
        (
            _rec("R", {"name": "v", "type": ["null", "long"]}),
            _rec("R", {"name": "v", "type": ["null", "int"]}),
            "v: no branch of the reader union can hold a writer long",
        ),
        (
            _rec("R", {"name": "xs", "type": {"type": "array", "items": "long"}}),
            _rec("R", {"name": "xs", "type": {"type": "array", "items": "int"}}),
            r"xs\[\]: narrowing writer long to int could overflow",
        ),
        (
            _rec("R", {"name": "m", "type": {"type": "map", "values": "double"}}),
            _rec("R", {"name": "m", "type": {"type": "map", "values": "float"}}),
            r"m\{\}: narrowing writer double to float",
        ),
        (
            _rec("R", {"name": "e", "type": {"type": "enum", "name": "E", "symbols": ["A", "B"]}}),
            _rec("R", {"name": "e", "type": {"type": "enum", "name": "E", "symbols": ["A"]}}),
            "e: reader enum has no symbol 'B' and no default",
        ),
        (
            _rec("R", {"name": "f", "type": {"type": "fixed", "name": "F", "size": 4}}),
            _rec("R", {"name": "f", "type": {"type": "fixed", "name": "F", "size": 8}}),
            "f: fixed size 4 cannot be read as 8",
        ),
        (
            _rec("R", {"name": "s", "type": "string"}),
            _rec("R", {"name": "s", "type": "int"}),
            "s: writer string cannot be read as int",
        ),
        (
            _rec("A", {"name": "s", "type": "string"}),
            _rec("B", {"name": "s", "type": "string"}),
            "writer A does not match reader B",
        ),
    ],
)
def test_static_resolution_check_names_the_field_b29(
    kit: Any, writer: dict[str, Any], reader: dict[str, Any], message: str
) -> None:
    """The build-time check is exhaustive and deterministic (no sampled data)."""
    for _ in range(3):
        with pytest.raises(ConfigError, match=message):
            kit.build(
                {"mode": "raw", "schema": kit.inline(writer), "reader_schema": kit.inline(reader)}
            )


def test_resolution_allows_promotions_aliases_defaults_and_recursion(kit: Any) -> None:
    node_w = _rec(
        "Node",
        {"name": "value", "type": "int"},
        {"name": "next", "type": ["null", "Node"]},
        {"name": "old_name", "type": "string"},
        {"name": "tags", "type": {"type": "map", "values": {"type": "array", "items": "int"}}},
        {"name": "kind", "type": {"type": "enum", "name": "K", "symbols": ["A", "Z"]}},
    )
    node_r = _rec(
        "Node",
        {"name": "value", "type": "double"},
        {"name": "next", "type": ["null", "Node"]},
        {"name": "new_name", "type": "bytes", "aliases": ["old_name"]},
        {"name": "tags", "type": {"type": "map", "values": {"type": "array", "items": "long"}}},
        {"name": "kind", "type": {"type": "enum", "name": "K", "symbols": ["A"], "default": "A"}},
        {"name": "extra", "type": ["null", "string"], "default": None},
    )
    deser = kit.build(
        {"mode": "raw", "schema": kit.inline(node_w), "reader_schema": kit.inline(node_r)}
    )
    value = {
        "value": 1,
        "next": {"value": 2, "next": None, "old_name": "b", "tags": {}, "kind": "Z"},
        "old_name": "a",
        "tags": {"t": [1, 2]},
        "kind": "A",
    }
    decoded = deser.deserialize(memoryview(kit.encode(node_w, value)))
    assert decoded == {
        "value": 1.0,
        "next": {
            "value": 2.0,
            "next": None,
            "new_name": b"b",
            "tags": {},
            "kind": "A",
            "extra": None,
        },
        "new_name": b"a",
        "tags": {"t": [1, 2]},
        "kind": "A",
        "extra": None,
    }
