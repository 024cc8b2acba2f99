"""JSON, Variant and Dynamic columns: type names, the checks of each value, the wire
types, and the columnar path's agreement with the row path (B310-B316).

No engine here: what the server stores is checked against chDB in
``tests/clickhouse/test_clickhouse_semistructured.py``.
"""

from __future__ import annotations

import datetime as dt
import decimal
import json
import uuid
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from spate.errors import ErrorClass, SinkError
from spate_clickhouse._coerce import BadValue, coercer_for
from spate_clickhouse._encoder import Column, RowEncoder
from spate_clickhouse._semistructured import DYNAMIC_WIRE, wire_type
from spate_clickhouse._types import parse_type, types_agree

from tests.support.scale import scaled

pl = pytest.importorskip("polars")
pa = pytest.importorskip("pyarrow")


def _member(value: object) -> tuple[object, str] | None:
    """A written Variant/Dynamic value as ``(value, member)`` (None for NULL)."""
    if value is None:
        return None
    return value.value, value.type_name  # type: ignore[attr-defined]


# -- B316: type names -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("declared", "server"),
    [
        ("Variant(String, Int64, Float64)", "Variant(Float64, Int64, String)"),
        ("JSON(a.b Int32, SKIP s)", "JSON(`a.b` Int32, SKIP s)"),
        ("JSON(max_dynamic_paths=10, x String)", "JSON(max_dynamic_paths = 10, x String)"),
        ("JSON(SKIP REGEXP '^tmp', a UInt8)", "JSON(a UInt8, SKIP REGEXP '^tmp')"),
        ("Dynamic(max_types=8)", "Dynamic(max_types = 8)"),
        ("Array(Variant(String, Array(Int64)))", "Array(Variant(Array(Int64), String))"),
    ],
)
def test_b316_semistructured_type_names_parse_and_agree_with_the_servers_spelling(
    declared: str, server: str
) -> None:
    mine, theirs = parse_type(declared), parse_type(server)
    assert types_agree(mine, theirs)
    assert str(parse_type(str(mine))) == str(mine)


def test_b316_a_different_variant_or_typed_path_does_not_agree() -> None:
    assert not types_agree(parse_type("Variant(String, Int64)"), parse_type("Variant(String)"))
    assert not types_agree(parse_type("JSON(a Int32)"), parse_type("JSON(a Int64)"))


# -- B310: Variant members ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "member"),
    [
        ("a", "String"),
        ("12", "String"),  # text stays text beside numbers (clickhouse-connect #534)
        (7, "Int64"),
        (1.5, "Float64"),
        (True, "Bool"),
        ([1, 2], "Array(Int64)"),
        (2.0, "Int64"),  # a whole float: no Float member here, Int64 takes it
    ],
)
def test_b310_a_value_goes_to_the_member_of_its_own_kind_first(value: object, member: str) -> None:
    t = parse_type(
        "Variant(String, Int64, Float64, Bool, Array(Int64))"
        if member != "Int64" or value != 2.0
        else "Variant(String, Int64)"
    )
    written = _member(coercer_for(t)(value))
    assert written is not None and written[1] == member


def test_b310_text_goes_to_a_member_that_reads_it_when_no_string_member() -> None:
    coerce = coercer_for(parse_type("Variant(Int64, Date32)"))
    assert _member(coerce("2024-01-02")) == (dt.date(2024, 1, 2), "Date32")
    assert _member(coerce("17")) == (17, "Int64")
    assert coerce(None) is None


# -- B311: a value that fits no member ------------------------------------------------------


