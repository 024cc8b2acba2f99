"""The spooled flagship under faults: real broker, spool, ClickHouse HTTP front (B1, B54, B56).

``examples/kafka_spool_clickhouse.py`` (the flagship with a spool in front of each
table) runs as a process while a producer writes storefront events at a steady pace.

* ``ack: spooled``: the ClickHouse front is stopped; production continues; the pipeline
  is killed with SIGKILL twice while the front is down (restarting with the terminal
  unreachable) and committed offsets keep moving; the front is started, the pipeline
  restarted.
* ``ack: terminal``: the front is stopped for a while (offsets stop), started again,
  and the pipeline is killed twice.

Throughout, a sampler checks that committed offsets never pass what is durable: the
spool's files (read first) plus ClickHouse (read second) with ``ack: spooled``,
ClickHouse alone with ``ack: terminal``. At the end every event is in ClickHouse
exactly once after ``FINAL`` and every spool directory is empty after the final drain.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from spate.sink._store import read_records

from tests.flagship.test_flagship_no_loss import (
    TABLES,
    held_identities,
    load_example,
    storefront_records,
)
from tests.support.chfront_fixtures import FrontFactory
from tests.support.delivery import DeliverySampler, PacedProducer, wait_until
from tests.support.scale import current_scale, scaled
from tests.support.services import committed_offsets, create_topic, end_offsets, unique_name

pytestmark = [pytest.mark.integration, pytest.mark.e2e]

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "kafka_spool_clickhouse.py"
KINDS = {table: kind for kind, table in TABLES.items()}


def spooled_identities(spool: Path) -> set[bytes]:
    """Identities of the complete records in every segment under ``spool``."""
    held: set[bytes] = set()
    for table, kind in KINDS.items():
        directory = spool / table
        if not directory.is_dir():
            continue
        for name in sorted(n for n in os.listdir(directory) if n.endswith(".jsonl")):
            try:
                records = read_records(str(directory / name))
            except FileNotFoundError:  # deleted after ClickHouse took it
                continue
            for payload in records:
                order_id = json.loads(payload)["t"][0]
                held.add(f"{kind}:{order_id}".encode())
    return held


def start(env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    with log.open("ab") as out:
        return subprocess.Popen(
            [sys.executable, str(EXAMPLE), "--no-create-tables"],
            stdout=out,
            stderr=subprocess.STDOUT,
            env=env,
        )


@pytest.mark.parametrize("ack", ["spooled", "terminal"])
def test_spooled_flagship_survives_kills_and_a_clickhouse_outage(
    kafka_bootstrap: str, chfront: FrontFactory, tmp_path: Path, ack: str
) -> None:
    topic, group = unique_name(f"spool-{ack}"), unique_name(f"spool-{ack}-g")
    create_topic(kafka_bootstrap, topic, 4)
    count = scaled(300_000, minimum=20_000)
    front = chfront()
    client = front.client()
    database = f"spool_no_loss_{ack}"
    load_example().create_tables(client, database)
    spool = tmp_path / "spool"
    env = {
        **os.environ,
        "KAFKA_BROKERS": kafka_bootstrap,
        "KAFKA_TOPIC": topic,
        "KAFKA_GROUP": group,
        "KAFKA_SESSION_TIMEOUT_MS": "6000",
        "STOP_AT": "never",
        "CLICKHOUSE_URL": front.url,
        "CLICKHOUSE_DATABASE": database,
        "SPATE_ADMIN_LISTEN": "none",
        "PIPELINE_NAME": f"spool-no-loss-{ack}",
        "SPOOL_DIR": str(spool),
        "SPOOL_ACK": ack,
    }
    log = tmp_path / "pipeline.log"
    proc = start(env, log)

    def in_clickhouse() -> set[bytes]:
        return held_identities(front.client(), database)

    last_seen: set[bytes] = set()

    def durable() -> set[bytes]:
        if ack == "terminal":
            return in_clickhouse()
        spooled = spooled_identities(spool)  # first the spool, then ClickHouse
        try:
            last_seen.update(in_clickhouse())
        except Exception:
            # The front is stopped: ClickHouse holds at least what it held when last
            # read, and nothing leaves the spool while the terminal is unreachable.
            if front.running:
                raise
        return spooled | last_seen

    def committed_total() -> int:
        return sum(committed_offsets(kafka_bootstrap, group, topic).values())

    def wait_for_progress(what: str) -> None:
        before = committed_total()
        try:
            wait_until(lambda: committed_total() > before, 180, what)
        except AssertionError as exc:
            tail = log.read_text()[-3000:]
            raise AssertionError(f"{exc}; exit code {proc.poll()}; log: {tail}") from None

    def kill_and_restart() -> subprocess.Popen[bytes]:
        proc.send_signal(signal.SIGKILL)
        proc.wait(30)
        return start(env, log)

    producer = PacedProducer(
        kafka_bootstrap,
        topic,
        storefront_records(count),
        count,
        seconds=60 * max(current_scale(), 0.5),
    )
    sampler = DeliverySampler(kafka_bootstrap, group, topic, producer.positions, durable)
    producer.start()
    sampler.start(every=0.5)
    try:
        wait_until(lambda: producer.produced >= count * 0.15, 300, "15% produced")
        wait_for_progress("a first commit")
        front.stop()
        if ack == "spooled":
            # Offsets keep moving with ClickHouse down; two crashes while it is down.
            for share in (0.35, 0.55):
                wait_until(lambda s=share: producer.produced >= count * s, 300, f"{share:.0%}")
                wait_for_progress("a commit while ClickHouse is down")
                proc = kill_and_restart()
            wait_for_progress("a commit after a restart with ClickHouse down")
            front.start()
            proc = kill_and_restart()
        else:
            time.sleep(10 * min(1.0, max(current_scale() * 2, 0.4)))
            assert proc.poll() is None, log.read_text()[-3000:]
            front.start()
            for share in (0.45, 0.7):
                wait_until(lambda s=share: producer.produced >= count * s, 300, f"{share:.0%}")
                wait_for_progress("a commit")
                proc = kill_and_restart()
        producer.finish(600)
        wait_until(
            lambda: in_clickhouse() >= set(producer.positions), 600, "every event in ClickHouse"
        )
        ends = end_offsets(kafka_bootstrap, topic)
        wait_until(
            lambda: committed_offsets(kafka_bootstrap, group, topic) == ends, 120, "final commit"
        )
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
        code = proc.wait(120)
        sampler.stop()
    assert code == 0, log.read_text()[-3000:]
    sampler.sample()
    assert len(sampler.samples) > 10
    assert not sampler.violations(), sampler.violations()[:3]
    leftover = {t: os.listdir(spool / t) for t in KINDS if (spool / t).is_dir()}
    assert all(not files for files in leftover.values()), leftover
    if ack == "spooled":  # killed with ClickHouse down: the spool held batches to replay
        assert "replaying" in log.read_text()
    by_kind = dict.fromkeys(TABLES, 0)
    for identity in producer.positions:
        by_kind[identity.decode().split(":")[0]] += 1
    for kind, table in TABLES.items():
        final = int(client.command(f"SELECT count() FROM {database}.{table} FINAL"))
        distinct = int(client.command(f"SELECT uniqExact(order_id) FROM {database}.{table}"))
        assert final == distinct == by_kind[kind], (table, final, distinct, by_kind[kind])
