"""The row path and the columnar path store the same rows in ClickHouse (B87).

Hypothesis draws record schemas and records for them; the records are encoded as raw
Avro (fastavro, the reference) and as JSON objects (orjson), some payloads corrupted,
and each batch runs through a whole pipeline twice — once with the deserializer's
columnar decoder removed (the row path), once with it (the columnar path, its log line
checked) — into tables of one ClickHouse HTTP front over chDB. The tables of both runs
must hold identical rows, and the deserializer counters (records decoded, skipped, and
empty payloads that hold no record) must be identical.

The fields are integers of several widths, floats, strings, booleans, nullable unions,
millisecond timestamps and arrays of integers for both encodings; for JSON also 64-bit
and wider integers (``UInt64``, ``(U)Int128/256``, ``Decimal(38, 0)``, drawn up to and
beyond 64 bits) and named tuples whose ``Nullable`` element's key may be absent; every column
also draws values of the other JSON kinds and values out of its range (:data:`ODD`:
floats with fractions or beyond the column, numeric and non-numeric text, dates and
times with offsets, UUIDs, booleans, nulls, arrays, objects), into sinks that skip
record errors, and the record errors each path counts must be identical too; for Avro also enums,
fixed, decimals (bytes and fixed, nullable too), the logical types date,
time-millis/micros, timestamp-millis/micros and uuid, nested records, arrays of records,
arrays of arrays, arrays of nullable values and maps. An Avro schema may be a top-level
union of records: the row path routes each record by its branch name with a row chain,
the columnar path with a frame chain's ``split().route(..., branch=...)``, one table per
branch.
"""

from __future__ import annotations

import copy
import datetime as dt
import io
import itertools
import json
import logging
from collections.abc import Callable, Iterator
from typing import Any

import fastavro
import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from spate import BuildContext, Pipeline
from spate.config import decode
from spate.metrics import Meter
from spate.testing import memory_source

from tests.clickhouse.columnar_values import deser_context as _context
from tests.clickhouse.sinkkit import build_sink
from tests.support.avro_native import needs_avro_columnar
from tests.support.chfront_fixtures import ChFront
from tests.support.scale import scaled

pytest.importorskip("polars")
pytest.importorskip("pyarrow")

pytestmark = pytest.mark.integration

EXAMPLES = settings(
    max_examples=scaled(40, minimum=4),
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)

Kinds = dict[str, tuple[str, Any, Any]]

# kind: (ClickHouse type, Avro type, values)
KINDS: Kinds = {
    "i8": ("Int8", "int", st.integers(-(2**7), 2**7 - 1)),
    "i16": ("Int16", "int", st.integers(-(2**15), 2**15 - 1)),
    "i32": ("Int32", "int", st.integers(-(2**31), 2**31 - 1)),
    "i64": ("Int64", "long", st.integers(-(2**63), 2**63 - 1)),
    "u8": ("UInt8", "int", st.integers(0, 2**8 - 1)),
    "u32": ("UInt32", "long", st.integers(0, 2**32 - 1)),
    "f64": ("Float64", "double", st.floats(allow_nan=False, allow_infinity=False)),
    "text": ("String", "string", st.text(max_size=10)),
    "flag": ("Bool", "boolean", st.booleans()),
    "maybe_int": ("Nullable(Int64)", ["null", "long"], st.none() | st.integers(-(2**40), 2**40)),
    "maybe_text": ("Nullable(String)", ["null", "string"], st.none() | st.text(max_size=6)),
    "at": (
        "DateTime64(3, 'UTC')",
        {"type": "long", "logicalType": "timestamp-millis"},
        st.integers(0, 4_102_444_800_000),  # 1970 .. 2100, in milliseconds
    ),
    "ints": (
        "Array(Int32)",
        {"type": "array", "items": "int"},
        st.lists(st.integers(-9, 9), max_size=3),
    ),
}

BIG = st.one_of(
    st.integers(-(2**63), 2**64 - 1),
    st.integers(-(2**80), 2**80),
    st.sampled_from([2**63, 2**64 - 1, 2**64, -(2**63) - 1, 2**100, -(2**127), 2**128 - 1]),
)
"""Integers of 64 bits and wider."""


