"""The flagship: Kafka → Avro → one ClickHouse table per event kind.

Reads storefront events (raw Avro of a three-record union, see the YAML beside this
file), routes each to its table and writes them with at-least-once delivery: Kafka
offsets are committed only behind rows ClickHouse has acknowledged. The tables are
``ReplacingMergeTree`` keyed by ``order_id``, so the duplicates a crash can replay
collapse under ``FINAL``.

    KAFKA_BROKERS=localhost:9092 CLICKHOUSE_URL=http://localhost:8123 \\
        python examples/kafka_avro_to_clickhouse.py [--config FILE] [--no-create-tables]

Produce events with ``spate datagen --brokers localhost:9092 --topic storefront-events``,
or run everything on embedded defaults with ``make demo``.
"""

from __future__ import annotations

import argparse
import logging
import os
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from spate import Pipeline, load_config

HERE = Path(__file__).resolve().parent
CONFIG = HERE / "kafka_avro_to_clickhouse.yaml"

TABLES = {
    "orders": """
        CREATE TABLE IF NOT EXISTS {db}.orders (
            order_id    Int64,
            customer_id Int32,
            region      LowCardinality(String),
            placed_at   DateTime64(3, 'UTC'),
            line_count  UInt16,
            total_cents Int64
        ) ENGINE = ReplacingMergeTree ORDER BY order_id
        SETTINGS non_replicated_deduplication_window = 1000
    """,
    "payments": """
        CREATE TABLE IF NOT EXISTS {db}.payments (
            order_id     Int64,
            amount_cents Int64
        ) ENGINE = ReplacingMergeTree ORDER BY order_id
        SETTINGS non_replicated_deduplication_window = 1000
    """,
    "refunds": """
        CREATE TABLE IF NOT EXISTS {db}.refunds (
            order_id     Int64,
            amount_cents Int64,
            reason       LowCardinality(String)
        ) ENGINE = ReplacingMergeTree ORDER BY order_id
        SETTINGS non_replicated_deduplication_window = 1000
    """,
}


def chains(ctx: Any) -> Any:
    """Route each decoded event to the table of its kind.

    The Avro deserializer hands over a ``NamedRecord``: the union branch's full name and
    the decoded record (``event.kind`` is the name without its namespace).
    """
    orders, payments, refunds = ctx.sink("orders"), ctx.sink("payments"), ctx.sink("refunds")

    def route(event: Any, out: Any) -> None:
        record = event.record
        kind = event.kind
        if kind == "OrderPlaced":
            lines = record["lines"]
            total = sum(line["qty"] * line["unit_cents"] for line in lines)
            out.emit(
                orders,
                (
                    record["order_id"],
                    record["customer_id"],
                    record["region"],
                    record["placed_at"],
                    len(lines),
                    total,
                ),
            )
        elif kind == "PaymentCaptured":
            out.emit(payments, (record["order_id"], record["amount_cents"]))
        elif kind == "RefundIssued":
            out.emit(refunds, (record["order_id"], record["amount_cents"], record["reason"]))

    return ctx.chain().split().route(route)


def clickhouse_client(url: str, *, user: str = "default", password: str = "") -> Any:
    """A clickhouse-connect client for an ``http(s)://`` or ``chdb://<dir>`` URL."""
    import clickhouse_connect

    parts = urlsplit(url)
    if parts.scheme == "chdb":
        path = url[len("chdb://") :]
        return clickhouse_connect.get_client(interface="chdb", path=str(Path(path).resolve()))
    return clickhouse_connect.get_client(
        interface=parts.scheme,
        host=parts.hostname or "localhost",
        port=parts.port or (8443 if parts.scheme == "https" else 8123),
        username=parts.username or user,
        password=parts.password or password,
    )


def create_tables(client: Any, database: str = "default") -> None:
    """Create the database and the three tables unless they exist."""
    client.command(f"CREATE DATABASE IF NOT EXISTS {database}")
    for ddl in TABLES.values():
        client.command(ddl.format(db=database))


def main(argv: list[str] | None = None, chains: Any = chains) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", type=Path, default=CONFIG, help="pipeline YAML")
    parser.add_argument(
        "--no-create-tables", action="store_true", help="expect the tables to exist"
    )
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")

    config = load_config(args.config)
    if not args.no_create_tables:
        url = os.environ.get("CLICKHOUSE_URL", "http://localhost:8123")
        client = clickhouse_client(
            url,
            user=os.environ.get("CLICKHOUSE_USER", "default"),
            password=os.environ.get("CLICKHOUSE_PASSWORD", ""),
        )
        create_tables(client, os.environ.get("CLICKHOUSE_DATABASE", "default"))
    report = Pipeline.from_config(config).chains(chains).run()
    return report.exit_code


if __name__ == "__main__":
    raise SystemExit(main())
