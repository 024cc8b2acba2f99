"""Runs the README pipeline (``schema.sql``, ``payments.py`` and ``pipeline.yaml`` in the
working directory) on the mock cluster and chDB, stops it once every payment is in ClickHouse,
and prints a JSON summary. Usage: ``python _readme_runner.py <chdb dir>``."""

from __future__ import annotations

import importlib
import json
import os
import sys
import threading
import time
from pathlib import Path

import clickhouse_connect
from confluent_kafka import Producer


def main() -> None:
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # tests.support
    from spate_kafka.testing import MockKafkaCluster

    # Groups form at once (no 3 s initial rebalance delay); it lives as long as the process.
    cluster = MockKafkaCluster()
    bootstrap = cluster.bootstrap
    holder = Producer({"bootstrap.servers": bootstrap})
    events = [
        {
            "kind": "PaymentCaptured" if i % 3 else "OrderPlaced",
            "order_id": i,
            "amount_cents": 100 + i,
        }
        for i in range(300)
    ]
    for ev in events:
        holder.produce("events", json.dumps(ev).encode(), str(ev["order_id"]).encode())
    assert holder.flush(30) == 0
    os.environ["KAFKA_BROKERS"] = bootstrap
    os.environ["CLICKHOUSE_URL"] = "chdb://" + sys.argv[1]
    client = clickhouse_connect.get_client(interface="chdb", path=sys.argv[1])
    # The README's CREATE TABLE, as written (comments dropped).
    with open("schema.sql", encoding="utf-8") as handle:
        lines = [line.split("--")[0] for line in handle]
    client.command(" ".join(" ".join(lines).split()))

    sys.path.insert(0, os.getcwd())
    payments = importlib.import_module("payments")
    from spate import Pipeline

    pipeline = Pipeline.from_config("pipeline.yaml", handle_signals=False)
    pipeline.chains(payments.chains)
    expected = sum(1 for ev in events if ev["kind"] == "PaymentCaptured")

    def stop_when_done() -> None:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            if int(client.command("SELECT count() FROM payments")) >= expected:
                break
            time.sleep(0.2)
        pipeline.request_stop("every payment written")

    threading.Thread(target=stop_when_done, daemon=True).start()
    report = pipeline.run()
    rows = int(client.command("SELECT count() FROM payments"))
    print(json.dumps({"exit": report.exit_code, "rows": rows, "expected": expected}))


if __name__ == "__main__":
    main()
