"""The flagship end to end against the loop a user would write by hand.

Measured by the performance rules in docs/development.md.

Data: ``SPATE_BENCH_RECORDS`` (default 1,000,000) storefront events (raw Avro, the
flagship's union) in a 4-partition topic of the real broker (``make services-up``),
produced once and reused. Destination: embedded ClickHouse (chDB), the same engine for
both sides, each run into its own fresh tables, created before the run and not timed.

* framework: ``examples/kafka_avro_to_clickhouse.py`` as shipped — its YAML (bounded
  mode) and its chain — through ``Pipeline.from_config``;
* baseline: ``consume(n)`` (``n``: the flagship's ``consume_batch``) →
  ``fastavro.schemaless_reader`` → per-table column lists →
  ``client.insert(..., column_oriented=True)`` of every table once any table holds
  50,000 rows (the flagship's ``batch.max_rows``), then a synchronous commit.

* columnar (when ``spate[columnar]`` is installed): the same YAML with
  ``examples/kafka_avro_to_clickhouse_columnar.py``'s frame chain, against the same
  baseline (target: 3x) and against a bare ``consume()`` loop that only touches
  ``value()`` (the ceiling of confluent-kafka in Python; target: 0.5x). The bare loop
  keeps the interpreter's garbage-collector threshold (700) as a hand-written script
  does, while the pipeline raises its own (``pipeline.gc_threshold``);
  ``SPATE_BENCH_BARE_GC_THRESHOLD=200000`` gives the bare loop the flagship's, and
  ``--ceiling-only`` skips the comparison with the hand-written loop.

* ``--delivery effectively_once``: the flagship under ``pipeline.delivery:
  effectively_once`` against the same flagship at least once (the cost of the intents
  and per-partition blocks, docs/concepts/delivery.md), interleaved, at least five runs
  each (``SPATE_BENCH_RUNS``). With ``--columnar``: the columnar flagship under
  ``effectively_once`` against the hand-written loop (target: 3x).

Prints each side's median, ``ratio:`` and peak RSS. ``SPATE_BENCH_RSS=1`` also samples
the framework side's RSS while it runs; ``--rss-only`` runs the framework side once with
sampling and no baseline (to show memory stays flat on a long input, e.g. with
``SPATE_BENCH_RECORDS=5000000``). ``--rss-series`` runs the columnar flagship once and
prints its RSS every ``SPATE_BENCH_RSS_INTERVAL`` seconds (default 3) as a table, with
``backpressure.max_inflight_bytes`` (``SPATE_BENCH_RECORDS=5000000`` for the series in
docs/benchmarks.md). ``SPATE_BENCH_CLICKHOUSE_URL`` (an ``http://`` server, e.g. the HTTP
front of ``scripts/services.sh``) replaces chDB for both sides.
"""

from __future__ import annotations

import dataclasses
import gc
import importlib.util
import io
import json
import os
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import fastavro
import yaml
from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition
from spate import Pipeline, load_config
from spate_datagen import storefront_schema_text
from spate_datagen.cli import ensure_topic, produce_events
from spate_kafka import CONSUMER_DEFAULTS

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _harness import compare, env_int, peak_rss_mib
from kafka_source import bootstrap

ROOT = Path(__file__).resolve().parent.parent
PARTITIONS = 4
BATCH_ROWS = 50_000


def flagship_consume_batch() -> int:
    """The flagship's ``source.kafka.consume_batch``: the baseline and the bare loop take
    messages in the same ``consume()`` sizes as the framework."""
    text = (ROOT / "examples" / "kafka_avro_to_clickhouse.yaml").read_text()
    kafka = yaml.safe_load(text)["source"]["kafka"]
    return int(kafka.get("consume_batch", 5000))


CONSUME_BATCH = flagship_consume_batch()


def load_example(name: str = "kafka_avro_to_clickhouse") -> Any:
    sys.path.insert(0, str(ROOT / "examples"))
    path = ROOT / "examples" / f"{name}.py"
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def ensure_data(brokers: str, topic: str, count: int, partitions: int = PARTITIONS) -> None:
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": brokers})
    if topic in admin.list_topics(timeout=30).topics:
        return
    ensure_topic(brokers, topic, partitions)
    produce_events(brokers, topic, count, seed=11)


