"""The datum scan of the columnar path refuses every datum that is not exactly one datum
of the writer schema, and never a valid one (B110).

The property (hypothesis): for random record schemas (the kinds of the row/columnar
equivalence tests, plus recursive and zero-size types) and random valid datums written by
fastavro, the scan accepts every datum; after random corruptions (truncations, flipped
bytes, appended bytes, huge block counts spliced in), every datum the scan accepts is one
the reference decoder (the row path's fastavro decode, logical types read as their
underlying type) accepts, and every datum it refuses is one the reference refuses or one
that is not canonical Avro (fastavro writes the value it decodes to other bytes). The
reference is not asked about a refused datum of a schema with zero-size items or
recursion: fastavro reads such a datum without bound (a huge count of nulls item by
item, a deep nesting until the C stack overflows), which is why the scan has limits.
"""

from __future__ import annotations

import io
from typing import Any

import fastavro
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from spate_avro._schema import build_decoder

from tests.support.avro_native import SKIP_REASON
from tests.support.scale import scaled

pytest.importorskip("spate_avro_native", reason=SKIP_REASON)
pytest.importorskip("pyarrow")

from spate_avro._columnar import _body, _ends, _pack, _zigzag
from spate_avro._scan import compile_schema, may_abort, unbounded_for_fastavro
from spate_avro_native import MAX_DEPTH, ZERO_SIZE_ITEMS, Program, scan

from tests.clickhouse.test_columnar_equivalence import AVRO_KINDS, _encode, _record_schema

_TREE = {
    "type": "record",
    "name": "Tree",
    "fields": [
        {"name": "v", "type": "long"},
        {"name": "kids", "type": {"type": "array", "items": "Tree"}},
        {"name": "next", "type": ["null", "Tree"]},
    ],
}


def _trees() -> Any:
    leaf = st.fixed_dictionaries(
        {"v": st.integers(-(2**40), 2**40), "kids": st.just([]), "next": st.none()}
    )
    return st.recursive(
        leaf,
        lambda inner: st.fixed_dictionaries(
            {
                "v": st.integers(-(2**40), 2**40),
                "kids": st.lists(inner, max_size=3),
                "next": st.none() | inner,
            }
        ),
        max_leaves=8,
    )


SCAN_KINDS = {
    **AVRO_KINDS,
    "tree": ("", _TREE, _trees()),
    "nulls": ("", {"type": "array", "items": "null"}, st.lists(st.none(), max_size=5)),
    "blobs": (
        "",
        {"type": "map", "values": ["null", "bytes"]},
        st.dictionaries(st.text(max_size=3), st.none() | st.binary(max_size=4), max_size=3),
    ),
}
"""The equivalence tests' Avro kinds, and a recursive record and zero-size items."""

CORRUPTIONS = ["truncate", "flip", "append", "count"]


def _renamed(schema: Any, old: str, new: str) -> Any:
    if schema == old:
        return new
    if isinstance(schema, dict):
        return {k: _renamed(v, old, new) if k != "name" else v for k, v in schema.items()}
    if isinstance(schema, list):
        return [_renamed(v, old, new) for v in schema]
    return schema


def _plain(schema: Any) -> Any:
    """``schema`` without logical types (the reference reads the underlying type)."""
    if isinstance(schema, dict):
        return {k: _plain(v) for k, v in schema.items() if k != "logicalType"}
    if isinstance(schema, list):
        return [_plain(v) for v in schema]
    return schema


@st.composite
def cases(draw: st.DrawFn) -> tuple[Any, list[bytes], list[bytes]]:
    """A parsed schema, valid datums of it, and corrupted copies of some of them."""
    kinds = draw(st.lists(st.sampled_from(sorted(SCAN_KINDS)), min_size=1, max_size=5))
    schema = _record_schema("R", kinds, SCAN_KINDS)
    for i, kind in enumerate(kinds):
        if kind == "tree":  # the definition was renamed: its references follow
            field = schema["fields"][i + 1]
            field["type"] = _renamed(field["type"], "Tree", f"Tree_R_{i}")
    records = draw(
        st.lists(
            st.fixed_dictionaries(
                {"id": st.integers(-(2**63), 2**63 - 1)}
                | {f"c{i}": SCAN_KINDS[k][2] for i, k in enumerate(kinds)}
            ),
            min_size=1,
            max_size=12,
        )
    )
    valid = _encode(schema, records)
    corrupted = []
    for index, how, at, byte in draw(
        st.lists(
            st.tuples(
                st.integers(0, len(valid) - 1),
                st.sampled_from(CORRUPTIONS),
                st.integers(0, 10_000),
                st.integers(0, 255),
            ),
            min_size=1,
            max_size=8,
        )
    ):
        p = valid[index]
        at %= len(p) + 1
        if how == "truncate":
            corrupted.append(p[:at])
        elif how == "flip" and p:
            at %= len(p)
            corrupted.append(p[:at] + bytes([p[at] ^ (byte or 1)]) + p[at + 1 :])
        elif how == "append":
            corrupted.append(p + bytes([byte]))
        else:  # a huge (or negative) count, or any varint, spliced in
            count = draw(st.sampled_from([6_000_000_000, 2**62, -(2**40), 1 << 20, byte]))
            corrupted.append(p[:at] + _zigzag(count) + p[at:])
    return schema, valid, corrupted


def _scan(parsed: Any, payloads: list[bytes]) -> set[int]:
    framed = _pack(payloads, 0)
    program = Program(compile_schema(parsed))
    return set(scan(program, _body(framed), _ends(framed), 4))


