"""The spool tier's cost: Kafka → spool (fsync per batch) → null vs Kafka → null.

Both sides read the same topic of the real broker (``make services-up``; data produced
once, ``SPATE_BENCH_RECORDS`` messages of 100 bytes, default 1,000,000) with a fresh
consumer group, copy each payload to ``bytes`` and end in a sink that acknowledges at
every tick. The spool side puts a ``SpoolTier`` (``ack: spooled``, ``fsync: batch``,
``max_records`` 5,000) in front of that sink, in a fresh directory per run, so every
record is encoded, appended in its batch's frame, fsynced, handed on and its segment
deleted. The null sinks of both sides take a source batch's rows in one call
(``prepare_rows``/``offer_rows``, as the sink pool does; taking a batch costs them what
one ``offer`` costs), so the chain hands each source batch to the spool, or to the null
sink, in one call, and the spool hands each durable batch on in one call; with
``SPATE_BENCH_ROW_TERMINAL=1`` the null sinks take rows one by one. Runs
are interleaved (``SPATE_BENCH_RUNS``, default 5); the report adds fsyncs per second of
the spool runs. Run::

    make services-up && .venv/bin/python bench/spool.py

``--columnar`` (``spate[columnar]``): the columnar flagship (``bench/e2e.py``'s data,
``examples/kafka_avro_to_clickhouse_columnar.py``'s frame chain, chDB) with
``examples/kafka_spool_clickhouse.yaml`` — a spool (``ack: spooled``, ``fsync: batch``)
in front of each table, a fresh directory per run — against the same YAML with each
``tiered`` sink replaced by its terminal, interleaved, at least five runs each
(``SPATE_BENCH_RUNS``). The load average (``uptime``) is printed before and after: on a
shared machine the figures are as measured under that load.
"""

from __future__ import annotations

import os
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Sequence
from pathlib import Path

from prometheus_client import CollectorRegistry
from spate import AckToken, Lane, Offer, Pipeline
from spate._clock import SystemClock
from spate.config import decode
from spate.config.models import CheckpointConfig
from spate.metrics import Meter
from spate.sink import JsonlStore, SpoolConfig, SpoolTier
from spate.sink._contract import Sink
from spate_kafka import KafkaSource, KafkaSourceConfig

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _harness import compare, env_int, uptime
from kafka_source import BATCH, VALUE, NullSink, bootstrap, ensure_data

FSYNCS: list[tuple[float, float]] = []
"""(fsyncs, seconds) of each spool run."""


class BytesDeserializer:
    """Copies each payload to ``bytes`` (what a pipeline without a deserializer does)."""

    many = False
    takes_bytes = True

    def deserialize(self, payload: bytes | memoryview) -> object:
        return bytes(payload)


class BulkNullSink(NullSink):
    """The null sink with the batch offer: one source batch's rows in one call."""

    takes_rows = True

    def prepare_rows(
        self, rows: list[object], keys: Sequence[bytes | None], lane: Lane
    ) -> tuple[int, list[tuple[int, str]]]:
        return len(rows), []

    def offer_rows(self, prepared: object, lane: Lane, ack: AckToken) -> Offer:
        assert isinstance(prepared, int)
        accepted = self.offer(None, None, lane, ack)
        self.rows += prepared - 1
        return accepted


def run(brokers: str, topic: str, spooled: bool) -> int:
    config = decode(
        KafkaSourceConfig,
        {
            "brokers": brokers,
            "topic": topic,
            "group_id": f"bench-spool-{uuid.uuid4().hex[:8]}",
            "stop_at": "end",
            "consume_batch": BATCH,
            "commit_interval": "1s",
            "statistics_interval": "0ms",
        },
        "source.kafka",
    )
    bulk = os.environ.get("SPATE_BENCH_ROW_TERMINAL") != "1"
    null = BulkNullSink() if bulk else NullSink()
    meter = Meter("bench-spool", CollectorRegistry())
    sink: Sink = null
    with tempfile.TemporaryDirectory() as directory:
        if spooled:
            cfg = SpoolConfig(dir=directory, ack="spooled", max_records=BATCH)
            store = JsonlStore(directory, segment_bytes=cfg.segment_bytes)
            sink = SpoolTier("spool", cfg, null, store, meter=meter, clock=SystemClock())
        pipeline = Pipeline(
            "bench-spool",
            KafkaSource(config),
            {"sink": sink},
            deserializer=BytesDeserializer(),
            checkpoint=CheckpointConfig(interval=1.0),
            meter=meter,
            handle_signals=False,
        )
        started = time.perf_counter()
        report = pipeline.run()
        elapsed = time.perf_counter() - started
        if report.exit_code != 0:
            raise SystemExit(f"run failed: {report.reason}")
        if spooled:
            labels = {"pipeline": "bench-spool", "component": "spool", "component_type": "spool"}
            count = meter.registry.get_sample_value(
                "spate_spool_fsync_duration_seconds_count", labels
            )
            FSYNCS.append((count or 0.0, elapsed))
    return null.rows


