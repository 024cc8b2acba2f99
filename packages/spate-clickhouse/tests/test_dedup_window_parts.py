"""The deduplication window counts parts; each piece knows the parts it writes.

ClickHouse keeps one hash per part — one per partition an insert writes — so a block cut
into pieces (B240) takes one entry of ``non_replicated_deduplication_window`` per
partition, while B123 sizes ``dedup_window`` in blocks. The chDB test shows a replayed
block written twice when its parts overflow the window, and kept once when the window
holds them; a block overflowing its share of the window is refused with the fix (B345).
"""

from __future__ import annotations

import datetime as dt
from types import SimpleNamespace

import pyarrow as pa
import pytest
from spate.errors import ErrorClass, SinkError
from spate_clickhouse._blocks import BlockPlanner, Columns, LateTable, Partitioning, Piece
from spate_clickhouse._intents import DedupWindow
from spate_clickhouse._partition import parse_key
from spate_clickhouse._types import parse_type

TYPES = {"ts": parse_type("DateTime('UTC')"), "id": parse_type("Int64")}
DAYS = 10
LIMIT = 4


def _block() -> tuple[list[dt.datetime], list[Piece]]:
    base = dt.datetime(2024, 1, 1, tzinfo=dt.UTC)
    stamps = [base + dt.timedelta(days=d) for d in range(DAYS)]
    columns = {"ts": pa.array(stamps, pa.timestamp("s", "UTC")), "id": pa.array(range(DAYS))}
    key = parse_key("toYYYYMMDD(ts)", TYPES)
    assert key is not None
    pieces = BlockPlanner(key, LIMIT).pieces("run-7", DAYS, lambda wanted: columns)
    return stamps, pieces


def test_b345_pieces_count_the_partitions_they_write() -> None:
    """Each piece carries the partitions it writes; a block's sum is its distinct
    partitions (one part, one window entry, each)."""
    _, pieces = _block()
    assert [p.token for p in pieces] == ["run-7:p0/3", "run-7:p1/3", "run-7:p2/3"]
    assert [p.partitions for p in pieces] == [4, 4, 2]
    assert sum(p.partitions for p in pieces) == DAYS
    whole = BlockPlanner(parse_key("toYYYYMMDD(ts)", TYPES), 100)
    stamps = pa.array([0, 5, 2 * 86_400], pa.timestamp("s", "UTC"))
    columns = {"ts": stamps, "id": pa.array([1, 2, 3])}
    assert [p.partitions for p in whole.pieces("t", 3, lambda wanted: columns)] == [2]


@pytest.mark.parametrize(("window", "copies"), [(DAYS - 1, 2), (DAYS, 1)])
def test_b345_a_replayed_block_overflowing_the_window_is_written_twice_on_chdb(
    window: int, copies: int
) -> None:
    """On chDB in process: a block of ten daily partitions, cut in pieces of four, written
    and then replayed under the same tokens. A window of nine parts — nine blocks to
    B123's count — lets every row in again; a window of ten keeps each row once."""
    session = pytest.importorskip("chdb.session")
    stamps, pieces = _block()
    db = session.Session()
    try:
        db.query("CREATE DATABASE IF NOT EXISTS w")
        db.query(
            "CREATE TABLE w.t (id Int64, ts DateTime('UTC')) ENGINE = MergeTree "
            "PARTITION BY toYYYYMMDD(ts) ORDER BY id "
            f"SETTINGS non_replicated_deduplication_window = {window}"
        )
        for _ in range(2):  # the first write, then the replay after a kill -9
            for piece in pieces:
                assert piece.rows is not None
                values = ",".join(f"({i}, {int(stamps[i].timestamp())})" for i in piece.rows)
                db.query(
                    "INSERT INTO w.t SETTINGS insert_deduplicate = 1, "
                    f"insert_deduplication_token = '{piece.token}' VALUES {values}"
                )
        counted = db.query("SELECT count(), uniqExact(id) FROM w.t", "CSV").bytes()
        assert counted.decode().strip() == f"{DAYS * copies},{DAYS}"
    finally:
        db.close()


