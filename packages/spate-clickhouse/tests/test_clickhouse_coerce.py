"""Per-record value checks and coercions (B28) and the first-row check of ``full`` (B20)."""

from __future__ import annotations

import datetime as dt
import uuid
from collections import namedtuple
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from spate.errors import ErrorClass, SinkError
from spate_clickhouse import Column, RowEncoder, parse_type
from spate_clickhouse._coerce import BadValue, coercer_for

UTC = dt.UTC
E = dt.datetime(1970, 1, 1, tzinfo=UTC)
PLUS1 = dt.timezone(dt.timedelta(hours=1))


def coerce(type_name: str, value: object) -> object:
    return coercer_for(parse_type(type_name), [False])(value)


def refused(type_name: str, value: object) -> str:
    with pytest.raises(BadValue) as info:
        coerce(type_name, value)
    return str(info.value)


@pytest.mark.parametrize(
    ("type_name", "value", "written"),
    [
        ("UInt8", 255, 255),
        ("Int8", -128, -128),
        ("Int64", True, 1),
        ("Int64", 5.0, 5),
        ("Int64", Decimal("7"), 7),
        ("Int64", " 42 ", 42),
        ("UInt256", 2**256 - 1, 2**256 - 1),
        ("Int128", -(2**127), -(2**127)),
        ("Float64", 1, 1.0),
        ("Float64", "2.5", 2.5),
        ("Float32", float("inf"), float("inf")),
        ("Decimal(9, 2)", Decimal("1.5"), Decimal("1.5")),
        ("Decimal(9, 2)", 3, Decimal(3)),
        ("Decimal(9, 2)", 0.1, Decimal("0.10")),
        ("Decimal(9, 2)", "1234567.89", Decimal("1234567.89")),
        ("String", "naïve", "naïve"),
        ("String", b"bytes", "bytes"),
        ("String", memoryview(b"view"), "view"),
        ("FixedString(4)", "ab", b"ab\x00\x00"),
        ("FixedString(4)", b"abcd", b"abcd"),
        ("Date", dt.date(1970, 1, 2), dt.date(1970, 1, 2)),
        ("Date", dt.datetime(1970, 1, 3, 23, 0, tzinfo=UTC), dt.date(1970, 1, 3)),
        ("Date", "2000-01-01", dt.date(2000, 1, 1)),
        ("Date", 1, dt.date(1970, 1, 2)),
        ("Date32", -25567, dt.date(1900, 1, 1)),
        ("DateTime", dt.datetime(1970, 1, 1, 0, 1), E + dt.timedelta(seconds=60)),
        ("DateTime", dt.datetime(1970, 1, 1, 1, 1, tzinfo=PLUS1), E + dt.timedelta(seconds=60)),
        ("DateTime", 1_700_000_000, E + dt.timedelta(seconds=1_700_000_000)),
        ("DateTime", 1.9, E + dt.timedelta(seconds=1)),
        ("DateTime('Europe/Berlin')", E + dt.timedelta(seconds=5), E + dt.timedelta(seconds=5)),
        (
            "DateTime64(3)",
            dt.datetime(1970, 1, 1, 0, 0, 1, 234567),
            E + dt.timedelta(microseconds=1234567),
        ),
        (
            "DateTime64(6, 'UTC')",
            dt.datetime(1969, 12, 31, 23, 59, 59, tzinfo=UTC),
            E - dt.timedelta(seconds=1),
        ),
        ("DateTime64(9)", dt.datetime(1970, 1, 1, 0, 0, 0, 1), 1000),
        ("DateTime64(9)", 5, 5),
        ("DateTime64(3)", 1234, E + dt.timedelta(milliseconds=1234)),
        ("DateTime64(3)", "1970-01-01T00:00:02", E + dt.timedelta(seconds=2)),
        ("UUID", b"\x00" * 16, uuid.UUID(int=0)),
        ("Bool", 1, True),
        ("Bool", "false", False),
        ("Enum8('red' = 1, 'blue' = -3)", "blue", -3),
        ("Enum16('low' = -1000, 'high' = 1000)", 1000, 1000),
        ("Nullable(Int32)", None, None),
        ("Nullable(Int32)", "3", 3),
        ("LowCardinality(Nullable(String))", None, None),
        ("LowCardinality(String)", "x", "x"),
        ("Array(Int32)", (1, 2), [1, 2]),
        ("Array(Nullable(Float64))", [None, 1], [None, 1.0]),
        ("Map(String, Int64)", {"a": 1}, {"a": 1}),
        ("Map(LowCardinality(String), Array(UInt8))", {"k": (1,)}, {"k": [1]}),
        ("Tuple(Int32, String)", [1, "a"], (1, "a")),
        ("Tuple(a Int32, b String)", {"b": "x", "a": 2}, (2, "x")),
        ("Tuple(a Int32, b Nullable(String))", {"a": 2}, (2, None)),  # B139
        ("Int128", 2**127 - 1, 2**127 - 1),
        ("UInt256", 1e30, 10**30 + 19884624838656),
        ("IPv4", "10.0.0.1", "10.0.0.1"),  # unchecked type: passed through
    ],
)
def test_values_are_written_in_their_columns_form(
    type_name: str, value: object, written: object
) -> None:
    assert coerce(type_name, value) == written
    assert type(coerce(type_name, value)) is type(written)


