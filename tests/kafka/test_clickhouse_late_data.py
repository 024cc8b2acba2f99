"""A Kafka stream with straggling event times into a daily-partitioned table (B240, B242).

The real broker and the ClickHouse HTTP front: a topic whose tenth of records carries
event times spread over two years (at least nine days back) goes through a bounded
pipeline from its YAML into ``PARTITION BY toYYYYMMDD(ts)``, one block for the whole
topic. The sink with ``late_data: {after: 7d, to: late}`` — the other sink of the same
file, whose table takes the stragglers — writes every recent row into its table and
every straggler into the side table, exact counts; the run summary shows them.
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
from spate import Pipeline, load_config

from tests.support.scale import scaled
from tests.support.services import create_topic, produce_keyed, unique_name

pytestmark = pytest.mark.integration

NOW = 1_782_820_800  # 2026-06-30 12:00 UTC: data, not a clock
DAY = 86_400


def test_b240_b242_stragglers_of_a_topic_go_to_the_side_table_and_the_rest_is_written(
    kafka_bootstrap: str, clickhouse_url: str, tmp_path: Path
) -> None:
    import clickhouse_connect

    topic, database = unique_name("late"), unique_name("latedb").replace("-", "_")
    create_topic(kafka_bootstrap, topic, 1)
    count = scaled(20_000, minimum=2_000)
    rng = random.Random(242)
    times = [
        NOW - rng.randrange(9 * DAY, 730 * DAY) if i % 10 == 3 else NOW - rng.randrange(3600)
        for i in range(count)
    ]
    stragglers = sum(1 for i in range(count) if i % 10 == 3)
    produce_keyed(
        kafka_bootstrap,
        topic,
        count,
        value=lambda i: json.dumps({"id": i, "ts": times[i]}).encode(),
    )
    parts = urlsplit(clickhouse_url)
    client = clickhouse_connect.get_client(host=parts.hostname, port=parts.port)
    client.command(f"CREATE DATABASE IF NOT EXISTS {database}")
    client.command(
        f"CREATE TABLE {database}.events (id UInt64, ts DateTime('UTC')) ENGINE = MergeTree "
        "PARTITION BY toYYYYMMDD(ts) ORDER BY id"
    )
    client.command(
        f"CREATE TABLE {database}.events_late (id UInt64, ts DateTime('UTC')) "
        "ENGINE = MergeTree ORDER BY id"
    )
    name = unique_name("latep")
    config = tmp_path / "pipeline.yaml"
    config.write_text(
        f"""
pipeline: {{name: {name}}}
admin: {{listen: none}}
checkpoint: {{interval: 1h}}
source:
  kafka:
    brokers: "{kafka_bootstrap}"
    topic: {topic}
    group_id: {unique_name("g")}
    stop_at: end
deserializer:
  json: {{framing: single}}
sinks:
  events:
    clickhouse:
      table: {database}.events
      columns: [id, ts]
      shards: [{{replicas: ["{clickhouse_url}"]}}]
      batch: {{max_rows: 1000000, linger: 1h}}
      late_data: {{after: 7d, to: late}}
  late:
    clickhouse:
      table: {database}.events_late
      columns: [id, ts]
      shards: [{{replicas: ["{clickhouse_url}"]}}]
"""
    )

    def chains(ctx: Any) -> Any:
        return ctx.chain().map(lambda r: (r["id"], r["ts"])).sink("events")

    pipeline = Pipeline.from_config(load_config(config), handle_signals=False).chains(chains)
    report = pipeline.run()
    assert report.exit_code == 0, report.summary()
    assert client.command(f"SELECT count() FROM {database}.events") == count - stragglers
    assert client.command(f"SELECT count() FROM {database}.events_late") == stragglers
    assert client.command(f"SELECT uniqExact(id) FROM {database}.events_late") == stragglers
    assert report.late_rows == {f"{database}.events_late": stragglers}
    assert f"late_rows={stragglers}" in report.summary()
