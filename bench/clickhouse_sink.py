"""The ClickHouse sink against a hand-written clickhouse-connect loop.

Measured by the performance rules in docs/development.md.

Both sides write the same storefront rows (from ``spate-datagen``, flattened to one
table: kind, order id, customer, region, amount, time) to the same destination in
batches of the same size:

* framework: the ``clickhouse`` sink as a pipeline builds it (the shared sink pool with
  its worker threads, per-column checks of each source batch, one Native INSERT per
  sealed batch with its dedup token), fed as the chain feeds it: one
  ``prepare_rows``/``offer_rows`` per source batch of 1,000 rows with its ack, then
  flushed;
* baseline: the loop a user writes by hand — rows arrive one at a time, each value is
  appended to its column list, and every ``BATCH`` rows
  ``client.insert(table, columns, column_names=..., column_oriented=True)`` runs (no value
  checks, no dedup token, no retries, one insert at a time).

Runs are interleaved, each side at least 3 times after a warm-up; each run empties the
table first and counts the rows after (both sides alike; the framework's run also builds,
starts and closes its sink). The script prints each side's median, ``ratio:`` (framework
throughput / baseline throughput) and the peak RSS. The destination is a ClickHouse HTTP
server: by default the repository's test front over chDB, started for the run in a child
process, or the URL in ``SPATE_BENCH_CLICKHOUSE_URL`` (an ``http://`` server, or
``chdb://<dir>`` for the engine embedded in this process, where the engine's own work
shares the GIL and the cores with both sides). Size with ``SPATE_BENCH_RECORDS`` (default
1,000,000), ``SPATE_BENCH_BATCH`` (default 100,000) and ``SPATE_BENCH_RUNS`` (default 3)::

    .venv/bin/python bench/clickhouse_sink.py
"""

from __future__ import annotations

import datetime as dt
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import clickhouse_connect
from spate._clock import SystemClock
from spate.checkpoint._ack import AckToken
from spate.config import decode
from spate.flow._budget import InflightBudget
from spate.metrics import Meter
from spate.plugins import BuildContext
from spate.records import Lane
from spate.sink import Offer
from spate_clickhouse import ClickHouseSinkConfig, ClickHouseSinkFactory
from spate_datagen import storefront_events

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _harness import compare, env_int

TABLE = "bench_storefront"
COLUMNS = ["kind", "order_id", "customer_id", "region", "amount_cents", "at"]
DDL = (
    f"CREATE TABLE IF NOT EXISTS {TABLE} (kind LowCardinality(String), order_id Int64, "
    "customer_id Int32, region String, amount_cents Int64, at DateTime64(3)) "
    "ENGINE = MergeTree ORDER BY (kind, order_id)"
)
SOURCE_BATCH = 1_000
_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)


def storefront_rows(count: int) -> list[tuple[Any, ...]]:
    """One row per event, in the written form both sides send."""
    rows: list[tuple[Any, ...]] = []
    for event in storefront_events(count, seed=7):
        record = event.record
        if event.kind == "OrderPlaced":
            lines: Any = record["lines"]
            amount = sum(int(line["qty"]) * int(line["unit_cents"]) for line in lines)
            at = _EPOCH + dt.timedelta(milliseconds=int(record["placed_at"]))  # type: ignore[call-overload]
            row = (event.kind, event.order_id, record["customer_id"], record["region"], amount, at)
        else:
            at = _EPOCH + dt.timedelta(milliseconds=event.order_id * 1_000)
            row = (event.kind, event.order_id, 0, "", record["amount_cents"], at)
        rows.append(row)
    return rows


