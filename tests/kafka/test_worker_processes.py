"""Worker processes and the supervisor on the real broker and the ClickHouse front (B63, B64).

``spate run`` reads a topic through the JSON deserializer into a ClickHouse table on the
HTTP front (each message is ``{"k": key}``; the table holds the keys). The scenarios:

- three workers on a six-partition topic under one parent, one worker killed with
  SIGKILL mid-stream: the parent restarts it, every key reaches ClickHouse, the delivery
  sampler never sees a committed offset ahead of the rows (B1), and SIGTERM at the end
  drains every worker and exits 0 (B14, B16, B64);
- a single supervised process whose inserts fail fatally three times: it is rebuilt
  with growing waits and completes (B63); and one whose inserts always fail: it gives up
  after ``max_restarts`` with one line and exit 1 (B63);
- two workers on a four-partition topic, on the row path (a row chain) and on the
  columnar path (no chain: JSON decoded as columns), at least once and effectively once:
  every record reaches ClickHouse once (B166).
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.kafka._pipeline import (
    JSON_VALUES,
    ROW_CHAIN,
    kafka_source,
    pipeline_document,
    write_document,
)
from tests.support.chfront_fixtures import ChFront, FrontFactory
from tests.support.delivery import DeliverySampler, PacedProducer, wait_until
from tests.support.scale import current_scale, scaled
from tests.support.services import (
    SESSION_TIMEOUT_MS,
    committed_offsets,
    create_topic,
    end_offsets,
    produce_keyed,
    unique_name,
)

pytestmark = [pytest.mark.integration, pytest.mark.e2e]

DATABASE = "workers"
TYPE_MISMATCH = 53  # a ClickHouse code the sink treats as fatal
ROOT = Path(__file__).resolve().parents[2]
WINDOW = "SETTINGS non_replicated_deduplication_window = 1000"


def _records(count: int) -> Iterator[tuple[bytes, bytes, bytes]]:
    for i in range(count):
        key = f"key-{i:08d}".encode()
        yield key, key, json.dumps({"k": key.decode()}).encode()


def _table(front: ChFront, table: str, settings: str = "") -> None:
    client = front.client()
    client.command(f"CREATE DATABASE IF NOT EXISTS {DATABASE}")
    client.command(
        f"CREATE TABLE {DATABASE}.{table} (k String) ENGINE = MergeTree ORDER BY k {settings}"
    )


def _held(front: ChFront, table: str) -> set[bytes]:
    rows = front.client().query(f"SELECT k FROM {DATABASE}.{table}").result_rows
    return {row[0].encode() for row in rows}


def _config(
    path: Path,
    *,
    bootstrap: str,
    topic: str,
    group: str,
    front: ChFront,
    table: str,
    bounded: bool,
    listen: str = "none",
    supervisor: dict[str, Any] | None = None,
    stalled_fail_after: str = "60s",
    delivery: str = "at_least_once",
) -> Path:
    source = kafka_source(
        bootstrap,
        topic,
        group,
        stop_at="end" if bounded else "never",
        session_timeout_ms=SESSION_TIMEOUT_MS,
    )
    sink = {
        "clickhouse": {
            "table": table,
            "database": DATABASE,
            "columns": ["k"],
            "shards": [{"replicas": [front.url]}],
            "batch": {"max_rows": 2000, "linger": "200ms"},
            "inflight": {"max_per_shard": 1},
        }
    }
    document = pipeline_document(
        table,
        source,
        sink,
        delivery=delivery,
        checkpoint={"stalled_fail_after": stalled_fail_after},
        listen=listen,
        deserializer=JSON_VALUES,
        **({"supervisor": supervisor} if supervisor is not None else {}),
    )
    return write_document(path, document)


def _spate(log: Path, *argv: str) -> subprocess.Popen[bytes]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}  # the row chain of B166
    with log.open("ab") as out:
        return subprocess.Popen(
            [sys.executable, "-m", "spate.cli", "run", *argv], stdout=out, stderr=out, env=env
        )


def test_b64_three_workers_survive_a_sigkill_and_drain_on_sigterm(
    kafka_bootstrap: str, chfront: FrontFactory, tmp_path: Path
) -> None:
    topic, group = unique_name("workers"), unique_name("workers-g")
    create_topic(kafka_bootstrap, topic, 6)
    front = chfront()
    _table(front, "three_workers")
    count = scaled(200_000, minimum=20_000)
    config = _config(
        tmp_path / "workers.yaml",
        bootstrap=kafka_bootstrap,
        topic=topic,
        group=group,
        front=front,
        table="three_workers",
        bounded=False,
        supervisor={"initial_backoff": "200ms"},
    )
    log = tmp_path / "parent.log"
    parent = _spate(log, str(config), "--processes", "3")
    producer = PacedProducer(
        kafka_bootstrap, topic, _records(count), count, seconds=40 * max(current_scale(), 0.3)
    )
    sampler = DeliverySampler(
        kafka_bootstrap, group, topic, producer.positions, lambda: _held(front, "three_workers")
    )

    def text() -> str:
        return log.read_text(errors="replace")

    try:
        wait_until(lambda: len(re.findall(r"worker \d started", text())) == 3, 60, "3 workers")
        producer.start()
        sampler.start(every=0.5)
        wait_until(lambda: producer.produced >= count * 0.4, 300, "40% produced")
        wait_until(lambda: len(_held(front, "three_workers")) > 0, 120, "rows in ClickHouse")
        pids = dict(re.findall(r"worker (\d) started \(pid (\d+)\)", text()))
        victim = subprocess.run(["kill", "-KILL", pids["1"]], check=False)
        assert victim.returncode == 0
        wait_until(
            lambda: len(re.findall(r"worker 1 started", text())) == 2, 120, "worker 1 restarted"
        )
        producer.finish(600)
        try:
            wait_until(
                lambda: _held(front, "three_workers") >= set(producer.positions),
                600,
                "every key in ClickHouse",
            )
        except AssertionError as exc:
            missing = len(set(producer.positions) - _held(front, "three_workers"))
            raise AssertionError(f"{exc}: {missing} missing; log: {text()[-5000:]}") from None
        ends = end_offsets(kafka_bootstrap, topic)
        wait_until(
            lambda: committed_offsets(kafka_bootstrap, group, topic) == ends, 120, "final commit"
        )
        assert parent.poll() is None, text()[-3000:]
        parent.send_signal(signal.SIGTERM)
        code = parent.wait(120)
    finally:
        sampler.stop()
        if parent.poll() is None:
            parent.kill()
            parent.wait()
    assert code == 0, text()[-3000:]
    assert "worker 1 died (killed by SIGKILL" in text()
    assert "every worker completed" in text()
    sampler.sample()
    assert len(sampler.samples) > 5
    assert not sampler.violations(), sampler.violations()[:3]


@pytest.mark.parametrize("delivery", ["at_least_once", "effectively_once"])
@pytest.mark.parametrize("path", ["rows", "columns"])
def test_b166_two_workers_deliver_every_record_on_either_path(
    kafka_bootstrap: str, chfront: FrontFactory, tmp_path: Path, path: str, delivery: str
) -> None:
    """B166: ``--processes 2`` on the row and the columnar path, under either delivery."""
    table = f"two_{path}_{delivery}"
    topic, group = unique_name(table.replace("_", "-")), unique_name(f"{table}-g")
    create_topic(kafka_bootstrap, topic, 4)
    front = chfront()
    _table(front, table, WINDOW if delivery == "effectively_once" else "")
    count = scaled(40_000, minimum=4_000)
    config = _config(
        tmp_path / "two.yaml",
        bootstrap=kafka_bootstrap,
        topic=topic,
        group=group,
        front=front,
        table=table,
        bounded=False,
        supervisor={"initial_backoff": "200ms"},
        delivery=delivery,
    )
    chain = ["--chain", ROW_CHAIN] if path == "rows" else []
    log = tmp_path / "parent.log"
    parent = _spate(log, *chain, str(config), "--processes", "2")

    def text() -> str:
        return log.read_text(errors="replace")

    def counts() -> tuple[int, int]:
        rows = front.client().query(f"SELECT count(), uniqExact(k) FROM {DATABASE}.{table}")
        return int(rows.result_rows[0][0]), int(rows.result_rows[0][1])

    try:
        wait_until(lambda: len(re.findall(r"worker \d started", text())) == 2, 60, "2 workers")
        wait_until(
            lambda: len(re.findall(r"partitions assigned .*partitions=\[\d, \d\]", text())) == 2,
            120,
            "two partitions for each worker",
        )
        produce_keyed(
            kafka_bootstrap,
            topic,
            count,
            key=lambda i: f"key-{i:08d}".encode(),
            value=lambda i: json.dumps({"k": f"key-{i:08d}"}).encode(),
        )
        ends = end_offsets(kafka_bootstrap, topic)
        wait_until(lambda: counts()[1] == count, 300, "every key in ClickHouse")
        wait_until(
            lambda: committed_offsets(kafka_bootstrap, group, topic) == ends, 120, "final commit"
        )
        parent.send_signal(signal.SIGTERM)
        code = parent.wait(120)
    except AssertionError as exc:
        raise AssertionError(f"{exc}; log: {text()[-4000:]}") from None
    finally:
        if parent.poll() is None:
            parent.kill()
            parent.wait()
    assert code == 0, text()[-3000:]
    assert ("runs on the columnar path" in text()) is (path == "columns"), text()[-3000:]
    assert counts() == (count, count)


def _bounded_run(
    kafka_bootstrap: str, front: ChFront, tmp_path: Path, table: str, recover_after: int | None
) -> tuple[int, str, int]:
    """A bounded supervised run whose inserts fail fatally until ``recover_after`` failed
    runs were logged (never, for None); its exit code, log and record count."""
    topic, group = unique_name(table), unique_name(f"{table}-g")
    create_topic(kafka_bootstrap, topic, 2)
    count = scaled(20_000, minimum=2_000)
    produce_keyed(
        kafka_bootstrap,
        topic,
        count,
        key=lambda i: f"key-{i:08d}".encode(),
        value=lambda i: json.dumps({"k": f"key-{i:08d}"}).encode(),
    )
    _table(front, table)
    front.inject("5xx", status=500, code=TYPE_MISMATCH, only="insert")
    config = _config(
        tmp_path / f"{table}.yaml",
        bootstrap=kafka_bootstrap,
        topic=topic,
        group=group,
        front=front,
        table=table,
        bounded=True,
        stalled_fail_after="500ms",
        supervisor={"max_restarts": 3, "initial_backoff": "200ms", "max_backoff": "1s"},
    )
    log = tmp_path / f"{table}.log"
    proc = _spate(log, str(config))
    if recover_after is not None:
        # Every run fails while the fault lasts; end it during the wait after the
        # recover_after-th failure, so the next build finds ClickHouse healthy.
        wait_until(
            lambda: log.read_text(errors="replace").count("restarting in") >= recover_after,
            300,
            f"{recover_after} failed runs",
        )
        front.recover()
    code = proc.wait(600)
    return code, log.read_text(errors="replace"), count


def test_b63_sink_failing_fatally_three_times_is_rebuilt_and_completes(
    kafka_bootstrap: str, chfront: FrontFactory, tmp_path: Path
) -> None:
    front = chfront()
    code, text, count = _bounded_run(kafka_bootstrap, front, tmp_path, "recovers", 3)
    assert code == 0, text[-3000:]
    waits = re.findall(r"\(\d of at most 3 within 10m\): .*; restarting in (\d+m?s)", text)
    assert waits == ["200ms", "400ms", "800ms"], text[-3000:]
    held = _held(front, "recovers")
    assert held == {k for k, _, _ in _records(count)}


def test_b63_sink_failing_fatally_always_gives_up_with_one_line(
    kafka_bootstrap: str, chfront: FrontFactory, tmp_path: Path
) -> None:
    front = chfront()
    code, text, _ = _bounded_run(kafka_bootstrap, front, tmp_path, "never", None)
    assert code == 1, text[-3000:]
    last = text.strip().splitlines()[-1]
    assert last.startswith(
        "pipeline never gave up after 4 failures within 10m (supervisor.max_restarts=3); "
        "last error: "
    ), text[-3000:]