@pytest.mark.parametrize(
    ("chtype", "value"),
    [
        ("Variant(String, Int64)", {"x": 1}),
        ("Variant(String, Int64)", 2.5),
        ("Variant(Int8, Bool)", 300),
        ("Dynamic", {"a": 1}),
        ("Dynamic", [[1]]),
        ("Dynamic", decimal.Decimal("1.5")),
        ("Dynamic", 2**64),
        ("JSON", "not an object"),
        ("JSON", [1, 2]),
        ("JSON", None),
        ("JSON(a.b Int32)", {"a": {"b": "abc"}}),
    ],
)
def test_b311_a_value_that_fits_no_member_is_a_record_error_for_its_row(
    chtype: str, value: object
) -> None:
    with pytest.raises(BadValue):
        coercer_for(parse_type(chtype))(value)
    encoder = RowEncoder([Column("id", parse_type("Int64")), Column("c", parse_type(chtype))])
    with pytest.raises(SinkError) as info:
        encoder.encode((1, value))
    assert info.value.error_class is ErrorClass.RECORD
    assert "column c" in info.value.reason
    fine = {} if chtype.startswith("JSON") else None
    block, refused = encoder.prepare_rows([(0, fine), (1, value)])
    assert [p for p, _ in refused] == [1] and block.count == 1


# -- B312: Dynamic --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "written"),
    [
        (7, (7, "Int64")),
        (2**63, (2**63, "UInt64")),
        (2.5, (2.5, "Float64")),
        (False, (False, "Bool")),
        ("s", ("s", "String")),
        (b"s", ("s", "String")),
        (dt.date(2024, 1, 2), (dt.date(2024, 1, 2), "Date32")),
        (uuid.UUID(int=1), (str(uuid.UUID(int=1)), "String")),
        ([1, None], ([1, None], "Array(Nullable(Int64))")),
        ([], ([], "Array(Nullable(String))")),
    ],
)
def test_b312_a_dynamic_value_is_written_as_its_own_type(value: object, written: Any) -> None:
    assert _member(coercer_for(parse_type("Dynamic"))(value)) == written


def test_b312_a_dynamic_column_is_sent_as_a_variant_of_its_types() -> None:
    assert wire_type(parse_type("Dynamic")) == DYNAMIC_WIRE
    assert wire_type(parse_type("Array(Dynamic)")) == f"Array({DYNAMIC_WIRE})"
    assert wire_type(parse_type("Variant(String, Int64)")) == "Variant(Int64, String)"


# -- B313, B314: JSON -----------------------------------------------------------------------


def test_b313_json_objects_are_written_as_their_text_whatever_came_first() -> None:
    coerce = coercer_for(parse_type("JSON"))
    nested = {"a": {"b": [1, "x", None]}, "n": None}
    assert json.loads(str(coerce(nested))) == nested
    assert json.loads(str(coerce('{"k": 1}'))) == {"k": 1}
    assert json.loads(str(coerce(b'{"k": 2}'))) == {"k": 2}


def test_b314_typed_paths_are_converted_and_skipped_paths_dropped() -> None:
    coerce = coercer_for(parse_type("JSON(`a.b` Int32, t DateTime, SKIP s, SKIP x.y)"))
    got = json.loads(
        str(
            coerce(
                {
                    "a": {"b": "12"},
                    "s": 1,
                    "x": {"y": 2, "z": 3},
                    "t": dt.datetime(2024, 1, 2, 3, 4, 5, tzinfo=dt.UTC),
                }
            )
        )
    )
    assert got == {"a": {"b": 12}, "x": {"z": 3}, "t": "2024-01-02 03:04:05"}
    with pytest.raises(BadValue, match=r"path a\.b \(Int32\)"):
        coerce({"a": {"b": 3.5}})


# -- B315: the columnar path ----------------------------------------------------------------


def test_b315_a_variant_is_sent_as_a_dense_union_of_its_members() -> None:
    from spate_clickhouse._frames import prepare_frame

    t = parse_type("Variant(String, Int64)")
    frame = pl.DataFrame({"c": ["a", "7", None]})
    table, bad = prepare_frame(frame, [Column("c", t)])
    assert bad == []
    column = table.column("c").combine_chunks()
    assert pa.types.is_union(column.type)
    assert column.to_pylist() == ["a", "7", None]


@pytest.mark.parametrize(
    ("chtype", "values"),
    [
        ("Variant(Date, Int64)", ["2024-01-02"]),
        ("Variant(UUID, String)", ["x"]),
        ("Map(String, Dynamic)", [{"a": 1}]),
        ("Tuple(a Variant(String, Int64))", [{"a": 1}]),
    ],
)
def test_b315_a_variant_arrow_cannot_carry_exactly_fails_naming_the_type(
    chtype: str, values: list[object]
) -> None:
    from spate_clickhouse._frames import prepare_frame

    frame = pl.DataFrame({"c": values})
    with pytest.raises(SinkError) as info:
        prepare_frame(frame, [Column("c", parse_type(chtype))])
    assert info.value.error_class is ErrorClass.FATAL
    assert str(parse_type(chtype)) in info.value.reason


