"""Bytes per core at real message sizes: 1.6 KB wide events, JSON and Avro, end to end.

Measured by the performance rules in docs/development.md.

Data: ``SPATE_BENCH_RECORDS`` (default 200,000) spate-datagen wide events
(``events: wide``, about 1.6 KB as JSON, about 1.05 KB as raw Avro: nested objects,
UUIDs, strings of varying length, integers, a timestamp, arrays), one topic per format
in a 4-partition topic of the real broker (``make services-up``;
``SPATE_BENCH_PARTITIONS`` sets another count, e.g. 64 or 512, to show the cost of many
partitions on one member), produced once with a fixed seed and reused. Destination:
embedded ClickHouse (chDB) in this process, or the server ``SPATE_BENCH_CLICKHOUSE_URL``
names (an ``http://`` one, e.g. the HTTP front of ``scripts/services.sh``), one ``wide``
table of the event's top-level fields, each run into its own fresh database, created
before the run and not timed.

Sides, run interleaved in one invocation (one warm-up each, then at least 5 rounds,
``SPATE_BENCH_RUNS`` raises it), on the same data:

* columnar: spate with no chain (columns map to the table's columns by name), which
  runs on the columnar path when ``spate[columnar]`` is installed;
* row: the same pipeline with an identity row chain (``ctx.chain()``);
* hand-written: ``consume(n)`` (``n``: the flagship's ``consume_batch``) → ``orjson.loads``
  or ``fastavro.schemaless_reader`` → column lists → clickhouse-connect
  ``insert(..., column_oriented=True)`` every 50,000 rows → synchronous commit;
* bare: a ``consume()`` loop that only touches ``value()`` (the ceiling of
  confluent-kafka in Python; it writes nothing).

Figures per side: records/s, payload MB/s (the sum of the payloads' lengths over the
median wall-clock time) and ``MB/s/core:`` (payload MB per CPU-second of this process,
all its threads: the pipeline's process, chDB in it included; the broker and an
out-of-process ClickHouse are not), with each side's runs; then ``ratio:`` and
``cpu ratio:`` of every side against the hand-written loop, with the spread of the
interleaved pairs. The machine and its load average are printed before and after.

    .venv/bin/python bench/bytes_per_core.py            # JSON and Avro
    .venv/bin/python bench/bytes_per_core.py avro       # one format
    SPATE_BENCH_RECORDS=2000 SPATE_BENCH_RUNS=5 .venv/bin/python bench/bytes_per_core.py

Its figures are read on a quiet machine only (docs/benchmarks.md).
"""

from __future__ import annotations

import io
import json
import os
import platform
import statistics
import sys
import tempfile
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import fastavro
import orjson
from spate import Pipeline, load_config
from spate_datagen import encode_avro, encode_json, wide_events, wide_schema_text
from spate_datagen._codec import Format
from spate_datagen.cli import produce_events

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from _harness import env_int, measure, peak_rss_mib, print_ratio, uptime
from e2e import (
    BATCH_ROWS,
    CONSUME_BATCH,
    PARTITIONS,
    bare_consume,
    commit_sync,
    group_consumer,
    load_example,
)
from kafka_source import bootstrap

from tests.support.columnar_run import watch_columnar

SEED = 38
FORMATS: tuple[Format, ...] = ("json", "avro")
COLUMNS = (
    "event_id",
    "seq",
    "occurred_at",
    "event_type",
    "status_code",
    "duration_ms",
    "bytes_sent",
    "url",
    "message",
    "tags",
)
TABLE = """
CREATE TABLE IF NOT EXISTS {db}.wide (
    event_id String,
    seq Int64,
    occurred_at DateTime64(3, 'UTC'),
    event_type LowCardinality(String),
    status_code Int32,
    duration_ms Int64,
    bytes_sent Int64,
    url String,
    message String,
    tags Array(String)
) ENGINE = MergeTree ORDER BY seq
"""

CONFIG = """
pipeline:
  name: bytes-per-core
  io_threads: 2
  gc_threshold: 200000
checkpoint:
  interval: 5s
  drain_timeout: 30s
backpressure:
  max_inflight_bytes: 256MiB
admin:
  listen: none
source:
  kafka:
    brokers: {brokers}
    topic: {topic}
    group_id: {group}
    stop_at: end
    commit_interval: 1s
    consume_batch: {consume_batch}
deserializer:
{deserializer}
sinks:
  wide:
    clickhouse:
      table: wide
      database: {database}
      columns: [{columns}]
      shards:
        - replicas: ["{url}"]
      batch:
        max_rows: {batch_rows}
        linger: 5s
"""