@settings(
    max_examples=scaled(300, minimum=30),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(cases())
def test_b110_scan_accepts_valid_datums_and_refuses_exactly_what_is_not_one_datum(
    case: tuple[Any, list[bytes], list[bytes]],
) -> None:
    schema, valid, corrupted = case
    parsed = fastavro.parse_schema(schema)
    assert _scan(parsed, valid) == set()
    plain = fastavro.parse_schema(_plain(schema))
    reference = build_decoder(plain)
    refused = _scan(parsed, corrupted)
    unbounded = unbounded_for_fastavro(compile_schema(parsed))
    for i, payload in enumerate(corrupted):
        if unbounded and i in refused:
            continue
        try:
            value = reference(payload, 0)
        except Exception:
            assert i in refused, payload  # the reference refuses it: so must the scan
            continue
        if i in refused:  # the lenient reference accepts it: it is not canonical Avro
            out = io.BytesIO()
            try:
                fastavro.schemaless_writer(out, plain, value)
            except Exception:
                continue  # not even writable back (a value out of its type's range)
            assert out.getvalue() != payload, payload


POISON = fastavro.parse_schema(
    {
        "type": "record",
        "name": "P",
        "fields": [{"name": "items", "type": {"type": "array", "items": "long"}}],
    }
)


def _one(parsed: Any, datum: bytes) -> bool:
    """Whether the scan accepts ``datum``."""
    return not _scan(parsed, [datum])


def test_b110_block_counts_that_cannot_fit_are_refused() -> None:
    """A count of items each at least one byte past the bytes left, in a positive block or
    a negative one (byte size given), a negative or too large byte size, and a byte size
    the items do not fill exactly: all refused; the same items written as Avro writers
    may (positive or negative blocks) are accepted."""
    items = _zigzag(1) + _zigzag(2)
    assert _one(POISON, _zigzag(2) + items + _zigzag(0))
    assert _one(POISON, _zigzag(-2) + _zigzag(len(items)) + items + _zigzag(0))
    assert not _one(POISON, _zigzag(6_000_000_000) + items + _zigzag(0))
    assert not _one(POISON, _zigzag(3) + items + _zigzag(0))
    assert not _one(POISON, _zigzag(-6_000_000_000) + _zigzag(2) + items + _zigzag(0))
    assert not _one(POISON, _zigzag(-2) + _zigzag(-2) + items + _zigzag(0))
    assert not _one(POISON, _zigzag(-2) + _zigzag(99) + items + _zigzag(0))
    assert not _one(POISON, _zigzag(-2) + _zigzag(len(items) - 1) + items + _zigzag(0))
    assert not _one(POISON, b"\xff" * 10 + b"\x01")  # an over-long varint
    assert not _one(POISON, _zigzag(2) + items)  # truncated: no closing block


def test_b110_zero_size_items_are_capped_per_datum() -> None:
    """Items of no bytes (null) cannot be bounded by the datum's size: at most
    ``ZERO_SIZE_ITEMS`` in a datum, over all its blocks and arrays (nested ones too);
    more is refused."""
    nulls = fastavro.parse_schema(
        {
            "type": "record",
            "name": "Z",
            "fields": [
                {"name": "n", "type": {"type": "array", "items": "null"}},
                {
                    "name": "m",
                    "type": {"type": "array", "items": {"type": "array", "items": "null"}},
                },
            ],
        }
    )
    assert unbounded_for_fastavro(compile_schema(nulls))
    empty = _zigzag(0)
    assert _one(nulls, _zigzag(ZERO_SIZE_ITEMS) + _zigzag(0) + empty)
    half = ZERO_SIZE_ITEMS // 2
    assert _one(nulls, _zigzag(half) + _zigzag(half) + _zigzag(0) + empty)
    assert not _one(nulls, _zigzag(half) + _zigzag(half + 1) + _zigzag(0) + empty)
    inner = _zigzag(half) + _zigzag(0)
    assert _one(nulls, empty + _zigzag(2) + inner + inner + _zigzag(0))
    assert not _one(nulls, _zigzag(1) + _zigzag(0) + _zigzag(2) + inner + inner + _zigzag(0))
    assert not _one(nulls, _zigzag(6_000_000_000) + _zigzag(0) + empty)


def test_b110_recursive_schemas_scan_and_nesting_is_capped() -> None:
    """A self-referencing record scans like any other; a datum nesting deeper than
    ``MAX_DEPTH`` levels is refused (the documented cap)."""
    linked = fastavro.parse_schema(
        {
            "type": "record",
            "name": "L",
            "fields": [{"name": "v", "type": "int"}, {"name": "next", "type": ["null", "L"]}],
        }
    )
    program = compile_schema(linked)
    assert may_abort(program)

    def chain(depth: int) -> bytes:
        return (_zigzag(7) + _zigzag(1)) * depth + _zigzag(7) + _zigzag(0)

    assert _one(linked, chain(10))
    assert not _one(linked, chain(10)[:-1])
    assert not _one(linked, chain(MAX_DEPTH))


def test_b110_a_record_nesting_through_an_array_alone_is_never_handed_to_fastavro() -> None:
    """B110: a record that holds itself only through an array is recursive too, so a
    datum the scan refuses for nesting too deep is not given to fastavro, which would
    recurse as deep as the datum nests."""
    for container in ({"type": "array", "items": "T"}, {"type": "map", "values": "T"}):
        schema = fastavro.parse_schema(
            {"type": "record", "name": "T", "fields": [{"name": "k", "type": container}]}
        )
        assert unbounded_for_fastavro(compile_schema(schema)), container


def test_b110_schemas_without_arrays_maps_or_recursion_skip_the_scan() -> None:
    flat = fastavro.parse_schema(
        {"type": "record", "name": "F", "fields": [{"name": "s", "type": ["null", "string"]}]}
    )
    assert not may_abort(compile_schema(flat))
    assert may_abort(compile_schema(POISON))