def group_consumer(
    brokers: str, topic: str, side: str, partitions: int = PARTITIONS
) -> tuple[Consumer, dict[int, int]]:
    """A consumer of a new group (auto commit off) subscribed to ``topic``, and the end
    offset of each of its ``partitions`` partitions (where a bounded run stops)."""
    consumer = Consumer(
        {
            **CONSUMER_DEFAULTS,
            "bootstrap.servers": brokers,
            "group.id": f"bench-{side}-{uuid.uuid4().hex[:8]}",
            "enable.auto.commit": False,
        }
    )
    ends = {
        p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=30)[1]
        for p in range(partitions)
    }
    consumer.subscribe([topic])
    return consumer, ends


def bare_consume(consumer: Consumer, ends: dict[int, int]) -> int:
    """The bare ``consume()`` loop up to ``ends``, touching only ``value()``; closes the
    consumer and returns the records read."""
    done = {p for p, end in ends.items() if end == 0}
    records = 0
    size = 0
    while len(done) < len(ends):
        for msg in consumer.consume(CONSUME_BATCH, timeout=1.0):
            if msg.error() is not None:
                continue
            size += len(msg.value())
            records += 1
            if msg.offset() + 1 >= ends[msg.partition()]:
                done.add(msg.partition())
    consumer.close()
    return records


def commit_sync(consumer: Consumer) -> None:
    """A synchronous commit of what was consumed; nothing new to commit is no error."""
    try:
        consumer.commit(asynchronous=False)
    except KafkaException as exc:
        if exc.args[0].code() != KafkaError._NO_OFFSET:
            raise


