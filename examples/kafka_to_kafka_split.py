"""Split one Kafka topic into two: payments and refunds, keyed by order id.

Reads JSON storefront events (``spate datagen --format json``), sends each payment to
the payments topic and each refund to the refunds topic as ``(key, value)`` rows, and
skips orders (counted as ``unrouted``). Offsets of the input topic are committed only
once both output topics acknowledged every message derived from them.

    KAFKA_BROKERS=localhost:9092 python examples/kafka_to_kafka_split.py
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import orjson
from spate import Pipeline, load_config

CONFIG = Path(__file__).resolve().with_suffix(".yaml")


def chains(ctx: Any) -> Any:
    payments, refunds = ctx.sink("payments"), ctx.sink("refunds")

    def route(event: dict[str, Any], out: Any) -> None:
        kind = event["kind"]
        if kind == "PaymentCaptured":
            out.emit(payments, (str(event["order_id"]), orjson.dumps(event)))
        elif kind == "RefundIssued":
            out.emit(refunds, (str(event["order_id"]), orjson.dumps(event)))

    return ctx.chain().split(unrouted="skip").route(route)


def main() -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    report = Pipeline.from_config(load_config(CONFIG)).chains(chains).run()
    return report.exit_code


if __name__ == "__main__":
    raise SystemExit(main())
