"""Columnar JSON decoding finds exactly the bad records the row path finds (B28, B86).

Random batches of JSON objects (and of the storefront events) with random corruptions
(truncation, trailing text, blank payloads, two objects in one payload, non-objects,
``NaN``, infinities, invalid UTF-8, duplicate keys, line breaks inside a record, a
record that closes the wrapper and opens another) go through the
``single`` and ``ndjson`` deserializers' ``deserialize_batch``; the bad records must be
exactly those the row path (the same deserializer's per-record decoding, orjson) refuses,
with the same errors, and every good record must read back with the row path's values.
"""

from __future__ import annotations

import dataclasses
import decimal
import subprocess
import sys
from collections.abc import Callable
from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from spate import NO_RECORD, DeserError
from spate_json import JsonDeserializer

from tests.support.deser_fuzz import JSON_VALUES, corrupt
from tests.support.scale import scaled

pl = pytest.importorskip("polars")
pytest.importorskip("pyarrow")

Build = Callable[[dict[str, Any]], JsonDeserializer]
SETTINGS = settings(
    max_examples=scaled(200, minimum=25),
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)

ITEMS = (
    st.none()
    | st.booleans()
    | st.integers(-(2**53), 2**53)
    | st.integers(-(2**63), 2**64 - 1)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=4)
)
"""Array items of every JSON kind (an integer beyond 2^53 beside a fraction in one
array is a record error on the columnar path only, B87: drawn where no float is)."""


def _no_inexact(value: Any) -> bool:
    """Whether no array holds a fraction beside an integer beyond 2^53 (B87)."""
    if isinstance(value, dict):
        return all(map(_no_inexact, value.values()))
    if not isinstance(value, list):
        return True
    leaves = list(_numbers_in(value))
    floats = any(isinstance(v, float) for v in leaves)
    big = any(type(v) is int and abs(v) > 2**53 for v in leaves)
    return not (floats and big) and all(map(_no_inexact, value))


def _numbers_in(items: list[Any]) -> Any:
    """The numbers among ``items`` and the items of their arrays, at any depth (one
    place, as Arrow types them together)."""
    for item in items:
        if isinstance(item, list):
            yield from _numbers_in(item)
        elif isinstance(item, (int, float)) and not isinstance(item, bool):
            yield item


ARRAYS = st.recursive(
    st.lists(ITEMS, max_size=4),
    lambda inner: st.lists(
        ITEMS | inner | st.dictionaries(st.sampled_from("xyz"), ITEMS | inner, max_size=2),
        max_size=3,
    ),
    max_leaves=8,
).filter(_no_inexact)
"""Arrays of mixed kinds, nulls among their items, empty, nested, of objects holding
arrays (B340)."""

VALUES: dict[str, Any] = {
    **JSON_VALUES,
    "when": st.sampled_from(["2024-01-01T00:00:00", "2026-12-01 10:20:30.123", "1999-01-01"]),
    "arrays": ARRAYS,
    "objects": st.dictionaries(st.sampled_from("xyz"), ITEMS | ARRAYS, max_size=3),
}