def main() -> None:
    count = env_int("SPATE_BENCH_RECORDS", 1_000_000)
    batch = env_int("SPATE_BENCH_BATCH", 100_000)
    url = os.environ.get("SPATE_BENCH_CLICKHOUSE_URL", "")
    workdir = tempfile.mkdtemp(prefix="spate-bench-ch-")
    front = None
    if not url:
        # A ClickHouse HTTP server of its own: the test front over chDB, in a child process.
        sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
        from tests.support.chfront_fixtures import ChFront

        front = ChFront(Path(workdir) / "front").start()
        url = front.url
    if url.startswith("chdb://"):
        client = clickhouse_connect.get_client(interface="chdb", path=url[len("chdb://") :])
    else:
        from urllib.parse import urlsplit

        parts = urlsplit(url)
        client = clickhouse_connect.get_client(
            host=parts.hostname, port=parts.port or 8123, compress="lz4"
        )
    client.command(DDL)
    print(f"destination {url}; {count:,} rows in batches of {batch:,}")
    started = time.perf_counter()
    rows = storefront_rows(count)
    print(f"generated rows in {time.perf_counter() - started:.1f}s")

    config = decode(
        ClickHouseSinkConfig,
        {
            "table": TABLE,
            "columns": COLUMNS,
            "shards": [{"replicas": [url]}],
            "validate_schema": "full",
            "batch": {"max_rows": batch, "max_bytes": "1GiB", "linger": "10s"},
            "inflight": {"max_per_shard": 2},
        },
        "sinks.bench.clickhouse",
    )

    def framework() -> int:
        client.command(f"TRUNCATE TABLE {TABLE}")
        context = BuildContext(
            pipeline="bench",
            component="storefront",
            meter=Meter("bench"),
            clock=SystemClock(),
            run_nonce=f"run{time.monotonic_ns()}",
            budget=InflightBudget(1 << 40),
            io_threads=2,
        )
        sink = ClickHouseSinkFactory.build(config, context)
        sink.start()
        lane = Lane("bench", 0)
        prepare, offer = sink.prepare_rows, sink.offer_rows
        rejected = Offer.REJECTED
        keys: list[bytes | None] = [None] * SOURCE_BATCH
        for first in range(0, len(rows), SOURCE_BATCH):
            # the chain collects a source batch's rows (one list append per row, as the
            # baseline's appends) and hands them over in one call
            chunk: list[object] = []
            add = chunk.append
            for row in rows[first : first + SOURCE_BATCH]:
                add(row)
            ack = AckToken(lane, 0, first, first + len(chunk), len(chunk), lambda token: None)
            prepared, bad = prepare(chunk, keys[: len(chunk)], lane)
            if bad:
                raise RuntimeError(f"refused rows: {bad[:3]}")
            while offer(prepared, lane, ack) is rejected:
                time.sleep(0.0005)
            ack.release(True)
        if not sink.flush(time.monotonic() + 600):
            raise RuntimeError("the sink did not write everything")
        sink.close()
        _check(len(rows))
        return len(rows)

    def baseline() -> int:
        client.command(f"TRUNCATE TABLE {TABLE}")
        # rows arrive one at a time, as from a consumer: append each value to its column
        columns: list[list[Any]] = [[] for _ in COLUMNS]
        kinds, orders, customers, regions, amounts, ats = columns
        held = 0
        for kind, order_id, customer_id, region, amount, at in rows:
            kinds.append(kind)
            orders.append(order_id)
            customers.append(customer_id)
            regions.append(region)
            amounts.append(amount)
            ats.append(at)
            held += 1
            if held == batch:
                client.insert(TABLE, columns, column_names=COLUMNS, column_oriented=True)
                for column in columns:
                    column.clear()
                held = 0
        if held:
            client.insert(TABLE, columns, column_names=COLUMNS, column_oriented=True)
        _check(len(rows))
        return len(rows)

    def _check(expected: int) -> None:
        held = client.query(f"SELECT count() FROM {TABLE}").result_rows[0][0]
        if held != expected:
            raise RuntimeError(f"expected {expected} rows in {TABLE}, found {held}")

    try:
        compare(f"ClickHouse sink, {count:,} storefront rows -> {url}", framework, baseline)
    finally:
        if front is not None:
            front.stop()


if __name__ == "__main__":
    main()
