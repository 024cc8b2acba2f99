"""The ClickHouse sink following its table's health against the same sink with fixed blocks.

Measured by the performance rules in docs/development.md. Both sides are the
``clickhouse`` sink as a pipeline builds it, writing the same rows in source batches of
``SOURCE_BATCH`` with the same small ``batch.max_rows`` into a table that refuses inserts
early (``parts_to_throw_insert = 24``, ``parts_to_delay_insert = 12``) whose merges are
slowed: a thread stops them (``SYSTEM STOP MERGES``) for one second in every 1.5 s:

* framework: ``health: {follow_parts: true}`` — blocks grow and inserts are spaced while
  the table's parts are near the limit;
* baseline: fixed blocks, retried on ``TOO_MANY_PARTS`` with the pool's backoff.

Runs are interleaved, each side at least 5 times after a warm-up (``SPATE_BENCH_RUNS``);
each run empties the table first and checks every row is there after. The script prints
each side's median rows/s, ``ratio:`` (adaptive throughput / fixed throughput), and for
each side the median inserts per second and the ``TOO_MANY_PARTS`` answers per run. The
destination is the repository's test front over chDB started for the run, or
``SPATE_BENCH_CLICKHOUSE_URL``. Size with ``SPATE_BENCH_RECORDS`` (default 200,000) and
``SPATE_BENCH_BATCH`` (default 500)::

    .venv/bin/python bench/clickhouse_health.py
"""

from __future__ import annotations

import os
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import clickhouse_connect
from spate import SystemClock
from spate.checkpoint import AckToken
from spate.config import decode
from spate.flow import InflightBudget
from spate.metrics import Meter
from spate.plugins import BuildContext
from spate.records import Lane
from spate.sink import Offer
from spate_clickhouse import ClickHouseSinkConfig, ClickHouseSinkFactory

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _harness import compare, env_int

TABLE = "bench_health"
DDL = (
    f"CREATE TABLE IF NOT EXISTS {TABLE} (id UInt64, v String) ENGINE = MergeTree "
    "ORDER BY id SETTINGS parts_to_throw_insert = 24, parts_to_delay_insert = 12, "
    "max_delay_to_insert = 1"
)
SOURCE_BATCH = 1_000


def main() -> None:
    count = env_int("SPATE_BENCH_RECORDS", 200_000)
    batch = env_int("SPATE_BENCH_BATCH", 500)
    url = os.environ.get("SPATE_BENCH_CLICKHOUSE_URL", "")
    front = None
    if not url:
        sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
        from tests.support.chfront_fixtures import ChFront

        front = ChFront(Path(tempfile.mkdtemp(prefix="spate-bench-chh-")) / "front").start()
        url = front.url
    from urllib.parse import urlsplit

    parts = urlsplit(url)
    client = clickhouse_connect.get_client(host=parts.hostname, port=parts.port or 8123)
    client.command(DDL)
    rows = [(i, f"value-{i % 977}") for i in range(count)]
    print(f"destination {url}; {count:,} rows, batch.max_rows {batch:,}")
    stats: dict[str, list[tuple[float, float]]] = {"adaptive": [], "fixed": []}

    def slow_merges(stop: threading.Event) -> None:
        throttle = clickhouse_connect.get_client(host=parts.hostname, port=parts.port or 8123)
        while not stop.is_set():
            throttle.command(f"SYSTEM STOP MERGES {TABLE}")
            stop.wait(1.0)
            throttle.command(f"SYSTEM START MERGES {TABLE}")
            stop.wait(0.5)

    def run(side: str, health: dict[str, Any]) -> int:
        client.command(f"TRUNCATE TABLE {TABLE}")
        stop = threading.Event()
        throttle = threading.Thread(target=slow_merges, args=(stop,), daemon=True)
        throttle.start()
        config = decode(
            ClickHouseSinkConfig,
            {
                "table": TABLE,
                "columns": ["id", "v"],
                "shards": [{"replicas": [url]}],
                "batch": {"max_rows": batch, "linger": "10s"},
                "retry": {"initial": "50ms", "max": "1s"},
                "breaker": {"failure_threshold": 1_000_000},
                "health": health,
            },
            f"sinks.{side}.clickhouse",
        )
        meter = Meter(f"bench-{side}")
        context = BuildContext(
            pipeline=f"bench-{side}",
            component=side,
            meter=meter,
            clock=SystemClock(),
            run_nonce=f"run{time.monotonic_ns()}",
            budget=InflightBudget(1 << 40),
            io_threads=2,
        )
        sink = ClickHouseSinkFactory.build(config, context)
        sink.start()
        lane = Lane("bench", 0)
        started = time.perf_counter()
        for first in range(0, count, SOURCE_BATCH):
            chunk: list[object] = list(rows[first : first + SOURCE_BATCH])
            ack = AckToken(lane, 0, first, first + len(chunk), len(chunk), lambda token: None)
            prepared, bad = sink.prepare_rows(chunk, [None] * len(chunk), lane)
            if bad:
                raise RuntimeError(f"refused rows: {bad[:3]}")
            while sink.offer_rows(prepared, lane, ack) is Offer.REJECTED:
                time.sleep(0.0005)
            ack.release(True)
        if not sink.flush(time.monotonic() + 600):
            raise RuntimeError("the sink did not write everything")
        elapsed = time.perf_counter() - started
        stop.set()
        throttle.join()
        sink.close()
        held = client.query(f"SELECT count() FROM {TABLE}").result_rows[0][0]
        if held != count:
            raise RuntimeError(f"expected {count} rows in {TABLE}, found {held}")
        base = {"pipeline": f"bench-{side}", "component": side, "component_type": "sink"}
        inserts = sum(
            meter.registry.get_sample_value(
                "spate_sink_flushes_total", {**base, "shard": "0", "reason": reason}
            )
            or 0.0
            for reason in ("max_rows", "max_bytes", "linger", "tick", "drain")
        )
        refused = (
            meter.registry.get_sample_value(
                "spate_sink_errors_total", {**base, "shard": "0", "error_class": "retryable"}
            )
            or 0.0
        )
        stats[side].append((inserts / elapsed, refused))
        return count

    adaptive = {"follow_parts": True, "check_interval": "200ms"}
    try:
        compare(
            f"ClickHouse sink following its table's parts vs fixed blocks, {count:,} rows",
            lambda: run("adaptive", adaptive),
            lambda: run("fixed", {}),
            runs=max(5, env_int("SPATE_BENCH_RUNS", 5)),
        )
        for side, measured in stats.items():
            rates = [m[0] for m in measured]
            refused = [m[1] for m in measured]
            print(
                f"{side}: inserts/s median {statistics.median(rates):.1f} "
                f"(spread {min(rates):.1f}-{max(rates):.1f}); TOO_MANY_PARTS and other "
                f"retryable answers per run: median {statistics.median(refused):.0f} "
                f"(max {max(refused):.0f})"
            )
    finally:
        if front is not None:
            front.stop()


if __name__ == "__main__":
    main()
