"""Effectively once into ClickHouse under faults, on the real broker and the HTTP front
(B88, B89, B90; B165 on the columnar path).

The flagship's split pipeline (three tables), the columnar flagship's frame chain (the
same three tables, as columns) and a single-table pipeline run with
``pipeline.delivery: effectively_once`` into plain ``MergeTree`` tables with a
``non_replicated_deduplication_window``, while a producer writes storefront events at
a steady pace. Each is killed with SIGKILL five times at random moments (a seeded random
share of the production, then a random delay after a write), ClickHouse is stopped once
for a while, and a second member joins the group and leaves again (a rebalance both
ways). The sampler checks throughout that no committed offset passes the rows in
ClickHouse; at the end every table's raw ``count()`` — no ``FINAL`` — equals the number
of events of its kinds produced.

Below full scale (``make test``) the split and columnar rows run; the single-table row
runs in ``make test-full`` (tests/kafka/test_effectively_once_kill.py kills a single-table
pipeline under effectively once on every commit).
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.support.avro_native import needs_avro_columnar
from tests.support.chfront_fixtures import FrontFactory
from tests.support.delivery import wait_until
from tests.support.matrix import matrix
from tests.support.no_loss import TABLES, NoLossRun, flagship_env, launch
from tests.support.scale import current_scale, scaled
from tests.support.services import create_topic, unique_name

pytestmark = [pytest.mark.integration, pytest.mark.e2e]

ROOT = Path(__file__).resolve().parents[2]
FLAGSHIP_YAML = ROOT / "examples" / "kafka_avro_to_clickhouse.yaml"
RUNNER = Path(__file__).with_name("_eo_runner.py")
WINDOW = "SETTINGS non_replicated_deduplication_window = 1000"

DDL = {
    "orders": "order_id Int64, customer_id Int32, region LowCardinality(String), "
    "placed_at DateTime64(3, 'UTC'), line_count UInt16, total_cents Int64",
    "payments": "order_id Int64, amount_cents Int64",
    "refunds": "order_id Int64, amount_cents Int64, reason LowCardinality(String)",
    "events": "kind LowCardinality(String), order_id Int64",
}


def write_config(path: Path, mode: str) -> Path:
    """The flagship YAML with ``delivery: effectively_once`` (and, for ``single``, one
    ``events`` sink in place of the three)."""
    config: dict[str, Any] = yaml.safe_load(FLAGSHIP_YAML.read_text())
    config["pipeline"]["delivery"] = "effectively_once"
    config["checkpoint"]["drain_timeout"] = "10s"
    if mode == "single":
        template = config["sinks"]["payments"]["clickhouse"]
        config["sinks"] = {
            "events": {
                "clickhouse": {**template, "table": "events", "columns": ["kind", "order_id"]}
            }
        }
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path


def create_tables(client: Any, database: str, tables: list[str]) -> None:
    client.command(f"CREATE DATABASE IF NOT EXISTS {database}")
    for table in tables:
        client.command(
            f"CREATE TABLE {database}.{table} ({DDL[table]}) ENGINE = MergeTree "
            f"ORDER BY order_id {WINDOW}"
        )


def start(config: Path, mode: str, env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    return launch([str(RUNNER), str(config), mode], env, log)


@matrix(
    "mode",
    ["split", "single", "columnar"],
    ci=("split", "columnar"),
    marks={"columnar": needs_avro_columnar},
)
def test_b89_no_duplicate_rows_after_kills_an_outage_and_a_rebalance(
    kafka_bootstrap: str, chfront: FrontFactory, tmp_path: Path, mode: str
) -> None:
    """B89 on the row path (``split``, ``single``); B165: the columnar flagship alike."""
    seed = int(os.environ.get("SPATE_EO_SEED", "22"))
    rng = random.Random(seed)
    topic, group = unique_name(f"eo-{mode}"), unique_name(f"eo-{mode}-g")
    create_topic(kafka_bootstrap, topic, 4)
    count = scaled(200_000, minimum=15_000)
    front = chfront()
    client = front.client()
    database = f"eo_{mode}"
    tables = ["events"] if mode == "single" else list(TABLES.values())
    create_tables(client, database, tables)
    config = write_config(tmp_path / "pipeline.yaml", mode)
    env = flagship_env(kafka_bootstrap, topic, group, front.url, database, f"eo-{mode}")
    log = tmp_path / "pipeline.log"

    def held() -> set[bytes]:
        reader = front.client()
        if mode == "single":
            rows = reader.query(f"SELECT kind, order_id FROM {database}.events").result_rows
            return {f"{kind}:{order_id}".encode() for kind, order_id in rows}
        found: set[bytes] = set()
        for kind, table in TABLES.items():
            result = reader.query(f"SELECT order_id FROM {database}.{table}")
            found.update(f"{kind}:{row[0]}".encode() for row in result.result_rows)
        return found

    run = NoLossRun(
        kafka_bootstrap,
        topic,
        group,
        count=count,
        seconds=90 * max(current_scale(), 0.5),
        start=lambda: start(config, mode, env, log),
        log=log,
        durable=held,
    )

    def rows_written() -> int:
        return sum(int(client.command(f"SELECT count() FROM {database}.{t}")) for t in tables)

    def wait_for_a_write() -> None:
        """While events are still produced, wait until the pipeline has written since."""
        run.wait_for_growth(rows_written, 120, "a write by the pipeline", or_done=True)

    def member_assigned(path: Path) -> bool:
        return path.exists() and "partitions assigned" in path.read_text(errors="replace")

    outage = 12.0 * min(1.0, max(current_scale() * 2, 0.4))
    shares = sorted(rng.uniform(0.1, 0.9) for _ in range(5))
    second_log = tmp_path / "second.log"

    def faults() -> None:
        for crash, share in enumerate(shares):
            run.wait_produced(share)
            wait_for_a_write()
            if crash == 0:  # a second member joins (a rebalance), takes part, and leaves
                second = start(config, mode, env, second_log)
                run.members.append(second)
                wait_until(lambda: member_assigned(second_log), 120, "the second member's turn")
                time.sleep(3.0)
                second.send_signal(signal.SIGTERM)
                assert second.wait(120) == 0, second_log.read_text()[-3000:]
                wait_for_a_write()
            if crash == 2:  # a ClickHouse outage while the pipeline runs
                run.wait_started()
                front.stop()
                time.sleep(outage)
                assert run.proc.poll() is None, run.tail()
                front.start()
                wait_for_a_write()
            time.sleep(rng.uniform(0.0, 1.5))
            run.kill_and_restart()

    def twice(kind: str, table: str) -> str:
        """The Kafka positions of the rows a table holds more than once (a failure's
        diagnosis): each partition's offsets, as ranges."""
        query = f"SELECT order_id FROM {database}.{table} GROUP BY order_id HAVING count() > 1"
        rows = client.query(query).result_rows
        positions = run.producer.positions
        offsets: dict[int, list[int]] = {}
        for (order_id,) in rows:
            position = positions.get(f"{kind}:{order_id}".encode())
            if position is not None:
                offsets.setdefault(position[0], []).append(position[1])
        return "; ".join(
            f"partition {p}: {len(o)} rows, offsets {min(o)}..{max(o)}"
            for p, o in sorted(offsets.items())
        )

    run.run(faults)
    by_kind = run.produced_by_kind()
    if mode == "single":
        counts = dict(
            client.query(f"SELECT kind, count() FROM {database}.events GROUP BY kind").result_rows
        )
        assert {k: int(counts.get(k, 0)) for k in TABLES} == by_kind, (seed, counts, by_kind)
        return
    for kind, table in TABLES.items():
        raw = int(client.command(f"SELECT count() FROM {database}.{table}"))
        assert raw == by_kind[kind], (seed, table, raw, by_kind[kind], twice(kind, table))
