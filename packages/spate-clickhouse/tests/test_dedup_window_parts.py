"""The deduplication window counts parts; each piece knows the parts it writes.

ClickHouse keeps one hash per part — one per partition an insert writes — so a block cut
into pieces (B240) takes one entry of ``non_replicated_deduplication_window`` per
partition, while B123 sizes ``dedup_window`` in blocks. The chDB test shows a replayed
block written twice when its parts overflow the window, and kept once when the window
holds them; a block overflowing its share of the window is refused with the fix (B345).
"""

from __future__ import annotations

import datetime as dt

import pyarrow as pa
import pytest
from spate.errors import ErrorClass, SinkError
from spate_clickhouse._blocks import BlockPlanner, Piece
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
