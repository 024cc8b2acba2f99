"""Overhead of the fused operator chain against a hand-written loop.

Measured by the performance rules in docs/development.md.

Both sides take the same payload batches (memoryviews over JSON ``bytes``, as a Kafka
source hands them over) and do the same work per record: decode with the same
deserializer (``view.obj`` handed to orjson), the same ``map`` and ``filter`` functions,
and ``offer`` into a fresh test-kit capture sink, one ack token per source batch.

* framework: ``compile_chain(ctx.chain().map(f).filter(g).sink())`` → the generated loop;
* baseline: the loop a user would write by hand, calling the same functions on the same
  views and reading only what it needs (value and key).

Runs are interleaved, each side at least 3 times after a warm-up; the script prints each
side's median, ``ratio:`` (framework throughput / baseline throughput; 1.0 = no
overhead) and the peak RSS. Size with ``SPATE_BENCH_RECORDS`` (default 1,000,000) and
``SPATE_BENCH_RUNS`` (default 3)::

    .venv/bin/python bench/chain_overhead.py
"""

from __future__ import annotations

import gc
import json
import os
import resource
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

import orjson
from spate import AckToken, Lane
from spate.metrics import Meter
from spate.ops import ChainContext, compile_chain
from spate.records import PayloadBatch
from spate.sink import Offer
from spate.testing import capture_sink

BATCH = 1000
"""Records per source batch (what one ``consume(num_messages)`` call returns)."""
SINK_ROWS = 10_000
"""Rows per sealed capture-sink batch."""
DISTINCT = 100_000
"""Distinct records built; larger runs pass over the same batches again (less memory)."""

LANE = Lane("bench", 0)
KINDS = ("OrderPlaced", "PaymentCaptured", "OrderRefunded", "ItemShipped")


class OrjsonDeser:
    """A JSON deserializer as spate-json's would be: whole-object views go to orjson."""

    many = False

    def deserialize(self, payload: memoryview) -> object:
        return orjson.loads(payload.obj)  # type: ignore[arg-type]


def to_row(ev: dict[str, Any]) -> tuple[object, ...]:
    return (ev["id"], ev["kind"], ev["amount"], ev["customer"])


def wanted(row: tuple[object, ...]) -> bool:
    return row[1] != "OrderPlaced"


def make_batches(n: int) -> list[PayloadBatch]:
    """``n`` records in batches of :data:`BATCH`, cycling over :data:`DISTINCT` records."""
    distinct = _distinct_batches(min(n, DISTINCT))
    plan: list[PayloadBatch] = []
    while len(plan) * BATCH < n:
        plan.extend(distinct[: (n - len(plan) * BATCH + BATCH - 1) // BATCH])
    return plan


def _distinct_batches(n: int) -> list[PayloadBatch]:
    keys = [f"c-{i}".encode() for i in range(5000)]
    batches: list[PayloadBatch] = []
    for start in range(0, n, BATCH):
        stop = min(start + BATCH, n)
        # json, not orjson.dumps: orjson's output buffers keep far more memory than the
        # bytes they hold, which would swamp the peak RSS figure.
        raws = [
            json.dumps(
                {
                    "id": i,
                    "kind": KINDS[i % 4],
                    "amount": (i * 7919) % 100_000 / 100,
                    "customer": f"c-{i % 5000}",
                },
                separators=(",", ":"),
            ).encode()
            for i in range(start, stop)
        ]
        batches.append(
            PayloadBatch(
                LANE,
                list(range(start, stop)),
                [memoryview(r) for r in raws],
                [keys[i % 5000] for i in range(start, stop)],
                [1_700_000_000_000 + i for i in range(start, stop)],
                stop,
            )
        )
    return batches


def _ack(batch: PayloadBatch) -> AckToken:
    return AckToken(batch.lane, 0, 0, batch.next_offset, len(batch), _resolved)


def _resolved(token: AckToken) -> None:
    pass


def run_framework(batches: list[PayloadBatch]) -> tuple[float, int]:
    sink, script = capture_sink("sink", max_rows=SINK_ROWS)
    sink.start()
    chain = ChainContext(["sink"]).chain().map(to_row).filter(wanted).sink()
    processor = compile_chain(
        chain, deserializer=OrjsonDeser(), sinks={"sink": sink}, meter=Meter("bench"), pipeline="b"
    )
    gc.collect()
    started = time.perf_counter()
    for batch in batches:
        ack = _ack(batch)
        if processor.process(batch, ack) is not None:
            raise RuntimeError("the capture sink refused a row")
        ack.release()
    sink.flush(time.monotonic() + 60)
    elapsed = time.perf_counter() - started
    return elapsed, len(script.rows)


def run_baseline(batches: list[PayloadBatch]) -> tuple[float, int]:
    sink, script = capture_sink("sink", max_rows=SINK_ROWS)
    sink.start()
    deserialize = OrjsonDeser().deserialize
    offer = sink.offer
    accepted = Offer.ACCEPTED
    gc.collect()
    started = time.perf_counter()
    for batch in batches:
        ack = _ack(batch)
        lane = batch.lane
        keys = batch.keys
        for i, view in enumerate(batch.payloads):
            row = to_row(deserialize(view))  # type: ignore[arg-type]
            if not wanted(row):
                continue
            if offer(row, keys[i], lane, ack) is not accepted:
                raise RuntimeError("the capture sink refused a row")
        ack.release()
    sink.flush(time.monotonic() + 60)
    elapsed = time.perf_counter() - started
    return elapsed, len(script.rows)


def main() -> int:
    records = int(os.environ.get("SPATE_BENCH_RECORDS", "1000000"))
    runs = max(3, int(os.environ.get("SPATE_BENCH_RUNS", "3")))
    batches = make_batches(records)
    records = sum(len(b) for b in batches)
    warm = batches[: max(1, len(batches) // 10)]
    run_framework(warm)
    run_baseline(warm)
    sides: dict[str, Callable[[list[PayloadBatch]], tuple[float, int]]] = {
        "framework": run_framework,
        "baseline": run_baseline,
    }
    times: dict[str, list[float]] = {name: [] for name in sides}
    rows: dict[str, set[int]] = {name: set() for name in sides}
    for r in range(runs):
        order = list(sides) if r % 2 == 0 else list(reversed(sides))
        for name in order:
            elapsed, written = sides[name](batches)
            times[name].append(elapsed)
            rows[name].add(written)
    if rows["framework"] != rows["baseline"] or len(rows["framework"]) != 1:
        print(f"row counts differ: {rows}", file=sys.stderr)
        return 1
    medians = {name: statistics.median(ts) for name, ts in times.items()}
    print(f"records: {records} in batches of {BATCH}; rows written: {rows['baseline'].pop()}")
    for name in sides:
        rate = records / medians[name]
        runs_text = ", ".join(f"{t:.3f}" for t in times[name])
        print(f"{name}: median {medians[name]:.3f}s ({rate:,.0f} records/s); runs {runs_text}")
    print(f"ratio: {medians['baseline'] / medians['framework']:.2f}")
    peak_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    print(f"peak_rss_mib: {peak_kib / 1024:.0f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
