"""Partition-aware blocks and late data against chDB's HTTP front (B240-B242, B244).

A stream whose tenth of rows is spread over two years goes into a table ``PARTITION BY
toYYYYMMDD(ts)``: one insert of a block fails as the server says ("Too many partitions
for single INSERT block", code 252); the sink writes every row, on the row path and on
the columnar path, cutting each block by its partitions (B240), or, for a key it cannot
compute, splitting refused inserts in halves (B241). With ``late_data`` the old rows go
to a side table, counted (B242); a block written again (a retry, or a replay under
``effectively_once``) rebuilds the same pieces with the same tokens and adds nothing
(B244). Row counts are checked exactly. ``tests/clickhouse/chdb_child.py`` (mode
``partitions``) runs the stream with ``late_data`` on a ``chdb://`` replica.
"""

from __future__ import annotations

import datetime as dt
import logging
import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from spate.errors import ConfigError, ErrorClass, SinkError
from spate.sink import WriteBatch

from tests.clickhouse.chdb_child import run_child
from tests.clickhouse.sinkkit import STRAGGLERS_NOW, Driver, build_sink, straggling_rows
from tests.support.chfront_fixtures import ChFront
from tests.support.scale import scaled

pytestmark = [pytest.mark.integration]

NOW = STRAGGLERS_NOW
WEEK = dt.timedelta(days=7)


@pytest.fixture(scope="module")
def front(chfront_module: Callable[..., ChFront]) -> Iterator[ChFront]:
    yield chfront_module()


def _table(front: ChFront, name: str, partition_by: str = "toYYYYMMDD(ts)") -> Any:
    client = front.client()
    client.command(
        f"CREATE TABLE {name} (id UInt64, ts DateTime64(3, 'UTC')) ENGINE = MergeTree "
        f"PARTITION BY {partition_by} ORDER BY id "
        "SETTINGS non_replicated_deduplication_window = 1000"
    )
    return client


def _rows(count: int, seed: int = 34) -> list[tuple[int, dt.datetime]]:
    return straggling_rows(count, NOW, seed)


def _body(front: ChFront, table: str, **extra: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "table": table,
        "columns": ["id", "ts"],
        "shards": [{"replicas": [front.url]}],
        "batch": {"max_rows": 1_000_000, "linger": "1h"},
        "retry": {"initial": "50ms", "max": "200ms", "max_attempts": 3},
    }
    body.update(extra)
    return body


def _drive(built: Any, rows: list[tuple[int, dt.datetime]]) -> None:
    """Offer every row as one source batch through the pool and flush; all delivered."""
    built.sink.start()
    driver = Driver(built.sink, batch_rows=len(rows))
    driver.offer_all(rows)
    assert driver.finish()
    built.sink.close()
    assert driver.all_delivered


def _frames_batch(
    built: Any, url: str, parts: list[list[Any]], token: str
) -> tuple[Any, WriteBatch]:
    """A started sink's writer and a batch of ``parts`` as the Arrow frames of one block."""
    built.sink.start()
    connector = built.sink._connector  # the sink's own connector, as its workers use it
    writer = connector.open_writer(0, 0, url)
    buffer = connector.new_buffer(0)
    for part in parts:
        buffer.append_frame(
            pa.table(
                {
                    "id": pa.array([r[0] for r in part], pa.uint64()),
                    "ts": pa.array([r[1] for r in part], pa.timestamp("ms", "UTC")),
                }
            )
        )
    return writer, WriteBatch(buffer, sum(len(p) for p in parts), 0, 0, 1, token, 1)


def _write_frames(built: Any, url: str, parts: list[list[Any]], token: str) -> None:
    """Write ``parts`` as the Arrow frames of one block, twice (a retry, a replay: the
    same pieces under the same tokens)."""
    writer, batch = _frames_batch(built, url, parts, token)
    writer.write(batch)
    writer.write(batch)
    writer.close()
    built.sink.close()


def _count(client: Any, table: str) -> int:
    return int(client.command(f"SELECT count() FROM {table}"))


def _late(rows: list[tuple[int, dt.datetime]]) -> int:
    """Rows whose day ended a week or more before the newest row."""
    newest = max(ts for _, ts in rows)
    horizon = newest - WEEK
    return sum(
        1
        for _, ts in rows
        if dt.datetime(ts.year, ts.month, ts.day, tzinfo=dt.UTC) + dt.timedelta(days=1) <= horizon
    )


