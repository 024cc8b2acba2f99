"""Partition pieces, halves, late rows, isolation and retries together, on a fake server
(B240-B242, B244 with B190).

The writer's columnar path writes a random block of rows to a scripted server that acts
as ClickHouse does where it matters: it refuses an insert spanning more than its
partition limit (code 252, "Too many partitions for single INSERT block"), refuses a
range holding a row with a bad value (code 469), keeps each token's rows once
(deduplication), and drops the link after a random number of inserts. The writer's
``write`` is called again after each failure, as the pool retries a batch. Whatever the
block, key and failures: every good row ends in the main table or, when late, in the
side table, exactly once; the bad rows nowhere and reported by their block positions;
and a second run on the same block makes the same inserts under the same tokens.
"""

from __future__ import annotations

import datetime as dt
import io
from typing import Any

import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st
from spate.config import decode
from spate.errors import SinkError
from spate.sink import WriteBatch
from spate_clickhouse import ClickHouseSinkConfig
from spate_clickhouse._blocks import BlockPlanner, LateTable
from spate_clickhouse._endpoint import parse_endpoint
from spate_clickhouse._isolate import Rejected
from spate_clickhouse._partition import parse_key
from spate_clickhouse._writer import ClickHouseConnector, ClickHouseShardWriter

NEWEST = dt.datetime(2026, 6, 30, 12, tzinfo=dt.UTC)
DAY = 86_400
LIMIT = 4  # the server's max_partitions_per_insert_block in this test


class _ServerError(Exception):
    """What clickhouse-connect raises for a server exception (the code in the text)."""


class _FakeServer:
    def __init__(self, bad: set[int], drop_after: int | None) -> None:
        self.bad = bad
        self.drop_after = drop_after
        self.inserts: list[tuple[str, str]] = []
        self.kept: dict[tuple[str, str], list[int]] = {}

    def raw_insert(
        self, table: str, column_names: Any, insert_block: bytes, settings: Any, fmt: str
    ) -> None:
        if self.drop_after is not None and len(self.inserts) >= self.drop_after:
            self.drop_after = None  # the link comes back for the retry
            raise ConnectionResetError("connection reset by peer")
        token = str(settings["insert_deduplication_token"])
        self.inserts.append((table, token))
        frame = pa.ipc.open_stream(io.BytesIO(insert_block)).read_all()
        ids = frame.column("id").to_pylist()
        days = {ts.date() for ts in frame.column("ts").to_pylist()}
        if len(days) > LIMIT:
            raise _ServerError(
                f"Code: 252. DB::Exception: Too many partitions for single INSERT block "
                f"(more than {LIMIT}). (TOO_MANY_PARTS)"
            )
        refused = sorted(self.bad.intersection(ids))
        if refused:
            raise _ServerError(
                f"Code: 469. DB::Exception: Constraint `ok` for table {table} is violated "
                f"at row {refused[0]}. (VIOLATED_CONSTRAINT)"
            )
        self.kept.setdefault((table, token), ids)

    def rows(self, table: str) -> list[int]:
        return sorted(i for (t, _), ids in self.kept.items() if t == table for i in ids)

    def close(self) -> None:
        pass


def _writer(server: _FakeServer, computed: bool, late: bool) -> tuple[Any, list[Rejected]]:
    body: dict[str, Any] = {
        "table": "events",
        "columns": [{"id": "UInt64"}, {"ts": "DateTime64(3, 'UTC')"}],
        "shards": [{"replicas": ["http://ch:8123"]}],
        "validate_schema": "off",
        "on_record_error": "skip",
        "max_partitions_per_insert_block": LIMIT,
    }
    if late:
        body["late_data"] = {"after": "7d", "to": "side"}
    config = decode(ClickHouseSinkConfig, body, "sinks.events.clickhouse")
    connector = ClickHouseConnector(config, "events")
    connector.partitioning.late = LateTable(
        "side", "", "side", lambda token: {"insert_deduplication_token": token}
    )
    types = {c.name: c.type for c in connector.encoder().columns}
    key = parse_key("toYYYYMMDD(ts)", types) if computed else None
    planner = connector.partitioning.planner
    connector.partitioning.planner = BlockPlanner(key, LIMIT, planner.late_after)
    found: list[Rejected] = []
    connector.rejected = lambda rows, inserts, seq, endpoint: found.extend(rows)  # type: ignore[method-assign]
    writer = ClickHouseShardWriter(connector, parse_endpoint("http://ch:8123"), 0)
    writer._get_client = lambda: server  # type: ignore[method-assign]
    return (connector, writer), found


def _run(
    days: list[int], bad: set[int], computed: bool, late: bool, drop_after: int | None
) -> tuple[_FakeServer, list[Rejected]]:
    server = _FakeServer(bad, drop_after)
    (connector, writer), found = _writer(server, computed, late)
    stamps = [NEWEST - dt.timedelta(days=d, minutes=i) for i, d in enumerate(days)]
    buffer = connector.new_buffer(0)
    buffer.append_frame(
        pa.table(
            {
                "id": pa.array(range(len(days)), pa.uint64()),
                "ts": pa.array(stamps, pa.timestamp("ms", "UTC")),
            }
        )
    )
    batch = WriteBatch(buffer, len(days), 0, 0, 1, "blk", 1)
    for _attempt in range(3):
        try:
            writer.write(batch)
            break
        except SinkError:
            continue
    else:
        raise AssertionError("the batch was never written")
    return server, found


@settings(max_examples=80, deadline=None)
@given(
    days=st.lists(st.integers(0, 40), min_size=1, max_size=60),
    data=st.data(),
    computed=st.booleans(),
    late=st.booleans(),
)
def test_b240_b244_pieces_halves_late_rows_isolation_and_retries_keep_every_row_once(
    days: list[int], data: st.DataObject, computed: bool, late: bool
) -> None:
    days[0] = 0  # the newest row of the block
    n = len(days)
    bad = set(data.draw(st.sets(st.integers(0, n - 1), max_size=2)))
    drop_after = data.draw(st.one_of(st.none(), st.integers(0, 12)))
    server, found = _run(days, bad, computed, late, drop_after)
    newest = NEWEST
    horizon = newest - dt.timedelta(days=7)

    def is_late(i: int) -> bool:
        ts = NEWEST - dt.timedelta(days=days[i], minutes=i)
        end = dt.datetime(ts.year, ts.month, ts.day, tzinfo=dt.UTC) + dt.timedelta(days=1)
        return computed and late and end <= horizon

    good = [i for i in range(n) if i not in bad]
    assert server.rows("events") == [i for i in good if not is_late(i)]
    assert server.rows("side") == [i for i in good if is_late(i)]
    assert sorted({r.row for r in found}) == sorted(bad)
    # B244: the same block written again from scratch (a replay) sends the same rows
    # under the same tokens, whatever failures the first run met
    again, _ = _run(days, bad, computed, late, None)
    assert set(again.inserts) == set(server.inserts)
    assert again.kept == server.kept
