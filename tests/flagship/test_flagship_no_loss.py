"""The flagship under faults on the real broker and the ClickHouse HTTP front (B1, B14).

A producer writes storefront events at a steady pace and records where each landed;
meanwhile the flagship (``examples/kafka_avro_to_clickhouse.py``) runs as a process, is
killed with SIGKILL at three moments and restarted, and the ClickHouse front is stopped
for a while once. Throughout, a sampler checks that the group's committed offsets never
pass the rows in ClickHouse. At the end every event is in its table, exactly once after
``FINAL``.

Below full scale (``make test``) the row flagship runs here; the columnar one runs in
``make test-full``, its kills and outages on every commit in test_effectively_once.py and
test_spool_no_loss.py (``ack: terminal``).
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from tests.support.avro_native import needs_avro_columnar
from tests.support.chfront_fixtures import FrontFactory
from tests.support.matrix import matrix
from tests.support.no_loss import (
    FLAGSHIP,
    ROOT,
    TABLES,
    NoLossRun,
    assert_final_counts,
    flagship_env,
    held_identities,
    load_example,
    start_flagship,
)
from tests.support.scale import current_scale, scaled
from tests.support.services import create_topic, unique_name

pytestmark = [pytest.mark.integration, pytest.mark.e2e]

COLUMNAR = ROOT / "examples" / "kafka_avro_to_clickhouse_columnar.py"


@matrix("path", ["row", "columnar"], ci="row", marks={"columnar": needs_avro_columnar})
def test_flagship_survives_kills_and_a_clickhouse_outage(
    kafka_bootstrap: str, chfront: FrontFactory, tmp_path: Path, path: str
) -> None:
    """The row flagship and the columnar one (same YAML, frame chain) alike (B1, B14)."""
    example = FLAGSHIP
    if path == "columnar":
        example = COLUMNAR
    topic, group = unique_name("flagship"), unique_name("flagship-g")
    create_topic(kafka_bootstrap, topic, 4)
    count = scaled(500_000, minimum=20_000)
    front = chfront()
    client = front.client()
    database = "flagship_no_loss"
    load_example().create_tables(client, database)
    env = flagship_env(kafka_bootstrap, topic, group, front.url, database, "flagship-no-loss")
    log = tmp_path / "flagship.log"
    run = NoLossRun(
        kafka_bootstrap,
        topic,
        group,
        count=count,
        seconds=60 * max(current_scale(), 0.5),
        start=lambda: start_flagship(env, log, example),
        log=log,
        durable=lambda: held_identities(front.client(), database),
    )

    def rows_written() -> int:
        """Every row inserted so far, replays included (grows with every insert)."""
        return sum(
            int(client.command(f"SELECT count() FROM {database}.{table}"))
            for table in TABLES.values()
        )

    def wait_for_a_write() -> None:
        """Wait until the (re)started process has written, i.e. is past its start-up."""
        run.wait_for_growth(rows_written, 120, "a write by the new process")

    outage = 15.0 * min(1.0, max(current_scale() * 2, 0.4))

    def faults() -> None:
        for crash, share in enumerate((0.2, 0.45, 0.7)):
            run.wait_produced(share)
            wait_for_a_write()
            if crash == 1:
                run.wait_started()
                front.stop()
                time.sleep(outage)
                assert run.proc.poll() is None, run.tail()
                front.start()
                wait_for_a_write()
            run.kill_and_restart()

    run.run(faults)
    assert_final_counts(client, database, run.produced_by_kind())
