"""Runs the flagship (row or columnar chains) on the mock cluster into chDB, bounded, with a
few corrupt payloads among the events; prints the exit code, the counters and a digest
of every table's contents as JSON.

Usage: ``python _columnar_runner.py <chdb dir> <count> row|columnar``.
"""

from __future__ import annotations

import dataclasses
import hashlib
import importlib.util
import json
import os
import sys
from pathlib import Path
from typing import Any

from confluent_kafka import Producer

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
CORRUPT = [b"", b"\x00", b"\x02\x04", b"\x06", b"\x01\x02\x03"]
"""Empty, truncated, a bad branch index; each is skipped and counted (B28)."""


def load(name: str) -> Any:
    sys.path.insert(0, str(EXAMPLES))
    spec = importlib.util.spec_from_file_location(name, EXAMPLES / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module: Any = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def main() -> None:
    chdb_dir, count, path = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    from spate_datagen import encode_avro, storefront_events

    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # tests.support
    from spate_kafka.testing import MockKafkaCluster

    # Groups form at once (no 3 s initial rebalance delay); it lives as long as the process.
    cluster = MockKafkaCluster()
    brokers = cluster.bootstrap
    producer = Producer({"bootstrap.servers": brokers, "linger.ms": 5})
    events = [encode_avro(e) for e in storefront_events(count)]
    # A truncated copy of a real order and one with a trailing byte, among good events.
    bad = [*CORRUPT, events[0][:-3], events[1] + b"\x00"]
    step = max(len(events) // (len(bad) + 1), 1)
    payloads = list(events)
    for i, payload in enumerate(bad):
        payloads.insert((i + 1) * step, payload)
    for i, payload in enumerate(payloads):
        producer.produce("storefront-events", payload, key=str(i % 97).encode(), partition=0)
        if i % 10_000 == 0:
            producer.poll(0)
    assert producer.flush(30) == 0
    os.environ.update(
        {
            "KAFKA_BROKERS": brokers,
            "CLICKHOUSE_URL": f"chdb://{chdb_dir}",
            "STOP_AT": "end",
            "SPATE_ADMIN_LISTEN": "none",
        }
    )
    flagship = load("kafka_avro_to_clickhouse")
    chains = flagship.chains if path == "row" else load("kafka_avro_to_clickhouse_columnar").chains
    client = flagship.clickhouse_client(f"chdb://{chdb_dir}")
    flagship.create_tables(client)

    from spate import Pipeline, load_config

    config = load_config(flagship.CONFIG)
    config = dataclasses.replace(config)
    pipeline = Pipeline.from_config(config, handle_signals=False).chains(chains)
    report = pipeline.run()
    digests = {}
    for table in ("orders", "payments", "refunds"):
        rows = client.query(f"SELECT * FROM {table} ORDER BY order_id").result_rows
        digests[table] = [len(rows), hashlib.sha256(repr(rows).encode()).hexdigest()]
    counters = {}
    for metric in pipeline.meter.registry.collect():
        if metric.name.startswith(("spate_deser", "spate_operator")):
            for sample in metric.samples:
                if sample.name.endswith("_total") and sample.value:
                    labels = ",".join(f"{k}={v}" for k, v in sorted(sample.labels.items()))
                    counters[f"{sample.name}{{{labels}}}"] = sample.value
    print(
        json.dumps(
            {
                "exit": report.exit_code,
                "records_in": report.records_in,
                "delivered": report.records_delivered,
                "tables": digests,
                "counters": counters,
            }
        )
    )


if __name__ == "__main__":
    main()
