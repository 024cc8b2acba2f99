"""The Parquet sink against a hand-written pyarrow ``write_table`` loop.

Both sides write the same rows (dicts of id, kind, region, amount, time) to local disk as
zstd Parquet files of ``SPATE_BENCH_BATCH`` rows with row groups of
``SPATE_BENCH_ROW_GROUP`` rows:

* framework: the ``parquet`` sink as a pipeline builds it (declared schema checked per
  row, one writer thread, content-addressed names, fsync of file and directory and a
  rename before the acks resolve), fed one row at a time by ``offer`` with one ack per
  source batch of 1,000 rows, then flushed;
* baseline: the loop a user writes by hand — rows arrive one at a time into a list, and
  every ``BATCH`` rows ``pa.Table.from_pylist(rows, schema)`` and ``pq.write_table(...)``
  with the same codec and row-group size run (no checks, no fsync, no rename).

Runs are interleaved, each side at least 3 times after a warm-up; each run writes to a
fresh directory and reads the row count back. Prints each side's median, ``ratio:``
(framework throughput / baseline throughput) and the peak RSS. Size with
``SPATE_BENCH_RECORDS`` (default 1,000,000), ``SPATE_BENCH_BATCH`` (default 100,000),
``SPATE_BENCH_ROW_GROUP`` (default 65,536) and ``SPATE_BENCH_RUNS`` (default 3)::

    .venv/bin/python bench/parquet_sink.py
"""

from __future__ import annotations

import datetime as dt
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
from spate.checkpoint._ack import AckToken
from spate.config import decode
from spate.records import Lane
from spate.sink import Offer
from spate.testing.conformance import conformance_context
from spate_parquet import ParquetSinkConfig, ParquetSinkFactory

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _harness import compare, env_int

SCHEMA = {
    "id": "int64",
    "kind": "string",
    "region": "string",
    "amount_cents": "int64",
    "at": "timestamp[ms, tz=UTC]",
}
SOURCE_BATCH = 1_000
KINDS = ("OrderPlaced", "PaymentCaptured", "RefundIssued")
REGIONS = ("eu-west", "us-east", "ap-south", "sa-east")


def make_rows(count: int) -> list[dict[str, Any]]:
    base = dt.datetime(2026, 12, 1, tzinfo=dt.UTC)
    return [
        {
            "id": i,
            "kind": KINDS[i % 3],
            "region": REGIONS[(i * 7) % 4],
            "amount_cents": (i * 7919) % 100_000,
            "at": base + dt.timedelta(milliseconds=i * 37),
        }
        for i in range(count)
    ]


def count_rows(root: Path) -> int:
    return sum(pq.ParquetFile(p).metadata.num_rows for p in root.rglob("*.parquet"))


def main() -> None:
    count = env_int("SPATE_BENCH_RECORDS", 1_000_000)
    batch = env_int("SPATE_BENCH_BATCH", 100_000)
    row_group = env_int("SPATE_BENCH_ROW_GROUP", 65_536)
    workdir = Path(tempfile.mkdtemp(prefix="spate-bench-parquet-"))
    rows = make_rows(count)
    print(f"{count:,} rows, files of {batch:,} rows, row groups of {row_group:,}, zstd")
    arrow_schema = pa.schema(
        [
            ("id", pa.int64()),
            ("kind", pa.string()),
            ("region", pa.string()),
            ("amount_cents", pa.int64()),
            ("at", pa.timestamp("ms", tz="UTC")),
        ]
    )
    runs = {"n": 0}

    def fresh(side: str) -> Path:
        runs["n"] += 1
        path = workdir / f"{side}-{runs['n']}"
        path.mkdir()
        return path

    def framework() -> int:
        root = fresh("framework")
        config = decode(
            ParquetSinkConfig,
            {
                "path": str(root),
                "schema": SCHEMA,
                "max_records": batch,
                "max_bytes": "4GiB",
                "row_group_size": row_group,
                "compression": "zstd",
            },
            "sinks.bench.parquet",
        )
        sink = ParquetSinkFactory.build(config, conformance_context("bench"))
        sink.start()
        lane = Lane("bench", 0)
        offer = sink.offer
        for first in range(0, len(rows), SOURCE_BATCH):
            chunk = rows[first : first + SOURCE_BATCH]
            ack = AckToken(lane, 0, first, first + len(chunk), len(chunk), lambda token: None)
            for row in chunk:
                while offer(row, None, lane, ack) is Offer.REJECTED:
                    time.sleep(0.0005)
            ack.release(True)
        if not sink.flush(time.monotonic() + 600):
            raise RuntimeError("the sink did not write everything")
        sink.close()
        return _checked(root)

    def baseline() -> int:
        root = fresh("baseline")
        held: list[dict[str, Any]] = []
        n = 0
        for row in rows:
            held.append(row)
            if len(held) == batch:
                table = pa.Table.from_pylist(held, schema=arrow_schema)
                pq.write_table(
                    table, root / f"part-{n}.parquet", row_group_size=row_group, compression="zstd"
                )
                held = []
                n += 1
        if held:
            table = pa.Table.from_pylist(held, schema=arrow_schema)
            pq.write_table(
                table, root / f"part-{n}.parquet", row_group_size=row_group, compression="zstd"
            )
        return _checked(root)

    def _checked(root: Path) -> int:
        held = count_rows(root)
        if held != len(rows):
            raise RuntimeError(f"expected {len(rows)} rows under {root}, found {held}")
        shutil.rmtree(root)
        return held

    try:
        compare(f"Parquet sink, {count:,} rows -> local disk", framework, baseline)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
