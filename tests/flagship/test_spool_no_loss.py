"""The spooled flagship under faults: real broker, spool, ClickHouse HTTP front (B1, B54, B56).

``examples/kafka_spool_clickhouse.py`` (the flagship with a spool in front of each
table) runs as a process while a producer writes storefront events at a steady pace.

* ``ack: spooled``: the ClickHouse front is stopped; production continues; the pipeline
  is killed with SIGKILL twice while the front is down (restarting with the terminal
  unreachable) and committed offsets keep moving; the front is started, the pipeline
  restarted.
* ``ack: terminal``: the front is stopped for a while (offsets stop), started again,
  and the pipeline is killed twice.

Each runs on the row path and on the columnar path (the columnar flagship's frame chain
with the same spooled YAML: frames spooled as Arrow, B151). Below full scale (``make
test``) ``ack: spooled`` runs on the row path and ``ack: terminal`` on the columnar one,
so both acks and both paths run on every commit; ``make test-full`` runs all four.

Throughout, a sampler checks that committed offsets never pass what is durable: the
spool's files (read first) plus ClickHouse (read second) with ``ack: spooled``,
ClickHouse alone with ``ack: terminal``. At the end every event is in ClickHouse
exactly once after ``FINAL`` and every spool directory is empty after the final drain.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import pytest
from spate.sink.tiers._spool_codec import FRAME_TAG, decode_frame, decode_records
from spate.sink.tiers._store import read_records

from tests.support.avro_native import needs_avro_columnar
from tests.support.chfront_fixtures import FrontFactory
from tests.support.matrix import matrix
from tests.support.no_loss import (
    ROOT,
    TABLES,
    NoLossRun,
    assert_final_counts,
    flagship_env,
    held_identities,
    launch,
    load_example,
    start_flagship,
)
from tests.support.scale import current_scale, scaled
from tests.support.services import committed_total, create_topic, unique_name

pytestmark = [pytest.mark.integration, pytest.mark.e2e]

EXAMPLE = ROOT / "examples" / "kafka_spool_clickhouse.py"
COLUMNAR = ROOT / "examples" / "kafka_avro_to_clickhouse_columnar.py"
SPOOLED_YAML = ROOT / "examples" / "kafka_spool_clickhouse.yaml"
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
            for record in records:
                if record[:1] == bytes([FRAME_TAG]):  # a spooled frame (columnar path)
                    frame: Any = decode_frame(record)[0]
                    ids = frame.get_column("order_id").to_list()
                    held.update(f"{kind}:{i}".encode() for i in ids)
                    continue
                for rows, _, _ in decode_records((record,)):
                    for row in rows:
                        held.add(f"{kind}:{row[0]}".encode())  # type: ignore[index]
    return held


@matrix(
    "ack, path",
    [(ack, path) for ack in ("spooled", "terminal") for path in ("row", "columnar")],
    ci=("spooled-row", "terminal-columnar"),
    marks={"spooled-columnar": needs_avro_columnar, "terminal-columnar": needs_avro_columnar},
)
def test_spooled_flagship_survives_kills_and_a_clickhouse_outage(
    kafka_bootstrap: str, chfront: FrontFactory, tmp_path: Path, ack: str, path: str
) -> None:
    """The row flagship and the columnar one (B151: frames through the spool) alike."""
    topic, group = unique_name(f"spool-{ack}"), unique_name(f"spool-{ack}-g")
    create_topic(kafka_bootstrap, topic, 4)
    count = scaled(300_000, minimum=20_000)
    front = chfront()
    client = front.client()
    database = f"spool_no_loss_{ack}_{path}"
    load_example().create_tables(client, database)
    spool = tmp_path / "spool"
    env = flagship_env(kafka_bootstrap, topic, group, front.url, database, f"spool-no-loss-{ack}")
    env.update({"SPOOL_DIR": str(spool), "SPOOL_ACK": ack})
    log = tmp_path / "pipeline.log"

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

    run = NoLossRun(
        kafka_bootstrap,
        topic,
        group,
        count=count,
        seconds=60 * max(current_scale(), 0.5),
        start=lambda: (
            start_flagship(env, log, EXAMPLE)
            if path == "row"
            else launch(
                [str(COLUMNAR), "--config", str(SPOOLED_YAML), "--no-create-tables"], env, log
            )
        ),
        log=log,
        durable=durable,
        delivered=in_clickhouse,
    )

    def wait_for_progress(what: str) -> None:
        run.wait_for_growth(lambda: committed_total(kafka_bootstrap, group, topic), 180, what)

    def faults() -> None:
        run.wait_produced(0.15)
        wait_for_progress("a first commit")
        front.stop()
        if ack == "spooled":
            # Offsets keep moving with ClickHouse down; two crashes while it is down.
            for share in (0.35, 0.55):
                run.wait_produced(share)
                wait_for_progress("a commit while ClickHouse is down")
                run.kill_and_restart()
            wait_for_progress("a commit after a restart with ClickHouse down")
            front.start()
            run.kill_and_restart()
        else:
            time.sleep(10 * min(1.0, max(current_scale() * 2, 0.4)))
            assert run.proc.poll() is None, run.tail()
            front.start()
            for share in (0.45, 0.7):
                run.wait_produced(share)
                wait_for_progress("a commit")
                run.kill_and_restart()

    run.run(faults)
    leftover = {t: os.listdir(spool / t) for t in KINDS if (spool / t).is_dir()}
    assert all(not files for files in leftover.values()), leftover
    if ack == "spooled":  # killed with ClickHouse down: the spool held batches to replay
        assert "replaying" in log.read_text()
    assert ("runs on the columnar path" in log.read_text()) is (path == "columnar")
    assert_final_counts(client, database, run.produced_by_kind())
