"""The flagship under faults on the real broker and the ClickHouse HTTP front (B1, B14).

A producer writes storefront events at a steady pace and records where each landed;
meanwhile the flagship (``examples/kafka_avro_to_clickhouse.py``) runs as a process, is
killed with SIGKILL at three moments and restarted, and the ClickHouse front is stopped
for a while once. Throughout, a sampler checks that the group's committed offsets never
pass the rows in ClickHouse. At the end every event is in its table, exactly once after
``FINAL``.
"""

from __future__ import annotations

import importlib.util
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from spate_datagen import encode_avro, storefront_events

from tests.support.chfront_fixtures import FrontFactory
from tests.support.delivery import DeliverySampler, PacedProducer, wait_until
from tests.support.scale import current_scale, scaled
from tests.support.services import committed_offsets, create_topic, end_offsets, unique_name

pytestmark = [pytest.mark.integration, pytest.mark.e2e]

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "kafka_avro_to_clickhouse.py"
COLUMNAR = ROOT / "examples" / "kafka_avro_to_clickhouse_columnar.py"
TABLES = {"OrderPlaced": "orders", "PaymentCaptured": "payments", "RefundIssued": "refunds"}


def storefront_records(count: int) -> Iterator[tuple[bytes, bytes, bytes]]:
    """``(b"<kind>:<order_id>", key, raw Avro)`` for each storefront event."""
    for event in storefront_events(count, seed=3):
        yield f"{event.kind}:{event.order_id}".encode(), event.key, encode_avro(event)


def held_identities(client: Any, database: str) -> set[bytes]:
    held: set[bytes] = set()
    for kind, table in TABLES.items():
        result = client.query(f"SELECT order_id FROM {database}.{table}")
        held.update(f"{kind}:{row[0]}".encode() for row in result.result_rows)
    return held


def start_flagship(
    env: dict[str, str], log: Path, example: Path = EXAMPLE
) -> subprocess.Popen[bytes]:
    with log.open("ab") as out:
        return subprocess.Popen(
            [sys.executable, str(example), "--no-create-tables"],
            stdout=out,
            stderr=subprocess.STDOUT,
            env=env,
        )


def load_example() -> Any:
    spec = importlib.util.spec_from_file_location("flagship", EXAMPLE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("path", ["row", "columnar"])
def test_flagship_survives_kills_and_a_clickhouse_outage(
    kafka_bootstrap: str, chfront: FrontFactory, tmp_path: Path, path: str
) -> None:
    """The row flagship and the columnar one (same YAML, frame chain) alike (B1, B14)."""
    example = EXAMPLE
    if path == "columnar":
        pytest.importorskip("polars")
        pytest.importorskip("jetliner")
        example = COLUMNAR
    topic, group = unique_name("flagship"), unique_name("flagship-g")
    create_topic(kafka_bootstrap, topic, 4)
    count = scaled(500_000, minimum=20_000)
    front = chfront()
    client = front.client()
    database = "flagship_no_loss"
    load_example().create_tables(client, database)

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
        "PIPELINE_NAME": "flagship-no-loss",
        # Commits and inserts every second, not every 5 s: a restarted process must still
        # have rows to write after the outage, which a 50,000-row batch would take at once.
        "CHECKPOINT_INTERVAL": "1s",
        "SINK_LINGER": "1s",
    }
    log = tmp_path / "flagship.log"
    proc = start_flagship(env, log, example)

    def held() -> set[bytes]:
        return held_identities(front.client(), database)

    def rows_written() -> int:
        """Every row inserted so far, replays included (grows with every insert)."""
        return sum(
            int(client.command(f"SELECT count() FROM {database}.{table}"))
            for table in TABLES.values()
        )

    def wait_for_a_write() -> None:
        """Wait until the (re)started process has written, i.e. is past its start-up."""
        before = rows_written()
        try:
            wait_until(lambda: rows_written() > before, 120, "a write by the new process")
        except AssertionError as exc:
            tail = log.read_text()[-3000:]
            raise AssertionError(f"{exc}; exit code {proc.poll()}; log: {tail}") from None

    producer = PacedProducer(
        kafka_bootstrap,
        topic,
        storefront_records(count),
        count,
        seconds=60 * max(current_scale(), 0.5),
    )
    sampler = DeliverySampler(kafka_bootstrap, group, topic, producer.positions, held)
    producer.start()
    sampler.start(every=0.5)
    outage = 15.0 * min(1.0, max(current_scale() * 2, 0.4))
    try:
        for crash, share in enumerate((0.2, 0.45, 0.7)):
            wait_until(lambda s=share: producer.produced >= count * s, 300, f"{share:.0%} produced")
            wait_for_a_write()
            if crash == 1:
                front.stop()
                time.sleep(outage)
                assert proc.poll() is None, log.read_text()[-3000:]
                front.start()
                wait_for_a_write()
            proc.send_signal(signal.SIGKILL)
            proc.wait(30)
            proc = start_flagship(env, log, example)
        producer.finish(600)
        wait_until(lambda: held() >= set(producer.positions), 600, "every event in ClickHouse")
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
    by_kind = dict.fromkeys(TABLES, 0)
    for identity in producer.positions:
        by_kind[identity.decode().split(":")[0]] += 1
    for kind, table in TABLES.items():
        final = int(client.command(f"SELECT count() FROM {database}.{table} FINAL"))
        distinct = int(client.command(f"SELECT uniqExact(order_id) FROM {database}.{table}"))
        assert final == distinct == by_kind[kind], (table, final, distinct, by_kind[kind])
