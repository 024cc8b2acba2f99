"""The client-side partition of every key kind against the server's own (B243).

For each expression the sink computes (``toYYYYMM``, ``toYYYYMMDD``, ``toDate``,
``toStartOfHour``, ``intDiv``, a bare column, a tuple), random values and edge cases —
the epoch, the last ``DateTime``, ``Date32`` before 1970, a zone half an hour off UTC,
``DateTime64`` of 3 and 9 digits, negative ``intDiv``, ``Nullable`` nulls — are inserted
into chDB (through its HTTP front) and ``SELECT toString(<expr>)`` is compared with
:meth:`Term.values` on the same values, on the row path's Python values and on the
columnar path's Arrow arrays. A tuple key is also checked against the partitions the
server makes of the rows.
"""

from __future__ import annotations

import datetime as dt
import random
from collections.abc import Callable, Iterator
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pytest
from spate_clickhouse._partition import arrow_column, parse_key
from spate_clickhouse._types import parse_type

from tests.support.chfront_fixtures import ChFront

pytestmark = [pytest.mark.integration]

UTC = dt.UTC
COLUMNS = {
    "d": "Date",
    "d32": "Date32",
    "t": "DateTime('UTC')",
    "tk": "DateTime('Asia/Kolkata')",
    "t3": "DateTime64(3, 'UTC')",
    "t9": "DateTime64(9, 'UTC')",
    "nt": "Nullable(DateTime('UTC'))",
    "i": "Int64",
    "u": "UInt32",
    "s": "String",
}
EXPRESSIONS = [
    *(f"{fn}({c})" for fn in ("toYYYYMM", "toYYYYMMDD", "toDate") for c in ("d", "d32")),
    *(
        f"{fn}({c})"
        for fn in ("toYYYYMM", "toYYYYMMDD", "toDate", "toStartOfHour")
        for c in ("t", "tk", "t3", "t9", "nt")
    ),
    "intDiv(i, 7)",
    "intDiv(i, -3)",
    "intDiv(u, 1000)",
    "i",
    "s",
    "d",
    "t",
]


def _values(rng: random.Random, n: int) -> dict[str, list[Any]]:
    edges = [
        dt.datetime(1970, 1, 1, tzinfo=UTC),
        dt.datetime(1970, 1, 1, 0, 0, 1, tzinfo=UTC),
        dt.datetime(2106, 2, 7, 6, 28, 15, tzinfo=UTC),
        dt.datetime(2024, 2, 29, 23, 59, 59, tzinfo=UTC),
        dt.datetime(2024, 3, 31, 18, 29, 59, tzinfo=UTC),  # 23:59:59 in Kolkata
        dt.datetime(2024, 3, 31, 18, 30, 0, tzinfo=UTC),  # the next day in Kolkata
        dt.datetime(2023, 12, 31, 23, 59, 59, tzinfo=UTC),
    ]
    times = edges + [
        dt.datetime.fromtimestamp(rng.randrange(0, 4_000_000_000), UTC)
        for _ in range(n - len(edges))
    ]
    days = [dt.date(1970, 1, 1), dt.date(2149, 6, 6), dt.date(2000, 2, 29)]
    days += [dt.date(1970, 1, 1) + dt.timedelta(days=rng.randrange(0, 65535)) for _ in range(n - 3)]
    days32 = [dt.date(1900, 1, 1), dt.date(1969, 12, 31), dt.date(2299, 12, 31)]
    days32 += [
        dt.date(1900, 1, 1) + dt.timedelta(days=rng.randrange(0, 146_000)) for _ in range(n - 3)
    ]
    ints = [0, -1, -7, -6, 7, 6, -(2**63), 2**63 - 1] + [
        rng.randrange(-(10**12), 10**12) for _ in range(n - 8)
    ]
    unsigned = [0, 999, 1000, 2**32 - 1] + [rng.randrange(0, 2**32) for _ in range(n - 4)]
    return {
        "d": days,
        "d32": days32,
        "t": times,
        "tk": times,
        "t3": [t + dt.timedelta(milliseconds=rng.randrange(1000)) for t in times],
        "t9": [t.replace(year=min(t.year, 2261)) for t in times],
        "nt": [None if k % 5 == 0 else t for k, t in enumerate(times)],
        "i": ints,
        "u": unsigned,
        "s": [rng.choice(["a", "b", "", "é"]) for _ in range(n)],
    }


