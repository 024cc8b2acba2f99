"""The columnar Protobuf decoder decodes every record as the row path does (B87, B142).

Hypothesis draws messages of ``columnar/v1/kinds.proto`` — every scalar type, an enum
(known and unknown numbers), ``optional``, a nested message with its own ``oneof``, map
and repeated timestamps, repeated scalars and messages, maps of scalars, of messages and
of timestamps, a ``oneof`` of three kinds, a ``Timestamp`` (in and out of ``datetime``'s
range) and wrappers — each field set or left to its default. Some payloads are made
malformed (bytes flipped or cut) and some are two messages concatenated (a valid
message: a ``oneof`` set twice, a map key twice, nested messages merged). The batch goes
through ``deserialize_batch`` (the columnar path) and each payload through
``deserialize`` (the row path), in ``raw`` and in ``confluent`` mode with the schema from
the registry test server; every row of the frames must equal the row path's record for
that payload, and the records the row path refuses must be exactly the columnar path's
record errors, with the same errors.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from spate import DeserError, DeserErrorKind

from tests.support.scale import scaled
from tests.support.schema_registry import SchemaRegistryServer

pytest.importorskip("polars")
pytest.importorskip("ptars")

EXAMPLES = settings(
    max_examples=scaled(60, minimum=6),
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)

I32 = st.integers(-(2**31), 2**31 - 1)
I64 = st.integers(-(2**63), 2**63 - 1)
U32 = st.integers(0, 2**32 - 1)
U64 = st.integers(0, 2**64 - 1)
# A Timestamp's seconds: mostly in datetime's range, sometimes beyond it (a record error).
SECONDS = st.integers(-62_135_596_800, 253_402_300_799) | st.integers(-(2**63), 2**63 - 1)
NANOS = st.integers(0, 999_999_999) | I32
COLOUR = st.sampled_from([0, 1, 2]) | I32
TEXT = st.text(max_size=8)


@pytest.fixture(scope="module")
def kinds_set(kit: Any, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("columnar-protos")
    return Path(kit.compile_protos(out, "columnar/v1/kinds.proto"))


@pytest.fixture(scope="module")
def classes(kit: Any, kinds_set: Path) -> Any:
    return kit.classes(kinds_set)


@pytest.fixture(scope="module")
def decoders(
    kit: Any, kinds_set: Path, classes: Any, order_classes: Any
) -> Iterator[dict[str, Any]]:
    with SchemaRegistryServer() as registry:
        schema_id = registry.register(
            "kinds-value", classes.serialized("columnar/v1/kinds.proto"), "PROTOBUF"
        )
        built = {
            "raw": kit.build(
                {"mode": "raw", "descriptor_set": str(kinds_set), "message": "columnar.v1.Kinds"}
            ),
            "raw-numbers": kit.build(
                {
                    "mode": "raw",
                    "descriptor_set": str(kinds_set),
                    "message": "columnar.v1.Kinds",
                    "enums": "numbers",
                }
            ),
            "confluent": kit.build(
                {
                    "mode": "confluent",
                    "registry": {"url": registry.url},
                    "prewarm_subjects": ["kinds-value"],
                    "fetch_wait": "5s",
                }
            ),
        }
        built["schema_id"] = schema_id
        built["order_id"] = registry.register(
            "orders-value", order_classes.serialized("shop/v1/order.proto"), "PROTOBUF"
        )
        try:
            yield built
        finally:
            for name, deser in built.items():
                if not name.endswith("_id"):
                    deser.close()


def _inner(draw: st.DrawFn, message: Any) -> None:
    if draw(st.booleans()):
        message.name = draw(TEXT)
    if draw(st.booleans()):
        message.weight = draw(I64)
    if draw(st.booleans()):
        message.colour = draw(COLOUR)
    pick = draw(st.sampled_from(["label", "code", None]))
    if pick == "label":
        message.label = draw(TEXT)
    elif pick == "code":
        message.code = draw(I32)
    for key, value in draw(st.dictionaries(TEXT, I32, max_size=3)).items():
        message.counts[key] = value
    for _ in range(draw(st.integers(0, 2))):
        seen = message.seen.add()
        seen.seconds, seen.nanos = draw(SECONDS), draw(NANOS)


@st.composite
def kinds(draw: st.DrawFn, cls: Any) -> bytes:
    """One ``Kinds`` message, each field set or not, serialized."""
    m = cls()
    scalars = {
        "i32": I32,
        "i64": I64,
        "u32": U32,
        "u64": U64,
        "s32": I32,
        "s64": I64,
        "f32": U32,
        "f64": U64,
        "sf32": I32,
        "sf64": I64,
        "real32": st.floats(width=32),
        "real64": st.floats(),
        "flag": st.booleans(),
        "text": TEXT,
        "blob": st.binary(max_size=8),
        "colour": COLOUR,
        "maybe": I64,
    }
    for name, values in scalars.items():
        if draw(st.booleans()):
            setattr(m, name, draw(values))
    if draw(st.booleans()):
        _inner(draw, m.inner)
    m.numbers.extend(draw(st.lists(I32, max_size=3)))
    m.words.extend(draw(st.lists(TEXT, max_size=3)))
    for _ in range(draw(st.integers(0, 2))):
        _inner(draw, m.inners.add())
    m.colours.extend(draw(st.lists(COLOUR, max_size=3)))
    for key, value in draw(st.dictionaries(TEXT, TEXT, max_size=3)).items():
        m.labels[key] = value
    for key in draw(st.lists(I64, max_size=2)):
        _inner(draw, m.by_id[key])
    choice = draw(st.sampled_from(["as_text", "as_number", "as_inner", None]))
    if choice == "as_text":
        m.as_text = draw(TEXT)
    elif choice == "as_number":
        m.as_number = draw(I64)
    elif choice == "as_inner":
        _inner(draw, m.as_inner)
    if draw(st.booleans()):
        m.at.seconds, m.at.nanos = draw(SECONDS), draw(NANOS)
    if draw(st.booleans()):
        m.wrapped.value = draw(I64)
    if draw(st.booleans()):
        m.wrapped_text.value = draw(TEXT)
    for key in draw(st.lists(TEXT, max_size=2)):
        m.times[key].seconds, m.times[key].nanos = draw(SECONDS), draw(NANOS)
    wire: bytes = m.SerializeToString()
    return wire


@st.composite
def payload(draw: st.DrawFn, cls: Any) -> bytes:
    """A message, two concatenated (still one valid message), or a corrupted one."""
    wire = draw(kinds(cls))
    shape = draw(st.sampled_from(["plain", "plain", "plain", "merged", "corrupt"]))
    if shape == "merged":
        return wire + draw(kinds(cls))
    if shape == "corrupt":
        mutated = bytearray(wire)
        for _ in range(draw(st.integers(1, 3))):
            if mutated:
                mutated[draw(st.integers(0, len(mutated) - 1))] = draw(st.integers(0, 255))
        return bytes(mutated[: draw(st.integers(0, len(mutated)))])
    return wire


def _normal(value: Any) -> Any:
    """One form for both paths' values: maps as dicts (the frame holds key/value entries),
    unknown enum numbers as their text (a frame's enum column holds names), NaN as a
    marker (NaN != NaN), datetimes in UTC."""
    if isinstance(value, dict):
        # No message of the schema is empty: an empty dict is an empty map, [] in a frame.
        return {k: _normal(v) for k, v in value.items()} if value else []
    if isinstance(value, list):
        if value and all(isinstance(v, dict) and set(v) == {"key", "value"} for v in value):
            return {e["key"]: _normal(e["value"]) for e in value}
        return [_normal(v) for v in value]
    if isinstance(value, float) and math.isnan(value):
        return "NaN"
    if isinstance(value, datetime):
        return value.timestamp(), value.microsecond
    return value


def _row_normal(value: Any, enum_names: bool) -> Any:
    """The row path's record in :func:`_normal`'s form (unknown enum numbers as text)."""
    if isinstance(value, dict):
        out = {}
        for k, v in value.items():
            if enum_names and k == "colour" and isinstance(v, int):
                v = str(v)
            elif enum_names and k == "colours":
                v = [str(x) if isinstance(x, int) else x for x in v]
            out[k] = _row_normal(v, enum_names)
        return out if out else []  # an empty map, as in _normal
    if isinstance(value, list):
        return [_row_normal(v, enum_names) for v in value]
    return _normal(value)


def _both_paths(
    deser: Any, payloads: list[bytes], enum_names: bool
) -> tuple[dict[int, Any], dict[int, Any]]:
    """``(row path, columnar path)``: per batch index, the record or ``DeserError``."""
    row: dict[int, Any] = {}
    for index, data in enumerate(payloads):
        try:
            row[index] = _row_normal(deser.deserialize(data), enum_names)
        except DeserError as exc:
            row[index] = (exc.kind, str(exc))
    frames, errors = deser.deserialize_batch(payloads)
    columnar: dict[int, Any] = {}
    for index, exc in errors:
        assert index not in columnar, f"record {index} has two errors"
        columnar[index] = (exc.kind, str(exc))
    for _, df in frames:
        for record in df.to_dicts():
            index = record.pop("__spate_row")
            assert index not in columnar, f"record {index} decoded twice"
            columnar[index] = _normal(record)
    return row, columnar


def _assert_same(row: dict[int, Any], columnar: dict[int, Any]) -> None:
    assert set(columnar) == set(row), "a record is missing from one path"
    for index in sorted(row):
        got, want = columnar[index], row[index]
        if isinstance(got, dict) and isinstance(want, dict):
            differ = {k: (got.get(k), want.get(k)) for k in got | want if got.get(k) != want.get(k)}
            assert not differ, f"record {index} differs (columnar, row): {differ}"
        assert got == want, f"record {index} differs"


@EXAMPLES
@given(data=st.data())
def test_columnar_raw_decode_equals_the_row_path_b142(
    decoders: dict[str, Any], classes: Any, data: st.DataObject
) -> None:
    cls = classes["columnar.v1.Kinds"]
    payloads = data.draw(st.lists(payload(cls), min_size=1, max_size=12))
    for name, names in (("raw", True), ("raw-numbers", False)):
        assert decoders[name].columnar is not None
        row, columnar = _both_paths(decoders[name], payloads, names)
        _assert_same(row, columnar)


@EXAMPLES
@given(data=st.data())
def test_columnar_confluent_decode_equals_the_row_path_b142(
    kit: Any, decoders: dict[str, Any], classes: Any, data: st.DataObject
) -> None:
    """Two message types of one schema (indexes [0] and [2]) in one batch, and payloads
    whose Confluent header is wrong (magic byte, too short, an index the file lacks)."""
    schema_id = decoders["schema_id"]
    kinds_cls, other_cls = classes["columnar.v1.Kinds"], classes["columnar.v1.Other"]
    other = st.builds(lambda i, c: other_cls(id=i, colour=c).SerializeToString(), I64, COLOUR)
    framed = st.one_of(
        payload(kinds_cls).map(lambda body: kit.confluent(schema_id, [0], body)),
        other.map(lambda body: kit.confluent(schema_id, [2], body)),
        st.sampled_from(
            [
                b"",
                b"\x01\x00\x00\x00\x01\x00",
                b"\x00\x00\x00",
                kit.confluent(schema_id, [7], b""),
                b"\x00" + schema_id.to_bytes(4, "big") + b"\x04",
            ]
        ),
    )
    payloads = data.draw(st.lists(framed, min_size=1, max_size=12))
    row, columnar = _both_paths(decoders["confluent"], payloads, True)
    _assert_same(row, columnar)


def test_an_unknown_schema_id_stalls_the_whole_columnar_batch_b21(
    kit: Any, decoders: dict[str, Any], classes: Any
) -> None:
    """An id the registry does not know yet is NOT_READY for the batch, not a drop."""
    deser = decoders["confluent"]
    good = kit.confluent(
        decoders["schema_id"], [0], classes["columnar.v1.Kinds"](i32=1).SerializeToString()
    )
    with pytest.raises(DeserError) as raised:
        deser.deserialize_batch([good, kit.confluent(999, [0], b"")])
    assert raised.value.kind is DeserErrorKind.NOT_READY


def test_a_type_with_no_columnar_form_keeps_rows(kit: Any, order_set: Path) -> None:
    """``shop.v1.Order`` holds a Duration, a Struct and a recursive type: no columnar form,
    and the deserializer says why when asked for columns."""
    deser = kit.build({"mode": "raw", "descriptor_set": str(order_set), "message": "shop.v1.Order"})
    try:
        assert deser.columnar is None
        with pytest.raises(RuntimeError, match="no columnar form"):
            deser.deserialize_batch([b""])
    finally:
        deser.close()


def test_well_known_fields_given_twice_merge_as_on_the_row_path_b142(
    decoders: dict[str, Any], classes: Any
) -> None:
    """Two messages concatenated are one message: a ``Timestamp`` or a wrapper given twice
    merges its fields (the property test found ptars keeping only the last one)."""
    cls = classes["columnar.v1.Kinds"]
    first, second = cls(), cls()
    first.wrapped.value = -336_320_964_332
    first.at.seconds = 1_700_000_000
    second.wrapped.SetInParent()  # an empty wrapper: merging keeps the first value
    second.at.nanos = 5_000
    payloads = [first.SerializeToString() + second.SerializeToString()]
    row, columnar = _both_paths(decoders["raw"], payloads, True)
    _assert_same(row, columnar)
    assert row[0]["wrapped"] == -336_320_964_332


def test_a_confluent_type_with_no_columnar_form_stops_the_batch_not_its_records(
    kit: Any, decoders: dict[str, Any], order_classes: Any
) -> None:
    """Records of a type with no columnar form are not bad records: the batch raises
    (the frame chain stops naming the type) instead of skipping them."""
    order = order_classes["shop.v1.Order"](order_id=1).SerializeToString()
    with pytest.raises(DeserError, match=r"shop\.v1\.Order has no columnar form") as raised:
        decoders["confluent"].deserialize_batch([kit.confluent(decoders["order_id"], [1], order)])
    assert raised.value.kind is DeserErrorKind.SCHEMA_UNAVAILABLE


def test_large_messages_decode_as_on_the_row_path_b142(
    decoders: dict[str, Any], classes: Any
) -> None:
    """Messages of 16 KiB and more (a three-byte length in the batch check) among small
    ones, a bad one after them."""
    cls = classes["columnar.v1.Kinds"]
    payloads = [
        cls(text="x" * 20_000, i32=1).SerializeToString(),
        cls(i32=2).SerializeToString(),
        cls(blob=b"\x01" * 3_000_000).SerializeToString(),
        b"\x0a\x05ab",
    ]
    row, columnar = _both_paths(decoders["raw"], payloads, True)
    _assert_same(row, columnar)
    assert isinstance(columnar[3], tuple)  # the truncated one is a record error


def test_fields_of_another_wire_type_and_unknown_fields_read_as_on_the_row_path_b142(
    decoders: dict[str, Any], classes: Any
) -> None:
    """A known field in the wrong wire type is an unknown field for upb; unknown fields,
    groups among them, are skipped; a repeated scalar may come unpacked."""
    good = classes["columnar.v1.Kinds"](i32=5, text="x").SerializeToString()
    extras = [
        b"\x0a\x01x",  # i32 (1) length-delimited
        b"\x70\x05",  # text (14) as a varint
        b"\x90\x01\x05",  # inner (18) as a varint
        b"\xe5\x01\x00\x00\x00\x00",  # at (28) as fixed32
        b"\x98\x01\x07\x98\x01\x08",  # numbers (19) unpacked
        b"\x9b\x06\x08\x01\x9c\x06",  # an unknown group (99)
        b"\x90\x03\x05",  # an unknown varint (50)
    ]
    payloads = [good + extra for extra in extras]
    for name, names in (("raw", True), ("raw-numbers", False)):
        row, columnar = _both_paths(decoders[name], payloads, names)
        _assert_same(row, columnar)
        assert not any(isinstance(value, tuple) for value in row.values())
