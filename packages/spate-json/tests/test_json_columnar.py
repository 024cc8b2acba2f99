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

VALUES: dict[str, Any] = {
    **JSON_VALUES,
    "when": st.sampled_from(["2024-01-01T00:00:00", "2026-12-01 10:20:30.123", "1999-01-01"]),
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
            good.append((index, {k: v for k, v in row.items() if v is not None}))
    good.sort(key=lambda item: item[0])
    return errors, good


def _no_nulls(value: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in value.items() if v is not None}


@SETTINGS
@given(payloads=batches())
def test_b86_single_columnar_batch_refuses_exactly_what_the_row_path_refuses(
    build_json: Build, payloads: list[bytes]
) -> None:
    deser = build_json({})
    assert deser.columnar is not None
    want_errors, want_good = reference(deser, payloads)
    got_errors, got_good = columnar(deser, payloads)
    assert got_errors == want_errors
    want = [(i, _no_nulls(v)) for i, v in want_good]
    assert sorted(got_good, key=lambda x: x[0]) == want


@SETTINGS
@given(chunks=st.lists(batches(), min_size=1, max_size=4))
def test_b86_ndjson_columnar_batch_refuses_exactly_the_bad_lines(
    build_json: Build, chunks: list[list[bytes]]
) -> None:
    deser = build_json({"framing": "ndjson"})
    assert deser.columnar is not None
    payloads = [b"\n".join(lines) + b"\n" for lines in chunks]
    want_errors, want_good = reference(deser, payloads)
    got_errors, got_good = columnar(deser, payloads)
    assert got_errors == want_errors
    want = [(i, _no_nulls(v)) for i, v in want_good]
    assert _by_index(got_good) == _by_index(want)


def _by_index(good: list[tuple[int, Any]]) -> dict[int, list[str]]:
    """Each index's records as sorted canonical text (numbers as floats: a column that
    holds an integer in one record and a float in another is a float column)."""
    out: dict[int, list[str]] = {}
    for index, value in good:
        text = orjson.dumps(_numbers(value), option=orjson.OPT_SORT_KEYS).decode()
        out.setdefault(index, []).append(text)
    return {index: sorted(texts) for index, texts in out.items()}


def _numbers(value: Any) -> Any:
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
