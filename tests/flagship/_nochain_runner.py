"""A YAML-only pipeline (no chain): raw Avro records from the mock cluster into chDB.

Prints the exit code, whether the columnar path ran, and the table's rows as JSON.
Usage: ``python _nochain_runner.py <chdb dir> <count>``.
"""

from __future__ import annotations

import io
import json
import logging
import sys
from pathlib import Path

import fastavro
from confluent_kafka import Producer

SCHEMA = {
    "type": "record",
    "name": "Payment",
    "fields": [
        {"name": "order_id", "type": "long"},
        {"name": "amount_cents", "type": "long"},
        {"name": "note", "type": ["null", "string"]},
    ],
}

YAML = """
pipeline: {name: nochain}
admin: {listen: none}
source:
  kafka: {brokers: "%(brokers)s", topic: payments, group_id: g, stop_at: end}
deserializer:
  avro:
    mode: raw
    schema: {inline: '%(schema)s'}
sink:
  clickhouse:
    table: payments
    columns: [order_id, amount_cents, note]
    shards: [{replicas: ["chdb://%(chdb)s"]}]
"""


class Seen(logging.Handler):
    columnar = False

    def emit(self, record: logging.LogRecord) -> None:
        if "columnar path" in record.getMessage():
            Seen.columnar = True


def main() -> None:
    chdb_dir, count = sys.argv[1], int(sys.argv[2])
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # tests.support
    from spate_kafka.testing import MockKafkaCluster

    # Groups form at once (no 3 s initial rebalance delay); it lives as long as the process.
    cluster = MockKafkaCluster()
    brokers = cluster.bootstrap
    producer = Producer({"bootstrap.servers": brokers})
    parsed = fastavro.parse_schema(SCHEMA)
    for i in range(count):
        out = io.BytesIO()
        note = None if i % 3 else f"n{i}"
        fastavro.schemaless_writer(
            out, parsed, {"order_id": i, "amount_cents": 7 * i, "note": note}
        )
        producer.produce("payments", out.getvalue(), partition=0)
    producer.produce("payments", b"\x01", partition=0)  # truncated: skipped and counted
    assert producer.flush(30) == 0
    import clickhouse_connect
    from spate import Pipeline, load_config

    client = clickhouse_connect.get_client(interface="chdb", path=chdb_dir)
    client.command(
        "CREATE TABLE payments (order_id Int64, amount_cents Int64, note Nullable(String)) "
        "ENGINE = MergeTree ORDER BY order_id"
    )
    logging.getLogger("spate").addHandler(Seen())
    logging.getLogger("spate").setLevel(logging.INFO)
    text = YAML % {"brokers": brokers, "schema": json.dumps(SCHEMA), "chdb": chdb_dir}
    path = f"{chdb_dir}.yaml"
    with open(path, "w") as out:
        out.write(text)
    report = Pipeline.from_config(load_config(path), handle_signals=False).run()
    rows = client.query("SELECT * FROM payments ORDER BY order_id").result_rows
    print(json.dumps({"exit": report.exit_code, "columnar": Seen.columnar, "rows": rows}))


if __name__ == "__main__":
    main()