class Bench:
    def __init__(self, brokers: str, topic: str, chdb_dir: str) -> None:
        self.brokers = brokers
        self.topic = topic
        # SPATE_BENCH_CLICKHOUSE_URL: an http:// server (the HTTP front of
        # scripts/services.sh) instead of chDB in this process, for both sides.
        self.url = os.environ.get("SPATE_BENCH_CLICKHOUSE_URL") or f"chdb://{chdb_dir}"
        self.example = load_example()
        self.client = self.example.clickhouse_client(self.url)
        self.union = fastavro.parse_schema(json.loads(storefront_schema_text()))
        self.rss_samples: list[float] = []
        self.rss_times: list[float] = []
        self.rss_interval = 1.0
        self.prepared: str | None = None

    def fresh_database(self, prefix: str) -> str:
        """The database :meth:`setup` prepared for this run, else a new one."""
        database, self.prepared = self.prepared, None
        if database is None:
            database = f"{prefix}_{uuid.uuid4().hex[:8]}"
            self.example.create_tables(self.client, database)
        return database

    def setup(self) -> None:
        """Before each run, untimed: fresh tables for the side that writes (a running
        system has its tables; the bare loop writes nothing, so creating them inside
        the timed run charged only the writing sides)."""
        self.prepared = None
        self.prepared = self.fresh_database("run")

    def rows(self, database: str) -> int:
        return sum(
            int(self.client.command(f"SELECT count() FROM {database}.{t}"))
            for t in ("orders", "payments", "refunds")
        )

    def columnar(self) -> int:
        return self.framework(load_example("kafka_avro_to_clickhouse_columnar").chains)

    def bare(self) -> int:
        """A bare ``consume()`` loop touching only ``value()``: no decode, no insert.

        It keeps the interpreter's garbage-collector threshold, as a script written by
        hand does, unless ``SPATE_BENCH_BARE_GC_THRESHOLD`` gives it one (the pipeline's
        ``pipeline.gc_threshold``, say, to hold both sides to the same collector).
        """
        threshold = env_int("SPATE_BENCH_BARE_GC_THRESHOLD", 0)
        before = gc.get_threshold()
        if threshold:
            gc.set_threshold(threshold, before[1], before[2])
        try:
            return self._bare()
        finally:
            gc.set_threshold(*before)

    def _bare(self) -> int:
        return bare_consume(*group_consumer(self.brokers, self.topic, "bare"))

    def effectively_once(self) -> int:
        return self.framework(delivery="effectively_once")

    def columnar_effectively_once(self) -> int:
        return self.framework(
            load_example("kafka_avro_to_clickhouse_columnar").chains, delivery="effectively_once"
        )

    def framework(self, chains: Any = None, delivery: str = "at_least_once") -> int:
        database = self.fresh_database("fw")
        os.environ.update(
            {
                "KAFKA_BROKERS": self.brokers,
                "KAFKA_TOPIC": self.topic,
                "KAFKA_GROUP": f"bench-fw-{uuid.uuid4().hex[:8]}",
                "STOP_AT": "end",
                "CLICKHOUSE_URL": self.url,
                "CLICKHOUSE_DATABASE": database,
                "SPATE_ADMIN_LISTEN": "none",
            }
        )
        config = load_config(self.example.CONFIG)
        config = dataclasses.replace(
            config, pipeline=dataclasses.replace(config.pipeline, delivery=delivery)
        )
        pipeline = Pipeline.from_config(config, handle_signals=False)
        stop = threading.Event()
        if os.environ.get("SPATE_BENCH_RSS"):
            threading.Thread(target=self._sample_rss, args=(stop,), daemon=True).start()
        report = pipeline.chains(chains or self.example.chains).run()
        stop.set()
        if report.exit_code != 0:
            raise SystemExit(f"framework run failed: {report.reason}")
        return report.records_in

    def _sample_rss(self, stop: threading.Event) -> None:
        start = time.perf_counter()
        while not stop.wait(self.rss_interval):
            with open("/proc/self/statm") as statm:
                pages = int(statm.read().split()[1])
            self.rss_samples.append(pages * os.sysconf("SC_PAGE_SIZE") / 2**20)
            self.rss_times.append(time.perf_counter() - start)

    def baseline(self) -> int:
        database = self.fresh_database("base")
        consumer, ends = group_consumer(self.brokers, self.topic, "base")
        columns = {
            "orders": [
                "order_id",
                "customer_id",
                "region",
                "placed_at",
                "line_count",
                "total_cents",
            ],
            "payments": ["order_id", "amount_cents"],
            "refunds": ["order_id", "amount_cents", "reason"],
        }
        buffers: dict[str, list[list[Any]]] = {t: [[] for _ in c] for t, c in columns.items()}
        union = self.union
        reader = fastavro.schemaless_reader
        done = {p for p, end in ends.items() if end == 0}
        records = 0
        fields = 0

        def flush() -> None:
            for table, cols in buffers.items():
                if cols[0]:
                    self.client.insert(
                        f"{database}.{table}",
                        cols,
                        column_names=columns[table],
                        column_oriented=True,
                    )
            for table in buffers:
                buffers[table] = [[] for _ in columns[table]]
            commit_sync(consumer)

        while len(done) < PARTITIONS:
            for msg in consumer.consume(CONSUME_BATCH, timeout=1.0):
                if msg.error() is not None:
                    continue
                value, key = msg.value(), msg.key()
                partition, offset = msg.partition(), msg.offset()
                fields += len(key or b"") + msg.timestamp()[1] % 2
                name, record = reader(io.BytesIO(value), union, return_record_name=True)
                if name.endswith("OrderPlaced"):
                    lines = record["lines"]
                    row = (
                        record["order_id"],
                        record["customer_id"],
                        record["region"],
                        record["placed_at"],
                        len(lines),
                        sum(line["qty"] * line["unit_cents"] for line in lines),
                    )
                    target = buffers["orders"]
                elif name.endswith("PaymentCaptured"):
                    row = (record["order_id"], record["amount_cents"])
                    target = buffers["payments"]
                else:
                    row = (record["order_id"], record["amount_cents"], record["reason"])
                    target = buffers["refunds"]
                for column, item in zip(target, row, strict=True):
                    column.append(item)
                records += 1
                if len(target[0]) >= BATCH_ROWS:
                    flush()
                if offset + 1 >= ends[partition]:
                    done.add(partition)
        flush()
        consumer.close()
        return records