@pytest.mark.parametrize(
    ("type_name", "value", "says"),
    [
        ("UInt8", 256, "out of range for UInt8"),
        ("UInt64", -1, "out of range"),
        ("Int32", 1.5, "whole number"),
        ("Int32", "x", "whole number"),
        ("Int32", None, "NULL"),
        ("Int32", [1], "an integer"),
        ("Float32", 1e39, "out of range for Float32"),
        ("Float64", "nan?", "a number"),
        ("Decimal(9, 2)", Decimal("1.234"), "more than 2 decimal places"),
        ("Decimal(9, 2)", Decimal("12345678.9"), "does not fit"),
        ("Decimal(9, 2)", float("nan"), "cannot be stored"),
        ("String", 5, "text"),
        ("FixedString(2)", "abc", "do not fit FixedString(2)"),
        ("Date", dt.date(1969, 12, 31), "out of range"),
        ("Date", "yesterday", "ISO date"),
        ("DateTime", dt.datetime(2200, 1, 1), "out of range"),
        ("DateTime", -1, "out of range"),
        ("DateTime64(3)", dt.datetime(1850, 1, 1), "out of range"),
        ("DateTime64(3)", object(), "a datetime"),
        ("UUID", "not-a-uuid", "a UUID"),
        ("Bool", 2, "a bool"),
        ("Enum8('red' = 1)", "green", "not one of Enum8's names"),
        ("Enum8('red' = 1)", 2, "one of red"),
        ("Array(Int32)", "abc", "a list"),
        ("Array(Int32)", [1, "x"], "whole number"),
        ("Map(String, Int64)", [("a", 1)], "a mapping"),
        ("Tuple(Int32, String)", (1,), "a tuple of 2 values"),
        ("Tuple(a Int32, b String)", {"a": 2}, "the tuple has no element 'b'"),
        ("UInt128", -1, "out of range"),
        ("Int256", 2**255, "out of range"),
        ("Array(String)", [b"\xff"], "not UTF-8"),
    ],
)
def test_b28_values_a_column_cannot_take_are_refused_with_a_reason(
    type_name: str, value: object, says: str
) -> None:
    assert says in refused(type_name, value)


def test_non_utf8_bytes_in_a_string_column_are_kept_as_bytes() -> None:
    seen = [False]
    assert coercer_for(parse_type("String"), seen)(b"\xff\x00") == b"\xff\x00"
    assert seen == [True]


def _encoder(*columns: tuple[str, str], strict: bool = False) -> RowEncoder:
    return RowEncoder([Column(n, parse_type(t)) for n, t in columns], strict_first=strict)


COLS = (("id", "UInt64"), ("name", "String"), ("amount", "Nullable(Decimal(9, 2))"))


def test_rows_may_be_tuples_lists_mappings_namedtuples_or_dataclasses() -> None:
    enc = _encoder(*COLS)
    Row = namedtuple("Row", "amount name id")

    @dataclass
    class Rec:
        id: int
        name: str
        amount: Decimal | None
        extra: str = "ignored"

    expected = (1, "a", Decimal("2.5"))
    assert enc.encode((1, "a", Decimal("2.5")))[0] == expected
    assert enc.encode([1, "a", "2.5"])[0] == expected
    assert enc.encode({"id": 1, "name": "a", "amount": 2.5, "other": 0})[0] == expected
    assert enc.encode(Row(Decimal("2.5"), "a", 1))[0] == expected
    assert enc.encode(Rec(1, "a", Decimal("2.5")))[0] == expected
    # a missing Nullable column is NULL; a missing required one is a record error
    assert enc.encode({"id": 1, "name": "a"})[0] == (1, "a", None)
    with pytest.raises(SinkError, match="no value for column name") as info:
        enc.encode({"id": 1})
    assert info.value.error_class is ErrorClass.RECORD


def test_b28_a_bad_value_is_a_record_error_naming_column_type_and_value() -> None:
    enc = _encoder(*COLS)
    with pytest.raises(SinkError) as info:
        enc.encode((-5, "a", None))
    assert info.value.error_class is ErrorClass.RECORD
    assert "column id (UInt64)" in info.value.reason and "-5" in info.value.reason
    with pytest.raises(SinkError, match="3 columns") as arity:
        enc.encode((1, "a"))
    assert arity.value.error_class is ErrorClass.RECORD
    with pytest.raises(SinkError, match="tuple, list, mapping or dataclass"):
        enc.encode(42)


