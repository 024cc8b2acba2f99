"""Effectively once under ``spate run``, a ``kill -9`` and a restart, on the real broker
and the ClickHouse HTTP front (B89, B121).

* The commit window (B89): the first run's Kafka source stores the checkpointer's
  positions for a ``commit_interval`` of an hour, so the broker never takes one, while
  the sink records more than 256 intents (a deletion of committed intents is due at the
  256th). Killed with SIGKILL and restarted with other block sizes, the member replays
  from the start: every recorded block must still be there to be rebuilt under its token,
  or its rows are cut again under new tokens and inserted twice.
* Replaying several partitions (B121): a split into three tables, three partitions, the
  shipped ratio of byte budget to block size (8: 256 MiB and 32 MiB, here 4 MiB and
  512 KiB). The first run records full-size blocks (about 700 rows) and is killed before
  any commit; the restart replays every block of every partition and reads each in about
  70 batches of 10 records with ``max_pending_batches: 8``, so a replayed block holds more
  batches than a partition may have pending. It must complete (bounded,
  ``stop_at: end``, exit 0) with every row once; before B121 it never ended.

A 6 s session lets the restarted member take the partitions soon after the dead one.

Below full scale (``make test``) the commit window runs on the columnar path (B145); the
row path runs in ``make test-full``, and its kills under effectively once on every commit
in tests/flagship/test_effectively_once.py (``split``).
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.kafka._pipeline import (
    JSON_VALUES,
    ROW_CHAIN,
    pipeline_document,
    replay_source,
    write_document,
)
from tests.support.chfront_fixtures import ChFront
from tests.support.cli_run import SpateRun
from tests.support.matrix import matrix
from tests.support.services import (
    committed_offsets,
    create_topic,
    end_offsets,
    produce_keyed,
    unique_name,
)

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
CHAIN = "tests.kafka._eo_split_chain:chains"
WINDOW = "SETTINGS non_replicated_deduplication_window = 1000"


def _create(client: Any, table: str) -> None:
    client.command(
        f"CREATE TABLE {table} (id Int64, pad String) ENGINE = MergeTree ORDER BY id {WINDOW}"
    )


def _config(
    path: Path,
    *,
    brokers: str,
    topic: str,
    group: str,
    front: str,
    tables: dict[str, str],
    first: bool,
    batch: dict[str, object],
    extra: dict[str, Any] | None = None,
    interval: str = "200ms",
    max_pending: int = 1024,
    consume_batch: int = 100,
) -> Path:
    """A pipeline configuration: the first run never sends a commit and never ends; the
    restart commits every 200 ms and ends at the end offsets."""
    sink = {
        name: {
            "clickhouse": {
                "table": table,
                "columns": ["id", "pad"],
                "shards": [{"replicas": [front]}],
                "batch": batch,
                # An hour-long commit interval is beyond any window the start accepts
                # (B123); the tables' own window of 1000 holds this test's blocks.
                **({"table_options": {"dedup_window": 0}} if first else {}),
            }
        }
        for name, table in tables.items()
    }
    source = replay_source(
        brokers,
        topic,
        group,
        first=first,
        consume_batch=consume_batch,
        rdkafka={"max.partition.fetch.bytes": 65536},
    )
    single = sink[next(iter(sink))] if len(sink) == 1 else None
    sinks = {"sinks": sink} if single is None else {}
    document = pipeline_document(
        "eo-kill",
        source,
        single,
        delivery="effectively_once",
        drain_timeout="30s",
        checkpoint={"interval": interval, "max_pending_batches": max_pending},
        deserializer=JSON_VALUES,
        **sinks,
        **(extra or {}),
    )
    return write_document(path, document)


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(ROOT)}


def _counts(client: Any, table: str) -> tuple[int, int]:
    rows = client.query(f"SELECT count(), uniqExact(id) FROM {table}").result_rows
    return int(rows[0][0]), int(rows[0][1])


@matrix("path", ["rows", "columns"], ci="columns")
def test_b89_a_kill_before_the_broker_took_the_commit_duplicates_nothing(
    kafka_bootstrap: str, chfront: Callable[..., ChFront], tmp_path: Path, path: str
) -> None:
    """B89, and B145 on the columnar path (no chain: JSON decoded as columns)."""
    chain = ["--chain", ROW_CHAIN] if path == "rows" else []
    front = chfront()
    client = front.client()
    _create(client, "events")
    topic, group = unique_name("eo-window"), unique_name("eo-window-g")
    create_topic(kafka_bootstrap, topic, 1)

    def value(i: int) -> bytes:
        return json.dumps({"id": i, "pad": "x"}).encode()

    produce_keyed(kafka_bootstrap, topic, 400, value=value, partition=0)
    common: dict[str, Any] = {
        "brokers": kafka_bootstrap,
        "topic": topic,
        "group": group,
        "front": front.url,
        "tables": {"events": "events"},
    }
    first = _config(
        tmp_path / "first.json", **common, first=True, batch={"max_rows": 2, "linger": "1h"}
    )
    run = SpateRun(tmp_path, "run", *chain, str(first), env=_env())
    try:
        run.until(lambda: _counts(client, "events")[0] == 400, "the first 400 rows", 300)
        # Several checkpoint intervals: the positions reach the source (stored, not sent).
        time.sleep(2.0)
        produce_keyed(
            kafka_bootstrap,
            topic,
            200,
            key=lambda i: b"k%d" % (400 + i),
            value=lambda i: value(400 + i),
            partition=0,
        )
        # 300 intents: the 256th deleted the intents below what is known committed.
        run.until(lambda: _counts(client, "events")[0] == 600, "all 600 rows", 300)
    finally:
        run.proc.kill()
        run.proc.wait()
    again = _config(
        tmp_path / "again.json", **common, first=False, batch={"max_rows": 3, "linger": "1h"}
    )
    restart = SpateRun(tmp_path, "run", *chain, str(again), env=_env())
    assert restart.wait(300) == 0, restart.text[-3000:]
    assert ("columnar path" in restart.text) is (path == "columns")
    assert _counts(client, "events") == (600, 600)
    assert committed_offsets(kafka_bootstrap, group, topic) == {0: 600}


def test_b121_a_killed_split_replays_several_partitions_and_completes(
    kafka_bootstrap: str, chfront: Callable[..., ChFront], tmp_path: Path
) -> None:
    front = chfront()
    client = front.client()
    tables = {"a": "split_a", "b": "split_b", "c": "split_c"}
    for table in tables.values():
        _create(client, table)
    topic, group = unique_name("eo-replay"), unique_name("eo-replay-g")
    partitions, per_partition = 3, 1500
    create_topic(kafka_bootstrap, topic, partitions)
    for part in range(partitions):
        produce_keyed(
            kafka_bootstrap,
            topic,
            per_partition,
            key=lambda i, p=part: b"%d-%d" % (p, i),
            value=lambda i, p=part: json.dumps(
                {"id": p * per_partition + i, "pad": "p" * 600}
            ).encode(),
            partition=part,
        )
    total = partitions * per_partition
    common: dict[str, Any] = {
        "brokers": kafka_bootstrap,
        "topic": topic,
        "group": group,
        "front": front.url,
        "tables": tables,
        "batch": {"max_bytes": "512KiB", "linger": "1h"},
    }
    # Full-size blocks: sealed at max_bytes, under the shipped budget, the tails by a
    # tick after the backlog was read.
    first = _config(tmp_path / "first.json", **common, first=True, interval="5s")
    run = SpateRun(tmp_path, "run", "--chain", CHAIN, str(first), env=_env())
    try:
        run.until(
            lambda: all(_counts(client, t)[0] == total for t in tables.values()),
            "every row in the three tables",
            300,
        )
    finally:
        run.proc.kill()
        run.proc.wait()
    assert "replays" not in run.text  # nothing was recorded before this run
    # The replay reads each block in 70 batches, 8 of them pending at most per partition.
    budget = {"backpressure": {"max_inflight_bytes": "4MiB"}}
    again = _config(
        tmp_path / "again.json",
        **common,
        first=False,
        extra=budget,
        max_pending=8,
        consume_batch=10,
    )
    restart = SpateRun(tmp_path, "run", "--chain", CHAIN, str(again), env=_env())
    assert restart.wait(300) == 0, restart.text[-3000:]
    assert "replays" in restart.text
    for table in tables.values():
        assert _counts(client, table) == (total, total), table
    assert committed_offsets(kafka_bootstrap, group, topic) == end_offsets(kafka_bootstrap, topic)