def deserializer_section(fmt: str) -> str:
    if fmt == "json":
        return "  json:\n    framing: single\n"
    schema = json.dumps(json.loads(wide_schema_text()))
    return f"  avro:\n    mode: raw\n    schema:\n      inline: '{schema}'\n"


def payload_bytes(fmt: Format, count: int) -> int:
    """The topic's payload bytes, from the same seeded events it was produced from."""
    encode = encode_json if fmt == "json" else encode_avro
    return sum(len(encode(event)) for event in wide_events(count, seed=SEED))


def partitions() -> int:
    """``SPATE_BENCH_PARTITIONS``: the topic's partitions (default 4), all on this one
    member, to show the cost of many partitions (4, 64, 512)."""
    return env_int("SPATE_BENCH_PARTITIONS", PARTITIONS)


def topic_name(fmt: str, count: int) -> str:
    """The benchmark's topic for a format, a size and :func:`partitions`."""
    n = partitions()
    return f"bench-wide-{fmt}-{count}" + ("" if n == PARTITIONS else f"-p{n}")


def ensure_data(brokers: str, topic: str, fmt: Format, count: int) -> None:
    from confluent_kafka.admin import AdminClient

    if topic in AdminClient({"bootstrap.servers": brokers}).list_topics(timeout=30).topics:
        return
    produce_events(
        brokers, topic, count, seed=SEED, fmt=fmt, events="wide", partitions=partitions()
    )


class Bench:
    """The four sides over one topic of one format."""

    def __init__(self, brokers: str, topic: str, fmt: Format, url: str) -> None:
        self.brokers = brokers
        self.topic = topic
        self.fmt = fmt
        self.url = url
        self.client = load_example().clickhouse_client(url)
        self.schema = fastavro.parse_schema(json.loads(wide_schema_text()))
        self.prepared: str | None = None

    def setup(self) -> None:
        """Before each run, untimed: a fresh database with the ``wide`` table."""
        database = f"bpc_{uuid.uuid4().hex[:8]}"
        self.client.command(f"CREATE DATABASE IF NOT EXISTS {database}")
        self.client.command(TABLE.format(db=database))
        self.prepared = database

    def stored(self, database: str) -> tuple[Any, ...]:
        """What a run stored, summed over every column: equal for sides that did the same
        work (a timestamp read in the wrong unit, a field dropped, a row lost, all show)."""
        result = self.client.query(
            "SELECT count(), sum(seq), sum(toUnixTimestamp64Milli(occurred_at)), "
            "sum(cityHash64(event_id, event_type, url, message)), sum(status_code), "
            "sum(duration_ms), sum(bytes_sent), sum(length(tags)) "
            f"FROM {database}.wide"
        )
        return tuple(result.result_rows[0])

    def _pipeline(self, chains: Callable[[Any], Any] | None) -> int:
        database = self.prepared or "default"
        with tempfile.NamedTemporaryFile("w", suffix=".yaml", delete=False) as file:
            file.write(
                CONFIG.format(
                    brokers=self.brokers,
                    topic=self.topic,
                    group=f"bench-bpc-{uuid.uuid4().hex[:8]}",
                    consume_batch=CONSUME_BATCH,
                    deserializer=deserializer_section(self.fmt),
                    database=database,
                    columns=", ".join(COLUMNS),
                    url=self.url,
                    batch_rows=BATCH_ROWS,
                )
            )
        try:
            pipeline = Pipeline.from_config(load_config(Path(file.name)), handle_signals=False)
        finally:
            os.unlink(file.name)
        if chains is not None:
            pipeline = pipeline.chains(chains)
        report = pipeline.run()
        if report.exit_code != 0:
            raise SystemExit(f"pipeline run failed: {report.reason}")
        return report.records_in

    def columnar(self) -> int:
        return self._on_path(True, None)

    def row(self) -> int:
        return self._on_path(False, lambda ctx: ctx.chain())

    def _on_path(self, columnar: bool, chains: Callable[[Any], Any] | None) -> int:
        """A pipeline run that fails unless it took the path its side is named after."""
        with watch_columnar() as seen:
            records = self._pipeline(chains)
        if seen.columnar != columnar:
            path = "columnar" if seen.columnar else "row"
            raise SystemExit(f"the {'columnar' if columnar else 'row'} side ran on the {path} path")
        return records

    def bare(self) -> int:
        return bare_consume(*group_consumer(self.brokers, self.topic, "bpc-bare", partitions()))

    def hand_written(self) -> int:
        database = self.prepared or "default"
        consumer, ends = group_consumer(self.brokers, self.topic, "bpc-hand", partitions())
        columns: list[list[Any]] = [[] for _ in COLUMNS]
        if self.fmt == "json":
            loads: Callable[[bytes], Any] = orjson.loads
        else:
            schema, reader = self.schema, fastavro.schemaless_reader

            def loads(value: bytes) -> Any:
                return reader(io.BytesIO(value), schema, None)

        done = {p for p, end in ends.items() if end == 0}
        records = 0

        def flush() -> None:
            nonlocal columns
            if columns[0]:
                self.client.insert(
                    f"{database}.wide", columns, column_names=COLUMNS, column_oriented=True
                )
            columns = [[] for _ in COLUMNS]
            commit_sync(consumer)

        while len(done) < len(ends):
            for msg in consumer.consume(CONSUME_BATCH, timeout=1.0):
                if msg.error() is not None:
                    continue
                record = loads(msg.value())
                for column, name in zip(columns, COLUMNS, strict=True):
                    column.append(record[name])
                records += 1
                if len(columns[0]) >= BATCH_ROWS:
                    flush()
                if msg.offset() + 1 >= ends[msg.partition()]:
                    done.add(msg.partition())
        flush()
        consumer.close()
        return records


