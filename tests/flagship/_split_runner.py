"""Runs examples/multi_table_split.py's chain on its YAML (or the orders variant) against
the mock cluster and chDB; stops once every routed event is written; prints a summary.

Usage: ``python _split_runner.py <chdb dir> <count> [--with-orders]``.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import os
import sys
import threading
import time
from pathlib import Path
from typing import Any

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "multi_table_split.py"


def main() -> None:
    chdb_dir, count, with_orders = sys.argv[1], int(sys.argv[2]), "--with-orders" in sys.argv
    from spate_datagen import storefront_events
    from spate_datagen.cli import produce_events

    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # tests.support
    from spate_kafka.testing import MockKafkaCluster

    # Groups form at once (no 3 s initial rebalance delay); it lives as long as the process.
    cluster = MockKafkaCluster()
    brokers = cluster.bootstrap
    manifest = produce_events(brokers, "storefront-events", count)
    os.environ.update({"KAFKA_BROKERS": brokers, "CLICKHOUSE_URL": f"chdb://{chdb_dir}"})
    spec = importlib.util.spec_from_file_location("multi_table_split", EXAMPLE)
    assert spec is not None and spec.loader is not None
    example: Any = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)
    client = example.clickhouse_client(f"chdb://{chdb_dir}")
    example.create_tables(client, with_orders)

    from spate import Pipeline, load_config
    from spate.config.models import AdminConfig

    config = load_config(example.CONFIG_WITH_ORDERS if with_orders else example.CONFIG)
    # The seed YAML listens on 0.0.0.0:9090; a test takes any free loopback port instead.
    config = dataclasses.replace(config, admin=AdminConfig(listen="127.0.0.1:0"))
    pipeline = Pipeline.from_config(config, handle_signals=False).chains(example.chains)
    lines = sum(len(e.record["lines"]) for e in storefront_events(count) if e.kind == "OrderPlaced")
    expected = {
        "payments": manifest.counts["PaymentCaptured"],
        "refunds": manifest.counts["RefundIssued"],
    }
    if with_orders:
        expected["order_lines"] = lines

    def counts() -> dict[str, int]:
        return {t: int(client.command(f"SELECT count() FROM {t} FINAL")) for t in expected}

    def stop_when_done() -> None:
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline and counts() != expected:
            time.sleep(0.3)
        pipeline.request_stop("every routed event written")

    threading.Thread(target=stop_when_done, daemon=True).start()
    report = pipeline.run()
    print(json.dumps({"exit": report.exit_code, "counts": counts(), "expected": expected}))


if __name__ == "__main__":
    main()
