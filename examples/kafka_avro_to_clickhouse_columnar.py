"""The flagship on the columnar path: the same YAML, tables and delivery, as columns.

Each polled Kafka batch is decoded into one polars DataFrame per event kind (the Avro
union's branches), ``line_count`` and ``total_cents`` are polars list expressions over
the nested ``lines`` column, and each frame goes to its table as one Arrow insert. Needs
``pip install "spate[kafka,clickhouse,columnar]"``; the row version is
``kafka_avro_to_clickhouse.py`` beside this file.

    KAFKA_BROKERS=localhost:9092 CLICKHOUSE_URL=http://localhost:8123 \\
        python examples/kafka_avro_to_clickhouse_columnar.py [--config FILE]
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import kafka_avro_to_clickhouse as flagship


def chains(ctx: Any) -> Any:
    """Route each branch's frame to the table of its kind, computing the order totals."""
    import polars as pl

    lines = pl.col("lines").list
    orders = ctx.frames().select(
        "order_id",
        "customer_id",
        "region",
        "placed_at",
        lines.len().alias("line_count"),
        lines.eval(
            pl.element().struct.field("qty").cast(pl.Int64)
            * pl.element().struct.field("unit_cents").cast(pl.Int64)
        )
        .list.sum()
        .alias("total_cents"),
    )
    return (
        ctx.frames()
        .split()
        .route("orders", branch="OrderPlaced", then=orders)
        .route("payments", branch="PaymentCaptured")
        .route("refunds", branch="RefundIssued")
    )


def main(argv: list[str] | None = None) -> int:
    return flagship.main(argv, chains=chains)


if __name__ == "__main__":
    raise SystemExit(main())