_TYPES = [
    "Variant(String, Int64, Float64)",
    "Variant(Int8, Bool)",
    "Variant(UInt8, String)",
    "Variant(Float32, Array(Int64))",
    "Variant(Int64, Date32)",
    "Array(Variant(Int8, String))",
    "Dynamic",
    "JSON",
    "JSON(a Int8)",
]

_FRAMES: dict[str, tuple[Any, Any]] = {
    "int": (pl.Int64, st.integers(-(2**63), 2**63 - 1) | st.sampled_from([0, 127, 128, 255, 256])),
    "float": (pl.Float64, st.floats(allow_nan=False) | st.sampled_from([0.0, 3.4e39, 2.0])),
    "text": (pl.String, st.text(max_size=4) | st.sampled_from(["12", "-3", "2024-01-02", "x"])),
    "bool": (pl.Boolean, st.booleans()),
    "ints": (pl.List(pl.Int64), st.lists(st.integers(-300, 300), max_size=3)),
    "object": (
        pl.Struct({"a": pl.Int64, "b": pl.String}),
        st.fixed_dictionaries({"a": st.integers(-200, 200), "b": st.text(max_size=3)}),
    ),
}


@settings(max_examples=scaled(200, minimum=30), deadline=None)
@given(kind=st.sampled_from(sorted(_FRAMES)), chtype=st.sampled_from(_TYPES), data=st.data())
def test_b315_each_arrow_kind_into_each_semistructured_type_agrees_with_the_row_path(
    kind: str, chtype: str, data: Any
) -> None:
    """Values of the wrong kind and out of range: the rows the columnar path refuses are
    exactly those the row path's coercer refuses, and each other row holds the member
    and value the row path writes."""
    from spate_clickhouse._frames import prepare_frame

    dtype, values = _FRAMES[kind]
    drawn = data.draw(st.lists(st.none() | values, min_size=1, max_size=8))
    t = parse_type(chtype)
    frame = pl.DataFrame({"c": drawn}, schema={"c": dtype})
    table, bad = prepare_frame(frame, [Column("c", t)])
    coerce = coercer_for(t)
    want_bad, want = [], []
    for position, value in enumerate(frame.get_column("c").to_list()):
        try:
            want.append(coerce(value))
        except BadValue:
            want_bad.append(position)
    assert [p for p, _ in bad] == want_bad
    assert table.num_rows == len(want)
    if not want:
        return
    got = table.column("c").combine_chunks()
    if t.name == "JSON":
        assert got.to_pylist() == want
        return
    if t.name == "Array":  # the lists' items, as one union
        got = got.flatten()
        want = [item for written in want for item in written]
    _same_members(got, want)


def _same_members(got: Any, want: list[Any]) -> None:
    """The union ``got`` holds ``want``'s written values, each in its member."""
    assert len(got) == len(want)
    for i, written in enumerate(want):
        if written is None:
            assert got[i].as_py() is None
            continue
        member = got.type.field(got.type_codes[i].as_py()).name
        assert parse_type(member) == parse_type(written.type_name)
        value = got[i].as_py()
        if isinstance(written.value, float) and isinstance(value, float):
            assert value == pytest.approx(written.value, rel=1e-6)
        else:
            assert value == written.value


def test_a_json_values_size_estimate_counts_its_text_alike_on_append_and_in_blocks() -> None:
    columns = [Column("id", parse_type("Int64")), Column("j", parse_type("JSON"))]
    small, big = {"a": 1}, {"a": "x" * 1000}
    encoder = RowEncoder(columns)
    sizes = [encoder.encode((1, value))[1] for value in (small, big)]
    assert sizes[1] - sizes[0] >= 1000
    block, refused = encoder.prepare_rows([(1, small), (2, big)])
    assert refused == [] and block.nbytes == sum(sizes)