CORRUPTIONS = {
    "truncate": lambda p: p[: len(p) // 2],
    "trailing": lambda p: p + b" x",
    "blank": lambda p: b"  ",
    "empty": lambda p: b"",
    "two": lambda p: p + p,
    "scalar": lambda p: b"5",
    "null": lambda p: b"null",
    "array": lambda p: b"[" + p + b"]",
    "nan": lambda p: b'{"f0": NaN}',
    "inf": lambda p: b'{"f0": 1e400}',
    "nested_inf": lambda p: b'{"f0": [1.5, -Infinity]}',
    "injected": lambda p: p + b'}\n{"v": ' + p,
    "utf8": lambda p: b'{"f0": "\xff"}',
    "dup": lambda p: b'{"f0": 1, "f0": 2}',
    "pretty": lambda p: p.replace(b",", b",\n  "),
    "tail": lambda p: p[:-1] + b', "zz": 1}, "w": 2',
    "surrogate": lambda p: b'{"f0": "\\ud800"}',
}


@st.composite
def batches(draw: st.DrawFn) -> list[bytes]:
    kinds = draw(st.lists(st.sampled_from(sorted(VALUES)), min_size=1, max_size=5))
    records = draw(
        st.lists(
            st.fixed_dictionaries({f"f{i}": VALUES[k] for i, k in enumerate(kinds)}),
            min_size=1,
            max_size=30,
        )
    )
    return corrupt(draw, [orjson.dumps(r) for r in records], CORRUPTIONS, 4)


def reference(deser: JsonDeserializer, payloads: list[bytes]) -> tuple[dict[int, list[str]], Any]:
    """The row path's errors by index and its good records, in order, with their index
    (a payload holding no record counts under index -1)."""
    errors: dict[int, list[str]] = {}
    good: list[tuple[int, Any]] = []
    for index, payload in enumerate(payloads):
        for value in deser.reference(memoryview(payload)):
            if value is NO_RECORD:
                errors.setdefault(-1, []).append("empty")
                continue
            if isinstance(value, DeserError):
                errors.setdefault(index, []).append(value.reason)
            else:
                good.append((index, value))
    return errors, good


def columnar(deser: JsonDeserializer, payloads: list[bytes]) -> tuple[dict[int, list[str]], Any]:
    """The batch's errors by index and good records, decoded from views; a Kafka batch's
    whole ``bytes`` (what a deserializer with ``takes_bytes`` is given, B97) decode the
    same."""
    from_views = _columnar(deser, [memoryview(p) for p in payloads])
    assert getattr(deser, "takes_bytes", False) is True
    assert _columnar(deser, list(payloads)) == from_views
    return from_views


def _columnar(deser: JsonDeserializer, payloads: list[Any]) -> tuple[dict[int, list[str]], Any]:
    frames, bad, empty = deser.deserialize_batch(payloads)
    errors: dict[int, list[str]] = {-1: ["empty"] * empty} if empty else {}
    for index, exc in bad:
        errors.setdefault(index, []).append(exc.reason)
    good: list[tuple[int, Any]] = []
    for branch, df in frames:
        assert branch is None
        for row in df.to_dicts():
            index = row.pop("__spate_row")
            good.append((index, _no_nulls(row)))
    good.sort(key=lambda item: item[0])
    return errors, good


def _no_nulls(value: Any) -> Any:
    """``value`` without the object fields that are null, at any depth (a column of
    objects has every field its records name, null where one is missing)."""
    if isinstance(value, dict):
        return {k: _no_nulls(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [_no_nulls(v) for v in value]
    return value


COLUMNS_REFUSE = "JSON record cannot be read as columns"


class _Conflict(Exception):
    """Items of one array whose kinds no one Arrow type holds."""


def _shape(value: Any) -> Any:
    """The Arrow-inferable shape of a JSON value: None (null), a scalar kind, ``("list",
    item shape)`` or ``("object", {field: shape})``; ``_Conflict`` when an array (at
    any depth) holds items of kinds no one type holds (``[1, "a"]``)."""
    if value is None:
        return None
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, (int, float)):
        return "number"
    if isinstance(value, str):
        return "text"
    if isinstance(value, list):
        item = None
        for v in value:
            item = _merge(item, _shape(v))
        return ("list", item)
    return ("object", {k: _shape(v) for k, v in value.items()})


def _merge(a: Any, b: Any) -> Any:
    if a is None or a == b:
        return b
    if b is None:
        return a
    if isinstance(a, tuple) and isinstance(b, tuple) and a[0] == b[0]:
        if a[0] == "list":
            return ("list", _merge(a[1], b[1]))
        fields = dict(a[1])
        for k, v in b[1].items():
            fields[k] = _merge(fields.get(k), v)
        return ("object", fields)
    raise _Conflict


def _expected(
    errors: dict[int, list[str]], good: list[tuple[int, Any]]
) -> tuple[dict[int, list[str]], list[tuple[int, Any]]]:
    """The row path's outcome as the columnar path must give it: each record the row path
    accepts whose array mixes kinds no Arrow type holds together is a record error of its
    own (B341); the other records as the row path decodes them (B86, B340)."""
    errors = {i: list(reasons) for i, reasons in errors.items()}
    kept = []
    for index, value in good:
        try:
            _shape(value)
        except _Conflict:
            errors.setdefault(index, []).append(COLUMNS_REFUSE)
            continue
        kept.append((index, _no_nulls(value)))
    return _reasons(errors), kept


def _reasons(errors: dict[int, list[str]]) -> dict[int, list[str]]:
    """Each index's reasons sorted, the columnar refusals' details left out."""
    return {
        i: sorted(COLUMNS_REFUSE if r.startswith(COLUMNS_REFUSE) else r for r in reasons)
        for i, reasons in errors.items()
    }


@SETTINGS
@given(payloads=batches())
def test_b86_single_columnar_batch_refuses_exactly_what_the_row_path_refuses(
    build_json: Build, payloads: list[bytes]
) -> None:
    """Arrays of mixed kinds, nulls among their items, nested, empty, of objects, and
    objects holding them, included (B340, B341)."""
    deser = build_json({})
    assert deser.columnar is not None
    want_errors, want = _expected(*reference(deser, payloads))
    got_errors, got_good = columnar(deser, payloads)
    assert _reasons(got_errors) == want_errors
    assert sorted(got_good, key=lambda x: x[0]) == want


@SETTINGS
@given(chunks=st.lists(batches(), min_size=1, max_size=4))
def test_b86_ndjson_columnar_batch_refuses_exactly_the_bad_lines(
    build_json: Build, chunks: list[list[bytes]]
) -> None:
    deser = build_json({"framing": "ndjson"})
    assert deser.columnar is not None
    payloads = [b"\n".join(lines) + b"\n" for lines in chunks]
    want_errors, want = _expected(*reference(deser, payloads))
    got_errors, got_good = columnar(deser, payloads)
    assert _reasons(got_errors) == want_errors
    assert _by_index(got_good) == _by_index(want)


@dataclasses.dataclass
class Declared:
    n: int
    x: float | None = None
    s: str = "d"
    maybe: int | None = None
    flags: list[bool] = dataclasses.field(default_factory=list)
    nums: list[int] = dataclasses.field(default_factory=list)
    texts: list[str] = dataclasses.field(default_factory=list)


OUT_OF_RANGE = st.sampled_from([2**63, 2**64 - 1, -(2**63), 1e300, -0.0])
ANY_VALUE = ITEMS | ARRAYS | OUT_OF_RANGE | VALUES["objects"]
"""Any JSON value, of the right type for a declared field or not."""

DECLARED_FIELDS = {
    "n": st.integers(-(2**63), 2**63 - 1),
    "x": st.none() | st.floats(allow_nan=False, allow_infinity=False) | st.integers(-9, 9),
    "s": st.text(max_size=4),
    "maybe": st.none() | st.integers(-(2**63), 2**63 - 1),
    "flags": st.lists(st.booleans(), max_size=3),
    "nums": st.lists(st.integers(-(2**63), 2**63 - 1), max_size=3),
    "texts": st.lists(st.text(max_size=3), max_size=3),
}


@st.composite
def declared_batches(draw: st.DrawFn) -> list[bytes]:
    """Records for :class:`Declared`: each field missing, of its type, or any value (a
    wrong type, out of range, an array of mixed kinds or holding nulls)."""
    records = []
    for _ in range(draw(st.integers(1, 20))):
        record = {}
        for name, right in DECLARED_FIELDS.items():
            choice = draw(st.sampled_from(["right", "right", "any", "missing"]))
            if choice != "missing":
                record[name] = draw(right if choice == "right" else ANY_VALUE)
        records.append(orjson.dumps(record))
    return records


@SETTINGS
@given(payloads=declared_batches())
def test_b340_a_declared_target_refuses_and_decodes_exactly_as_the_row_path(
    build_json: Build, payloads: list[bytes]
) -> None:
    """With a ``target`` type the columns are declared: the columnar path refuses exactly
    the records the row path refuses (wrong types, nulls inside arrays of a type that
    holds none, numbers out of range) and yields the row path's values for the others
    (B86, B340)."""
    deser = build_json({"target": f"{__name__}:Declared"})
    assert deser.columnar is not None
    want_errors, want_good = reference(deser, payloads)
    got_errors, got_good = columnar(deser, payloads)
    assert _reasons(got_errors) == _reasons(want_errors)
    assert got_good == [(i, _no_nulls(dataclasses.asdict(v))) for i, v in want_good]


def test_b340_a_declared_int_beyond_int64_is_taken_as_the_row_path_takes_it(
    build_json: Build,
) -> None:
    """A ``target``'s ``int`` field holding an integer up to 2^64 - 1 (orjson's ``int``,
    which the row path takes) is read as ``uint64``, or as decimals beside negative
    integers, instead of a record error on the columnar path alone (B340, B138)."""
    deser = build_json({"target": f"{__name__}:Declared"})
    for ns in ([1, 2**63, 2**64 - 1], [-1, 2**64 - 1], [1, 2]):
        payloads = [orjson.dumps({"n": n, "nums": [n, 0]}) for n in ns]
        got_errors, got_good = columnar(deser, payloads)
        assert got_errors == {}
        assert [(v["n"], v["nums"]) for _, v in got_good] == [(n, [n, 0]) for n in ns]


def _by_index(good: list[tuple[int, Any]]) -> dict[int, list[str]]:
    """Each index's records as sorted canonical text (numbers as floats: a column that
    holds an integer in one record and a float in another is a float column)."""
    out: dict[int, list[str]] = {}
    for index, value in good:
        text = orjson.dumps(_numbers(value), option=orjson.OPT_SORT_KEYS).decode()
        out.setdefault(index, []).append(text)
    return {index: sorted(texts) for index, texts in out.items()}


def _numbers(value: Any) -> Any:
    if isinstance(value, decimal.Decimal):
        return float(value)
    if isinstance(value, dict):
        return {k: _numbers(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_numbers(v) for v in value]
    if isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    return value


def test_b86_a_clean_batch_is_one_frame_with_row_indices(
    build_json: Build, monkeypatch: pytest.MonkeyPatch
) -> None:
    deser = build_json({})
    monkeypatch.setattr(deser.columnar, "_by_record", None)  # the fast path only
    payloads = [
        orjson.dumps({"id": i, "name": f"n{i}", "at": "2026-01-01T00:00:00"}) for i in range(50)
    ]
    frames, errors, _ = deser.deserialize_batch([memoryview(p) for p in payloads])
    assert errors == []
    assert len(frames) == 1
    df = frames[0][1]
    assert df.get_column("__spate_row").to_list() == list(range(50))
    assert df.schema["at"] == pl.String  # looks like a timestamp, stays a string as on rows
    assert df.get_column("id").to_list() == list(range(50))


@pytest.mark.parametrize(
    "framing, odd",
    [
        ("single", [b"", b'{"f0": 1}{"f0": 2}']),
        ("single", [b"  ", b'{"f0": 1} {"f0": 2}']),
        ("single", [b'{"f0":\n 1}', b'{"f0": 3}']),
        ("single", [b'{"f0": 1}\r{"f0": 2}', b"\r"]),
        ("ndjson", [b'{"f0": 1}\n\n{"f0": 2}{"f0": 3}\n']),
        ("ndjson", [b'{"f0": 1}\r\n{"f0": 2}\r\n']),
    ],
)
def test_b86_a_blank_payload_beside_two_objects_on_one_line_never_shifts_rows(
    build_json: Build, framing: str, odd: list[bytes]
) -> None:
    """The joined batch is read as lines: a payload the reader would skip (blank) and
    one it would read as two rows must not cancel out in the row count (B86)."""
    deser = build_json({"framing": framing})
    payloads = [orjson.dumps({"f0": i}) for i in range(5)] + odd + [b'{"f0": 9}']
    assert columnar(deser, payloads) == reference(deser, payloads)


@pytest.mark.parametrize("framing", ["single", "ndjson"])
def test_b86_views_that_are_slices_of_one_buffer_read_their_own_bytes(
    build_json: Build, framing: str
) -> None:
    """Payload views cut from one larger buffer (as a source may hand them over) read
    exactly their own bytes on the fast path (B86)."""
    deser = build_json({"framing": framing})
    records = [orjson.dumps({"id": i, "name": f"n{i}"}) for i in range(20)]
    buffer = memoryview(b"\n".join(records))
    views, start = [], 0
    for record in records:
        views.append(buffer[start : start + len(record)])
        start += len(record) + 1
    frames, errors, empty = deser.deserialize_batch(views)
    assert (errors, empty, len(frames)) == ([], 0, 1)
    assert frames[0][1].get_column("id").to_list() == list(range(20))
    assert frames[0][1].get_column("__spate_row").to_list() == list(range(20))


@dataclasses.dataclass
class Order:
    id: int
    amount: float
    note: str | None = None
    region: str = "eu"
    tags: list[str] = dataclasses.field(default_factory=list)


def test_b86_a_target_type_declares_the_columns_and_defaults_match_the_row_path(
    build_json: Build,
) -> None:
    deser = build_json({"target": f"{__name__}:Order"})
    assert deser.columnar is not None
    payloads = [
        b'{"id": 1, "amount": 2}',
        b'{"id": 2, "amount": 2.5, "note": "x", "region": "us", "tags": ["a"]}',
        b'{"id": 3.5, "amount": 1}',  # not an integer: a record error on both paths
        b'{"id": 4, "amount": 1, "other": true}',  # unknown field: a record error
        b'{"amount": 1}',  # required field missing
    ]
    want_errors, want_good = reference(deser, payloads)
    got_errors, got_good = columnar(deser, payloads)
    assert got_errors == want_errors
    assert sorted(want_errors) == [2, 3, 4]
    assert got_good == [(i, _no_nulls(dataclasses.asdict(v))) for i, v in want_good]
    clean = [b'{"id": 5, "amount": 3, "region": "ap", "tags": []}'] * 3
    frames, errors, _ = deser.deserialize_batch([memoryview(p) for p in clean])
    assert errors == [] and len(frames) == 1
    assert frames[0][1].schema["amount"] == pl.Float64


def test_b86_a_field_whose_type_changes_within_the_batch_splits_the_frame(
    build_json: Build,
) -> None:
    deser = build_json({})
    payloads = [b'{"a": 1}', b'{"a": "x"}', b'{"a": 2}']
    frames, errors, _ = deser.deserialize_batch([memoryview(p) for p in payloads])
    assert errors == []
    rows = sorted((r["__spate_row"], r["a"]) for _, df in frames for r in df.to_dicts())
    assert rows == [(0, 1), (1, "x"), (2, 2)]


def test_b87_integers_beside_fractions_stay_integers_as_orjson_reads_them(
    build_json: Build,
) -> None:
    """Arrow reads a field mixing integers and fractions as floats (2^60 + 1 would become
    2^60, 3 would become 3.0); the batch is split so each integer stays an integer (one
    beyond Int64 as a UInt64, B138). An array of one record mixing integers exact in a
    double with fractions stays doubles, and one mixing negative integers with integers
    beyond Int64 becomes decimals (B170); an integer beyond 2^53 beside a fraction in one
    array, which no Arrow column holds as orjson does, is a record error (B87)."""
    deser = build_json({})
    payloads = [
        b'{"a": 1152921504606846977}',
        b'{"a": 0.5}',
        b'{"a": 3}',
        b'{"a": 2.0}',
        b'{"a": 18446744073709551615}',
        b'{"a": [1, 2.5]}',
        b'{"a": [-1, 18446744073709551615]}',
        b'{"a": [1152921504606846977, 2.5]}',
    ]
    frames, errors, _ = deser.deserialize_batch([memoryview(p) for p in payloads])
    rows = sorted((r["__spate_row"], r["a"]) for _, df in frames for r in df.to_dicts())
    assert [(i, type(v), v) for i, v in rows[:5]] == [
        (0, int, 2**60 + 1),
        (1, float, 0.5),
        (2, int, 3),
        (3, float, 2.0),
        (4, int, 2**64 - 1),
    ]
    assert rows[5] == (5, [1.0, 2.5])
    assert rows[6] == (6, [-1, 2**64 - 1])
    assert {type(v) for v in rows[6][1]} == {decimal.Decimal}
    assert [index for index, _ in errors] == [7]
    assert all("inexact float" in str(error) for _, error in errors)


MIXED_ARRAYS = [[1, 2], ["a"], [], [None, 3]]
"""One field's arrays across four records: items of different kinds, an empty array and
a null before the first number."""

NULL_FIRST = {
    "array of numbers": [None, None, 3],
    "array of text": [None, "s"],
    "array of objects": [None, {"x": 1}],
    "array inside an object": {"x": [None, 1]},
    "arrays of objects holding arrays": [{"x": [None, 2]}],
    "nested arrays": [[None, 1]],
    "a null before an array": [None, [1]],
    "an empty array before one with a null": [[], [None, 1]],
    "a map of arrays": {"k": [None, "s"], "j": [True]},
    "nulls beside an integer beyond Int64": {"x": 2**63, "y": [None, None]},
}
"""Values whose arrays open with nulls, in every shape that nests an array."""


@pytest.mark.parametrize("framing", ["single", "ndjson"])
@pytest.mark.parametrize(
    "values",
    [MIXED_ARRAYS, *([1, shape, 2] for shape in NULL_FIRST.values())],
    ids=["mixed kinds", *NULL_FIRST],
)
def test_b340_arrays_of_mixed_kinds_and_nulls_decode_as_the_row_path_decodes_them(
    build_json: Build, framing: str, values: list[Any]
) -> None:
    """Arrow's reader, inferring an array's item type, drops the nulls before the first
    typed item and builds a list column whose offsets run past its items: polars
    refused the frame and the whole batch failed (``offsets must not exceed the values
    length``). Each record now decodes with the row path's values, the batch's other
    records beside it, on the fast path and record by record (B340)."""
    deser = build_json({"framing": framing})
    payloads = [orjson.dumps({"id": i, "a": v}) for i, v in enumerate(values)]
    if framing == "ndjson":
        payloads = [b"\n".join(payloads[:2]), *payloads[2:]]
    want_errors, want_good = reference(deser, payloads)
    got_errors, got_good = columnar(deser, payloads)
    assert got_errors == want_errors == {}
    assert [(i, v["a"]) for i, v in got_good] == [(i, v["a"]) for i, v in want_good]
    alone = [orjson.dumps({"a": v}) for v in values if v not in (1, 2)]
    assert columnar(deser, alone) == reference(deser, alone)


def test_b341_a_record_arrow_cannot_build_even_alone_is_a_record_error_of_its_own(
    build_json: Build, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A record whose own array holds items of kinds no one Arrow type holds, or whose
    columns polars refuses to take from Arrow (as it refused a list column whose offsets
    ran past its items), fails no batch: it is a record error of its own at its
    position, under ``on_error``, and the batch's other records decode (B341)."""
    from_arrow = pl.from_arrow

    def broken(table: Any, **kwargs: Any) -> Any:
        if 3 in table.column("id").to_pylist():
            raise pl.exceptions.ComputeError("offsets must not exceed the values length")
        return from_arrow(table, **kwargs)

    deser = build_json({})
    mixed = [*MIXED_ARRAYS, [1, "a"], [{"x": 1}, {"x": "s"}], [7]]
    payloads = [orjson.dumps({"id": i, "a": v}) for i, v in enumerate(mixed)]
    got_errors, got_good = columnar(deser, payloads)
    assert reference(deser, payloads)[0] == {}  # the row path takes every record
    assert sorted(got_errors) == [4, 5]
    assert all(COLUMNS_REFUSE in reasons[0] for reasons in got_errors.values())
    assert [(i, v["a"]) for i, v in got_good] == [(i, mixed[i]) for i in (0, 1, 2, 3, 6)]
    monkeypatch.setattr(pl, "from_arrow", broken)
    got_errors, got_good = columnar(deser, payloads)
    assert sorted(got_errors) == [3, 4, 5]
    assert [i for i, _ in got_good] == [0, 1, 2, 6]


def test_b86_array_framing_and_top_level_any_stay_on_the_row_path(build_json: Build) -> None:
    assert build_json({"framing": "array"}).columnar is None
    assert build_json({"top_level": "any"}).columnar is None


@pytest.mark.parametrize("depth", [3, 63, 64, 1023, 1100])
def test_b86_deeply_nested_records_never_reach_polars_and_stay_exact_below_the_limit(
    build_json: Build, depth: int
) -> None:
    """Below ``DEPTH_LIMIT`` levels as on rows; from it on a record error (polars would
    overflow its stack near a thousand levels); beyond orjson's 1024 its own error."""
    from spate_json._columnar import DEPTH_LIMIT

    deep = b'{"a": ' + b"[" * (depth - 1) + b"]" * (depth - 1) + b"}"
    payloads = [b'{"a": [1]}', deep, b'{"a": [2]}']
    deser = build_json({})
    want_errors, _ = reference(deser, payloads)
    got_errors, got_good = columnar(deser, payloads)
    if depth < DEPTH_LIMIT or depth > 1024:
        assert got_errors == want_errors
    else:
        assert list(got_errors) == [1]
        assert "cannot be read as columns" in got_errors[1][0]
    assert {i for i, _ in got_good} == {0, 2} | ({1} if 1 not in got_errors else set())


ROW_START = """
import dataclasses
import sys

from spate import BuildContext, ManualClock
from spate.config import decode
from spate.metrics._meter import Meter
from spate_json import JsonConfig, JsonDeserializerFactory


@dataclasses.dataclass
class Order:
    id: int
    amount: float
    tags: list[str] = dataclasses.field(default_factory=list)


class Budget:
    def acquire(self, nbytes):
        return None

    def release(self, nbytes):
        return None


context = BuildContext(
    pipeline="json-start",
    component="deserializer",
    meter=Meter("json-start"),
    clock=ManualClock(),
    run_nonce="r1",
    budget=Budget(),
)
for raw in ({}, {"framing": "ndjson"}, {"target": "__main__:Order"}):
    deser = JsonDeserializerFactory.build(decode(JsonConfig, raw, "json"), context)
    assert deser.columnar is not None, raw
print(" ".join(sorted(m for m in ("polars", "pyarrow") if m in sys.modules)))
"""


def test_b28_building_the_columnar_decoder_imports_neither_polars_nor_pyarrow() -> None:
    """A row pipeline builds the columnar decoder it never uses (with and without a
    ``target``): that costs no polars or pyarrow import at start-up; the first columnar
    batch imports them (B28)."""
    result = subprocess.run(
        [sys.executable, "-c", ROW_START], capture_output=True, text=True, check=True
    )
    assert result.stdout.split() == []
