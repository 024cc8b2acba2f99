"""`make demo`: generate storefront events into Kafka, run the flagship, compare counts.

Endpoints, in order of preference:

* Kafka: ``KAFKA_BROKERS``; else the local broker when ``make services-up`` is running;
  else librdkafka's in-process mock cluster, held by this process for the run.
* ClickHouse: ``CLICKHOUSE_URL`` (``http://…`` or ``chdb://<dir>``); else the local HTTP
  front when ``make services-up`` is running; else embedded chDB in ``.demo/clickhouse``.

The demo writes into its own topic and a fresh ``spate_demo`` database, runs the
flagship in bounded mode (``stop_at: end``), then prints the rows per table (``FINAL``)
and one line saying whether they match what was produced. Exit code 0 only when they do.
"""

from __future__ import annotations

import argparse
import importlib.util
import logging
import os
import shutil
import socket
import sys
import time
from pathlib import Path
from types import ModuleType
from typing import Any
from urllib.parse import urlsplit

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "examples" / "kafka_avro_to_clickhouse.py"
COLUMNAR_EXAMPLE = ROOT / "examples" / "kafka_avro_to_clickhouse_columnar.py"
SERVICES_ENV = ROOT / ".services" / "env"
DATABASE = "spate_demo"
TABLE_OF_KIND = {"OrderPlaced": "orders", "PaymentCaptured": "payments", "RefundIssued": "refunds"}