def _one_kind(values: list[Any]) -> bool:
    """Whether the columnar path reads a JSON array as the row path does (B170): every
    array but one that holds a float (an integer beyond 64 bits, which orjson reads as
    a float, or a fraction) beside an integer beyond 2^53, which no Arrow type holds
    exactly together with a float; such a record is a record error on the columnar path
    only, as documented in ``docs/concepts/columnar.md``."""
    ints = [v for v in values if type(v) is int and -(2**63) <= v <= 2**64 - 1]
    if len(ints) == len(values):
        return True
    return all(abs(v) <= 2**53 for v in ints)


BIGS = st.lists(BIG, max_size=3).filter(_one_kind)
MIXED = st.lists(
    st.one_of(
        st.integers(-300, 300),
        st.integers(-(2**53), 2**53),
        st.floats(allow_nan=False, allow_infinity=False),
        st.sampled_from([2.5, 0.5, -1.0, 1e20, 1e39, 2.0**63, 2**64 - 1, -(2**63)]),
    ),
    max_size=4,
).filter(_one_kind)
"""Arrays mixing integers and floats (B170), and integers of both signs beyond Int64."""

ODD = st.one_of(
    st.integers(-(2**63), 2**63 - 1),
    st.sampled_from([300, -1, 2**31, 2**32, 2**40, 0, 1]),
    st.floats(allow_nan=False, allow_infinity=False),
    st.sampled_from([3.5, 1.005, 1e20, 1e39, 2.0, -0.5]),
    st.text(max_size=6),
    st.sampled_from(
        [
            "12",
            " 13",
            "-7",
            "abc",
            "1e3",
            "2.5",
            "true",
            "yes",
            "2024-01-02",
            "2024-01-01T00:00:00+02:00",
            "2024-01-01T00:00:00.5",
            "2024-02-30T00:00:00",
            "6ba7b810-9dad-11d1-80b4-00c04fd430c8",
            "not-a-uuid",
        ]
    ),
    st.booleans(),
    st.none(),
    st.lists(st.integers(-300, 300), max_size=2),
    MIXED,
    st.fixed_dictionaries({"a": st.integers(-3, 3)}),
    BIG,
    BIGS,
    st.fixed_dictionaries(
        {"a": st.integers(-3, 3)}, optional={"b": st.none() | st.text(max_size=2)}
    ),
)
"""JSON values of every kind, many out of range or of the wrong kind for a column: the
row path refuses them as record errors or converts them, and the columnar path must do
the same (B87, B28). Integers reach beyond 64 bits (orjson reads one up to 2^64 - 1 as
an integer, a wider one as a float)."""

_PAIR = st.fixed_dictionaries(
    {"a": st.integers(-(2**31), 2**31 - 1)}, optional={"b": st.none() | st.text(max_size=3)}
)
JSON_ONLY: Kinds = {
    "u64": ("UInt64", None, st.integers(0, 2**64 - 1)),
    "i128": ("Int128", None, BIG),
    "u128": ("UInt128", None, BIG),
    "i256": ("Int256", None, BIG),
    "u256": ("UInt256", None, BIG),
    "big_dec": ("Decimal(38, 0)", None, BIG),
    "bigs": ("Array(Int128)", None, BIGS),
    "mixed": ("Array(Float64)", None, MIXED),
    "mixed_ints": ("Array(Int64)", None, MIXED),
    "mixed_u64": ("Array(UInt64)", None, MIXED),
    "mixed_dec": ("Array(Decimal(18, 2))", None, MIXED),
    "pair": ("Tuple(a Int32, b Nullable(String))", None, _PAIR),
    "pairs": ("Array(Tuple(a Int32, b Nullable(String)))", None, st.lists(_PAIR, max_size=2)),
}
"""Columns only the JSON test draws: wide integers (values up to and beyond 64 bits) and
named tuples whose ``Nullable`` element's key may be absent from the object."""
JSON_KINDS: Kinds = {
    k: (ch, avro, values | ODD) for k, (ch, avro, values) in {**KINDS, **JSON_ONLY}.items()
}