def test_b345_a_block_overflowing_its_share_of_the_window_is_refused() -> None:
    """``window // blocks`` parts per block pass; one more is refused, FATAL, naming the
    setting, the numbers and the ``ALTER TABLE`` that makes room."""
    window = DedupWindow("`w`.`t`", "non_replicated_deduplication_window", 1000, 13)
    assert window.parts_per_block == 76
    window.check(76, "sink ch on chdb://")
    with pytest.raises(SinkError) as caught:
        window.check(77, "sink ch on chdb://")
    assert caught.value.error_class is ErrorClass.FATAL
    message = str(caught.value)
    assert "writes 77 parts" in message
    assert "non_replicated_deduplication_window = 1000 holds 76 per block" in message
    assert "13 blocks a partition writes before a replay" in message
    assert "MODIFY SETTING non_replicated_deduplication_window = 1001" in message


def test_b346_a_one_part_block_is_never_refused_and_a_share_is_at_least_one() -> None:
    """18,081 blocks before a replay (a run that never commits) leave a window of 1000
    less than one part per block: the share is one, a block of one part passes (B123's
    start-up rule is the one for it), a block of two is refused (B346)."""
    window = DedupWindow("`w`.`t`", "non_replicated_deduplication_window", 1000, 18_081)
    assert window.parts_per_block == 1
    window.check(1, "sink ch on chdb://")
    window.check(0, "sink ch on chdb://")  # parts not known: not checked
    with pytest.raises(SinkError) as caught:
        window.check(2, "sink ch on chdb://")
    assert "holds 1 per block for the 18081 blocks" in str(caught.value)


class _KeyClient:
    """Answers the side table's ``partition_key`` query as a server would."""

    def __init__(self, expression: str) -> None:
        self.expression = expression

    def query(self, sql: str, parameters: dict[str, str]) -> SimpleNamespace:
        assert parameters == {"db": "db", "table": "t_late"}
        return SimpleNamespace(result_rows=[(self.expression, "UTC")])


def _late_block() -> tuple[Partitioning, list[Piece], Columns]:
    """A block of one row now and late rows on four days of two months, cut by day."""
    base = dt.datetime(2024, 1, 1, tzinfo=dt.UTC)
    days = [0, 1, 40, 41]
    stamps = [base + dt.timedelta(days=400)] + [base + dt.timedelta(days=d) for d in days]
    arrays = {"ts": pa.array(stamps, pa.timestamp("s", "UTC")), "id": pa.array(range(5))}
    late = LateTable("side", "", "t_late", lambda token: {})
    partitioning = Partitioning("ch", 3, 7 * 86_400.0, late)
    partitioning.planner = BlockPlanner(parse_key("toYYYYMMDD(ts)", TYPES), 3, 7 * 86_400.0)

    def columns(wanted: tuple[str, ...]) -> dict[str, pa.Array]:
        return {name: arrays[name] for name in wanted}

    return partitioning, partitioning.pieces("run-8", 5, columns), columns


@pytest.mark.parametrize(
    ("expression", "parts"),
    [("", 2), ("tuple()", 2), ("toYYYYMM(ts)", 3), ("toYYYYMMDD(ts)", 4), ("cityHash64(id)", None)],
)
def test_b347_late_pieces_count_the_parts_of_the_side_tables_own_key(
    expression: str, parts: int | None
) -> None:
    """The late rows of a block (four days in two months, cut in pieces of three days)
    write one part per piece into a side table without partitions, and each piece's
    partitions under the side table's own key otherwise; a key the sink cannot compute
    leaves them uncounted (B347)."""
    partitioning, pieces, columns = _late_block()
    assert [(p.late, p.partitions) for p in pieces] == [(False, 1), (True, 3), (True, 1)]
    partitioning.learn_late(_KeyClient(expression), "db", TYPES)  # type: ignore[arg-type]
    assert partitioning.late_parts(pieces, columns) == parts