def load_example(path: Path = EXAMPLE) -> ModuleType:
    sys.path.insert(0, str(path.parent))
    spec = importlib.util.spec_from_file_location(path.stem, path)
    if spec is None or spec.loader is None:
        raise SystemExit(f"cannot load {path}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def columnar_installed() -> bool:
    """Whether ``spate[columnar]`` is installed (polars, jetliner, pyarrow)."""
    modules = ("polars", "jetliner", "pyarrow", "spate_avro_native")
    return all(importlib.util.find_spec(m) is not None for m in modules)


def reachable(address: str) -> bool:
    host, _, port = address.rpartition(":")
    try:
        with socket.create_connection((host or "127.0.0.1", int(port)), timeout=1):
            return True
    except (OSError, ValueError):
        return False


def running_services() -> dict[str, str]:
    if not SERVICES_ENV.exists():
        return {}
    values = {}
    for line in SERVICES_ENV.read_text().splitlines():
        key, sep, value = line.partition("=")
        if sep:
            values[key.strip()] = value.strip()
    return values


def choose_kafka(services: dict[str, str]) -> tuple[str, Any]:
    """(bootstrap, holder) — the holder keeps a mock cluster alive while referenced."""
    if os.environ.get("KAFKA_BROKERS"):
        return os.environ["KAFKA_BROKERS"], None
    local = services.get("SPATE_KAFKA_BOOTSTRAP")
    if local and reachable(local):
        return local, None
    from confluent_kafka import Producer

    holder = Producer({"test.mock.num.brokers": 1, "log_level": 3})
    brokers = holder.list_topics(timeout=10).brokers
    return ",".join(f"{b.host}:{b.port}" for b in brokers.values()), holder


def choose_clickhouse(services: dict[str, str]) -> str:
    if os.environ.get("CLICKHOUSE_URL"):
        return os.environ["CLICKHOUSE_URL"]
    local = services.get("SPATE_CLICKHOUSE_URL")
    if local:
        parts = urlsplit(local)
        if reachable(f"{parts.hostname}:{parts.port}"):
            return local
    directory = ROOT / ".demo" / "clickhouse"
    shutil.rmtree(directory, ignore_errors=True)
    directory.parent.mkdir(parents=True, exist_ok=True)
    return f"chdb://{directory}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="run the flagship pipeline end to end")
    parser.add_argument("--count", type=int, default=int(os.environ.get("DEMO_COUNT", 100_000)))
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument(
        "--embedded",
        action="store_true",
        help="use the mock cluster and chDB even when local services are running",
    )
    parser.add_argument(
        "--path",
        choices=("auto", "columnar", "row"),
        default=os.environ.get("DEMO_PATH", "auto"),
        help="columnar (spate[columnar]) or row chains; auto: columnar when installed",
    )
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.WARNING, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )

    from spate import Pipeline, load_config
    from spate_datagen.cli import produce_events

    example = load_example()
    services = {} if args.embedded else running_services()
    brokers, mock_holder = choose_kafka(services)
    clickhouse_url = choose_clickhouse(services)
    run_id = time.strftime("%Y%m%d%H%M%S")
    topic = f"storefront-demo-{run_id}"
    kafka_label = "librdkafka mock cluster" if mock_holder is not None else brokers
    print(f"kafka:      {kafka_label}")
    print(f"clickhouse: {clickhouse_url}")

    started = time.monotonic()
    manifest = produce_events(
        brokers, topic, args.count, seed=args.seed, partitions=None if mock_holder else 4
    )
    print(f"produced {manifest.total:,} events to {topic} in {time.monotonic() - started:.1f}s")

    client = example.clickhouse_client(clickhouse_url)
    client.command(f"DROP DATABASE IF EXISTS {DATABASE}")
    example.create_tables(client, DATABASE)

    os.environ.update(
        {
            "KAFKA_BROKERS": brokers,
            "KAFKA_TOPIC": topic,
            "KAFKA_GROUP": f"storefront-demo-{run_id}",
            "STOP_AT": "end",
            "CLICKHOUSE_URL": clickhouse_url,
            "CLICKHOUSE_DATABASE": DATABASE,
            "SPATE_ADMIN_LISTEN": os.environ.get("SPATE_ADMIN_LISTEN", "127.0.0.1:0"),
            "PIPELINE_NAME": "storefront-demo",
        }
    )
    started = time.monotonic()
    path = args.path
    if path == "auto":
        path = "columnar" if columnar_installed() else "row"
    chains = load_example(COLUMNAR_EXAMPLE).chains if path == "columnar" else example.chains
    print(
        f"path:       {path} ("
        + (
            "Arrow columns, frame operators"
            if path == "columnar"
            else "per-record operators; the columnar path needs the columnar extra, "
            "see docs/install.md"
        )
        + ")"
    )
    report = Pipeline.from_config(load_config(example.CONFIG)).chains(chains).run()
    elapsed = time.monotonic() - started
    print(
        f"pipeline {report.state} in {elapsed:.1f}s: {report.records_in:,} records in "
        f"({report.records_in / max(elapsed, 1e-9):,.0f}/s)"
    )

    ok = report.exit_code == 0
    print(f"{'table':<10}{'rows':>10}{'produced':>10}")
    for kind, table in TABLE_OF_KIND.items():
        rows = int(client.command(f"SELECT count() FROM {DATABASE}.{table} FINAL"))
        expected = manifest.counts[kind]
        ok = ok and rows == expected
        print(f"{table:<10}{rows:>10,}{expected:>10,}")
    if ok:
        print("OK: every table holds exactly the events produced")
        return 0
    print(
        mismatch(manifest.total, report.records_in, mock=mock_holder is not None), file=sys.stderr
    )
    return 1


def mismatch(produced: int, read: int, *, mock: bool) -> str:
    """The closing line of a run whose tables do not match what was produced."""
    if mock and read < produced:
        return (
            f"MISMATCH: the mock cluster kept only {read:,} of the {produced:,} events produced "
            "(librdkafka's mock cluster drops a partition's oldest data beyond about 100k "
            "messages or 5 MiB, so the pipeline never saw the rest); run large counts on a "
            "real broker: make services-up, then make demo"
        )
    return "MISMATCH: the tables do not hold what was produced"


if __name__ == "__main__":
    raise SystemExit(main())
