"""Frames into ClickHouse columns keep the row path's meaning of each value (B87).

The row path reads an integer given to a ``DateTime64(p)`` column as ticks of 10^-p s
(and to a ``DateTime`` column as seconds); a frame's integer column bound for those
columns must arrive meaning the same instants, whatever ClickHouse makes of a bare
integer in an Arrow stream.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from spate_clickhouse._coerce import coercer_for
from spate_clickhouse._encoder import Column
from spate_clickhouse._frames import prepare_frame
from spate_clickhouse._types import parse_type

from tests.support.scale import scaled

pl = pytest.importorskip("polars")
pa = pytest.importorskip("pyarrow")

UTC = dt.UTC


@pytest.mark.parametrize("precision", [0, 1, 3, 4, 6, 7, 9])
def test_b87_integer_ticks_into_datetime64_are_the_instants_the_row_path_writes(
    precision: int,
) -> None:
    text = f"DateTime64({precision}, 'UTC')"
    column = Column("at", parse_type(text))
    ticks = [0, 1, 1_234_567, 10**9 + 5, None]
    frame = pl.DataFrame({"at": ticks}, schema={"at": pl.Int64})
    table, bad = prepare_frame(frame, [Column("at", parse_type(f"Nullable({text})"))])
    assert bad == []
    coerce = coercer_for(column.type)
    got = table.column("at").cast(pa.timestamp("ns", "UTC")).cast(pa.int64()).to_pylist()
    epoch = dt.datetime(1970, 1, 1, tzinfo=UTC)
    for tick, nanos in zip(ticks, got, strict=True):
        if tick is None:
            assert nanos is None
            continue
        want = coerce(tick)
        if isinstance(want, int):  # precision > 6: the row path writes the ticks themselves
            assert nanos == want * 10 ** (9 - precision)
        else:
            assert isinstance(want, dt.datetime)
            assert nanos == (want - epoch) // dt.timedelta(microseconds=1) * 1000


def test_b87_ticks_out_of_the_column_range_are_record_errors_as_on_rows() -> None:
    frame = pl.DataFrame({"at": [0, 2**62, -(2**62)]}, schema={"at": pl.Int64})
    table, bad = prepare_frame(frame, [Column("at", parse_type("DateTime64(3, 'UTC')"))])
    assert [position for position, _ in bad] == [1, 2]
    assert table.num_rows == 1


def test_b87_integer_seconds_into_datetime_stay_seconds() -> None:
    frame = pl.DataFrame({"at": [0, 86_400]}, schema={"at": pl.Int64})
    table, bad = prepare_frame(frame, [Column("at", parse_type("DateTime('UTC')"))])
    assert bad == []
    got = [v.replace(tzinfo=UTC) for v in table.column("at").to_pylist()]
    coerce = coercer_for(parse_type("DateTime('UTC')"))
    assert got == [coerce(0), coerce(86_400)]


@pytest.mark.parametrize("dtype", [pl.Int64, pl.Float64, pl.Boolean])
def test_b87_a_number_or_boolean_into_a_string_column_is_a_record_error_as_on_rows(
    dtype: Any,
) -> None:
    values = {pl.Int64: [5, None], pl.Float64: [1.5, None], pl.Boolean: [True, None]}[dtype]
    frame = pl.DataFrame({"s": values}, schema={"s": dtype})
    for text in ("String", "Nullable(String)", "LowCardinality(String)"):
        t = parse_type(text)
        table, bad = prepare_frame(frame, [Column("s", t)])
        want = []
        for position, value in enumerate(values):
            try:
                coercer_for(t)(value)
            except Exception:
                want.append(position)
        assert [position for position, _ in bad] == want, text
        assert table.num_rows == len(values) - len(want)


def test_b87_an_object_read_as_a_struct_goes_into_a_map_column_as_its_keys() -> None:
    frame = pl.DataFrame(
        {"m": [{"a": 1, "b": 2}, {"a": 3, "b": None}, None]},
        schema={"m": pl.Struct({"a": pl.Int64, "b": pl.Int64})},
    )
    table, bad = prepare_frame(frame, [Column("m", parse_type("Map(String, Int64)"))])
    assert pa.types.is_map(table.schema.field("m").type)
    # a field that is absent (or null) in a record is no key of its map; a null object
    # into a Map column (never Nullable) is a record error, as on rows
    assert [list(v) for v in table.column("m").to_pylist()] == [
        [("a", 1), ("b", 2)],
        [("a", 3)],
    ]
    assert [position for position, _ in bad] == [2]


def test_b100_arrow_buffers_of_an_open_batch_count_against_the_inflight_budget() -> None:
    """B100: the Arrow table a ClickHouse batch holds on the columnar path counts its
    buffers' bytes against ``backpressure.max_inflight_bytes`` while the batch is held,
    and returns them once it is written: the budget bounds the memory columns take."""
    from spate._clock import ManualClock
    from spate.checkpoint._ack import AckToken
    from spate.flow._budget import InflightBudget
    from spate.metrics._meter import Meter
    from spate.records import Lane
    from spate.sink import Offer, ShardConfig, SinkPool
    from spate.testing import ScriptedEndpoints
    from spate_clickhouse._encoder import ColumnBuffer

    class ArrowEndpoints(ScriptedEndpoints):
        def new_buffer(self, shard: int) -> Any:
            return ColumnBuffer()  # the connector's own buffer: what it counts is under test

    clock = ManualClock()
    budget = InflightBudget(1 << 20)
    pool = SinkPool(
        "orders",
        ArrowEndpoints(clock),
        shards=[ShardConfig(replicas=("a",))],
        pipeline="test",
        run_nonce="run1",
        meter=Meter("test-arrow-budget"),
        clock=clock,
        budget=budget,
        io_threads=0,
    )
    pool.start()
    rows = 20_000
    regions = [f"region-{i % 97:04d}-{'x' * 40}" for i in range(rows)]
    frame = pl.DataFrame({"order_id": range(rows), "region": regions})
    columns = [Column("order_id", parse_type("Int64")), Column("region", parse_type("String"))]
    table, bad = prepare_frame(frame, columns)
    assert bad == []
    lane = Lane("t", 0)
    ack = AckToken(lane, 0, 1, 1, 1, lambda token: None)
    assert pool.offer_frame(table, None, lane, ack) is Offer.ACCEPTED
    # 20,000 rows of ~55 bytes: about a megabyte of Arrow buffers, all of it counted.
    assert table.nbytes > 1_000_000
    assert budget.used >= table.nbytes
    assert budget.ratio > 1  # over the limit: flow control pauses the source
    assert pool.flush(deadline=1e9)
    assert budget.used == 0
    pool.close()


_CH_TYPES = [
    "Int8",
    "Int32",
    "Int64",
    "UInt8",
    "UInt64",
    "Float32",
    "Float64",
    "Decimal(10, 2)",
    "String",
    "FixedString(3)",
    "Date",
    "Date32",
    "DateTime('UTC')",
    "DateTime64(3, 'UTC')",
    "DateTime64(9, 'UTC')",
    "UUID",
    "Bool",
    "Enum8('a' = 1, 'b' = 2)",
    "Nullable(Int16)",
    "LowCardinality(String)",
    "Array(Int8)",
    "Array(Nullable(Float32))",
    "Map(String, Int8)",
    "Tuple(a Int8, b String)",
    "Int128",
    "UInt128",
    "Nullable(Int256)",
    "UInt256",
    "Array(Int128)",
    "Decimal(38, 0)",
    "Decimal(19, 0)",
    "Tuple(a Int8, b Nullable(String))",
]
_TEXTS = st.one_of(
    st.text(max_size=5),
    st.sampled_from(
        [
            "12",
            "-7",
            " 13",
            "2.5",
            "1e3",
            "true",
            "0",
            "yes",
            "a",
            "2024-01-02",
            "2024-01-01T00:00:00+02:00",
            "2024-01-01 00:00:00.5",
            "2024-02-30",
            "6ba7b810-9dad-11d1-80b4-00c04fd430c8",
            "abc",
        ]
    ),
)
_FRAMES = {
    "int": (
        pl.Int64,
        st.one_of(st.integers(-(2**63), 2**63 - 1), st.sampled_from([0, 1, 2, 300, -1, 2**40])),
    ),
    "float": (
        pl.Float64,
        st.one_of(st.floats(allow_nan=False), st.sampled_from([3.5, 1.005, 1e20, 1e39, 2.0])),
    ),
    "text": (pl.String, _TEXTS),
    "bytes": (pl.Binary, st.binary(max_size=4)),
    "date": (pl.Date, st.dates(dt.date(1800, 1, 1), dt.date(2400, 1, 1))),
    "time": (
        pl.Datetime("us", "UTC"),
        st.datetimes(dt.datetime(1800, 1, 1), dt.datetime(2400, 1, 1), timezones=st.just(UTC)),
    ),
    "naive": (pl.Datetime("ms"), st.datetimes(dt.datetime(1960, 1, 1), dt.datetime(2200, 1, 1))),
    "decimal": (
        pl.Decimal(12, 3),
        st.decimals(-(10**8), 10**8, places=3, allow_nan=False, allow_infinity=False),
    ),
    "uint": (
        pl.UInt64,
        st.one_of(st.integers(0, 2**64 - 1), st.sampled_from([0, 1, 2**63, 2**64 - 1])),
    ),
    "bool": (pl.Boolean, st.booleans()),
    "ints": (pl.List(pl.Int64), st.lists(st.integers(-300, 300), max_size=3)),
    "object": (
        pl.Struct({"a": pl.Int64, "b": pl.String}),
        st.fixed_dictionaries({"a": st.integers(-200, 200), "b": st.text(max_size=3)}),
    ),
    "partial": (  # an object without the key "b"
        pl.Struct({"a": pl.Int64}),
        st.fixed_dictionaries({"a": st.integers(-200, 200)}),
    ),
}


@settings(max_examples=scaled(300, minimum=30), deadline=None)
@given(
    kind=st.sampled_from(sorted(_FRAMES)),
    chtype=st.sampled_from(_CH_TYPES),
    data=st.data(),
)
def test_b87_each_arrow_kind_into_each_column_type_agrees_with_the_row_coercer(
    kind: str, chtype: str, data: Any
) -> None:
    """Whatever the kernels convert or flag, the rows refused are exactly those the row
    path's coercer refuses, and every other row holds the coercer's value (B87, B28)."""
    from spate_clickhouse._arrowvalues import _arrow_value, arrow_type

    dtype, values = _FRAMES[kind]
    drawn = data.draw(st.lists(st.none() | values, min_size=1, max_size=8))
    t = parse_type(chtype)
    frame = pl.DataFrame({"c": drawn}, schema={"c": dtype})
    table, bad = prepare_frame(frame, [Column("c", t)])
    coerce = coercer_for(t, [False])
    to_arrow = _arrow_value(t)
    want_bad, want = [], []
    for position, value in enumerate(frame.get_column("c").to_list()):
        if isinstance(dtype, pl.Struct) and t.unwrapped().name == "Map" and value is not None:
            value = {k: v for k, v in value.items() if v is not None}
        try:
            want.append(to_arrow(coerce(value)))
        except Exception:
            want_bad.append(position)
    assert [p for p, _ in bad] == want_bad
    expected = pa.array(want, type=table.column("c").type).to_pylist()
    assert list(map(repr, table.column("c").to_pylist())) == list(map(repr, expected))
    assert arrow_type(t) is not None


def test_b87_frames_of_one_batch_with_different_column_types_make_one_stream() -> None:
    from spate_clickhouse._frames import arrow_stream

    text = pa.table({"s": pa.array(["a"], pa.large_string())})
    raw = pa.table({"s": pa.array([b"\xff"], pa.large_binary())})
    data = arrow_stream([text, raw])
    read = pa.ipc.open_stream(data).read_all()
    assert read.column("s").to_pylist() == [b"a", b"\xff"]


def test_b165_a_block_reaches_clickhouse_as_one_record_batch_whatever_its_frames() -> None:
    """B165: ClickHouse makes a block of each record batch of an Arrow stream and the
    dedup token names those blocks, so the same rows cut from other source batches (a
    replay) must give the same stream: one record batch."""
    pa = pytest.importorskip("pyarrow")
    from spate_clickhouse._frames import arrow_stream

    first = pa.table({"id": pa.array(range(600), pa.int64())})
    second = pa.table({"id": pa.array(range(600, 1000), pa.int64())})
    whole = pa.table({"id": pa.array(range(1000), pa.int64())})
    split = arrow_stream([first, second])
    assert split == arrow_stream([whole])
    batches = list(pa.ipc.open_stream(split))
    assert [len(b) for b in batches] == [1000]