def run_format(fmt: Format, brokers: str, count: int, url: str, where: str) -> None:
    topic = topic_name(fmt, count)
    ensure_data(brokers, topic, fmt, count)
    total = payload_bytes(fmt, count)
    bench = Bench(brokers, topic, fmt, url)
    sides = {
        "columnar": bench.columnar,
        "row": bench.row,
        "hand-written": bench.hand_written,
        "bare consume": bench.bare,
    }
    writing = {"columnar", "row", "hand-written"}
    databases: dict[str, list[str]] = {name: [] for name in writing}

    def tracked(name: str, side: Callable[[], int]) -> Callable[[], int]:
        def run() -> int:
            if name in databases and bench.prepared is not None:
                databases[name].append(bench.prepared)
            return side()

        return run

    runs = max(5, env_int("SPATE_BENCH_RUNS", 5))
    times, cpu, counts = measure(
        {name: tracked(name, side) for name, side in sides.items()}, runs=runs, setup=bench.setup
    )
    mean = total / count if count else 0.0
    print(
        f"== bytes per core, {fmt} ({where}): {count:,} wide events of {mean:,.0f} bytes on "
        f"average ({total / 1e6:,.1f} MB of payload), {partitions()} partitions, {runs} runs"
    )
    for name in sides:
        wall, spent = statistics.median(times[name]), statistics.median(cpu[name])
        rate = counts[name] / wall if wall > 0 else float("inf")
        mb = total / 1e6
        listed = ", ".join(f"{t:.3f}" for t in times[name])
        cpu_listed = ", ".join(f"{t:.2f}" for t in cpu[name])
        print(
            f"{name}: {counts[name]:,} records, median {wall:.3f}s ({rate:,.0f} records/s, "
            f"{mb / wall:,.1f} MB/s); runs {listed}"
        )
        print(f"{name} cpu: median {spent:.2f}s; runs {cpu_listed}")
        per_core = [mb / t for t in cpu[name] if t > 0]
        if per_core:
            print(
                f"{name} MB/s/core: {mb / spent:,.1f} (runs {min(per_core):,.1f}.."
                f"{max(per_core):,.1f})"
            )
    for name in sides:
        if name == "hand-written":
            continue
        print_ratio(f"{name} ratio", times["hand-written"], times[name])
        print_ratio(f"{name} cpu ratio", cpu["hand-written"], cpu[name])
    stored = {
        name: {bench.stored(database) for database in names} for name, names in databases.items()
    }
    reference = stored["hand-written"]
    for name, found in stored.items():
        if found != reference or next(iter(found))[0] != count:
            raise SystemExit(f"{name} stored {sorted(found)}, the hand-written loop {reference}")
    print(f"stored: every writing run the same {count:,} rows")
    print(f"peak RSS: {peak_rss_mib():.0f} MiB")


def main() -> int:
    brokers = bootstrap()
    count = env_int("SPATE_BENCH_RECORDS", 200_000)
    formats = [arg for arg in sys.argv[1:] if arg in FORMATS] or list(FORMATS)
    print(f"machine: {platform.machine()}, {os.cpu_count()} cores, Python {sys.version.split()[0]}")
    print(uptime())
    with tempfile.TemporaryDirectory(prefix="spate-bench-", ignore_cleanup_errors=True) as chdb_dir:
        url = os.environ.get("SPATE_BENCH_CLICKHOUSE_URL") or f"chdb://{chdb_dir}"
        where = "chDB" if url.startswith("chdb://") else url
        for fmt in formats:
            run_format(fmt, brokers, count, url, where)
    print(uptime())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