def without_tiers(spooled: Path, into: Path) -> Path:
    """``spooled`` with each ``tiered`` sink replaced by its terminal (all else equal)."""
    import yaml

    config = yaml.safe_load(spooled.read_text())
    for name, sink in config["sinks"].items():
        if "tiered" in sink:
            config["sinks"][name] = sink["tiered"]["terminal"]
    path = into / "without-spool.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path


def columnar() -> int:
    """``--columnar``: the columnar flagship with the spool against it without."""
    import e2e
    from spate import load_config

    brokers = bootstrap()
    count = env_int("SPATE_BENCH_RECORDS", 1_000_000)
    topic = f"bench-storefront-{count}"
    e2e.ensure_data(brokers, topic, count)
    spooled_yaml = e2e.ROOT / "examples" / "kafka_spool_clickhouse.yaml"
    chains = e2e.load_example("kafka_avro_to_clickhouse_columnar").chains
    print(uptime())
    with tempfile.TemporaryDirectory(prefix="spate-bench-", ignore_cleanup_errors=True) as work:
        bench = e2e.Bench(brokers, topic, str(Path(work) / "chdb"))
        plain_yaml = without_tiers(spooled_yaml, Path(work))

        def side(path: Path) -> int:
            database = bench.fresh_database("spool" if path == spooled_yaml else "plain")
            with tempfile.TemporaryDirectory(dir=work) as spool_dir:
                os.environ.update(
                    {
                        "KAFKA_BROKERS": brokers,
                        "KAFKA_TOPIC": topic,
                        "KAFKA_GROUP": f"bench-spool-{uuid.uuid4().hex[:8]}",
                        "STOP_AT": "end",
                        "CLICKHOUSE_URL": bench.url,
                        "CLICKHOUSE_DATABASE": database,
                        "SPATE_ADMIN_LISTEN": "none",
                        "SPOOL_DIR": spool_dir,
                        "SPOOL_ACK": "spooled",
                    }
                )
                pipeline = Pipeline.from_config(load_config(path), handle_signals=False)
                report = pipeline.chains(chains).run()
            if report.exit_code != 0:
                raise SystemExit(f"run failed: {report.reason}")
            if bench.rows(database) != report.records_in:
                raise SystemExit(f"{database}: {bench.rows(database)} rows of {report.records_in}")
            return report.records_in

        compare(
            f"columnar flagship with a spool in front of each table vs without (chDB): "
            f"{count:,} storefront events",
            lambda: side(spooled_yaml),
            lambda: side(plain_yaml),
            runs=max(5, env_int("SPATE_BENCH_RUNS", 5)),
            setup=bench.setup,
        )
    print(uptime())
    return 0


def main() -> int:
    if "--columnar" in sys.argv:
        return columnar()
    brokers = bootstrap()
    count = env_int("SPATE_BENCH_RECORDS", 1_000_000)
    topic = f"bench-kafka-source-{count}"
    ensure_data(brokers, topic, count)
    terminal = "per row" if os.environ.get("SPATE_BENCH_ROW_TERMINAL") == "1" else "per batch"
    compare(
        f"Spool (fsync per batch of {BATCH}, handed on {terminal}): "
        f"{count:,} messages of {len(VALUE)} bytes",
        lambda: run(brokers, topic, True),
        lambda: run(brokers, topic, False),
        runs=env_int("SPATE_BENCH_RUNS", 5),
    )
    rates = [n / s for n, s in FSYNCS if s > 0]
    fsyncs = statistics.median(n for n, _ in FSYNCS)
    print(
        f"spool fsyncs per run: median {fsyncs:.0f}; fsyncs/s median {statistics.median(rates):.1f}"
    )
    print(f"fsyncs/s spread: {min(rates):.1f}-{max(rates):.1f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