def report_rss(samples: list[float]) -> None:
    """RSS over the run: by tenths of the samples, to show whether it grows with input."""
    if not samples:
        return
    step = max(1, len(samples) // 10)
    tenths = ", ".join(f"{samples[i]:.0f}" for i in range(0, len(samples), step))
    print(f"framework RSS over time (MiB, every {step} s): {tenths}; max {max(samples):.0f}")


def rss_series(bench: Bench, count: int) -> None:
    """``--rss-series``: the columnar flagship once over the whole topic, RSS sampled every
    ``SPATE_BENCH_RSS_INTERVAL`` seconds (default 3), printed as a Markdown table."""
    os.environ["SPATE_BENCH_RSS"] = "1"
    bench.rss_interval = float(os.environ.get("SPATE_BENCH_RSS_INTERVAL") or 3)
    config = yaml.safe_load((ROOT / "examples" / "kafka_avro_to_clickhouse.yaml").read_text())
    budget = config["backpressure"]["max_inflight_bytes"]
    start, cpu = time.perf_counter(), time.process_time()
    records = bench.columnar()
    elapsed, cpu = time.perf_counter() - start, time.process_time() - cpu
    print(
        f"columnar flagship: {records:,} records in {elapsed:.1f}s ({records / elapsed:,.0f}/s, "
        f"cpu {cpu:.1f}s); backpressure.max_inflight_bytes {budget}"
    )
    print("| elapsed (s) | RSS (MiB) |")
    print("| --- | --- |")
    for at, mib in zip(bench.rss_times, bench.rss_samples, strict=True):
        print(f"| {at:.0f} | {mib:.0f} |")
    samples = bench.rss_samples
    if samples:
        half = samples[len(samples) // 2 :]
        print(
            f"RSS max {max(samples):.0f} MiB; second half of the run "
            f"{min(half):.0f} to {max(half):.0f} MiB"
        )


def _option(name: str) -> str | None:
    """The value after ``name`` on the command line (``--name value`` or ``--name=value``)."""
    for i, arg in enumerate(sys.argv):
        if arg == name and i + 1 < len(sys.argv):
            return sys.argv[i + 1]
        if arg.startswith(name + "="):
            return arg.split("=", 1)[1]
    return None


def main() -> int:
    brokers = bootstrap()
    count = env_int("SPATE_BENCH_RECORDS", 1_000_000)
    topic = f"bench-storefront-{count}"
    ensure_data(brokers, topic, count)
    # chDB may still be merging in the background when the run ends: tolerate it.
    with tempfile.TemporaryDirectory(prefix="spate-bench-", ignore_cleanup_errors=True) as chdb_dir:
        bench = Bench(brokers, topic, chdb_dir)
        if "--rss-series" in sys.argv:
            rss_series(bench, count)
            return 0
        if "--rss-only" in sys.argv:
            os.environ["SPATE_BENCH_RSS"] = "1"
            start = time.perf_counter()
            records = bench.columnar() if "--columnar" in sys.argv else bench.framework()
            elapsed = time.perf_counter() - start
            print(f"framework: {records:,} records in {elapsed:.1f}s ({records / elapsed:,.0f}/s)")
            report_rss(bench.rss_samples)
            return 0
        where = "chDB" if bench.url.startswith("chdb://") else bench.url
        delivery = _option("--delivery")
        if delivery == "effectively_once" and "--columnar" in sys.argv:
            compare(
                f"columnar flagship under effectively once vs hand-written loop ({where}): "
                f"{count:,} storefront events (target 3x)",
                bench.columnar_effectively_once,
                bench.baseline,
                runs=max(5, env_int("SPATE_BENCH_RUNS", 5)),
                setup=bench.setup,
            )
            print(f"peak RSS at exit: {peak_rss_mib():.0f} MiB")
            return 0
        if delivery == "effectively_once":
            compare(
                f"effectively once vs at least once (chDB): {count:,} storefront events",
                bench.effectively_once,
                bench.framework,
                runs=max(5, env_int("SPATE_BENCH_RUNS", 5)),
                setup=bench.setup,
            )
            print(f"peak RSS at exit: {peak_rss_mib():.0f} MiB")
            return 0
        if delivery not in (None, "at_least_once"):
            raise SystemExit(f"--delivery: at_least_once or effectively_once, got {delivery}")
        if "--columnar" in sys.argv:
            if "--ceiling-only" not in sys.argv:
                compare(
                    f"columnar flagship vs hand-written loop ({where}): {count:,} storefront "
                    "events",
                    bench.columnar,
                    bench.baseline,
                    setup=bench.setup,
                )
            bare_gc = env_int("SPATE_BENCH_BARE_GC_THRESHOLD", 0)
            compare(
                f"columnar flagship vs bare consume() loop ({where}): {count:,} storefront "
                "events (the ceiling of confluent-kafka in Python; target 0.5; the bare "
                f"loop's gc threshold {bare_gc or gc.get_threshold()[0]})",
                bench.columnar,
                bench.bare,
                label="ceiling ratio",
                setup=bench.setup,
            )
            print(f"peak RSS at exit: {peak_rss_mib():.0f} MiB")
            return 0
        compare(
            f"Kafka → Avro → ClickHouse (chDB): {count:,} storefront events",
            bench.framework,
            bench.baseline,
            setup=bench.setup,
        )
        report_rss(bench.rss_samples)
    print(f"peak RSS at exit: {peak_rss_mib():.0f} MiB")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
