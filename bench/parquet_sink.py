"""The Parquet sink against a hand-written pyarrow ``write_table`` loop.

Both sides write the same rows (dicts of id, kind, region, amount, time) to local disk as
zstd Parquet files of ``SPATE_BENCH_BATCH`` rows with row groups of
``SPATE_BENCH_ROW_GROUP`` rows:

* framework: the ``parquet`` sink as a pipeline builds it (declared schema, one writer
  thread, content-addressed names, fsync of file and directory and a rename before the
  acks resolve), fed as the row chain feeds a sink that takes a source batch's rows at
  once: ``prepare_rows`` (the schema check, per column) and ``offer_rows`` per source
  batch of 1,000 rows with its ack, then flushed; with ``--per-row``, one ``offer`` per
  row instead (the path every row goes through when the chain offers rows one by one);
* baseline: the loop a user writes by hand — rows arrive one at a time into a list, and
  every ``BATCH`` rows ``pa.Table.from_pylist(rows, schema)`` and ``pq.write_table(...)``
  with the same codec and row-group size run (no checks, no fsync, no rename).

Runs are interleaved, each side at least 3 times after a warm-up; each run writes to a
fresh directory and reads the row count back. Prints each side's median, ``ratio:``
(framework throughput / baseline throughput) and the peak RSS. Size with
``SPATE_BENCH_RECORDS`` (default 1,000,000), ``SPATE_BENCH_BATCH`` (default 100,000),
``SPATE_BENCH_ROW_GROUP`` (default 65,536) and ``SPATE_BENCH_RUNS`` (default 3)::

    .venv/bin/python bench/parquet_sink.py
    .venv/bin/python bench/parquet_sink.py --per-row

With ``--columnar`` (``spate[columnar]``) both sides start from the same raw Avro
payloads instead, as a Kafka → Parquet pipeline gets them:

* framework: the Avro deserializer's ``deserialize_batch`` per source batch of 1,000
  records (Arrow columns, no per-record Python objects), ``prepare_frame`` and
  ``offer_frame`` of the ``parquet`` sink, as the frame executor drives them;
* baseline: ``fastavro.schemaless_reader`` per payload into a list of dicts, then
  ``pa.Table.from_pylist`` and ``pq.write_table`` every ``BATCH`` rows, as above::

    .venv/bin/python bench/parquet_sink.py --columnar
"""

from __future__ import annotations

import datetime as dt
import json
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
from spate.sink._contract import REJECTED
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


AVRO_SCHEMA = {
    "type": "record",
    "name": "Event",
    "fields": [
        {"name": "id", "type": "long"},
        {"name": "kind", "type": "string"},
        {"name": "region", "type": "string"},
        {"name": "amount_cents", "type": "long"},
        {"name": "at", "type": {"type": "long", "logicalType": "timestamp-millis"}},
    ],
}


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

    columnar = "--columnar" in sys.argv[1:]
    per_row = "--per-row" in sys.argv[1:]
    payloads: list[bytes] = []
    if columnar:
        import io

        import fastavro
        from spate_avro import AvroConfig, AvroDeserializerFactory

        parsed = fastavro.parse_schema(AVRO_SCHEMA)
        for row in rows:
            out = io.BytesIO()
            fastavro.schemaless_writer(out, parsed, row)
            payloads.append(out.getvalue())
        avro_config = decode(
            AvroConfig, {"mode": "raw", "schema": {"inline": json.dumps(AVRO_SCHEMA)}}, "avro"
        )
        deser = AvroDeserializerFactory.build(avro_config, conformance_context("bench"))
        if getattr(deser, "columnar", None) is None:
            raise SystemExit("--columnar needs spate[columnar] (polars and jetliner)")
        views = [memoryview(p) for p in payloads]
        print("columnar: raw Avro payloads on both sides")
    elif per_row:
        print("per row: one offer per row")
    else:
        print("row batches: prepare_rows and offer_rows per source batch")

    def _sink(root: Path) -> Any:
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
        return sink

    def framework() -> int:
        root = fresh("framework")
        sink = _sink(root)
        lane = Lane("bench", 0)

        def refused(count: int) -> None:
            if count:
                raise RuntimeError(f"{count} rows refused")

        def by_frames(views: list[memoryview], ack: AckToken) -> None:
            frames, errors = deser.deserialize_batch(views)  # type: ignore[attr-defined]
            if errors:
                raise RuntimeError(f"{len(errors)} records did not decode")
            for _, df in frames:
                table, bad = sink.prepare_frame(df)
                refused(len(bad))
                while sink.offer_frame(table, None, lane, ack) is REJECTED:
                    time.sleep(0.0005)

        def by_batch(chunk: list[dict[str, Any]], ack: AckToken) -> None:
            prepared, bad = sink.prepare_rows(chunk, [None] * len(chunk), lane)
            refused(len(bad))
            while sink.offer_rows(prepared, lane, ack) is REJECTED:
                time.sleep(0.0005)

        def by_row(chunk: list[dict[str, Any]], ack: AckToken) -> None:
            offer = sink.offer
            for row in chunk:
                while offer(row, None, lane, ack) is REJECTED:
                    time.sleep(0.0005)

        feed: Any = by_frames if columnar else by_row if per_row else by_batch
        source: list[Any] = views if columnar else rows
        for first in range(0, len(source), SOURCE_BATCH):
            chunk = source[first : first + SOURCE_BATCH]
            ack = AckToken(lane, 0, first, first + len(chunk), len(chunk), lambda token: None)
            feed(chunk, ack)
            ack.release(True)
        if not sink.flush(time.monotonic() + 600):
            raise RuntimeError("the sink did not write everything")
        sink.close()
        return _checked(root)

    def baseline() -> int:
        root = fresh("baseline")
        held: list[dict[str, Any]] = []
        n = 0
        source: Any = rows
        if columnar:
            import io

            import fastavro

            reader = fastavro.schemaless_reader
            parsed_schema = fastavro.parse_schema(AVRO_SCHEMA)
            source = (reader(io.BytesIO(p), parsed_schema, None) for p in payloads)
        for row in source:
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
