"""Freshness histograms on the real broker and the ClickHouse HTTP front (B220, B221).

A bounded pipeline reads a topic into two tables: one measures freshness from the Kafka
message timestamps, the other from an ``event_time_column`` whose values lie an hour
before the messages were produced. Every row written is counted once in event time →
written and once in written → committed, per sink and table; the ages are plausible
(seconds, not milliseconds): the column-based one is at least the hour its values lag.
No time is asserted beyond those units.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
from spate import Pipeline, load_config

from tests.kafka._pipeline import source_yaml
from tests.support.scale import scaled
from tests.support.services import create_topic, produce_keyed, unique_name

pytestmark = pytest.mark.integration

EVENT_TO_WRITTEN = "spate_sink_event_to_written_seconds"
WRITTEN_TO_COMMITTED = "spate_checkpoint_written_to_committed_seconds"
HOUR = 3600


def test_b220_b221_freshness_histograms_count_every_row_per_sink_and_table(
    kafka_bootstrap: str, clickhouse_url: str, tmp_path: Path
) -> None:
    import clickhouse_connect

    topic, database = unique_name("fresh"), unique_name("freshdb").replace("-", "_")
    create_topic(kafka_bootstrap, topic, 2)
    count = scaled(5_000, minimum=500)
    stamped = int(time.time()) - HOUR  # data, not a timing: an event time an hour back
    produce_keyed(
        kafka_bootstrap,
        topic,
        count,
        value=lambda i: json.dumps({"id": i, "at": stamped}).encode(),
    )
    parts = urlsplit(clickhouse_url)
    client = clickhouse_connect.get_client(host=parts.hostname, port=parts.port)
    client.command(f"CREATE DATABASE IF NOT EXISTS {database}")
    for table in ("by_ts", "by_col"):
        client.command(
            f"CREATE TABLE {database}.{table} (id UInt64, at UInt32) ENGINE = MergeTree ORDER BY id"
        )
    name = unique_name("freshp")
    config = tmp_path / "pipeline.yaml"
    config.write_text(
        f"""
pipeline: {{name: {name}}}
admin: {{listen: none}}
checkpoint: {{interval: 200ms}}
readiness: {{max_freshness: 1h}}
{source_yaml(kafka_bootstrap, topic, unique_name("g"), json_values=True)}
sinks:
  ts:
    clickhouse:
      table: {database}.by_ts
      columns: [id, at]
      shards: [{{replicas: ["{clickhouse_url}"]}}]
      batch: {{max_rows: 700}}
  col:
    clickhouse:
      table: {database}.by_col
      columns: [id, at]
      event_time_column: at
      shards: [{{replicas: ["{clickhouse_url}"]}}]
      batch: {{max_rows: 900}}
"""
    )

    def chains(ctx: Any) -> Any:
        by_ts, by_col = ctx.sink("ts"), ctx.sink("col")

        def route(record: Any, out: Any) -> None:
            row = (record["id"], record["at"])
            out.emit(by_ts, row)
            out.emit(by_col, row)

        return ctx.chain().split().route(route)

    pipeline = Pipeline.from_config(load_config(config), handle_signals=False).chains(chains)
    report = pipeline.run()
    assert report.exit_code == 0, report.summary()
    for table in ("by_ts", "by_col"):
        assert client.command(f"SELECT count() FROM {database}.{table}") == count

    def value(family: str, sink: str, table: str, suffix: str) -> float:
        found = [
            sample.value
            for metric in pipeline.meter.registry.collect()
            for sample in metric.samples
            if sample.name == f"{family}{suffix}"
            and sample.labels.get("pipeline") == name
            and sample.labels.get("component") == sink
            and sample.labels.get("table") == f"{database}.{table}"
        ]
        assert len(found) == 1, (family, sink, suffix, found)
        return found[0]

    for sink, table in (("ts", "by_ts"), ("col", "by_col")):
        for family in (EVENT_TO_WRITTEN, WRITTEN_TO_COMMITTED):
            assert value(family, sink, table, "_count") == count, (family, sink)
            assert value(family, sink, table, "_sum") >= 0
    mean_ts = value(EVENT_TO_WRITTEN, "ts", "by_ts", "_sum") / count
    mean_col = value(EVENT_TO_WRITTEN, "col", "by_col", "_sum") / count
    # Seconds, not milliseconds: the message timestamps are younger than the hour-old
    # column values, and those are at least an hour old when written.
    assert 0 <= mean_ts < HOUR, mean_ts
    assert mean_col >= HOUR, mean_col