@pytest.fixture(scope="module")
def table(chfront_module: Callable[..., ChFront]) -> Iterator[tuple[Any, dict[str, list[Any]]]]:
    front = chfront_module()
    client = front.client()
    client.command(
        "CREATE TABLE part_values (k UInt32, "
        + ", ".join(f"{name} {type_name}" for name, type_name in COLUMNS.items())
        + ") ENGINE = MergeTree ORDER BY k"
    )
    values = _values(random.Random(240), 300)
    rows = [[k, *(values[c][k] for c in COLUMNS)] for k in range(300)]
    client.insert("part_values", rows, column_names=["k", *COLUMNS])
    yield client, values


def _rendered(array: pa.Array) -> list[str | None]:
    if pa.types.is_timestamp(array.type):
        return pc.strftime(array, format="%Y-%m-%d %H:%M:%S").to_pylist()  # type: ignore[no-any-return]
    if pa.types.is_date(array.type):
        return pc.strftime(array.cast(pa.timestamp("s")), format="%Y-%m-%d").to_pylist()  # type: ignore[no-any-return]
    return [None if v is None else str(v) for v in array.to_pylist()]


def _frame_array(name: str, values: list[Any]) -> pa.Array:
    """The columnar path's Arrow array of a column (as a frame would carry it)."""
    arrow_types = {
        "d": pa.date32(),
        "d32": pa.date32(),
        "t": pa.timestamp("s", "UTC"),
        "tk": pa.timestamp("s", "UTC"),
        "t3": pa.timestamp("ms", "UTC"),
        "t9": pa.timestamp("ns", "UTC"),
        "nt": pa.timestamp("us", "UTC"),
        "i": pa.int64(),
        "u": pa.uint32(),
        "s": pa.string(),
    }
    return pa.array(values, arrow_types[name])


@pytest.mark.parametrize("expression", EXPRESSIONS)
def test_b243_client_partition_values_match_the_server(
    table: tuple[Any, dict[str, list[Any]]], expression: str
) -> None:
    client, values = table
    types = {name: parse_type(type_name) for name, type_name in COLUMNS.items()}
    key = parse_key(expression, types, "UTC")
    assert key is not None and len(key.terms) == 1
    term = key.terms[0]
    server = [
        None if r[0] is None else str(r[0])
        for r in client.query(
            f"SELECT toString({expression}) FROM part_values ORDER BY k"
        ).result_rows
    ]
    rows = arrow_column(values[term.column], types[term.column])
    assert _rendered(term.values(rows)) == server, "row path"
    frame = _frame_array(term.column, values[term.column])
    assert _rendered(term.values(frame)) == server, "columnar path"


def test_b243_a_tuple_key_makes_as_many_partitions_as_the_server(
    table: tuple[Any, dict[str, list[Any]]],
) -> None:
    client, values = table
    expression = "(toYYYYMM(t3), intDiv(i, 1000000000000), s)"
    types = {name: parse_type(type_name) for name, type_name in COLUMNS.items()}
    key = parse_key(expression, types, "UTC")
    assert key is not None and len(key.terms) == 3
    ids, count = key.ids({c: arrow_column(values[c], types[c]) for c in key.columns})
    server = client.query(f"SELECT count(DISTINCT {expression}) FROM part_values").result_rows
    assert count == server[0][0]
    # rows share an id exactly when the server gives them the same key
    keys = client.query(f"SELECT toString({expression}) FROM part_values ORDER BY k").result_rows
    pairs = set(zip(ids.to_pylist(), (r[0] for r in keys), strict=True))
    assert len(pairs) == count


def test_b243_the_server_reports_keys_the_client_parses(
    chfront_module: Callable[..., ChFront],
) -> None:
    client = chfront_module().client()
    client.command(
        "CREATE TABLE part_key (ts DateTime64(3, 'UTC'), id Int64) ENGINE = MergeTree "
        "PARTITION BY (toYYYYMMDD(ts), intDiv(id, 100)) ORDER BY id"
    )
    expression = client.query(
        "SELECT partition_key FROM system.tables WHERE name = 'part_key' "
        "AND database = currentDatabase()"
    ).result_rows[0][0]
    types = {"ts": parse_type("DateTime64(3, 'UTC')"), "id": parse_type("Int64")}
    key = parse_key(expression, types)
    assert key is not None, expression
    assert [(t.function, t.column, t.divisor) for t in key.terms] == [
        ("toYYYYMMDD", "ts", 1),
        ("intDiv", "id", 100),
    ]
