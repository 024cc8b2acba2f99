"""Helpers of the Kafka delivery tests: a pipeline process per ``spate run`` on a YAML file.

The pipeline is Kafka source → (no deserializer unless one is given, no chain) → the test
kit's fsynced file sink, so every message value lands as one JSON string line. Producers
write each key as its own value, so the file's lines are the delivered keys.

``Streaming.start(..., clickhouse=url, delivery=...)`` writes instead into a plain
``MergeTree`` table of its own on the ClickHouse HTTP front: the values are then
``{"k": key}``, decoded by the JSON deserializer, and the table's ``k`` column holds the
delivered keys (:class:`ClickHouseTable`).

A test that runs ``spate run`` on the real broker, whatever its sink, builds its
configuration here rather than writing the document out: :func:`kafka_source` (or
:func:`replay_source` for a kill-and-restart test) is the ``source:`` section,
:func:`pipeline_document` the whole document and :func:`write_document` writes it. A test
that writes its document as YAML text takes the ``source:`` section from
:func:`source_yaml`.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.support.delivery import DeliverySampler, PacedProducer, wait_until
from tests.support.kafka_groups import set_consumer_session
from tests.support.scale import current_scale, scaled
from tests.support.services import committed_offsets, create_topic, end_offsets, unique_name

SPATE = Path(sys.executable).parent / "spate"
PARTITIONS = 6


JSON_VALUES: dict[str, object] = {"json": {"framing": "single"}}
"""The ``deserializer:`` section of a pipeline whose Kafka values are one JSON object each."""

ROW_CHAIN = "tests.kafka._eo_row_chain:chains"
"""``spate run --chain`` of a chain passing every record on to the single sink: the run
takes the row path where it would take the columnar one (with the repository on
``PYTHONPATH``)."""


def kafka_source(
    bootstrap: str,
    topic: str,
    group: str,
    *,
    stop_at: str | None = "never",
    commit_interval: str | None = "200ms",
    consume_batch: int | None = None,
    session_timeout_ms: int | None = 6000,
    rebalance: str | None = None,
    statistics_interval: str | None = None,
    rdkafka: Mapping[str, object] | None = None,
) -> dict[str, object]:
    """The ``source:`` section of a test pipeline reading ``topic`` as ``group``.

    It commits every ``commit_interval`` and reads until ``stop_at`` (``"end"``,
    ``"never"``; ``None`` leaves either key out, to the source's default).
    ``consume_batch``, ``rebalance`` and ``statistics_interval`` are written only when
    given. ``session_timeout_ms`` sets ``session.timeout.ms`` with a
    heartbeat every 500 ms; ``None`` leaves the session to the broker (as ``rebalance:
    consumer`` must). ``rdkafka`` adds librdkafka settings after those; with none at all
    the ``rdkafka:`` key is left out."""
    kafka: dict[str, object] = {"brokers": bootstrap, "topic": topic, "group_id": group}
    if commit_interval is not None:
        kafka["commit_interval"] = commit_interval
    if stop_at is not None:
        kafka["stop_at"] = stop_at
    if consume_batch is not None:
        kafka["consume_batch"] = consume_batch
    if rebalance is not None:
        kafka["rebalance"] = rebalance
    if statistics_interval is not None:
        kafka["statistics_interval"] = statistics_interval
    settings: dict[str, object] = (
        {"session.timeout.ms": session_timeout_ms, "heartbeat.interval.ms": 500}
        if session_timeout_ms is not None
        else {}
    )
    settings.update(rdkafka or {})
    if settings:
        kafka["rdkafka"] = settings
    return {"kafka": kafka}


def source_yaml(bootstrap: str, topic: str, group: str, *, json_values: bool = False) -> str:
    """The YAML ``source:`` section of a test pipeline written as text: ``topic`` read as
    ``group`` to the end offsets; with ``json_values`` the ``deserializer:`` section of
    :data:`JSON_VALUES` follows. No trailing newline: the next section goes on the next
    line of the caller's text."""
    text = (
        "source:\n"
        "  kafka:\n"
        f'    brokers: "{bootstrap}"\n'
        f"    topic: {topic}\n"
        f"    group_id: {group}\n"
        "    stop_at: end"
    )
    if json_values:
        text += "\ndeserializer:\n  json: {framing: single}"
    return text


def replay_source(
    bootstrap: str, topic: str, group: str, *, first: bool, **options: Any
) -> dict[str, object]:
    """The source of a kill-and-restart test: the ``first`` run never sends a commit (an
    hour's interval) and never ends, so everything it wrote is replayed after its kill;
    the restart commits every 200 ms and ends at the end offsets. ``options`` are
    :func:`kafka_source`'s."""
    return kafka_source(
        bootstrap,
        topic,
        group,
        commit_interval="1h" if first else "200ms",
        stop_at="never" if first else "end",
        **options,
    )


def pipeline_document(
    name: str,
    source: Mapping[str, object],
    sink: Mapping[str, object] | None,
    *,
    delivery: str | None = None,
    drain_timeout: str | None = "15s",
    checkpoint: Mapping[str, object] | None = None,
    listen: str = "none",
    **sections: object,
) -> dict[str, object]:
    """A pipeline process's whole configuration, as :func:`write_document` writes it.

    ``name`` and, when given, ``delivery`` are the ``pipeline:`` section; the checkpoint
    runs every 200 ms with ``drain_timeout`` (``None`` leaves it to the default;
    ``checkpoint`` adds keys); the admin server
    listens on ``listen`` (none: several processes share the machine). ``sink`` is the
    ``sink:`` section (``None`` when ``sections`` has ``sinks:``); ``sections`` are the
    other top-level sections (``deserializer``, ``supervisor``, ...)."""
    document: dict[str, object] = {
        "pipeline": {"name": name, **({"delivery": delivery} if delivery is not None else {})},
        "checkpoint": {
            "interval": "200ms",
            **({"drain_timeout": drain_timeout} if drain_timeout is not None else {}),
            **(checkpoint or {}),
        },
        "admin": {"listen": listen},
        "source": dict(source),
    }
    if sink is not None:
        document["sink"] = dict(sink)
    document.update(sections)
    return document


def write_document(path: Path, document: Mapping[str, object]) -> Path:
    """Write a configuration document (JSON, which the YAML loader reads) to ``path``."""
    path.write_text(json.dumps(document))
    return path


def write_config(
    path: Path,
    *,
    bootstrap: str,
    topic: str,
    group: str,
    out: Path,
    bounded: bool,
    name: str = "kafka-e2e",
    deserializer: Mapping[str, object] | None = None,
    session_timeout_ms: int = 6000,
    rebalance: str = "eager",
    table: ClickHouseTable | None = None,
    delivery: str = "at_least_once",
) -> Path:
    """The pipeline's JSON config; ``deserializer`` (a ``deserializer:`` section) decodes
    the values before they reach the file sink. The 6 s session outlasts the seconds of
    latency some fault tests inject; a test that waits for sessions to expire and injects
    no latency may shorten it. Under ``rebalance: consumer`` the broker owns the session
    (``group.consumer.session.timeout.ms`` in scripts/kafka/server.properties.in, or the
    group's own, which ``Streaming.start`` sets to ``session_timeout_ms``).
    With ``table`` the pipeline writes into that ClickHouse table (under ``delivery``)."""
    extra: dict[str, object] = (
        {"deserializer": dict(deserializer)} if deserializer is not None else {}
    )
    sink: dict[str, object] = {"file": {"path": str(out), "max_rows": 500}}
    if table is not None:
        extra["deserializer"] = JSON_VALUES
        sink = table.sink()
    source = kafka_source(
        bootstrap,
        topic,
        group,
        stop_at="end" if bounded else "never",
        consume_batch=500,
        rebalance=rebalance,
        session_timeout_ms=session_timeout_ms if rebalance != "consumer" else None,
        rdkafka={"topic.metadata.refresh.interval.ms": 2000},
    )
    return write_document(path, pipeline_document(name, source, sink, delivery=delivery, **extra))


def start_pipeline(config: Path, log: Path) -> subprocess.Popen[bytes]:
    with log.open("ab") as handle:
        return subprocess.Popen(
            [str(SPATE), "run", str(config)],
            stdout=handle,
            stderr=subprocess.STDOUT,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )


def stop_pipeline(proc: subprocess.Popen[bytes], timeout: float = 60) -> int:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
    return proc.wait(timeout)


def read_keys(path: Path) -> list[bytes]:
    """Every complete line of the file sink, as the key bytes it holds (torn tail skipped)."""
    if not path.exists():
        return []
    keys: list[bytes] = []
    for line in path.read_bytes().split(b"\n"):
        if not line:
            continue
        try:
            keys.append(json.loads(line).encode())
        except ValueError:
            continue
    return keys


def assignments_logged(log: Path) -> int:
    """How many times the pipelines writing to ``log`` were assigned partitions."""
    return log.read_text(errors="replace").count("partitions assigned") if log.exists() else 0


def wait_running(log: Path, before: int, timeout: float = 120) -> None:
    """Wait until a pipeline started after ``before`` assignments got its partitions."""
    import time

    deadline = time.monotonic() + timeout
    while assignments_logged(log) <= before:
        if time.monotonic() > deadline:
            raise AssertionError(f"no pipeline got partitions within {timeout:.0f}s")
        time.sleep(0.1)


def revocations_logged(log: Path) -> int:
    return log.read_text(errors="replace").count("partitions revoked") if log.exists() else 0


def paced(bootstrap: str, topic: str, count: int, *, as_json: bool = False) -> PacedProducer:
    """Keyed records (value = key, or ``{"k": key}`` with ``as_json``) produced over ~30s
    at full scale, 15s at least."""
    create_topic(bootstrap, topic, PARTITIONS)
    records = (
        (b"k%d" % i, b"k%d" % i, b'{"k":"k%d"}' % i if as_json else b"k%d" % i)
        for i in range(count)
    )
    return PacedProducer(bootstrap, topic, records, count, seconds=30 * max(current_scale(), 0.5))


@dataclass(frozen=True)
class ClickHouseTable:
    """A plain ``MergeTree`` table ``(k String)`` on the ClickHouse HTTP front, with the
    deduplication window effectively-once needs (B88)."""

    url: str
    name: str

    @classmethod
    def create(cls, url: str, prefix: str) -> ClickHouseTable:
        table = cls(url, unique_name(prefix).replace("-", "_"))
        table._client().command(
            f"CREATE TABLE {table.name} (k String) ENGINE = MergeTree ORDER BY k "
            "SETTINGS non_replicated_deduplication_window = 1000"
        )
        return table

    def _client(self) -> Any:
        import clickhouse_connect

        host, port = self.url.removeprefix("http://").rsplit(":", 1)
        return clickhouse_connect.get_client(host=host, port=int(port))

    def sink(self) -> dict[str, object]:
        return {
            "clickhouse": {
                "table": self.name,
                "columns": ["k"],
                "shards": [{"replicas": [self.url]}],
                "batch": {"max_rows": 500, "linger": "200ms"},
                "inflight": {"max_per_shard": 2},
            }
        }

    def keys(self) -> list[bytes]:
        rows = self._client().query(f"SELECT k FROM {self.name}").result_rows
        return [row[0].encode() for row in rows]

    def counts(self) -> tuple[int, int]:
        """``(count(), uniqExact(k))``, raw: no ``FINAL``, no deduplication at read."""
        row = self._client().query(f"SELECT count(), uniqExact(k) FROM {self.name}")
        return int(row.result_rows[0][0]), int(row.result_rows[0][1])


@dataclass
class Streaming:
    """A paced producer, the pipeline config for one group (file sink, or a ClickHouse
    table under effectively-once), and a sampler."""

    bootstrap: str
    topic: str
    group: str
    count: int
    producer: PacedProducer
    out: Path
    config: Path
    sampler: DeliverySampler
    table: ClickHouseTable | None = None

    def keys(self) -> list[bytes]:
        """The keys the destination holds (with repeats)."""
        return read_keys(self.out) if self.table is None else self.table.keys()

    @classmethod
    def start(
        cls,
        bootstrap: str,
        tmp_path: Path,
        prefix: str,
        *,
        pipeline_bootstrap: str | None = None,
        session_timeout_ms: int = 6000,
        rebalance: str = "eager",
        clickhouse: str | None = None,
        delivery: str = "at_least_once",
    ) -> Streaming:
        """Start producing; the pipelines of ``config`` connect to ``pipeline_bootstrap``
        (a fault proxy, say) when given, else to ``bootstrap`` like everything else. With
        ``clickhouse`` (the front's URL) they write into a new table under ``delivery``."""
        topic, group = unique_name(prefix), unique_name("g")
        count = scaled(100_000, minimum=6_000)
        table = ClickHouseTable.create(clickhouse, prefix) if clickhouse else None
        if rebalance == "consumer":  # the broker owns the session: set the group's own
            set_consumer_session(bootstrap, group, max(session_timeout_ms, 3000))
        producer = paced(bootstrap, topic, count, as_json=table is not None)
        out = tmp_path / "out.jsonl"
        config = write_config(
            tmp_path / "c.json",
            bootstrap=pipeline_bootstrap or bootstrap,
            topic=topic,
            group=group,
            out=out,
            bounded=False,
            session_timeout_ms=session_timeout_ms,
            rebalance=rebalance,
            table=table,
            delivery=delivery,
        )
        keys = (lambda: read_keys(out)) if table is None else table.keys
        sampler = DeliverySampler(bootstrap, group, topic, producer.positions, keys)
        sampler.start(every=0.3)
        producer.start()
        return cls(bootstrap, topic, group, count, producer, out, config, sampler, table)

    def finish(self) -> dict[bytes, tuple[int, int]]:
        """Wait for every key in the file and the final commits; return the positions."""
        positions = self.producer.finish()
        wait_until(lambda: set(self.keys()) >= set(positions), 240, "every key")
        ends = end_offsets(self.bootstrap, self.topic)
        wait_until(
            lambda: committed_offsets(self.bootstrap, self.group, self.topic) == ends,
            60,
            "final commits",
        )
        return positions

    def check_sampler(self) -> None:
        self.sampler.stop()
        self.sampler.sample()
        assert len(self.sampler.samples) > 5
        assert not self.sampler.violations(), self.sampler.violations()[:3]