def test_b240_a_block_over_two_years_of_days_is_refused_whole_and_written_in_pieces(
    front: ChFront,
) -> None:
    client = _table(front, "parts_rows")
    count = scaled(20_000, minimum=4_000)
    rows = _rows(count)
    with pytest.raises(Exception, match="Too many partitions for single INSERT block") as naive:
        client.insert("parts_rows", rows, column_names=["id", "ts"])
    assert "252" in str(naive.value)  # TOO_MANY_PARTS, the code the server uses for it
    assert _count(client, "parts_rows") == 0

    built = build_sink(_body(front, "parts_rows"))
    _drive(built, rows)
    assert _count(client, "parts_rows") == count
    days = int(client.command("SELECT uniqExact(toYYYYMMDD(ts)) FROM parts_rows"))
    assert built.metric("spate_sink_partition_inserts_total") == -(-days // 100) - 1


def test_b240_b244_frames_are_cut_alike_and_a_rewrite_adds_nothing(front: ChFront) -> None:
    client = _table(front, "parts_frames")
    count = scaled(10_000, minimum=3_000)
    rows = _rows(count, seed=35)
    built = build_sink(_body(front, "parts_frames"))
    half = count // 2
    _write_frames(built, front.url, [rows[:half], rows[half:]], "frames-token")
    assert _count(client, "parts_frames") == count
    assert int(client.command("SELECT uniqExact(id) FROM parts_frames")) == count


def test_b241_a_key_the_client_cannot_compute_is_split_in_halves(front: ChFront) -> None:
    client = _table(front, "parts_halves", partition_by="id % 150")
    count = 600  # halves of 300 and quarters of 150 rows span 150 partitions, eighths 75
    rows = _rows(count, seed=36)
    built = build_sink(_body(front, "parts_halves"))
    _drive(built, rows)
    assert _count(client, "parts_halves") == count
    assert built.metric("spate_sink_partition_inserts_total") == 7  # 1 + 2 + 4 splits


@pytest.mark.parametrize("path", ["rows", "frames"])
def test_b242_late_rows_go_to_the_late_data_sink_and_are_counted(front: ChFront, path: str) -> None:
    main, side = f"late_main_{path}", f"late_side_{path}"
    client = _table(front, main)
    _table(front, side, partition_by="toYYYYMM(ts)")
    count = scaled(10_000, minimum=3_000)
    rows = _rows(count, seed=37)
    late = _late(rows)
    assert late > count // 20
    body = _body(front, main, late_data={"after": "7d", "to": "late"})
    built = build_sink(body, sinks={"late": _body(front, side)})
    if path == "rows":
        _drive(built, rows)
    else:  # B244: the block written twice, the same late and on-time pieces deduplicated
        _write_frames(built, front.url, [rows], f"late-{path}")
    assert _count(client, side) == late
    assert _count(client, main) == count - late
    oldest_kept = client.query(f"SELECT min(ts) FROM {main}").result_rows[0][0]
    if oldest_kept.tzinfo is None:
        oldest_kept = oldest_kept.replace(tzinfo=dt.UTC)
    assert oldest_kept >= NOW - WEEK - dt.timedelta(days=1)
    # counted per written block: the frames' block was written twice
    writes = 1 if path == "rows" else 2
    assert built.metric("spate_sink_late_rows_total", table=side) == late * writes


def test_b242_late_data_on_a_table_not_partitioned_by_time_fails_start(front: ChFront) -> None:
    _table(front, "late_ids", partition_by="intDiv(id, 1000)")
    _table(front, "late_ids_side")
    body = _body(front, "late_ids", late_data={"after": "7d", "to": "late"})
    built = build_sink(body, sinks={"late": _body(front, "late_ids_side")})
    with pytest.raises(SinkError, match=r"events\.late_data needs a table partitioned by time"):
        built.sink.start()
    built.sink.close()


def test_b242_late_data_naming_no_sink_is_refused_with_its_path(front: ChFront) -> None:
    body = _body(front, "late_none", late_data={"after": "7d", "to": "nowhere"})
    with pytest.raises(ConfigError, match="nowhere") as refused:
        build_sink(body)
    assert "events.late_data.to" in str(refused.value)


def test_b244_a_block_cut_short_after_its_first_piece_is_completed_by_its_retry(
    front: ChFront, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The link fails after the first piece landed: the batch fails (nothing acked), and
    its retry — or a replay rebuilding the block — sends every piece again under the same
    tokens; the first is dropped by ClickHouse's deduplication, the others land."""
    from spate_clickhouse._writer import ClickHouseShardWriter

    client = _table(front, "parts_cut")
    count = scaled(10_000, minimum=3_000)
    rows = _rows(count, seed=38)
    built = build_sink(_body(front, "parts_cut"))
    writer, batch = _frames_batch(built, front.url, [rows], "cut-token")
    sent: list[str] = []
    insert = ClickHouseShardWriter._insert_stream

    def flaky(self: Any, token: str, *args: Any) -> None:
        if len(sent) == 1:
            sent.append(token)
            raise SinkError("connection reset by peer", ErrorClass.RETRYABLE)
        sent.append(token)
        insert(self, token, *args)

    monkeypatch.setattr(ClickHouseShardWriter, "_insert_stream", flaky)
    with pytest.raises(SinkError, match="connection reset"):
        writer.write(batch)
    first = _count(client, "parts_cut")
    assert 0 < first < count  # the first piece landed, the rest did not
    writer.write(batch)
    writer.close()
    built.sink.close()
    assert sent[0] == sent[2] == "cut-token:p0/" + sent[0].rsplit("/", 1)[1]
    assert _count(client, "parts_cut") == count
    assert int(client.command("SELECT uniqExact(id) FROM parts_cut")) == count


def test_b244_rows_refused_in_a_piece_are_named_by_their_place_in_the_block(
    front: ChFront, caplog: pytest.LogCaptureFixture
) -> None:
    """Isolation (B190) runs inside each piece; a refused row keeps its block position."""
    client = front.client()
    client.command(
        "CREATE TABLE parts_checked (id UInt64, ts DateTime64(3, 'UTC'), "
        "CONSTRAINT small CHECK id != 1003 AND id != 2503) ENGINE = MergeTree "
        "PARTITION BY toYYYYMMDD(ts) ORDER BY id"
    )
    rows = _rows(3_000, seed=39)
    built = build_sink(_body(front, "parts_checked", on_record_error="skip"))
    with caplog.at_level(logging.WARNING):
        _drive(built, rows)
    assert _count(client, "parts_checked") == len(rows) - 2
    refused = sorted(int(m) for m in re.findall(r"refused row (\d+) of batch", caplog.text))
    assert refused == [1003, 2503]


def test_b240_b242_a_chdb_replica_takes_the_stragglers_in_pieces_and_aside(
    tmp_path: Path,
) -> None:
    count = scaled(10_000, minimum=3_000)
    result = run_child("partitions", str(tmp_path / "ch"), str(count))
    late = _late(_rows(count))
    assert result == {
        "naive": 252,
        "delivered": True,
        "days": count - late,
        "days_late": late,
        "late": late,
    }


@pytest.fixture(scope="module")
def window_run(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The ``window`` scenarios of one ``chdb://`` child (B345-B347)."""
    return run_child("window", str(tmp_path_factory.mktemp("window") / "ch"))


def test_b345_a_block_overflowing_its_share_of_the_window_is_refused_unwritten(
    window_run: dict[str, Any],
) -> None:
    """Under ``effectively_once`` on a ``chdb://`` replica, with a window of ten parts and
    two blocks before a replay: a block of five daily partitions is written, one of six is
    refused, FATAL, before any of its rows is — a replay of it could have been written
    twice (B345)."""
    written, five, refused, still = window_run["results"]
    assert (written, five, still) == ("written", 5, 5)
    assert refused.startswith("FATAL: sink events on chdb://")
    assert "a block writes 6 parts (one per partition) into `win`" in refused
    assert "non_replicated_deduplication_window = 10 holds 5 per block" in refused
    assert "for the 2 blocks a partition writes before a replay" in refused
    assert "MODIFY SETTING non_replicated_deduplication_window = 12" in refused


def test_b345_a_replay_of_a_block_overflowing_the_window_writes_no_row_twice(
    window_run: dict[str, Any],
) -> None:
    """A block of ten daily partitions, cut in pieces of four, written and then replayed
    under its token into a table whose window holds nine parts: without B345 every row is
    written twice (chDB keeps no hash of the first parts); with it the block is refused
    both times and no row is in the table twice."""
    first, again, (count, distinct) = window_run["replay"]
    assert count == distinct, f"{count - distinct} rows written twice"
    assert first.startswith("FATAL: ") and again.startswith("FATAL: ")
    assert "a block writes 10 parts" in first
    assert count == 0


def test_b346_a_one_part_block_is_never_refused_for_the_window(
    window_run: dict[str, Any],
) -> None:
    """With 18,081 blocks before a replay (a run that never commits) a window of 1000
    holds less than a part per block; a block of one part is still written — B123's rule
    at start is the one for it — and a block of two parts is refused (B346)."""
    one, two, (count, distinct) = window_run["one"]
    assert one == "written"
    assert two.startswith("FATAL: ")
    assert "a block writes 2 parts" in two
    assert "holds 1 per block for the 18081 blocks" in two
    assert (count, distinct) == (3, 3)


def test_b347_late_rows_count_against_the_side_tables_own_window(
    window_run: dict[str, Any],
) -> None:
    """Late rows go to the ``late_data`` table, whose window is its own: partitioned by
    month with a window of two parts and one block before a replay, a block whose late
    rows span two months is written, one whose late rows span three is refused before any
    of its rows (on time or late) is written, naming the side table (B347)."""
    written, refused, main, side = window_run["late"]
    assert written == "written"
    assert refused.startswith("FATAL: ")
    assert "a block writes 3 parts (one per partition) into `lat_side`" in refused
    assert "non_replicated_deduplication_window = 2 holds 2 per block" in refused
    assert (main, side) == ([1, 1], [2, 2])
