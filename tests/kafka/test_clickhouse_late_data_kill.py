"""``kill -9`` of a pipeline whose sink sets late rows apart, under effectively once (B331).

The real broker and the ClickHouse HTTP front: one partition whose every tenth record
carries an event time nine days to two years back, the others the last hour, read into
``PARTITION BY toYYYYMMDD(ts)`` with ``late_data: {after: 7d, to: late}``, blocks of 50
rows, so most blocks are cut into on-time pieces and late pieces. Offsets are the ids.
On the row path (a row chain) and the columnar path (a frame chain).

1. The first run never commits (B89's window) and reads the first half of the topic,
   the rest not yet produced; it is killed with SIGKILL once a quarter of the records is
   in the two tables, late ones among them, so the restart replays every block it
   recorded, late pieces included.
2. The second run commits every 200 ms and reads the third quarter as it arrives; it is
   killed once its commit passed the first half. Every record below the committed offset
   is then in one of the tables.
3. The third run reads to the end. Every record is in exactly one table, once; the
   recent ones all in the sink's table; the offset committed is the end.

Each kill waits on a condition (rows written, an offset committed), never on a delay.

Below full scale (``make test``) the columnar path runs; the row path runs in ``make
test-full``, and on every commit its late rows in test_clickhouse_late_data.py and its
kills under effectively once in tests/flagship/test_effectively_once.py (``split``).
"""

from __future__ import annotations

import json
import os
import random
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.kafka._pipeline import (
    JSON_VALUES,
    kafka_source,
    pipeline_document,
    replay_source,
    write_document,
)
from tests.support.chfront_fixtures import ChFront
from tests.support.cli_run import SpateRun
from tests.support.matrix import matrix
from tests.support.scale import scaled
from tests.support.services import committed_offsets, create_topic, produce_keyed, unique_name

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
CHAIN = "tests.kafka._late_chain"
NOW = 1_782_820_800  # 2026-06-30 12:00 UTC: data, not a clock
DAY = 86_400
WINDOW = "SETTINGS non_replicated_deduplication_window = 1000"


def _straggler(i: int) -> bool:
    return i % 10 == 3


def _config(path: Path, *, brokers: str, topic: str, group: str, front: str, run: int) -> Path:
    """Run 1 never commits and never ends, run 2 commits and never ends, run 3 commits
    and ends at the end offsets."""
    if run == 1:
        source = replay_source(brokers, topic, group, first=True)
    else:
        stop_at = "never" if run == 2 else "end"
        source = kafka_source(brokers, topic, group, stop_at=stop_at)
    # An hour-long commit interval is beyond any window the start accepts (B123); the
    # tables' own window of 1000 holds this test's blocks.
    options = {"table_options": {"dedup_window": 0}} if run == 1 else {}

    def sink(table: str, **more: Any) -> dict[str, Any]:
        return {
            "clickhouse": {
                "table": table,
                "columns": ["id", "ts"],
                "shards": [{"replicas": [front]}],
                "batch": {"max_rows": 50, "linger": "200ms"},
                **options,
                **more,
            }
        }

    sinks = {
        "events": sink("events", late_data={"after": "7d", "to": "late"}),
        "late": sink("events_late"),
    }
    document = pipeline_document(
        "eo-late",
        source,
        None,
        delivery="effectively_once",
        drain_timeout="30s",
        deserializer=JSON_VALUES,
        sinks=sinks,
    )
    return write_document(path, document)


def _ids(client: Any, table: str) -> list[int]:
    return [int(row[0]) for row in client.query(f"SELECT id FROM {table}").result_rows]


def _written(client: Any) -> int:
    rows = client.query(
        "SELECT (SELECT count() FROM events) + (SELECT count() FROM events_late)"
    ).result_rows
    return int(rows[0][0])


def _assert_once_below(client: Any, bound: int) -> None:
    """Every id below ``bound`` is in exactly one of the tables, once."""
    main, late = _ids(client, "events"), _ids(client, "events_late")
    below_main = [i for i in main if i < bound]
    below_late = [i for i in late if i < bound]
    assert len(below_main) == len(set(below_main)), "a row twice in the sink's table"
    assert len(below_late) == len(set(below_late)), "a row twice in the side table"
    assert not set(below_main) & set(below_late), "a row in both tables"
    missing = set(range(bound)) - set(below_main) - set(below_late)
    assert not missing, f"{len(missing)} rows below {bound} in neither table"
    assert not [i for i in late if not _straggler(i)], "a recent row in the side table"


@matrix("path", ["rows", "columns"], ci="columns")
def test_b331_late_rows_are_written_once_across_kills_under_effectively_once(
    kafka_bootstrap: str, chfront: Callable[..., ChFront], tmp_path: Path, path: str
) -> None:
    front = chfront()
    client = front.client()
    for table in ("events", "events_late"):
        client.command(
            f"CREATE TABLE {table} (id UInt64, ts DateTime('UTC')) ENGINE = MergeTree "
            f"{'PARTITION BY toYYYYMMDD(ts) ' if table == 'events' else ''}ORDER BY id {WINDOW}"
        )
    count = scaled(4000, minimum=800)
    half, three_quarters = count // 2, count * 3 // 4
    rng = random.Random(331)
    times = [
        NOW - rng.randrange(9 * DAY, 730 * DAY) if _straggler(i) else NOW - rng.randrange(3600)
        for i in range(count)
    ]
    topic, group = unique_name("eo-late"), unique_name("eo-late-g")
    create_topic(kafka_bootstrap, topic, 1)

    def produce(start: int, stop: int) -> None:
        produce_keyed(
            kafka_bootstrap,
            topic,
            stop - start,
            key=lambda i: b"k%d" % (start + i),
            value=lambda i: json.dumps({"id": start + i, "ts": times[start + i]}).encode(),
            partition=0,
        )

    common: dict[str, Any] = {
        "brokers": kafka_bootstrap,
        "topic": topic,
        "group": group,
        "front": front.url,
    }
    env = {**os.environ, "PYTHONPATH": str(ROOT)}

    def start(run: int) -> SpateRun:
        config = _config(tmp_path / f"run{run}.json", **common, run=run)
        chain = f"{CHAIN}:{'chains' if path == 'rows' else 'frames'}"
        return SpateRun(tmp_path, "run", "--chain", chain, str(config), env=env)

    produce(0, half)
    first = start(1)
    try:
        first.until(
            lambda: _written(client) >= count // 4 and _ids(client, "events_late"),
            "a quarter of the rows, late ones among them",
            300,
        )
    finally:
        first.proc.kill()
        first.proc.wait()
    assert committed_offsets(kafka_bootstrap, group, topic) == {}

    second = start(2)
    try:
        produce(half, three_quarters)

        def past_half() -> bool:
            return committed_offsets(kafka_bootstrap, group, topic).get(0, 0) >= half

        second.until(past_half, "a commit past the first half", 300)
    finally:
        second.proc.kill()
        second.proc.wait()
    assert "replays" in second.text, second.text[-3000:]
    assert ("columnar path" in second.text) is (path == "columns")
    committed = committed_offsets(kafka_bootstrap, group, topic)[0]
    assert half <= committed <= three_quarters
    _assert_once_below(client, committed)

    produce(three_quarters, count)
    third = start(3)
    assert third.wait(300) == 0, third.text[-3000:]
    _assert_once_below(client, count)
    assert len(_ids(client, "events")) + len(_ids(client, "events_late")) == count
    assert committed_offsets(kafka_bootstrap, group, topic) == {0: count}