def test_buffer_append_keeps_written_values_and_estimates_size() -> None:
    enc = _encoder(*COLS)
    buffer = enc.new_buffer()
    small = buffer.append((1, "a", None))
    large = buffer.append((2, "a" * 1000, "1.25"))
    assert large - small == 999
    with pytest.raises(SinkError):
        buffer.append((3, 4, None))
    assert len(buffer) == 2  # a refused row leaves the buffer as it was
    assert buffer.columns(3) == [[1, 2], ["a", "a" * 1000], [None, Decimal("1.25")]]
    assert len(buffer) == 2


def test_binary_string_columns_are_sent_as_bytes_throughout() -> None:
    enc = _encoder(("id", "UInt8"), ("payload", "String"))
    buffer = enc.new_buffer()
    buffer.append((1, "text"))
    buffer.append((2, b"\xfe\xff"))
    assert enc.binary_columns() == {1}
    assert buffer.columns(2, enc.binary_columns()) == [[1, 2], [b"text", b"\xfe\xff"]]


def test_b20_full_checks_the_first_row_as_a_whole_and_fails_fatally() -> None:
    enc = _encoder(*COLS, strict=True)
    first = enc.new_buffer()
    with pytest.raises(SinkError) as info:
        first.append(("x", 5, None))
    assert info.value.error_class is ErrorClass.FATAL
    assert "id (UInt64)" in info.value.reason and "name (String)" in info.value.reason
    shape = _encoder(*COLS, strict=True).new_buffer()
    with pytest.raises(SinkError, match="first row does not fit") as wrong:
        shape.append({"id": 1})
    assert wrong.value.error_class is ErrorClass.FATAL


def test_after_a_good_first_row_later_bad_rows_are_record_errors() -> None:
    enc = _encoder(*COLS, strict=True)
    buffer = enc.new_buffer()
    buffer.append((1, "a", None))
    with pytest.raises(SinkError) as info:
        buffer.append((1, 2, None))
    assert info.value.error_class is ErrorClass.RECORD
    assert type(enc.new_buffer()) is type(buffer)  # the check ran once


@given(st.integers(min_value=-(2**70), max_value=2**70))
def test_b28_integer_range_is_enforced_exactly(value: int) -> None:
    for name, lo, hi in (("Int32", -(2**31), 2**31 - 1), ("UInt64", 0, 2**64 - 1)):
        if lo <= value <= hi:
            assert coerce(name, value) == value
        else:
            assert "out of range" in refused(name, value)


@given(
    st.decimals(
        allow_nan=False, allow_infinity=False, places=4, min_value=-(10**9), max_value=10**9
    )
)
def test_decimal_places_and_digits_are_enforced(value: Decimal) -> None:
    try:
        written: Any = coerce("Decimal(12, 2)", value)
    except BadValue:
        assert value != value.quantize(Decimal("0.01")) or abs(value) >= 10**10
    else:
        assert written == value


def test_written_datetimes_are_aware_so_the_client_reads_them_as_utc() -> None:
    for type_name in ("DateTime", "DateTime64(3)", "DateTime64(6)"):
        written = coerce(type_name, dt.datetime(2020, 5, 1, 12, 0))
        assert isinstance(written, dt.datetime) and written.utcoffset() == dt.timedelta(0)


def test_fast_path_and_coercers_agree_on_temporal_bounds() -> None:
    enc = _encoder(("d", "Date"), ("t", "DateTime"), ("t3", "DateTime64(3)"))
    ok = (dt.date(2149, 6, 6), E + dt.timedelta(seconds=2**32 - 1), E - dt.timedelta(days=25567))
    assert enc.encode(ok)[0] == ok
    for bad in (
        (dt.date(2149, 6, 7), ok[1], ok[2]),
        (ok[0], E + dt.timedelta(seconds=2**32), ok[2]),
        (ok[0], ok[1], dt.datetime(1899, 12, 31, 23, 59, tzinfo=UTC)),
    ):
        with pytest.raises(SinkError, match="out of range"):
            enc.encode(bad)


def test_a_tuple_already_in_written_form_is_kept_and_others_are_rebuilt() -> None:
    enc = _encoder(("id", "UInt64"), ("name", "Nullable(String)"), ("at", "DateTime64(3)"))
    buffer = enc.new_buffer()
    ready = (1, None, E)
    buffer.append(ready)
    buffer.append((2, b"x", E))
    buffer.append([3, "y", E])
    assert buffer.rows[0] is ready
    assert buffer.rows[1] == (2, "x", E) and buffer.rows[2] == (3, "y", E)
    with pytest.raises(SinkError, match="out of range"):
        buffer.append((-1, None, E))
    assert len(buffer) == 3