_UTC = dt.UTC
_POINT = {
    "type": "record",
    "name": "Point",
    "fields": [{"name": "x", "type": "int"}, {"name": "label", "type": "string"}],
}
_POINTS = st.fixed_dictionaries(
    {"x": st.integers(-(2**31), 2**31 - 1), "label": st.text(max_size=5)}
)
_DEC = {"type": "bytes", "logicalType": "decimal", "precision": 9, "scale": 2}
_DECIMALS = st.decimals(-9_999_999, 9_999_999, places=2, allow_nan=False, allow_infinity=False)

AVRO_KINDS: Kinds = {
    **KINDS,
    "enum": (
        "Enum8('red' = 1, 'green' = 2, 'blue' = 3)",
        {"type": "enum", "name": "Colour", "symbols": ["red", "green", "blue"]},
        st.sampled_from(["red", "green", "blue"]),
    ),
    "maybe_enum": (
        "Nullable(Enum8('red' = 1, 'green' = 2, 'blue' = 3))",
        ["null", {"type": "enum", "name": "Colour", "symbols": ["red", "green", "blue"]}],
        st.none() | st.sampled_from(["red", "green", "blue"]),
    ),
    "fixed": (
        "FixedString(4)",
        {"type": "fixed", "name": "Four", "size": 4},
        st.binary(min_size=4, max_size=4),
    ),
    "dec": ("Decimal(9, 2)", _DEC, _DECIMALS),
    "maybe_dec": ("Nullable(Decimal(9, 2))", ["null", _DEC], st.none() | _DECIMALS),
    "dec_fixed": (
        "Decimal(18, 4)",
        {
            "type": "fixed",
            "name": "Money",
            "size": 8,
            "logicalType": "decimal",
            "precision": 18,
            "scale": 4,
        },
        st.decimals(-(10**13), 10**13, places=4, allow_nan=False, allow_infinity=False),
    ),
    "date": (
        "Date32",
        {"type": "int", "logicalType": "date"},
        st.dates(dt.date(1900, 1, 1), dt.date(2299, 12, 31)),
    ),
    "at_us": (
        "DateTime64(6, 'UTC')",
        {"type": "long", "logicalType": "timestamp-micros"},
        st.datetimes(dt.datetime(1900, 1, 1), dt.datetime(2262, 1, 1), timezones=st.just(_UTC)),
    ),
    "maybe_at": (
        "Nullable(DateTime64(3, 'UTC'))",
        ["null", {"type": "long", "logicalType": "timestamp-millis"}],
        st.none()
        | st.datetimes(dt.datetime(1970, 1, 1), dt.datetime(2100, 1, 1), timezones=st.just(_UTC)),
    ),
    "uuid": ("UUID", {"type": "string", "logicalType": "uuid"}, st.uuids()),
    "time_ms": (
        "Time64(3)",
        {"type": "int", "logicalType": "time-millis"},
        st.times().map(lambda t: t.replace(microsecond=t.microsecond // 1000 * 1000)),
    ),
    "time_us": ("Time64(6)", {"type": "long", "logicalType": "time-micros"}, st.times()),
    "point": ("Tuple(x Int32, label String)", _POINT, _POINTS),
    "points": (
        "Array(Tuple(x Int32, label String))",
        {"type": "array", "items": _POINT},
        st.lists(_POINTS, max_size=3),
    ),
    "grid": (
        "Array(Array(Int64))",
        {"type": "array", "items": {"type": "array", "items": "long"}},
        st.lists(st.lists(st.integers(-(2**63), 2**63 - 1), max_size=3), max_size=3),
    ),
    "holes": (
        "Array(Nullable(Int32))",
        {"type": "array", "items": ["null", "int"]},
        st.lists(st.none() | st.integers(-(2**31), 2**31 - 1), max_size=4),
    ),
    "counts": (
        "Map(String, Int64)",
        {"type": "map", "values": "long"},
        st.dictionaries(st.text(max_size=4), st.integers(-(2**63), 2**63 - 1), max_size=3),
    ),
}
"""The Avro-only kinds too (values JSON has no form for, named and nested types)."""

_tables = itertools.count()


@pytest.fixture(scope="module")
def front(chfront_module: Callable[..., ChFront]) -> Iterator[ChFront]:
    yield chfront_module()


class _Seen(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.columnar: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        message = record.getMessage()
        if "runs on the columnar path" in message:
            self.columnar.append(message)


Case = tuple[list[str], list[dict[str, Any]], list[tuple[int, str]]]
CORRUPTIONS = ["cut", "junk", "empty"]


@st.composite
def cases(draw: st.DrawFn, kinds_table: Kinds = KINDS) -> Case:
    kinds = draw(st.lists(st.sampled_from(sorted(kinds_table)), min_size=1, max_size=6))
    records = draw(
        st.lists(
            st.fixed_dictionaries({f"c{i}": kinds_table[k][2] for i, k in enumerate(kinds)}),
            min_size=1,
            max_size=25,
        )
    )
    for i, record in enumerate(records):
        record["id"] = i
    bad = draw(
        st.lists(
            st.tuples(st.integers(0, len(records) - 1), st.sampled_from(CORRUPTIONS)), max_size=3
        )
    )
    return kinds, records, bad


@st.composite
def union_cases(draw: st.DrawFn) -> tuple[list[list[str]], list[tuple[int, dict[str, Any]]], Any]:
    """Branch field kinds, ``(branch, record)`` in batch order, and corruptions (also a
    branch index outside the union)."""
    branches = draw(
        st.lists(
            st.lists(st.sampled_from(sorted(AVRO_KINDS)), min_size=1, max_size=4),
            min_size=1,
            max_size=3,
        )
    )
    picks = draw(st.lists(st.integers(0, len(branches) - 1), min_size=1, max_size=25))
    records = []
    for i, b in enumerate(picks):
        record = draw(
            st.fixed_dictionaries({f"c{j}": AVRO_KINDS[k][2] for j, k in enumerate(branches[b])})
        )
        record["id"] = i
        records.append((b, record))
    bad = draw(
        st.lists(
            st.tuples(st.integers(0, len(records) - 1), st.sampled_from([*CORRUPTIONS, "branch"])),
            max_size=3,
        )
    )
    return branches, records, bad


def _named(avro: Any, suffix: str) -> Any:
    """``avro`` with every named type renamed ``<name><suffix>`` (a name is defined once)."""
    avro = copy.deepcopy(avro)
    pending = [avro]
    while pending:
        node = pending.pop()
        if isinstance(node, list):
            pending.extend(node)
        elif isinstance(node, dict):
            if node.get("type") in ("record", "enum", "fixed"):
                node["name"] = f"{node['name']}{suffix}"
            pending.extend(node.values())
    return avro


def _record_schema(name: str, kinds: list[str], table: Kinds) -> dict[str, Any]:
    return {
        "type": "record",
        "name": name,
        "fields": [{"name": "id", "type": "long"}]
        + [
            {"name": f"c{i}", "type": _named(table[k][1], f"_{name}_{i}")}
            for i, k in enumerate(kinds)
        ],
    }


def _encode(schema: Any, datums: list[Any]) -> list[bytes]:
    parsed = fastavro.parse_schema(schema)
    payloads = []
    for datum in datums:
        out = io.BytesIO()
        fastavro.schemaless_writer(out, parsed, datum)
        payloads.append(out.getvalue())
    return payloads


def _corrupt(payloads: list[bytes], bad: list[tuple[int, str]], branches: int = 0) -> list[bytes]:
    out = list(payloads)
    for index, how in bad:
        if how == "cut":
            out[index] = out[index][: len(out[index]) // 2]
        elif how == "junk":
            out[index] = out[index] + b"\x00junk"
        elif how == "branch":  # the zig-zag index one past the last branch
            out[index] = bytes([branches * 2]) + out[index][1:]
        else:
            out[index] = b""
    return out


Tables = dict[str, tuple[list[str], list[str]]]
"""Sink name → (columns, ClickHouse types) of its table."""
Rows = dict[str, list[tuple[Any, ...]]]


def _table_spec(kinds: list[str], table: Kinds = KINDS) -> tuple[list[str], list[str]]:
    columns = ["id", *(f"c{i}" for i in range(len(kinds)))]
    return columns, ["Int64", *(table[k][0] for k in kinds)]


def _pipeline(
    name: str,
    payloads: list[bytes],
    sinks: dict[str, Any],
    deserializer: Any,
    meter: Meter,
    budget: Any,
    *,
    batch_size: int,
    chains: Callable[[Any], Any] | None = None,
) -> tuple[Any, Any, _Seen]:
    """Run one pipeline over ``payloads``: its exit report, the source handle and the
    columnar log lines it wrote."""
    source, handle = memory_source({0: payloads}, batch_size=batch_size)
    seen = _Seen()
    logger = logging.getLogger("spate")
    logger.addHandler(seen)
    old_level = logger.level
    logger.setLevel(logging.INFO)
    try:
        pipeline = Pipeline(
            name,
            source,
            sinks,
            deserializer=deserializer,
            meter=meter,
            budget=budget,
            handle_signals=False,
        )
        if chains is not None:
            pipeline.chains(chains)
        report = pipeline.run()
    finally:
        logger.removeHandler(seen)
        logger.setLevel(old_level)
    return report, handle, seen


def _run(
    front: ChFront,
    tables: Tables,
    payloads: list[bytes],
    build: Callable[[BuildContext], Any],
    columnar: bool,
    exit_code: int = 0,
    chains: Callable[[Any], Any] | None = None,
    on_record_error: str = "fail",
) -> tuple[Rows, tuple[float, float, float, float]]:
    """Run one pipeline into new tables (one per sink): their rows (by id), its
    (decoded, skipped, empty) deserializer counts and the record errors it skipped."""
    client = front.client()
    name = f"eq{next(_tables)}"
    meter = Meter(name)
    deserializer = build(_context(name))
    if not columnar:
        deserializer.columnar = None
    sinks: dict[str, Any] = {}
    budget = None
    names = {}
    for sink, (columns, types) in tables.items():
        table = f"{name}_{sink}"
        names[sink] = table
        client.command(
            f"CREATE TABLE {table} ("
            + ", ".join(f"{c} {t}" for c, t in zip(columns, types, strict=True))
            + ") ENGINE = MergeTree ORDER BY id"
        )
        built = build_sink(
            {
                "table": table,
                "columns": columns,
                "shards": [{"replicas": [front.url]}],
                "on_record_error": on_record_error,
            },
            sink,
            pipeline=name,
            meter=meter,
            budget=budget,
        )
        budget = built.budget
        sinks[sink] = built.sink
    report, _, seen = _pipeline(
        name, payloads, sinks, deserializer, meter, budget, batch_size=10, chains=chains
    )
    assert report.exit_code == exit_code, report
    assert bool(seen.columnar) is columnar, seen.columnar
    rows = {
        sink: [tuple(r) for r in client.query(f"SELECT * FROM {t} ORDER BY id").result_rows]
        for sink, t in names.items()
    }

    def count(outcome: str) -> float:
        value = meter.registry.get_sample_value(
            "spate_deser_records_total",
            {
                "pipeline": name,
                "component": "deserializer",
                "component_type": "deserializer",
                "outcome": outcome,
            },
        )
        return value or 0.0

    record_errors = sum(
        sample.value
        for metric in meter.registry.collect()
        for sample in metric.samples
        if sample.name == "spate_operator_dropped_total"
        and sample.labels.get("reason") == "record_error"
        and sample.labels.get("pipeline") == name
    )
    return rows, (count("ok"), count("skipped"), count("empty"), record_errors)


def _same(
    front: ChFront,
    tables: Tables,
    payloads: list[bytes],
    factory: Any,
    config: Any,
    chains: Callable[[bool], Callable[[Any], Any] | None] = lambda columnar: None,
    exit_code: int = 0,
    on_record_error: str = "fail",
) -> None:
    """Both paths store the same rows and count the same outcomes for ``payloads``
    decoded by ``factory.build(config, ...)``; ``chains(columnar)`` is each path's chain."""

    def build(context: BuildContext) -> Any:
        return factory.build(config, context)

    rows, counts = _run(
        front,
        tables,
        payloads,
        build,
        False,
        exit_code=exit_code,
        chains=chains(False),
        on_record_error=on_record_error,
    )
    col_rows, col_counts = _run(
        front,
        tables,
        payloads,
        build,
        True,
        exit_code=exit_code,
        chains=chains(True),
        on_record_error=on_record_error,
    )
    assert col_rows == rows
    if exit_code == 0:  # a failed run stops at the record on rows, after the batch on columns
        assert col_counts == counts


@needs_avro_columnar
@EXAMPLES
@given(case=cases(AVRO_KINDS))
def test_b87_avro_raw_rows_and_columns_store_identical_tables(front: ChFront, case: Case) -> None:
    from spate_avro import AvroConfig, AvroDeserializerFactory

    kinds, records, bad = case
    schema = _record_schema("R", kinds, AVRO_KINDS)
    config = decode(
        AvroConfig, {"mode": "raw", "schema": {"inline": json.dumps(schema)}}, "deserializer.avro"
    )
    payloads = _corrupt(_encode(schema, records), bad)
    _same(
        front, {"events": _table_spec(kinds, AVRO_KINDS)}, payloads, AvroDeserializerFactory, config
    )


@needs_avro_columnar
@EXAMPLES
@given(case=union_cases())
def test_b87_avro_union_branches_route_to_identical_tables_on_both_paths(
    front: ChFront, case: tuple[list[list[str]], list[tuple[int, dict[str, Any]]], Any]
) -> None:
    from spate_avro import AvroConfig, AvroDeserializerFactory

    branches, records, bad = case
    schema = [_record_schema(f"B{b}", kinds, AVRO_KINDS) for b, kinds in enumerate(branches)]
    config = decode(
        AvroConfig, {"mode": "raw", "schema": {"inline": json.dumps(schema)}}, "deserializer.avro"
    )
    payloads = _corrupt(
        _encode(schema, [(f"B{b}", record) for b, record in records]), bad, len(branches)
    )
    tables = {f"t{b}": _table_spec(kinds, AVRO_KINDS) for b, kinds in enumerate(branches)}

    def chains(columnar: bool) -> Callable[[Any], Any]:
        def rows(ctx: Any) -> Any:
            handles = {f"B{b}": (ctx.sink(f"t{b}"), tables[f"t{b}"][0]) for b in tables_by}

            def route(event: Any, out: Any) -> None:
                sink, columns = handles[event.kind]
                out.emit(sink, tuple(event.record[c] for c in columns))

            return ctx.chain().split().route(route)

        def frames(ctx: Any) -> Any:
            split = ctx.frames().split()
            for b in tables_by:
                split = split.route(f"t{b}", branch=f"B{b}")
            return split

        return frames if columnar else rows

    tables_by = range(len(branches))
    _same(front, tables, payloads, AvroDeserializerFactory, config, chains)


@EXAMPLES
@given(case=cases(JSON_KINDS), framing=st.sampled_from(["single", "ndjson"]))
def test_b87_json_rows_and_columns_store_identical_tables(
    front: ChFront, case: Case, framing: str
) -> None:
    from spate_json import JsonConfig, JsonDeserializerFactory

    kinds, records, bad = case
    payloads = [_json(r) for r in records]
    if framing == "ndjson":  # several records per payload
        payloads = [b"\n".join(payloads[i : i + 3]) + b"\n" for i in range(0, len(payloads), 3)]
        bad = [(i % len(payloads), how) for i, how in bad]
    config = decode(JsonConfig, {"framing": framing}, "deserializer.json")
    _same(
        front,
        {"events": _table_spec(kinds, JSON_KINDS)},
        _corrupt(payloads, bad),
        JsonDeserializerFactory,
        config,
        on_record_error="skip",
    )


def _json(record: dict[str, Any]) -> bytes:
    """``record`` as compact JSON (orjson writes no integer wider than 64 bits)."""
    try:
        return orjson.dumps(record)
    except TypeError:
        return json.dumps(record, separators=(",", ":"), ensure_ascii=False).encode()


def _json_pipeline(
    front: ChFront, payloads: list[bytes], on_error: str
) -> tuple[Any, Any, list[tuple[Any, ...]], _Seen]:
    from spate_json import JsonConfig, JsonDeserializerFactory

    table = f"eq_{next(_tables)}"
    client = front.client()
    client.command(f"CREATE TABLE {table} (id Int64, name String) ENGINE = MergeTree ORDER BY id")
    name = f"eq{table}"
    meter = Meter(name)
    config = decode(JsonConfig, {"on_error": on_error}, "deserializer.json")
    built = build_sink(
        {"table": table, "columns": ["id", "name"], "shards": [{"replicas": [front.url]}]},
        pipeline=name,
        meter=meter,
    )
    report, handle, seen = _pipeline(
        name,
        payloads,
        {"events": built.sink},
        JsonDeserializerFactory.build(config, _context(name)),
        meter,
        built.budget,
        batch_size=8,
    )
    rows = client.query(f"SELECT * FROM {table} ORDER BY id").result_rows
    return report, handle, [tuple(r) for r in rows], seen


def test_b86_columnar_json_skips_bad_records_and_commits_every_good_offset(
    front: ChFront,
) -> None:
    payloads = [orjson.dumps({"id": i, "name": f"n{i}"}) for i in range(30)]
    payloads[3] = b'{"id": 3, "name": '  # truncated
    payloads[17] = b'{"id": 17}{"id": 18}'  # two objects in one payload
    report, handle, rows, seen = _json_pipeline(front, payloads, "skip")
    assert seen.columnar
    assert report.exit_code == 0
    assert [r[0] for r in rows] == [i for i in range(30) if i not in (3, 17)]
    assert handle.last_committed(0) == 30


def test_b86_columnar_json_fail_policy_stops_at_the_bad_record_without_committing_it(
    front: ChFront,
) -> None:
    payloads = [orjson.dumps({"id": i, "name": f"n{i}"}) for i in range(30)]
    payloads[19] = b"NaN"
    report, handle, _, seen = _json_pipeline(front, payloads, "fail")
    assert seen.columnar
    assert report.exit_code == 1
    assert "memory[0] offset 19" in report.reason or "offset 19" in report.reason, report.reason
    committed = handle.last_committed(0)
    assert committed is None or committed <= 16  # batches of 8: the one holding 19 is not


@pytest.mark.parametrize(
    ("chtype", "value", "exit_code"),
    [
        ("DateTime64(3, 'UTC')", "2024-01-02T03:04:05.123", 0),
        ("DateTime64(6, 'UTC')", 1_700_000_000_123_456, 0),
        ("Date", "2024-01-02", 0),
        ("Int64", "42", 0),
        ("Float64", 3, 0),
        ("Map(String, Int64)", {"a": 1, "b": 2}, 0),
        ("Tuple(a Int64, b String)", {"a": 1, "b": "x"}, 0),
        ("LowCardinality(String)", "x", 0),
        ("UUID", "6ba7b810-9dad-11d1-80b4-00c04fd430c8", 0),
        ("String", 5, 1),  # a record error under the sink's default on_record_error: fail
        ("UInt64", 2**64 - 1, 0),  # an integer beyond Int64 (B138)
        ("Int128", 2**63, 0),
        ("Decimal(38, 0)", 2**64 - 1, 0),
        ("Float64", 2**63 + 1, 0),
        ("String", 2**63, 1),
        ("Int64", 2**63, 1),
        ("Array(UInt64)", [2**64 - 1, 1], 0),
        ("Int128", 2**100, 0),  # wider than 64 bits: a float on both paths
        ("Int128", 1e30, 0),  # range-checked, stored exactly (B138)
        ("Int256", -(2**70), 0),
        ("UInt128", -1, 1),
        ("UInt256", 3.5, 1),
        ("Int128", "-12", 0),
        ("Nullable(Int256)", None, 0),
        ("Array(Int128)", [1, -(2**63)], 0),
        ("Map(String, UInt128)", {"a": 1, "b": 2**64 - 1}, 0),
        ("Tuple(a Int64, b Nullable(String))", {"a": 1}, 0),  # absent: NULL (B139)
        ("Tuple(a Int64, b String)", {"a": 1}, 1),  # absent, not Nullable: refused
        ("Array(Tuple(a Int64, b Nullable(Int8)))", [{"a": 1}, {"a": 2, "b": 3}], 0),
        ("Array(Float64)", [1, 2.5], 0),  # integers and fractions in one array (B170)
        ("Array(Float32)", [2**53, -0.5, 7], 0),
        ("Array(Decimal(10, 2))", [1, 2.5], 0),
        ("Array(Int64)", [1, 2.5], 1),  # the fraction refused on both paths
        ("Array(Int64)", [1, 2.0], 0),
        ("Array(Bool)", [1, 0.0], 1),
        ("Array(Array(Float64))", [[1], [2.5, 3]], 0),
        ("Array(Int128)", [-1, 2**64 - 1], 0),  # both signs beyond Int64 (B170)
        ("Array(Float64)", [-1, 2**64 - 1], 0),
        ("Array(UInt64)", [-1, 2**64 - 1], 1),
        ("Array(Decimal(38, 0))", [-(2**63), 2**64 - 1], 0),
        ("Array(String)", [-1, 2**64 - 1], 1),
    ],
)
def test_b87_json_values_mean_the_same_on_both_paths_for_each_column_type(
    front: ChFront, chtype: str, value: Any, exit_code: int
) -> None:
    from spate_json import JsonConfig, JsonDeserializerFactory

    payloads = [_json({"id": i, "c0": value}) for i in range(3)]
    config = decode(JsonConfig, {}, "deserializer.json")
    tables = {"events": (["id", "c0"], ["Int64", chtype])}
    _same(front, tables, payloads, JsonDeserializerFactory, config, exit_code=exit_code)


@needs_avro_columnar
@pytest.mark.parametrize(
    ("chtype", "exit_code"),
    [("Time64(3)", 0), ("Int32", 1), ("Float64", 1), ("String", 1), ("Nullable(String)", 1)],
)
def test_b87_an_avro_time_into_a_column_that_is_not_a_time_is_a_record_error_on_both_paths(
    front: ChFront, chtype: str, exit_code: int
) -> None:
    """A ``time-millis`` value is a record error for an integer, float or string column
    on the columnar path as on the row path (B87, B28), not its seconds or its text."""
    from spate_avro import AvroConfig, AvroDeserializerFactory

    kinds = {"t": (chtype, {"type": "int", "logicalType": "time-millis"}, None)}
    schema = _record_schema("R", ["t"], kinds)
    config = decode(
        AvroConfig, {"mode": "raw", "schema": {"inline": json.dumps(schema)}}, "deserializer.avro"
    )
    payloads = _encode(schema, [{"id": i, "c0": dt.time(1, 2, 3, 4000 * i)} for i in range(3)])
    tables = {"events": _table_spec(["t"], kinds)}
    _same(front, tables, payloads, AvroDeserializerFactory, config, exit_code=exit_code)


@needs_avro_columnar
def test_b87_an_avro_map_stores_the_same_map_on_both_paths(front: ChFront) -> None:
    """An Avro map reads as a list of key/value structs; it reaches a ``Map`` column as
    the row path's dict does (B87)."""
    from spate_avro import AvroConfig, AvroDeserializerFactory

    schema = _record_schema("R", ["counts"], AVRO_KINDS)
    config = decode(
        AvroConfig, {"mode": "raw", "schema": {"inline": json.dumps(schema)}}, "deserializer.avro"
    )
    values: list[dict[str, int]] = [{}, {"a": 1}, {"a": -(2**63), "b": 2**63 - 1, "": 0}]
    payloads = _encode(schema, [{"id": i, "c0": v} for i, v in enumerate(values)])
    tables = {"events": _table_spec(["counts"], AVRO_KINDS)}
    _same(front, tables, payloads, AvroDeserializerFactory, config)
