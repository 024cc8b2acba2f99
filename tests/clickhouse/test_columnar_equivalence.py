"""The row path and the columnar path store the same rows in ClickHouse (B87).

Hypothesis draws a record schema (integers of several widths, floats, strings, booleans,
nullable fields, millisecond timestamps, arrays of integers) and records for it; the
records are encoded as raw Avro (fastavro, the reference) and as JSON objects (orjson),
some payloads corrupted, and each batch runs through a whole pipeline twice — once with
the deserializer's columnar decoder removed (the row path), once with it (the columnar
path, its log line checked) — into two tables of one ClickHouse HTTP front over chDB.
Both tables must hold identical rows, and the deserializer counters (records decoded,
skipped, and empty payloads that hold no record) must be identical.
"""

from __future__ import annotations

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
from spate import BuildContext, ManualClock, Pipeline
from spate.config import decode
from spate.metrics import Meter
from spate.testing import memory_source

from tests.clickhouse.sinkkit import build_sink
from tests.support.chfront_fixtures import ChFront
from tests.support.scale import scaled

pytest.importorskip("polars")
pytest.importorskip("jetliner")
pytest.importorskip("pyarrow")

pytestmark = pytest.mark.integration

EXAMPLES = settings(
    max_examples=scaled(40, minimum=4),
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)

