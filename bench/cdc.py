"""Debezium change events into a ReplacingMergeTree table: spate against the loop a user
would write by hand.

Measured by the performance rules in docs/development.md (``bench/_harness.py``).

Data: ``SPATE_BENCH_CDC_EVENTS`` (default 1,000,000) change events of a seeded random
workload (``tests.support.debezium_events``: inserts, updates, primary-key changes,
deletes, a tombstone after each delete, about a third wrapped as the JSON converter with
``schemas.enable`` writes them), JSON, keyed by the primary key, in a 4-partition topic of
the real broker, produced once and reused. Destination: embedded ClickHouse (chDB), or
``SPATE_BENCH_CLICKHOUSE_URL``, the same for both sides, each run into its own fresh
``ReplacingMergeTree(_version, _is_deleted)`` table, created before the run, not timed.

* framework: a bounded pipeline, Kafka → the JSON deserializer →
  ``flat_map(spate.cdc.DebeziumRows(engine="replacing"))`` → the ClickHouse sink
  (``batch.max_rows`` 50,000), at least once;
* baseline: ``consume(n)`` → ``orjson.loads`` → the same mapping written out (unwrap
  ``payload``, skip tombstones, ``after`` with the LSN and 0, or ``before`` with the LSN
  and 1) → per-column lists → ``client.insert(..., column_oriented=True)`` every 50,000
  rows, then a synchronous commit.

The columnar path is not measured: the envelope is a row operator, which the columnar
path refuses (docs/guides/cdc.md). Prints each side's median, ``ratio:`` (above 1 spate
is faster) and peak RSS; at least five interleaved runs (``SPATE_BENCH_RUNS``).
"""

from __future__ import annotations

import os
import sys
import tempfile
import uuid
from pathlib import Path
from typing import Any

import orjson
import yaml
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient
from spate import Pipeline, load_config
from spate.cdc import DebeziumRows
from spate_datagen.cli import ensure_topic

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from _harness import compare, env_int, peak_rss_mib
from e2e import PARTITIONS, commit_sync, group_consumer, load_example
from kafka_source import bootstrap

from tests.support.debezium_events import workload

BATCH_ROWS = 50_000
CONSUME_BATCH = 5_000
COLUMNS = ["id", "name", "n", "_version", "_is_deleted"]
DDL = (
    "(id Int64, name Nullable(String), n Int64, _version UInt64, _is_deleted UInt8) "
    "ENGINE = ReplacingMergeTree(_version, _is_deleted) ORDER BY id"
)


def ensure_data(brokers: str, topic: str, count: int) -> int:
    """The workload's change events in ``topic`` (produced once); returns the records."""
    admin = AdminClient({"bootstrap.servers": brokers})
    if topic not in admin.list_topics(timeout=30).topics:
        ensure_topic(brokers, topic, PARTITIONS)
        producer = Producer({"bootstrap.servers": brokers, "linger.ms": 50})
        steps = count * 10 // 12  # a delete adds a tombstone, a key change two records
        key = 0
        for value in workload(11, steps).events:
            if value is not None:
                payload = value.get("payload", value)
                image = payload["after"] or payload["before"]
                key = image["id"]
            body = None if value is None else orjson.dumps(value)
            producer.produce(topic, body, str(key).encode())
            producer.poll(0)
        producer.flush(120)
    consumer, ends = group_consumer(brokers, topic, "count")
    consumer.close()
    return sum(ends.values())


