"""A ``kill -9`` in the middle of isolating a refused block, under effectively once (B192).

On the real broker and the ClickHouse HTTP front: a table whose ``CHECK`` constraint
refuses one row of a block; the front holds every insert for a moment, so the bisection
of that block takes a few seconds. The first run (no commit reaches the broker) is
killed with SIGKILL once some of the block's sub-blocks have landed and before the
search ends; the restart replays the recorded block, meets the same refusals and
inserts the same sub-blocks under the same tokens: every good row is in the table once,
the refused row never, and the group's offset is at the end. Under ``on_record_error:
dead_letter`` the restart dead-letters the same record, with the server's code (B248).

Below full scale (``make test``) the row path runs with ``skip`` and the columnar path
with ``dead_letter``, so each path and each policy runs on every commit; ``make
test-full`` runs all four.
"""

from __future__ import annotations

import json
import os
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
from tests.kafka.test_kafka_dead_letter import _dlq_records
from tests.support.chfront_fixtures import ChFront
from tests.support.cli_run import SpateRun
from tests.support.matrix import matrix
from tests.support.services import committed_offsets, create_topic, produce_keyed, unique_name

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
COUNT = 1000
BAD = 777


def _config(
    path: Path,
    *,
    brokers: str,
    topic: str,
    group: str,
    front: str,
    first: bool,
    dlq: str | None = None,
) -> Path:
    source = replay_source(brokers, topic, group, first=first)
    sink = {
        "clickhouse": {
            "table": "events",
            "columns": ["id", "pad"],
            "shards": [{"replicas": [front]}],
            "batch": {"max_rows": COUNT, "linger": "1h"},
            "on_record_error": "skip" if dlq is None else "dead_letter",
            **({"table_options": {"dedup_window": 0}} if first else {}),
        }
    }
    sections: dict[str, Any] = {}
    if dlq is not None:
        sections["dead_letter"] = {"sink": {"kafka": {"brokers": brokers, "topic": dlq}}}
    document = pipeline_document(
        "eo-isolate",
        source,
        sink,
        delivery="effectively_once",
        drain_timeout="30s",
        deserializer=JSON_VALUES,
        **sections,
    )
    return write_document(path, document)


def _counts(client: Any) -> tuple[int, int, int]:
    rows = client.query(
        f"SELECT count(), uniqExact(id), countIf(id = {BAD}) FROM events"
    ).result_rows
    return int(rows[0][0]), int(rows[0][1]), int(rows[0][2])


@matrix(
    "path, policy",
    [("rows", "skip"), ("columns", "skip"), ("rows", "dead_letter"), ("columns", "dead_letter")],
    ci=("rows-skip", "columns-dead_letter"),
)
def test_b192_b248_a_kill_in_the_middle_of_a_bisection_replays_the_same_sub_blocks(
    kafka_bootstrap: str, chfront: Callable[..., ChFront], tmp_path: Path, path: str, policy: str
) -> None:
    chain = ["--chain", ROW_CHAIN] if path == "rows" else []
    front = chfront()
    client = front.client()
    client.command(
        f"CREATE TABLE events (id Int64, pad String, CONSTRAINT good CHECK id != {BAD}) "
        "ENGINE = MergeTree ORDER BY id SETTINGS non_replicated_deduplication_window = 1000"
    )
    topic, group = unique_name("eo-isolate"), unique_name("eo-isolate-g")
    create_topic(kafka_bootstrap, topic, 1)
    produce_keyed(
        kafka_bootstrap,
        topic,
        COUNT,
        value=lambda i: json.dumps({"id": i, "pad": "x"}).encode(),
        partition=0,
    )
    dlq = None
    if policy == "dead_letter":
        dlq = unique_name("eo-isolate-dlq")
        create_topic(kafka_bootstrap, dlq, 1)
    common: dict[str, Any] = {
        "brokers": kafka_bootstrap,
        "topic": topic,
        "group": group,
        "front": front.url,
        "dlq": dlq,
    }
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    front.inject("slow", delay=0.4, only="insert")
    first = _config(tmp_path / "first.json", **common, first=True)
    run = SpateRun(tmp_path, "run", *chain, str(first), env=env)
    try:
        run.until(lambda: _counts(client)[0] > 0, "a first sub-block", 300)
        landed = _counts(client)[0]
    finally:
        run.proc.kill()
        run.proc.wait()
    front.recover()
    assert 0 < landed < COUNT - 1, landed  # killed in the middle of the search
    again = _config(tmp_path / "again.json", **common, first=False)
    restart = SpateRun(tmp_path, "run", *chain, str(again), env=env)
    assert restart.wait(300) == 0, restart.text[-3000:]
    assert "replays" in restart.text
    assert _counts(client) == (COUNT - 1, COUNT - 1, 0)
    assert committed_offsets(kafka_bootstrap, group, topic) == {0: COUNT}
    assert f"refused row {BAD % COUNT} of batch" in restart.text
    if dlq is not None:
        letters = _dlq_records(kafka_bootstrap, dlq)
        assert letters, "the refused record was not dead-lettered"
        for key, value, headers in letters:  # at least once: a copy per run that got there
            assert json.loads(value)["id"] == BAD
            assert key == b"k%d" % BAD
            assert headers["spate.error.code"] == "469"
            assert headers["spate.error.source.offset"] == str(BAD)
