"""JSON framings and their bad-input rules (B21, B28); config, target types, entry point."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from importlib.metadata import entry_points
from typing import Any, Literal

import orjson
import pytest
from spate import NO_RECORD, ConfigError, DeserError, DeserErrorKind, ErrorPolicy
from spate.config import decode
from spate.plugins import ComponentFactory
from spate_json import (
    ArrayJsonDeserializer,
    JsonConfig,
    JsonDeserializer,
    JsonDeserializerFactory,
    NdjsonDeserializer,
    SingleJsonDeserializer,
)

Build = Callable[[dict[str, Any]], JsonDeserializer]

EVENTS = [
    {"kind": "OrderPlaced", "order_id": 1, "lines": [{"sku": "a", "qty": 2}], "note": None},
    {"kind": "PaymentCaptured", "order_id": 1, "amount": 12.5, "ok": True, "tag": "ü€"},
    {"kind": "RefundIssued", "order_id": 2, "nested": {"deep": [1, [2, {"x": "y"}]]}},
]


def _view(data: bytes) -> memoryview:
    return memoryview(data)


def test_single_round_trip_from_whole_and_sliced_views(build_json: Build) -> None:
    deser = build_json({})
    assert isinstance(deser, SingleJsonDeserializer) and deser.many is False
    assert deser.on_error is ErrorPolicy.SKIP
    chunk = b""
    for event in EVENTS:
        assert deser.deserialize(_view(orjson.dumps(event))) == event
        chunk += orjson.dumps(event) + b"\n"
    view = memoryview(chunk)
    pos = 0
    for event in EVENTS:
        size = len(orjson.dumps(event))
        assert deser.deserialize(view[pos : pos + size]) == event
        pos += size + 1


@pytest.mark.parametrize("payload", [b"", b"   ", b"\n\r\t "])
def test_empty_single_payload_yields_no_record_b21(build_json: Build, payload: bytes) -> None:
    assert build_json({"framing": "single"}).deserialize(_view(payload)) is NO_RECORD


@pytest.mark.parametrize(
    ("payload", "message"),
    [
        (b'{"a": 1', "invalid JSON"),
        (b'{"a": 1}}', "invalid JSON"),
        (b"\xff\xfe", "invalid JSON"),
        (b"NaN", "invalid JSON"),
        (b"[1, 2]", "expected a JSON object, got array"),
        (b'"text"', "expected a JSON object, got string"),
        (b"3", "expected a JSON object, got number"),
        (b"null", "expected a JSON object, got null"),
    ],
)
def test_invalid_json_and_wrong_top_level_type_are_malformed_b28(
    build_json: Build, payload: bytes, message: str
) -> None:
    deser = build_json({"on_error": "fail"})
    assert deser.on_error is ErrorPolicy.FAIL
    with pytest.raises(DeserError, match=message) as info:
        deser.deserialize(_view(payload))
    assert info.value.kind is DeserErrorKind.MALFORMED


def test_top_level_any_accepts_every_json_value(build_json: Build) -> None:
    deser = build_json({"top_level": "any"})
    for value in ([1, 2], "text", 3, None, 1.5, True):
        assert deser.deserialize(_view(orjson.dumps(value))) == value


def test_ndjson_isolates_a_bad_line_b21(build_json: Build) -> None:
    deser = build_json({"framing": "ndjson"})
    assert isinstance(deser, NdjsonDeserializer) and deser.many is True
    lines = [orjson.dumps(e) for e in EVENTS]
    payload = b"\n".join([lines[0], b"{broken", b"", lines[1], b"[1]", b"  ", lines[2]]) + b"\n"
    out = deser.deserialize_many(_view(payload))
    assert len(out) == 5
    assert out[0] == EVENTS[0] and out[2] == EVENTS[1] and out[4] == EVENTS[2]
    assert isinstance(out[1], DeserError) and out[1].reason.startswith("line 2: invalid JSON")
    assert isinstance(out[3], DeserError)
    assert out[3].reason == "line 5: expected a JSON object, got array"


def test_ndjson_with_crlf_and_from_a_slice(build_json: Build) -> None:
    deser = build_json({"framing": "ndjson"})
    body = b"\r\n".join(orjson.dumps(e) for e in EVENTS)
    buf = b"XX" + body + b"YY"
    assert deser.deserialize_many(memoryview(buf)[2:-2]) == EVENTS
    assert deser.deserialize_many(_view(b"")) == []


def test_array_decodes_all_elements(build_json: Build) -> None:
    deser = build_json({"framing": "array"})
    assert isinstance(deser, ArrayJsonDeserializer) and deser.many is True
    assert deser.deserialize_many(_view(orjson.dumps(EVENTS))) == EVENTS
    assert deser.deserialize_many(_view(b"[]")) == []
    assert deser.deserialize_many(_view(b"")) == []


@pytest.mark.parametrize(
    ("payload", "message"),
    [
        (b'[{"a": 1}, {"b": ', "invalid JSON"),
        (b'{"a": 1}', "expected a JSON array, got object"),
        (b'[{"a": 1}, 2, {"c": 3}]', "element 1: expected a JSON object, got number"),
    ],
)
def test_array_fails_the_whole_payload_b21(build_json: Build, payload: bytes, message: str) -> None:
    with pytest.raises(DeserError, match=message) as info:
        build_json({"framing": "array"}).deserialize_many(_view(payload))
    assert info.value.kind is DeserErrorKind.MALFORMED


@dataclass(frozen=True)
class Line:
    sku: str
    qty: int


@dataclass(frozen=True)
class Order:
    order_id: int
    kind: Literal["OrderPlaced", "PaymentCaptured"]
    lines: list[Line]
    amount: float = 0.0
    note: str | None = None
    labels: dict[str, str] = field(default_factory=dict)
    history: tuple[int, ...] = ()


TARGET = f"{__name__}:Order"


def test_target_type_builds_checked_instances(build_json: Build) -> None:
    deser = build_json({"target": TARGET})
    raw = {"order_id": 1, "kind": "OrderPlaced", "lines": [{"sku": "a", "qty": 2}], "amount": 3}
    value = deser.deserialize(_view(orjson.dumps(raw)))
    assert value == Order(order_id=1, kind="OrderPlaced", lines=[Line("a", 2)], amount=3.0)
    assert isinstance(value, Order) and isinstance(value.amount, float)
    full = {**raw, "note": "n", "labels": {"x": "y"}, "history": [1, 2]}
    assert deser.deserialize(_view(orjson.dumps(full))) == Order(
        order_id=1,
        kind="OrderPlaced",
        lines=[Line("a", 2)],
        amount=3.0,
        note="n",
        labels={"x": "y"},
        history=(1, 2),
    )


@pytest.mark.parametrize(
    ("record", "message"),
    [
        ({"kind": "OrderPlaced", "lines": []}, "required field 'order_id' is missing"),
        ({"order_id": "1", "kind": "OrderPlaced", "lines": []}, "order_id: expected an integer"),
        ({"order_id": True, "kind": "OrderPlaced", "lines": []}, "order_id: expected an integer"),
        ({"order_id": 1, "kind": "Other", "lines": []}, "kind: expected one of"),
        (
            {"order_id": 1, "kind": "OrderPlaced", "lines": [{"sku": "a", "qty": 1.5}]},
            r"lines\[0\]\.qty: expected an integer, got number",
        ),
        (
            {"order_id": 1, "kind": "OrderPlaced", "lines": [], "labels": {"a": 1}},
            r"labels\['a'\]: expected a string",
        ),
        ({"order_id": 1, "kind": "OrderPlaced", "lines": {}}, "lines: expected an array"),
        ({"order_id": 1, "kind": "OrderPlaced", "lines": [], "x": 1}, "unknown field.*'x'"),
    ],
)
def test_target_type_field_errors_name_the_path_b28(
    build_json: Build, record: dict[str, Any], message: str
) -> None:
    deser = build_json({"target": TARGET, "framing": "ndjson"})
    (out,) = deser.deserialize_many(_view(orjson.dumps(record)))
    assert isinstance(out, DeserError)
    assert out.kind is DeserErrorKind.MALFORMED
    assert out.reason.startswith("line 1: ")
    assert re.search(message, out.reason), out.reason


def test_unknown_fields_may_be_ignored(build_json: Build) -> None:
    deser = build_json({"target": TARGET, "unknown_fields": "ignore", "framing": "array"})
    out = deser.deserialize_many(
        _view(b'[{"order_id": 1, "kind": "PaymentCaptured", "lines": [], "extra": 0}]')
    )
    assert out == [Order(order_id=1, kind="PaymentCaptured", lines=[])]


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ({"framing": "lines"}, r"d\.json\.framing: expected one of single, ndjson, array"),
        ({"on_error": "ignore"}, r"d\.json\.on_error: expected one of skip, fail"),
        ({"target": "no-colon"}, r"d\.json\.target: expected package\.module:Name"),
        ({"target": "m:X", "top_level": "any"}, r"d\.json\.top_level: must be object"),
        ({"framng": "single"}, r"d\.json\.framng: unknown key"),
    ],
)
def test_config_errors_name_the_dotted_key_b17(raw: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        decode(JsonConfig, raw, "d.json")


@dataclass
class _Unsupported:
    when: set[int]


@pytest.mark.parametrize(
    ("target", "message"),
    [
        ("no_such_module_xyz:Thing", "cannot import 'no_such_module_xyz'"),
        (f"{__name__}:Missing", "has no attribute 'Missing'"),
        (f"{__name__}:EVENTS", "is not a dataclass"),
        (f"{__name__}:_Unsupported", r"_Unsupported\.when: unsupported field type"),
    ],
)
def test_bad_target_fails_build_naming_the_key_b29(
    build_json: Build, target: str, message: str
) -> None:
    with pytest.raises(ConfigError, match=rf"deserializer\.json\.target: .*{message}"):
        build_json({"target": target})


def test_entry_point_names_the_factory_b27() -> None:
    (entry,) = [e for e in entry_points(group="spate.deserializers") if e.name == "json"]
    factory = entry.load()
    assert factory is JsonDeserializerFactory
    assert isinstance(factory, ComponentFactory)
    assert factory.config_model is JsonConfig
