"""A spool under ``spate run --processes 2`` on the real broker: one owner per directory (B114).

Two workers, two partitions each, read a four-partition topic of JSON records into a
spool (``ack: spooled``) in front of a ClickHouse sink on the HTTP front over chDB whose
table does not exist yet, so the terminal cannot start and every record stays spooled
while the offsets are committed. Worker 1 is killed with SIGKILL and restarted by the
parent; only then is the table created and the terminal comes up. Each worker spools in
its own ``<dir>/w<index>``, so the restarted worker replays only its own batches: the
table holds every record exactly once — a raw ``count()`` on a table that deduplicates
nothing (nothing was re-read from Kafka, as everything had been committed before the
kill) — no segment is cut or deleted by the restart, and the spool directories are empty
after the drain.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from tests.kafka._pipeline import JSON_VALUES, kafka_source, pipeline_document, write_document
from tests.support.chfront_fixtures import FrontFactory
from tests.support.delivery import wait_until
from tests.support.scale import scaled
from tests.support.services import (
    SESSION_TIMEOUT_MS,
    committed_offsets,
    create_topic,
    end_offsets,
    produce_keyed,
    unique_name,
)

pytestmark = [pytest.mark.integration, pytest.mark.e2e]


def _segments(directory: Path) -> dict[str, int]:
    """Segment name -> size of every segment under ``directory``, subdirectories included."""
    return {
        str(path.relative_to(directory)): path.stat().st_size
        for path in directory.rglob("seg-*.jsonl")
    }


def test_b114_a_restarted_worker_replays_only_its_own_spool(
    kafka_bootstrap: str, chfront: FrontFactory, tmp_path: Path
) -> None:
    topic, group = unique_name("spoolw"), unique_name("spoolw-g")
    create_topic(kafka_bootstrap, topic, 4)
    count = scaled(20_000, minimum=2_000)
    front = chfront()
    client = front.client()
    client.command("CREATE DATABASE IF NOT EXISTS spoolw")
    table = "spoolw.rows"
    spool = tmp_path / "spool"
    config = tmp_path / "spool.yaml"
    source = kafka_source(
        kafka_bootstrap, topic, group, stop_at=None, session_timeout_ms=SESSION_TIMEOUT_MS
    )
    sink = {
        "tiered": {
            "tiers": [{"spool": {"dir": str(spool), "ack": "spooled", "max_records": 500}}],
            "terminal": {
                "clickhouse": {
                    "database": "spoolw",
                    "table": "rows",
                    "columns": ["k"],
                    "shards": [{"replicas": [front.url]}],
                    "batch": {"max_rows": 2000, "linger": "200ms"},
                }
            },
        }
    }
    document = pipeline_document(
        "spoolw",
        source,
        sink,
        supervisor={"initial_backoff": "200ms"},
        deserializer=JSON_VALUES,
    )
    write_document(config, document)
    log = tmp_path / "parent.log"
    with log.open("ab") as sink:
        parent = subprocess.Popen(
            [sys.executable, "-m", "spate.cli", "run", str(config), "--processes", "2"],
            stdout=sink,
            stderr=sink,
        )

    def text() -> str:
        return log.read_text(errors="replace")

    try:
        wait_until(lambda: len(re.findall(r"worker \d started", text())) == 2, 60, "2 workers")
        wait_until(
            lambda: len(re.findall(r"partitions assigned .*partitions=\[\d, \d\]", text())) == 2,
            60,
            "two partitions for each worker",
        )
        produce_keyed(kafka_bootstrap, topic, count, value=lambda i: b'{"k": "v%d"}' % i)
        ends = end_offsets(kafka_bootstrap, topic)
        wait_until(
            lambda: committed_offsets(kafka_bootstrap, group, topic) == ends,
            180,
            "every record spooled and committed",
        )
        # Both workers spooled some of it (segment names end in the writing run's nonce).
        wait_until(
            lambda: len({n.rsplit("-", 1)[1] for n in _segments(spool)}) == 2,
            60,
            "segments of both workers",
        )
        before = _segments(spool)
        pids = dict(re.findall(r"worker (\d) started \(pid (\d+)\)", text()))
        os.kill(int(pids["1"]), signal.SIGKILL)
        wait_until(
            lambda: len(re.findall(r"worker 1 started", text())) == 2, 120, "worker 1 restarted"
        )
        wait_until(
            lambda: text().count("running (run nonce") == 3, 60, "the restarted worker running"
        )
        # Every segment is as it was (all were complete before the kill): the restart
        # cut, deleted and adopted nothing of its sibling's.
        assert _segments(spool) == before
        assert "the next tier cannot start" in text()
        # The terminal can start now; the table deduplicates no insert, so a raw count
        # sees every row written twice.
        client.command(
            f"CREATE TABLE {table} (k String) ENGINE = MergeTree ORDER BY k"
            " SETTINGS non_replicated_deduplication_window = 0"
        )

        def held() -> int:
            return int(client.query(f"SELECT count() FROM {table}").result_rows[0][0])

        wait_until(lambda: held() >= count, 180, "all rows")
        parent.send_signal(signal.SIGTERM)
        code = parent.wait(120)
    except AssertionError as exc:
        raise AssertionError(f"{exc}; log: {text()[-4000:]}") from None
    finally:
        if parent.poll() is None:
            parent.kill()
            parent.wait()
    assert code == 0, text()[-3000:]
    rows = Counter(k for (k,) in client.query(f"SELECT k FROM {table}").result_rows)
    assert held() == count, f"{held()} rows held for {count} records"
    assert set(rows) == {f"v{i}" for i in range(count)}
    twice = [row for row, n in rows.items() if n > 1]
    assert not twice, f"{len(twice)} rows written twice, e.g. {twice[:3]}"
    assert _segments(spool) == {}