# kind: (ClickHouse type, Avro type, values)
KINDS: dict[str, tuple[str, Any, Any]] = {
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


@st.composite
def cases(draw: st.DrawFn) -> tuple[list[str], list[dict[str, Any]], list[tuple[int, str]]]:
    kinds = draw(st.lists(st.sampled_from(sorted(KINDS)), min_size=1, max_size=6))
    records = draw(
        st.lists(
            st.fixed_dictionaries({f"c{i}": KINDS[k][2] for i, k in enumerate(kinds)}),
            min_size=1,
            max_size=25,
        )
    )
    for i, record in enumerate(records):
        record["id"] = i
    bad = draw(
        st.lists(
            st.tuples(st.integers(0, len(records) - 1), st.sampled_from(["cut", "junk", "empty"])),
            max_size=3,
        )
    )
    return kinds, records, bad


def _context(name: str) -> BuildContext:
    return BuildContext(
        pipeline=name,
        component="deserializer",
        meter=Meter(name),
        clock=ManualClock(),
        run_nonce="r1",
        budget=None,  # type: ignore[arg-type]  # deserializers take no bytes from the budget
    )


def _avro(kinds: list[str], records: list[dict[str, Any]]) -> tuple[Any, list[bytes]]:
    schema = {
        "type": "record",
        "name": "R",
        "fields": [{"name": "id", "type": "long"}]
        + [{"name": f"c{i}", "type": KINDS[k][1]} for i, k in enumerate(kinds)],
    }
    parsed = fastavro.parse_schema(schema)
    payloads = []
    for record in records:
        out = io.BytesIO()
        fastavro.schemaless_writer(out, parsed, record)
        payloads.append(out.getvalue())
    return schema, payloads


def _corrupt(payloads: list[bytes], bad: list[tuple[int, str]]) -> list[bytes]:
    out = list(payloads)
    for index, how in bad:
        if how == "cut":
            out[index] = out[index][: len(out[index]) // 2]
        elif how == "junk":
            out[index] = out[index] + b"\x00junk"
        else:
            out[index] = b""
    return out


def _run(
    front: ChFront,
    kinds: list[str],
    payloads: list[bytes],
    build: Callable[[BuildContext], Any],
    columnar: bool,
    exit_code: int = 0,
) -> tuple[list[tuple[Any, ...]], tuple[float, float, float]]:
    """Run one pipeline into a new table: its rows (by id) and its (decoded, skipped,
    empty) deserializer counts."""
    table = f"eq_{next(_tables)}"
    columns = ["id", *(f"c{i}" for i in range(len(kinds)))]
    types = ["Int64", *(KINDS[k][0] for k in kinds)]
    client = front.client()
    client.command(
        f"CREATE TABLE {table} ("
        + ", ".join(f"{c} {t}" for c, t in zip(columns, types, strict=True))
        + ") ENGINE = MergeTree ORDER BY id"
    )
    name = f"eq{table}"
    meter = Meter(name)
    deserializer = build(_context(name))
    if not columnar:
        deserializer.columnar = None
    built = build_sink(
        {"table": table, "columns": columns, "shards": [{"replicas": [front.url]}]},
        pipeline=name,
        meter=meter,
    )
    source, _ = memory_source({0: payloads}, batch_size=10)
    seen = _Seen()
    logger = logging.getLogger("spate")
    logger.addHandler(seen)
    old_level = logger.level
    logger.setLevel(logging.INFO)
    try:
        report = Pipeline(
            name,
            source,
            {"events": built.sink},
            deserializer=deserializer,
            meter=meter,
            budget=built.budget,
            handle_signals=False,
        ).run()
    finally:
        logger.removeHandler(seen)
        logger.setLevel(old_level)
    assert report.exit_code == exit_code, report
    assert bool(seen.columnar) is columnar, seen.columnar
    rows = client.query(f"SELECT * FROM {table} ORDER BY id").result_rows

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

    return [tuple(r) for r in rows], (count("ok"), count("skipped"), count("empty"))


def _same(
    front: ChFront, kinds: list[str], payloads: list[bytes], build: Callable[[BuildContext], Any]
) -> None:
    rows, counts = _run(front, kinds, payloads, build, columnar=False)
    col_rows, col_counts = _run(front, kinds, payloads, build, columnar=True)
    assert col_rows == rows
    assert col_counts == counts


@EXAMPLES
@given(case=cases())
def test_b87_avro_raw_rows_and_columns_store_identical_tables(
    front: ChFront, case: tuple[list[str], list[dict[str, Any]], list[tuple[int, str]]]
) -> None:
    from spate_avro import AvroConfig, AvroDeserializerFactory

    kinds, records, bad = case
    schema, payloads = _avro(kinds, records)
    config = decode(
        AvroConfig,
        {"mode": "raw", "schema": {"inline": json.dumps(schema)}},
        "deserializer.avro",
    )
    _same(
        front,
        kinds,
        _corrupt(payloads, bad),
        lambda context: AvroDeserializerFactory.build(config, context),
    )


@EXAMPLES
@given(case=cases(), framing=st.sampled_from(["single", "ndjson"]))
def test_b87_json_rows_and_columns_store_identical_tables(
    front: ChFront,
    case: tuple[list[str], list[dict[str, Any]], list[tuple[int, str]]],
    framing: str,
) -> None:
    from spate_json import JsonConfig, JsonDeserializerFactory

    kinds, records, bad = case
    payloads = [orjson.dumps(r) for r in records]
    if framing == "ndjson":  # several records per payload
        payloads = [b"\n".join(payloads[i : i + 3]) + b"\n" for i in range(0, len(payloads), 3)]
        bad = [(i % len(payloads), how) for i, how in bad]
    config = decode(JsonConfig, {"framing": framing}, "deserializer.json")
    _same(
        front,
        kinds,
        _corrupt(payloads, bad),
        lambda context: JsonDeserializerFactory.build(config, context),
    )


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
    source, handle = memory_source({0: payloads}, batch_size=8)
    seen = _Seen()
    logger = logging.getLogger("spate")
    logger.addHandler(seen)
    old_level = logger.level
    logger.setLevel(logging.INFO)
    try:
        report = Pipeline(
            name,
            source,
            {"events": built.sink},
            deserializer=JsonDeserializerFactory.build(config, _context(name)),
            meter=meter,
            budget=built.budget,
            handle_signals=False,
        ).run()
    finally:
        logger.removeHandler(seen)
        logger.setLevel(old_level)
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
    ],
)
def test_b87_json_values_mean_the_same_on_both_paths_for_each_column_type(
    front: ChFront, chtype: str, value: Any, exit_code: int
) -> None:
    from spate_json import JsonConfig, JsonDeserializerFactory

    KINDS["probe"] = (chtype, None, None)
    payloads = [orjson.dumps({"id": i, "c0": value}) for i in range(3)]
    config = decode(JsonConfig, {}, "deserializer.json")

    def build(context: BuildContext) -> Any:
        return JsonDeserializerFactory.build(config, context)

    rows, counts = _run(front, ["probe"], payloads, build, columnar=False, exit_code=exit_code)
    col_rows, col_counts = _run(
        front, ["probe"], payloads, build, columnar=True, exit_code=exit_code
    )
    assert col_rows == rows
    if exit_code == 0:  # a failed run stops at the record on rows, after the batch on columns
        assert col_counts == counts
