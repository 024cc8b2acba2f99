"""Round trips for ``mode: raw`` and ``mode: single_object``; bad input by kind (B28)."""

from __future__ import annotations

import datetime as dt
import decimal
import json
import uuid
from typing import Any

import pytest
from spate import ConfigError, DeserError, DeserErrorKind, ErrorPolicy
from spate_avro import NamedRecord, single_object_fingerprint
from spate_avro._schema import parse_schema_text

UTC = dt.UTC


def _events() -> list[tuple[str, dict[str, Any]]]:
    placed = dt.datetime(2024, 5, 1, 12, 30, 15, 123000, tzinfo=UTC)
    return [
        (
            "spate.datagen.OrderPlaced",
            {
                "order_id": 1,
                "customer_id": 42,
                "region": "eu-west",
                "placed_at": placed,
                "lines": [
                    {"sku": "sku-1", "qty": 2, "unit_cents": 1999},
                    {"sku": "sku-ü", "qty": 1, "unit_cents": 5},
                ],
            },
        ),
        ("spate.datagen.PaymentCaptured", {"order_id": 1, "amount_cents": 4003}),
        ("spate.datagen.RefundIssued", {"order_id": 1, "amount_cents": 5, "reason": "damaged"}),
    ]


def test_raw_union_decodes_each_branch_with_its_full_name(kit: Any) -> None:
    deser = kit.build({"mode": "raw", "schema": kit.inline(kit.union)})
    assert deser.on_error is ErrorPolicy.SKIP
    for name, record in _events():
        value = deser.deserialize(memoryview(kit.encode(kit.union, (name, record))))
        assert isinstance(value, NamedRecord)
        assert value == (name, record)
        assert value.name == name
        assert value.kind == name.rpartition(".")[2]
        assert value.record == record


def test_raw_payload_sliced_from_a_larger_buffer_decodes_from_the_view(kit: Any) -> None:
    """A view that is a slice (an S3 chunk) must be decoded from the view, not ``obj``."""
    deser = kit.build({"mode": "raw", "schema": kit.inline(kit.union)})
    payloads = [kit.encode(kit.union, event) for event in _events()]
    chunk = b"".join(payloads)
    view = memoryview(chunk)
    pos = 0
    for payload, (name, record) in zip(payloads, _events(), strict=True):
        value = deser.deserialize(view[pos : pos + len(payload)])
        pos += len(payload)
        assert value == (name, record)


def test_raw_record_schema_from_path(kit: Any, tmp_path: Any) -> None:
    schema = {"type": "record", "name": "P", "fields": [{"name": "a", "type": "string"}]}
    path = tmp_path / "p.avsc"
    path.write_text(json.dumps(schema))
    deser = kit.build({"mode": "raw", "schema": {"path": str(path)}})
    assert deser.deserialize(memoryview(kit.encode(schema, {"a": "x"}))) == {"a": "x"}


def test_schema_path_that_cannot_be_read_names_the_key(kit: Any, tmp_path: Any) -> None:
    """B29: a bad schema file fails at build with the dotted key."""
    missing = tmp_path / "nope.avsc"
    with pytest.raises(ConfigError, match=r"deserializer\.avro\.schema\.path: cannot read"):
        kit.build({"mode": "raw", "schema": {"path": str(missing)}})


def test_invalid_inline_schema_names_the_key(kit: Any) -> None:
    with pytest.raises(ConfigError, match=r"deserializer\.avro\.schema\.inline: invalid Avro"):
        kit.build({"mode": "raw", "schema": {"inline": '{"type": "recrd"}'}})
    with pytest.raises(ConfigError, match=r"schema\.inline: schema is not valid JSON"):
        kit.build({"mode": "raw", "schema": {"inline": "{nope"}})


LOGICAL = {
    "type": "record",
    "name": "Logical",
    "namespace": "t",
    "fields": [
        {"name": "ts_ms", "type": {"type": "long", "logicalType": "timestamp-millis"}},
        {"name": "ts_us", "type": {"type": "long", "logicalType": "timestamp-micros"}},
        {"name": "day", "type": {"type": "int", "logicalType": "date"}},
        {"name": "t_ms", "type": {"type": "int", "logicalType": "time-millis"}},
        {"name": "t_us", "type": {"type": "long", "logicalType": "time-micros"}},
        {
            "name": "price",
            "type": {"type": "bytes", "logicalType": "decimal", "precision": 12, "scale": 4},
        },
        {
            "name": "fixed_price",
            "type": {
                "type": "fixed",
                "name": "Money",
                "size": 8,
                "logicalType": "decimal",
                "precision": 18,
                "scale": 2,
            },
        },
        {"name": "id", "type": {"type": "string", "logicalType": "uuid"}},
    ],
}


def test_logical_types_round_trip_exactly(kit: Any) -> None:
    value = {
        "ts_ms": dt.datetime(2023, 12, 31, 23, 59, 59, 999000, tzinfo=UTC),
        "ts_us": dt.datetime(1969, 7, 20, 20, 17, 40, 123456, tzinfo=UTC),
        "day": dt.date(2000, 2, 29),
        "t_ms": dt.time(13, 14, 15, 16000),
        "t_us": dt.time(1, 2, 3, 456789),
        "price": decimal.Decimal("-12345678.9012"),
        "fixed_price": decimal.Decimal("0.10"),
        "id": uuid.UUID("12345678-1234-5678-1234-567812345678"),
    }
    deser = kit.build({"mode": "raw", "schema": kit.inline(LOGICAL)})
    decoded = deser.deserialize(memoryview(kit.encode(LOGICAL, value)))
    assert decoded == value
    # the decimal keeps the schema's scale exactly, not a float's approximation
    assert decoded["price"].as_tuple().exponent == -4
    assert decoded["fixed_price"].as_tuple() == decimal.Decimal("0.10").as_tuple()
    assert decoded["ts_ms"].tzinfo is not None


