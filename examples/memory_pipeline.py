"""A complete spate pipeline with no infrastructure: memory source → chain → capture sinks.

Run it with ``python examples/memory_pipeline.py``. It reads generated order events from
an in-memory source with three partitions, decodes them as JSON, splits them into two
sinks, and prints records in/out and the committed watermarks. It exits with the exit
report's code: 0 when everything was delivered and committed.
"""

from __future__ import annotations

import json
import logging

from spate import Pipeline
from spate.testing import capture_sink, memory_source

PARTITIONS = 3
EVENTS_PER_PARTITION = 2_000


def events(partition: int) -> list[bytes]:
    out = []
    for i in range(EVENTS_PER_PARTITION):
        kind = "refund" if i % 10 == 0 else "payment"
        event = {"order": f"o-{partition}-{i}", "kind": kind, "cents": 100 + i % 900}
        out.append(json.dumps(event).encode())
    return out


class JsonDeserializer:
    """Decodes one JSON payload; ``payload.obj`` is the source's buffer, so decode the view."""

    many = False

    def deserialize(self, payload: memoryview) -> object:
        return json.loads(payload.tobytes())


def chains(ctx):  # type: ignore[no-untyped-def]
    payments, refunds = ctx.sink("payments"), ctx.sink("refunds")
    return (
        ctx.chain()
        .filter(lambda ev: ev["cents"] > 0)
        .split()
        .route(
            lambda ev, out: out.emit(
                refunds if ev["kind"] == "refund" else payments, (ev["order"], ev["cents"])
            )
        )
    )


def main() -> int:
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s %(message)s")
    source, handle = memory_source(
        {p: events(p) for p in range(PARTITIONS)}, stream="orders", batch_size=500
    )
    payments, payments_out = capture_sink("payments", max_rows=1000)
    refunds, refunds_out = capture_sink("refunds", max_rows=1000)
    pipeline = Pipeline(
        "memory-demo",
        source,
        {"payments": payments, "refunds": refunds},
        deserializer=JsonDeserializer(),
    ).chains(chains)
    report = pipeline.run()
    print(f"state: {report.state} ({report.reason})")
    print(f"records in: {report.records_in}")
    print(f"rows out: payments={len(payments_out.rows)} refunds={len(refunds_out.rows)}")
    for lane, offset in sorted(handle.committed.items()):
        print(f"committed {lane}: {offset}")
    return report.exit_code


if __name__ == "__main__":
    raise SystemExit(main())
