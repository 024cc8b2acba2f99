"""JSON storefront events from Kafka to Parquet files, then one query over them with chDB.

Reads the events ``spate datagen --format json`` produces, writes one row per event
(kind, order id, region, amount) to Parquet under ``events.parts/kind=…/`` — a local
directory by default, or S3 with ``PARQUET_PATH=s3://bucket/prefix`` and ``S3_ENDPOINT``
— and publishes each part in ``events.parts/_manifest.json`` only once it is written and
audited. Offsets are committed only after the part holding their records is durable.
Afterwards it asks chDB for the totals per kind over exactly the published parts.

    KAFKA_BROKERS=localhost:9092 STOP_AT=end python examples/kafka_to_parquet.py
"""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path
from typing import Any

from spate import Pipeline, load_config

CONFIG = Path(__file__).resolve().with_suffix(".yaml")


def row(event: dict[str, Any]) -> dict[str, Any]:
    """One flat row per event: the amount of an order is the sum of its lines."""
    if event["kind"] == "OrderPlaced":
        amount = sum(line["qty"] * line["unit_cents"] for line in event["lines"])
    else:
        amount = event["amount_cents"]
    return {
        "kind": event["kind"],
        "order_id": event["order_id"],
        "region": event.get("region", ""),
        "amount_cents": amount,
    }


def chains(ctx: Any) -> Any:
    return ctx.chain().map(row)


def published_parts(root: Path) -> list[Path]:
    """The parts the manifest lists (a local directory); unpublished files are ignored."""
    manifest = json.loads((root / "events.parts" / "_manifest.json").read_bytes())
    return [root / part["path"] for part in manifest["parts"]]


def totals(root: Path) -> list[tuple[str, int, int]]:
    """(kind, rows, amount) over the published parts, computed by chDB."""
    import chdb

    parts = " UNION ALL ".join(
        f"SELECT kind, amount_cents FROM file('{p}', 'Parquet')" for p in published_parts(root)
    )
    query = f"SELECT kind, count(), sum(amount_cents) FROM ({parts}) GROUP BY kind ORDER BY kind"
    out = chdb.query(query, "CSV").data()
    return [
        (kind.strip('"'), int(rows), int(amount))
        for kind, rows, amount in (line.split(",") for line in out.splitlines() if line)
    ]


def main() -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    report = Pipeline.from_config(load_config(CONFIG)).chains(chains).run()
    path = os.environ.get("PARQUET_PATH", "./lake")
    if report.exit_code == 0 and not path.startswith("s3://"):
        for kind, rows, amount in totals(Path(path)):
            print(f"{kind}: {rows} rows, {amount} cents")
    return report.exit_code


if __name__ == "__main__":
    raise SystemExit(main())