@pytest.mark.parametrize("cut", [0, 1, 2, 5, 9, -1])
def test_truncated_payload_is_malformed_b28(kit: Any, cut: int) -> None:
    deser = kit.build({"mode": "raw", "schema": kit.inline(kit.union)})
    payload = kit.encode(kit.union, _events()[0])
    with pytest.raises(DeserError) as info:
        deser.deserialize(memoryview(payload[:cut]))
    assert info.value.kind is DeserErrorKind.MALFORMED


def test_trailing_bytes_are_malformed_b28(kit: Any) -> None:
    deser = kit.build({"mode": "raw", "schema": kit.inline(kit.union)})
    payload = kit.encode(kit.union, _events()[1]) + b"\x00"
    with pytest.raises(DeserError, match="1 trailing bytes") as info:
        deser.deserialize(memoryview(payload))
    assert info.value.kind is DeserErrorKind.MALFORMED


def test_union_branch_index_out_of_range_is_malformed_b28(kit: Any) -> None:
    deser = kit.build({"mode": "raw", "schema": kit.inline(kit.union)})
    payload = b"\x06" + kit.encode(kit.union, _events()[1])[1:]  # zig-zag 3: a 4th branch
    with pytest.raises(DeserError, match="branch index 3 is out of range") as info:
        deser.deserialize(memoryview(payload))
    assert info.value.kind is DeserErrorKind.MALFORMED
    with pytest.raises(DeserError, match="branch index -1"):
        deser.deserialize(memoryview(b"\x01\x02\x02"))
    with pytest.raises(DeserError, match="out of range"):  # a multi-byte index
        deser.deserialize(memoryview(b"\x80\x01\x02\x02"))


def test_invalid_utf8_string_is_malformed_b28(kit: Any) -> None:
    schema = {"type": "record", "name": "S", "fields": [{"name": "s", "type": "string"}]}
    deser = kit.build({"mode": "raw", "schema": kit.inline(schema), "on_error": "fail"})
    assert deser.on_error is ErrorPolicy.FAIL
    with pytest.raises(DeserError) as info:
        deser.deserialize(memoryview(b"\x04\xff\xfe"))
    assert info.value.kind is DeserErrorKind.MALFORMED
    assert "UnicodeDecodeError" in info.value.reason


def test_single_object_fingerprint_matches_the_specification() -> None:
    """CRC-64-AVRO of the canonical form of "null" is 0x63DD24E7CC258F8A (little-endian)."""
    assert single_object_fingerprint(parse_schema_text('"null"')) == (0x63DD24E7CC258F8A).to_bytes(
        8, "little"
    )


def test_single_object_round_trip_and_known_older_writer(kit: Any) -> None:
    v1 = {
        "type": "record",
        "name": "User",
        "namespace": "t",
        "fields": [{"name": "id", "type": "long"}],
    }
    v2 = {
        "type": "record",
        "name": "User",
        "namespace": "t",
        "fields": [
            {"name": "id", "type": "long"},
            {"name": "email", "type": "string", "default": ""},
        ],
    }
    deser = kit.build(
        {
            "mode": "single_object",
            "schema": kit.inline(v2),
            "writer_schemas": [kit.inline(v1)],
            "reader_schema": kit.inline(v2),
        }
    )

    def frame(schema: Any, datum: Any) -> memoryview:
        fp = single_object_fingerprint(parse_schema_text(json.dumps(schema)))
        return memoryview(b"\xc3\x01" + fp + kit.encode(schema, datum))

    assert deser.deserialize(frame(v2, {"id": 7, "email": "a@b"})) == {"id": 7, "email": "a@b"}
    assert deser.deserialize(frame(v1, {"id": 8})) == {"id": 8, "email": ""}


def test_single_object_wrong_marker_and_unknown_fingerprint_b28(kit: Any) -> None:
    schema = {"type": "record", "name": "U", "fields": [{"name": "id", "type": "long"}]}
    deser = kit.build({"mode": "single_object", "schema": kit.inline(schema)})
    body = kit.encode(schema, {"id": 1})
    with pytest.raises(DeserError, match="expected marker C3 01") as info:
        deser.deserialize(memoryview(b"\xc3\x02" + bytes(8) + body))
    assert info.value.kind is DeserErrorKind.MALFORMED
    with pytest.raises(DeserError, match="unknown schema fingerprint") as info:
        deser.deserialize(memoryview(b"\xc3\x01" + bytes(8) + body))
    assert info.value.kind is DeserErrorKind.SCHEMA_UNAVAILABLE
    with pytest.raises(DeserError, match="in 3 bytes"):
        deser.deserialize(memoryview(b"\xc3\x01\x00"))


def test_union_branch_naming_a_type_defined_in_another_branch(kit: Any) -> None:
    inner = {
        "type": "record",
        "name": "Inner",
        "namespace": "t",
        "fields": [{"name": "x", "type": "int"}],
    }
    outer = {
        "type": "record",
        "name": "Outer",
        "namespace": "t",
        "fields": [{"name": "inner", "type": inner}],
    }
    union = [outer, "t.Inner"]
    deser = kit.build({"mode": "raw", "schema": kit.inline(union)})
    value = deser.deserialize(memoryview(kit.encode(union, ("t.Inner", {"x": 5}))))
    assert value == ("t.Inner", {"x": 5})
    value = deser.deserialize(memoryview(kit.encode(union, ("t.Outer", {"inner": {"x": 1}}))))
    assert value == ("t.Outer", {"inner": {"x": 1}})