class Bench:
    def __init__(self, brokers: str, topic: str, chdb_dir: str) -> None:
        self.brokers, self.topic = brokers, topic
        self.url = os.environ.get("SPATE_BENCH_CLICKHOUSE_URL") or f"chdb://{chdb_dir}"
        self.client = load_example().clickhouse_client(self.url)
        self.prepared: str | None = None
        self.config = Path(chdb_dir) / "cdc.yaml"
        self.config.write_text(
            yaml.safe_dump(
                {
                    "pipeline": {"name": "bench-cdc"},
                    "source": {
                        "kafka": {
                            "brokers": "${KAFKA_BROKERS}",
                            "topic": topic,
                            "group_id": "${KAFKA_GROUP}",
                            "stop_at": "end",
                            "consume_batch": CONSUME_BATCH,
                        }
                    },
                    "deserializer": {"json": {}},
                    "sink": {
                        "clickhouse": {
                            "table": "${CLICKHOUSE_TABLE}",
                            "columns": COLUMNS,
                            "shards": [{"replicas": [self.url]}],
                            "batch": {"max_rows": BATCH_ROWS, "linger": "1s"},
                        }
                    },
                },
                sort_keys=False,
            )
        )

    def setup(self) -> None:
        """Before each run, untimed: a fresh table."""
        self.prepared = f"default.cdc_{uuid.uuid4().hex[:8]}"
        self.client.command(f"CREATE TABLE {self.prepared} {DDL}")

    def _table(self) -> str:
        table, self.prepared = self.prepared, None
        if table is None:
            self.setup()
            table, self.prepared = self.prepared, None
        assert table is not None
        return table

    def framework(self) -> int:
        os.environ.update(
            {
                "KAFKA_BROKERS": self.brokers,
                "KAFKA_GROUP": f"bench-cdc-fw-{uuid.uuid4().hex[:8]}",
                "CLICKHOUSE_TABLE": self._table(),
                "SPATE_ADMIN_LISTEN": "none",
            }
        )
        rows = DebeziumRows(engine="replacing")
        pipeline = Pipeline.from_config(load_config(self.config), handle_signals=False)
        report = pipeline.chains(lambda ctx: ctx.chain().flat_map(rows)).run()
        if report.exit_code != 0:
            raise SystemExit(f"framework run failed: {report.reason}")
        return report.records_in

    def baseline(self) -> int:
        table = self._table()
        consumer, ends = group_consumer(self.brokers, self.topic, "cdc-base")
        buffers: list[list[Any]] = [[] for _ in COLUMNS]
        done = {p for p, end in ends.items() if end == 0}
        records = 0

        def flush() -> None:
            if buffers[0]:
                self.client.insert(table, buffers, column_names=COLUMNS, column_oriented=True)
            for column in buffers:
                column.clear()
            commit_sync(consumer)

        ids, names, ns, versions, deleted = buffers
        while len(done) < PARTITIONS:
            for msg in consumer.consume(CONSUME_BATCH, timeout=1.0):
                if msg.error() is not None:
                    continue
                records += 1
                if msg.offset() + 1 >= ends[msg.partition()]:
                    done.add(msg.partition())
                value = msg.value()
                if not value:
                    continue  # a tombstone
                event = orjson.loads(value)
                if "payload" in event and "schema" in event:
                    event = event["payload"]
                after = event["after"]
                image = after if after is not None else event["before"]
                ids.append(image["id"])
                names.append(image["name"])
                ns.append(image["n"])
                versions.append(event["source"]["lsn"])
                deleted.append(0 if after is not None else 1)
                if len(ids) >= BATCH_ROWS:
                    flush()
        flush()
        consumer.close()
        return records


def main() -> int:
    brokers = bootstrap()
    count = env_int("SPATE_BENCH_CDC_EVENTS", 1_000_000)
    topic = f"bench-cdc-{count}"
    records = ensure_data(brokers, topic, count)
    with tempfile.TemporaryDirectory(prefix="spate-bench-", ignore_cleanup_errors=True) as chdb_dir:
        bench = Bench(brokers, topic, chdb_dir)
        where = "chDB" if bench.url.startswith("chdb://") else bench.url
        compare(
            f"Debezium change events into ReplacingMergeTree, row path ({where}): "
            f"{records:,} records",
            bench.framework,
            bench.baseline,
            runs=max(5, env_int("SPATE_BENCH_RUNS", 5)),
            setup=bench.setup,
        )
        print("columnar path: not measured (the envelope is a row operator)")
        print(f"peak RSS at exit: {peak_rss_mib():.0f} MiB")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
