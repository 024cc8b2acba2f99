"""Run ``multi_table_split.yaml``: Avro storefront events into ``payments`` and ``refunds``.

Each event kind has its own ClickHouse sink; the chain routes every decoded event to the
sink of its kind. Orders are not routed to either table and are skipped (counted as
``unrouted``). With ``--with-orders`` the variant ``multi_table_split_orders.yaml`` adds
an ``order_lines`` table, and every order line becomes one row there.

    KAFKA_BROKERS=localhost:9092 CLICKHOUSE_URL=http://localhost:8123 \\
        python examples/multi_table_split.py [--with-orders] [--no-create-tables]
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from pathlib import Path
from typing import Any

from spate import Pipeline, load_config

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))  # the flagship example beside this file has the client helper
from kafka_avro_to_clickhouse import clickhouse_client  # noqa: E402

CONFIG = HERE / "multi_table_split.yaml"
CONFIG_WITH_ORDERS = HERE / "multi_table_split_orders.yaml"

TABLES = {
    "payments": """
        CREATE TABLE IF NOT EXISTS {table} (order_id Int64, amount_cents Int64)
        ENGINE = ReplacingMergeTree ORDER BY order_id""",
    "refunds": """
        CREATE TABLE IF NOT EXISTS {table} (
            order_id Int64, amount_cents Int64, reason LowCardinality(String))
        ENGINE = ReplacingMergeTree ORDER BY order_id""",
    "order_lines": """
        CREATE TABLE IF NOT EXISTS {table} (
            order_id Int64, line_no UInt16, sku String, qty Int32, unit_cents Int32)
        ENGINE = ReplacingMergeTree ORDER BY (order_id, line_no)""",
}


def chains(ctx: Any) -> Any:
    """Route payments and refunds to their tables; order lines too when that sink exists."""
    payments, refunds = ctx.sink("payments"), ctx.sink("refunds")
    order_lines = ctx.sink("order_lines") if "order_lines" in ctx.sinks else None

    def route(event: Any, out: Any) -> None:
        record = event.record
        kind = event.kind
        if kind == "PaymentCaptured":
            out.emit(payments, (record["order_id"], record["amount_cents"]))
        elif kind == "RefundIssued":
            out.emit(refunds, (record["order_id"], record["amount_cents"], record["reason"]))
        elif kind == "OrderPlaced" and order_lines is not None:
            order_id = record["order_id"]
            for line_no, line in enumerate(record["lines"]):
                out.emit(
                    order_lines,
                    (order_id, line_no, line["sku"], line["qty"], line["unit_cents"]),
                )

    return ctx.chain().split(unrouted="skip").route(route)


def create_tables(client: Any, with_orders: bool) -> None:
    names = {
        "payments": os.environ.get("CLICKHOUSE_PAYMENTS_TABLE", "payments"),
        "refunds": os.environ.get("CLICKHOUSE_REFUNDS_TABLE", "refunds"),
        "order_lines": os.environ.get("CLICKHOUSE_ORDER_LINES_TABLE", "order_lines"),
    }
    for kind, ddl in TABLES.items():
        if kind != "order_lines" or with_orders:
            client.command(ddl.format(table=names[kind]))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--with-orders", action="store_true", help="also fill order_lines")
    parser.add_argument("--no-create-tables", action="store_true")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    config = load_config(CONFIG_WITH_ORDERS if args.with_orders else CONFIG)
    if not args.no_create_tables:
        url = os.environ.get("CLICKHOUSE_URL", "http://localhost:8123")
        client = clickhouse_client(
            url,
            user=os.environ.get("CLICKHOUSE_USER", "default"),
            password=os.environ.get("CLICKHOUSE_PASSWORD", ""),
        )
        create_tables(client, args.with_orders)
    report = Pipeline.from_config(config).chains(chains).run()
    return report.exit_code


if __name__ == "__main__":
    raise SystemExit(main())
