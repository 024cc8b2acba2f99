"""Blocks cut by partitions, late rows set apart, refused inserts halved (B240-B242, B244).

Pure: the planner over Arrow columns, no server (the server's own partitions are compared
in ``tests/clickhouse/test_clickhouse_partition.py``, the writes in
``tests/clickhouse/test_clickhouse_partitions.py``).
"""

from __future__ import annotations

import datetime as dt

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from spate.errors import ErrorClass, SinkError
from spate_clickhouse._blocks import BlockPlanner, TooManyPartitions, halving, too_many_partitions
from spate_clickhouse._partition import parse_key, split_terms
from spate_clickhouse._types import parse_type

TYPES = {"ts": parse_type("DateTime64(3, 'UTC')"), "id": parse_type("Int64")}
DAY = 86_400


def _columns(days: list[int]) -> dict[str, pa.Array]:
    base = dt.datetime(2024, 1, 1, tzinfo=dt.UTC)
    stamps = [base + dt.timedelta(days=d, hours=d % 24) for d in days]
    return {"ts": pa.array(stamps, pa.timestamp("ms", "UTC")), "id": pa.array(days, pa.int64())}


@settings(max_examples=60, deadline=None)
@given(
    days=st.lists(st.integers(0, 400), min_size=1, max_size=300),
    limit=st.integers(1, 50),
)
def test_b240_pieces_hold_every_row_once_in_block_order_within_the_limit(
    days: list[int], limit: int
) -> None:
    key = parse_key("toYYYYMMDD(ts)", TYPES)
    planner = BlockPlanner(key, limit)
    columns = _columns(days)
    pieces = planner.pieces("tok", len(days), lambda wanted: columns)
    distinct = len(set(days))
    if distinct <= limit:
        assert [(p.rows, p.token) for p in pieces] == [(None, "tok")]
        return
    n = len(pieces)
    assert [p.token for p in pieces] == [f"tok:p{i}/{n}" for i in range(n)]
    seen: list[int] = []
    for piece in pieces:
        assert piece.rows is not None and piece.rows == sorted(piece.rows)
        assert len({days[r] for r in piece.rows}) <= limit
        seen.extend(piece.rows)
    assert sorted(seen) == list(range(len(days)))
    # B244: the same block gives the same pieces
    again = planner.pieces("tok", len(days), lambda wanted: columns)
    assert again == pieces


def test_b242_rows_of_days_ended_before_the_horizon_are_late() -> None:
    key = parse_key("toYYYYMMDD(ts)", TYPES)
    planner = BlockPlanner(key, 100, late_after=7 * DAY)
    base = dt.datetime(2024, 3, 20, 12, tzinfo=dt.UTC)
    stamps = [base, base - dt.timedelta(days=6), base - dt.timedelta(days=8), base]
    columns = {"ts": pa.array(stamps, pa.timestamp("ms", "UTC"))}
    pieces = planner.pieces("tok", 4, lambda wanted: columns)
    assert [(p.rows, p.token, p.late) for p in pieces] == [
        ([0, 1, 3], "tok", False),
        ([2], "tok:late", True),
    ]


def test_b242_a_month_partition_is_late_only_once_the_whole_month_is() -> None:
    key = parse_key("toYYYYMM(ts)", TYPES)
    planner = BlockPlanner(key, 100, late_after=7 * DAY)
    newest = dt.datetime(2024, 3, 5, tzinfo=dt.UTC)
    stamps = [
        newest,
        dt.datetime(2024, 3, 1, tzinfo=dt.UTC),
        dt.datetime(2024, 2, 1, tzinfo=dt.UTC),
    ]
    columns = {"ts": pa.array(stamps, pa.timestamp("ms", "UTC"))}
    pieces = planner.pieces("tok", 3, lambda wanted: columns)
    # February ended on March 1st, less than a week before the newest row: not late
    assert [(p.rows, p.late) for p in pieces] == [(None, False)]
    stamps[0] = dt.datetime(2024, 3, 8, tzinfo=dt.UTC)
    columns = {"ts": pa.array(stamps, pa.timestamp("ms", "UTC"))}
    pieces = planner.pieces("tok", 3, lambda wanted: columns)
    assert [(p.rows, p.late) for p in pieces] == [([0, 1], False), ([2], True)]


def test_b241_a_refused_insert_is_halved_with_tokens_of_its_ranges() -> None:
    calls: list[tuple[int, int, str]] = []
    error = SinkError("Too many partitions for single INSERT block", ErrorClass.RETRYABLE)

    def insert(start: int, stop: int, token: str) -> None:
        calls.append((start, stop, token))
        if stop - start > 2:
            raise TooManyPartitions(error)

    splits: list[int] = []
    halving(insert, "tok", lambda: splits.append(1))(0, 8, "tok")
    written = [c for c in calls if c[1] - c[0] <= 2]
    assert [c[2] for c in written] == ["tok:0-2", "tok:2-4", "tok:4-6", "tok:6-8"]
    assert len(splits) == 3


def test_b241_one_row_still_refused_raises_the_servers_error() -> None:
    error = SinkError("Too many partitions for single INSERT block", ErrorClass.RETRYABLE)

    def insert(start: int, stop: int, token: str) -> None:
        raise TooManyPartitions(error)

    with pytest.raises(SinkError) as raised:
        halving(insert, "tok", lambda: None)(0, 1, "tok")
    assert raised.value is error


def test_b241_too_many_parts_is_not_too_many_partitions() -> None:
    assert too_many_partitions(
        252,
        "Code: 252. DB::Exception: Too many partitions for single INSERT block (more than 100).",
    )
    assert not too_many_partitions(252, "Code: 252. DB::Exception: Too many parts (300).")
    assert not too_many_partitions(None, "Too many partitions for single INSERT block")


@pytest.mark.parametrize(
    ("expression", "terms"),
    [
        ("toYYYYMM(ts)", ["toYYYYMM(ts)"]),
        ("(toYYYYMMDD(ts), intDiv(id, 10))", ["toYYYYMMDD(ts)", "intDiv(id, 10)"]),
        ("tuple(toDate(ts), id)", ["toDate(ts)", "id"]),
        ("tuple()", []),
        ("", []),
    ],
)
def test_b240_partition_keys_split_into_terms(expression: str, terms: list[str]) -> None:
    assert split_terms(expression) == terms


@pytest.mark.parametrize(
    "expression",
    [
        "id % 10",
        "toMonday(ts)",
        "intDiv(ts, 10)",
        "toYYYYMM(id)",
        "toYYYYMM(other)",
        "intDiv(id, 0)",
    ],
)
def test_b241_other_keys_are_left_to_the_server(expression: str) -> None:
    assert parse_key(expression, TYPES) is None


def test_b241_a_block_whose_partitions_cannot_be_computed_goes_whole() -> None:
    """Values the key's functions cannot read leave the block to the halving (B241)."""
    from spate_clickhouse._blocks import Partitioning, Piece

    partitioning = Partitioning("events", 100, None, None)
    partitioning.planner = BlockPlanner(parse_key("toYYYYMMDD(ts)", TYPES), 100)
    columns = {"ts": pa.array(["not", "a", "time"])}
    assert partitioning.pieces("tok", 3, lambda wanted: columns) == [Piece(None, "tok")]
