"""Debezium change events under ``delivery: effectively_once`` against the HTTP front
(B379): a first run writes part of a topic's change events, a later run replays them
from an older offset (a commit that never happened) with other batch settings; the
replacing table's ``FINAL`` and the collapsing table's sign sums equal the source table,
and no key's raw ``sum(_sign)`` ever leaves 0..1 (no row applied twice)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pytest
from spate import AckToken, ErrorClass, Lane, SinkError
from spate.cdc import DebeziumRows
from spate.sink import Offer, RecordPosition

from tests.clickhouse.sinkkit import build_sink
from tests.clickhouse.test_clickhouse_effectively_once import eo_sink
from tests.support.chfront_fixtures import ChFront
from tests.support.debezium_events import workload

pytestmark = [pytest.mark.integration]

_ENGINES = {
    "replacing": (
        "ReplacingMergeTree(_version, _is_deleted)",
        "_version UInt64, _is_deleted UInt8",
    ),
    "collapsing": ("CollapsingMergeTree(_sign)", "_sign Int8"),
}


@pytest.fixture(scope="module")
def front(chfront_module: Callable[..., ChFront]) -> ChFront:
    return chfront_module()


def _offer(
    sink: Any, position: RecordPosition, lane: Lane, offset: int, rows: list[dict[str, Any]]
) -> None:
    ack = AckToken(lane, 0, offset, offset + 1, 1, lambda t: None)
    position.offset = offset
    for row in rows:
        deadline = time.monotonic() + 60
        while sink.offer(row, None, lane, ack) is Offer.REJECTED:
            assert time.monotonic() < deadline, "the sink refused rows for 60s"
            time.sleep(0.01)
    ack.release()


@pytest.mark.parametrize("engine", ["replacing", "collapsing"])
def test_b379_change_events_replayed_from_an_older_offset_are_applied_once(
    front: ChFront, engine: str
) -> None:
    client = front.client()
    table = f"cdc_replay_{engine}"
    clause, extra = _ENGINES[engine]
    client.command(
        f"CREATE TABLE {table} (id Int64, name Nullable(String), n Int64, {extra}) "
        f"ENGINE = {clause} ORDER BY id SETTINGS non_replicated_deduplication_window = 1000"
    )
    columns = ["id", "name", "n", *(c.split()[0] for c in extra.split(", "))]
    work = workload(7, 150)
    to_rows = DebeziumRows(engine=engine)  # type: ignore[arg-type]
    records = [to_rows(value) for value in work.events]
    lane = Lane(f"cdc_{engine}", 0)
    stop, restart = 2 * len(records) // 3, len(records) // 3

    def run(offsets: range, **batch: Any) -> None:
        sink, position = eo_sink(front, table, columns=columns, batch=batch)
        sink.start()
        for offset in offsets:
            _offer(sink, position, lane, offset, records[offset])
            if offset % 9 == 0:
                sink.tick()
        sink.tick()
        assert sink.flush(time.monotonic() + 60)
        sink.close()

    run(range(stop), max_rows=16, linger="1h")
    run(range(restart, len(records)), max_rows=1000, linger="1h")

    final = client.query(f"SELECT id, name, n FROM {table} FINAL ORDER BY id").result_rows
    assert [list(r) for r in final] == [
        [k, r["name"], r["n"]] for k, r in sorted(work.table.items())
    ]
    if engine == "collapsing":
        low, high = client.query(
            f"SELECT min(s), max(s) FROM (SELECT sum(_sign) AS s FROM {table} GROUP BY id)"
        ).result_rows[0]
        assert (int(low), int(high)) == (0, 1)
        sums = client.query(
            f"SELECT id, sum(n * _sign) FROM {table} GROUP BY id HAVING sum(_sign) > 0 ORDER BY id"
        ).result_rows
        assert [list(r) for r in sums] == [[k, r["n"]] for k, r in sorted(work.table.items())]


def test_b378_an_existing_collapsing_table_without_effectively_once_fails_start(
    front: ChFront,
) -> None:
    front.client().command(
        "CREATE TABLE cdc_existing (id Int64, _sign Int8) ENGINE = CollapsingMergeTree(_sign) "
        "ORDER BY id"
    )
    built = build_sink(
        {"table": "cdc_existing", "columns": ["id", "_sign"], "shards": [{"replicas": [front.url]}]}
    )
    try:
        with pytest.raises(SinkError) as raised:
            built.sink.start()
    finally:
        built.sink.close()
    assert raised.value.error_class is ErrorClass.FATAL
    assert "cdc_existing is CollapsingMergeTree, which needs pipeline.delivery: " in str(
        raised.value
    )
