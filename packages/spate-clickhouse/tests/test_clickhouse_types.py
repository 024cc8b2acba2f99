"""ClickHouse type names: parsing, canonical spelling, agreement (B20)."""

from __future__ import annotations

import pytest
from spate_clickhouse import parse_type
from spate_clickhouse._types import TypeSyntaxError, types_agree


@pytest.mark.parametrize(
    ("written", "canonical"),
    [
        ("UInt64", "UInt64"),
        ("Nullable(Decimal(9,2))", "Nullable(Decimal(9, 2))"),
        ("Decimal32(2)", "Decimal(9, 2)"),
        ("Decimal64(4)", "Decimal(18, 4)"),
        ("Decimal(10)", "Decimal(10, 0)"),
        ("Map(LowCardinality(String),Array(UInt8))", "Map(LowCardinality(String), Array(UInt8))"),
        ("Enum8('red'=1,'green'=2,'blue'=-3)", "Enum8('red' = 1, 'green' = 2, 'blue' = -3)"),
        ("Enum('a' = 1, 'b' = 300)", "Enum16('a' = 1, 'b' = 300)"),
        ("Tuple(a Int32, b String)", "Tuple(a Int32, b String)"),
        ("DateTime64(3, 'UTC')", "DateTime64(3, 'UTC')"),
        ("LowCardinality(Nullable(String))", "LowCardinality(Nullable(String))"),
        ("FixedString(8)", "FixedString(8)"),
        ("Boolean", "Bool"),
        ("Enum8('it\\'s' = 1)", "Enum8('it\\'s' = 1)"),
    ],
)
def test_types_print_in_clickhouse_canonical_form(written: str, canonical: str) -> None:
    assert str(parse_type(written)) == canonical
    assert parse_type(canonical) == parse_type(written)


@pytest.mark.parametrize("bad", ["", "Array(", "Nullable(Int32))", "Map(String Int32", "(x)"])
def test_bad_type_names_are_refused(bad: str) -> None:
    with pytest.raises(TypeSyntaxError):
        parse_type(bad)


def test_b20_declared_types_agree_only_with_the_same_type() -> None:
    def agree(a: str, b: str) -> bool:
        return types_agree(parse_type(a), parse_type(b))

    assert agree("Decimal32(2)", "Decimal(9, 2)")
    assert not agree("Decimal(9, 2)", "Decimal(9, 3)")
    assert not agree("Int64", "Nullable(Int64)")
    assert not agree("DateTime64(3)", "DateTime64(6)")
    assert agree("DateTime64(3)", "DateTime64(3, 'UTC')")  # zone not declared: any zone
    assert not agree("DateTime64(3, 'UTC')", "DateTime64(3, 'Europe/Berlin')")
    assert agree("DateTime", "DateTime('UTC')")
    assert not agree("String", "LowCardinality(String)")
    assert not agree("Array(Int32)", "Array(Int64)")
    assert not agree("Map(String, Int64)", "Map(String, UInt64)")
    assert agree("Map(String, Array(Nullable(Float64)))", "Map(String, Array(Nullable(Float64)))")


def test_wrappers_are_seen_through() -> None:
    t = parse_type("LowCardinality(Nullable(String))")
    assert t.nullable and t.unwrapped().name == "String"
    assert not parse_type("Array(Nullable(Int8))").nullable
