"""A tee on real services: Kafka → ``tee: [clickhouse, kafka]`` under an outage and kill -9.

The pipeline (``_tee_runner.py``, a process) reads a topic of the real broker and tees
every record into a ClickHouse table behind the HTTP front and into a second Kafka
topic, while a producer writes at a steady pace. The front is stopped mid-run and
production continues: the Kafka branch keeps taking rows that ClickHouse does not have,
and their offsets must not be committed (the worst status wins, B58). The pipeline is
killed with SIGKILL while the front is down, the front is started, the pipeline
restarted, and killed once more mid-stream.

Throughout, a sampler checks that committed offsets never pass what *both* branches
hold (B1, B58): ClickHouse (while the front is stopped, the table as read from its data
directory once it stopped — a last answer through the front would miss inserts that
landed between that read and the stop) and the output topic up to its high watermark.
At the end every record is in ClickHouse exactly once after ``FINAL`` and in the output
topic at least once.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from tests.support.chfront_fixtures import FrontFactory
from tests.support.delivery import DeliverySampler, PacedProducer, wait_for_growth, wait_until
from tests.support.scale import current_scale, scaled
from tests.support.services import (
    SESSION_TIMEOUT_MS,
    committed_offsets,
    committed_total,
    create_topic,
    end_offsets,
    unique_name,
)

pytestmark = [pytest.mark.integration, pytest.mark.e2e]

RUNNER = Path(__file__).resolve().parent / "_tee_runner.py"
ROOT = Path(__file__).resolve().parents[2]


class TopicContents:
    """Every value of a topic read so far; :meth:`read` catches up to the high watermarks.

    Thread-safe (the sampler and the test read it). A record the Kafka sink had
    acknowledged (``acks: all``) is below the high watermark, so what :meth:`read`
    returns holds everything the sink reported written before the call.
    """

    def __init__(self, bootstrap: str, topic: str) -> None:
        from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

        self.bootstrap, self.topic = bootstrap, topic
        self.values: set[bytes] = set()
        self.copies = 0
        self._next: dict[int, int] = {}
        self._lock = threading.Lock()
        self._consumer = Consumer(
            {
                "bootstrap.servers": bootstrap,
                "group.id": unique_name("tee-reader"),
                "enable.auto.commit": False,
                "log_level": 3,
            }
        )
        partitions = sorted(end_offsets(bootstrap, topic))
        self._consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in partitions])
        self._next = dict.fromkeys(partitions, 0)

    def read(self, timeout: float = 60.0) -> set[bytes]:
        ends = end_offsets(self.bootstrap, self.topic)
        with self._lock:
            deadline = time.monotonic() + timeout
            while any(self._next[p] < end for p, end in ends.items()):
                if time.monotonic() > deadline:
                    raise TimeoutError(f"{self.topic}: not read up to {ends} in {timeout}s")
                for msg in self._consumer.consume(num_messages=1000, timeout=0.5):
                    if msg.error() is not None:
                        continue  # partition EOF and the like
                    self.values.add(msg.value())
                    self.copies += 1
                    self._next[msg.partition()] = msg.offset() + 1
            return set(self.values)

    def close(self) -> None:
        with self._lock:
            self._consumer.close()


def config_text(
    bootstrap: str, topic: str, group: str, out_topic: str, front_url: str, database: str
) -> str:
    return f"""\
pipeline: {{name: {unique_name("tee-no-loss")}}}
checkpoint: {{interval: 500ms, drain_timeout: 60s}}
admin: {{listen: none}}
source:
  kafka:
    brokers: "{bootstrap}"
    topic: {topic}
    group_id: {group}
    stop_at: never
    commit_interval: 500ms
    rdkafka: {{session.timeout.ms: {SESSION_TIMEOUT_MS}}}
sink:
  tee:
    sinks:
      - clickhouse:
          table: events
          database: {database}
          columns: [id, payload]
          shards: [{{replicas: ["{front_url}"]}}]
          batch: {{max_rows: 5000, linger: 300ms}}
          retry: {{initial: 100ms, max: 1s}}
      - kafka:
          brokers: "{bootstrap}"
          topic: {out_topic}
          batch: {{max_rows: 5000, linger: 100ms}}
          retry: {{initial: 100ms, max: 1s}}
"""


READ_IDS = """
import sys

import chdb

rows = chdb.connect(sys.argv[1]).query(f"SELECT id FROM {sys.argv[2]}.events", "TabSeparated")
sys.stdout.buffer.write(rows.bytes())
"""


def ids_on_disk(data_dir: Path, database: str) -> set[bytes]:
    """The table's ids read from a stopped front's data directory (a process of its own:
    chDB opens one directory per process)."""
    result = subprocess.run(
        [sys.executable, "-c", READ_IDS, str(data_dir), database],
        capture_output=True,
        check=True,
        timeout=300,
    )
    return set(result.stdout.split())


def start(config: Path, log: Path) -> subprocess.Popen[bytes]:
    with log.open("ab") as out:
        return subprocess.Popen(
            [sys.executable, str(RUNNER), str(config)],
            stdout=out,
            stderr=subprocess.STDOUT,
            cwd=ROOT,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
        )


def test_b58_tee_to_clickhouse_and_kafka_survives_an_outage_and_kill_9_b1(
    kafka_bootstrap: str, chfront: FrontFactory, tmp_path: Path
) -> None:
    topic, out_topic = unique_name("tee-in"), unique_name("tee-out")
    group = unique_name("tee-g")
    create_topic(kafka_bootstrap, topic, 4)
    create_topic(kafka_bootstrap, out_topic, 3)
    count = scaled(100_000, minimum=20_000)
    front = chfront()
    client = front.client()
    database = unique_name("tee_db").replace("-", "_")
    client.command(f"CREATE DATABASE IF NOT EXISTS {database}")
    client.command(
        f"CREATE TABLE {database}.events (id String, payload String) "
        "ENGINE = ReplacingMergeTree ORDER BY id"
    )
    config = tmp_path / "tee.yaml"
    config.write_text(
        config_text(kafka_bootstrap, topic, group, out_topic, front.url, database),
        encoding="utf-8",
    )
    log = tmp_path / "pipeline.log"
    out = TopicContents(kafka_bootstrap, out_topic)
    outage: set[bytes] | None = None
    """The table's ids read from the stopped front's data directory (exact while down)."""
    outage_read = threading.Event()

    def in_clickhouse() -> set[bytes]:
        rows = front.client().query(f"SELECT id FROM {database}.events").result_rows
        return {row[0].encode() for row in rows}

    def clickhouse_view() -> set[bytes]:
        """What ClickHouse holds: read through the front, or while it is stopped what its
        data directory held once it stopped (nothing can reach it meanwhile)."""
        try:
            return in_clickhouse()
        except Exception:
            if front.running:
                raise
        if not outage_read.wait(300):
            raise AssertionError("the stopped front's data directory was not read")
        assert outage is not None
        return outage

    views: list[tuple[float, bool, int, int]] = []
    """(when, front running, ids in ClickHouse, values in the output topic) of each read."""

    def in_both() -> set[bytes]:
        held = clickhouse_view()
        written = out.read()
        views.append((time.monotonic(), front.running, len(held), len(written)))
        return held & written

    proc = start(config, log)

    def wait_for_progress(what: str) -> None:
        try:
            wait_for_growth(lambda: committed_total(kafka_bootstrap, group, topic), 180, what)
        except AssertionError as exc:
            tail = log.read_text()[-3000:]
            raise AssertionError(f"{exc}; exit code {proc.poll()}; log: {tail}") from None

    def wait_running(runs: int) -> None:
        """Until the ``runs``-th process logged that it runs (its signal handlers are set)."""
        wait_until(
            lambda: log.read_text().count("running (run nonce") >= runs or proc.poll() is not None,
            180,
            f"run {runs} of the pipeline",
        )
        assert proc.poll() is None, log.read_text()[-3000:]

    records = ((b"e-%07d" % i, None, b"e-%07d" % i) for i in range(count))
    producer = PacedProducer(
        kafka_bootstrap, topic, records, count, seconds=120 * max(current_scale(), 0.375)
    )
    sampler = DeliverySampler(kafka_bootstrap, group, topic, producer.positions, in_both)
    producer.start()
    sampler.start(every=0.5)
    code: int | None = None
    try:
        wait_running(1)
        wait_until(lambda: producer.produced >= count * 0.15, 300, "15% produced")
        wait_for_progress("a first commit")
        front.stop()
        outage = ids_on_disk(front.data_dir, database)
        outage_read.set()
        # The Kafka branch goes on taking rows ClickHouse cannot: one branch accepted
        # them, the other did not, so their source batches stay uncommitted (B58).
        wait_until(
            lambda: bool(out.read() - clickhouse_view()),
            180,
            "rows in the Kafka branch that ClickHouse does not hold",
        )
        wait_until(lambda: producer.produced >= count * 0.45, 300, "45% produced")
        assert proc.poll() is None, log.read_text()[-3000:]
        proc.send_signal(signal.SIGKILL)  # with ClickHouse down
        proc.wait(30)
        front.start()
        outage_read.clear()
        proc = start(config, log)
        wait_running(2)
        wait_for_progress("a commit after the restart")
        wait_until(lambda: producer.produced >= count * 0.7, 300, "70% produced")
        assert producer.is_alive(), "the second kill must come while records still arrive"
        proc.send_signal(signal.SIGKILL)  # mid-stream, both branches up
        proc.wait(30)
        proc = start(config, log)
        wait_running(3)
        producer.finish(600)
        expected = set(producer.positions)
        wait_until(lambda: in_clickhouse() >= expected, 600, "every record in ClickHouse")
        wait_until(lambda: out.read() >= expected, 600, "every record in the output topic")
        ends = end_offsets(kafka_bootstrap, topic)
        wait_until(
            lambda: committed_offsets(kafka_bootstrap, group, topic) == ends, 120, "final commit"
        )
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
        code = proc.wait(120)
        sampler.stop()
    try:
        assert code == 0, log.read_text()[-3000:]
        sampler.sample()
        assert len(sampler.samples) > 10
        violations = sampler.violations()
        if violations:  # what each read saw, for the diagnosis
            (tmp_path / "reads.txt").write_text("\n".join(map(repr, views)))
        assert not violations, [(v.committed, v.held, len(v.missing)) for v in violations[:3]]
        final = int(client.command(f"SELECT count() FROM {database}.events FINAL"))
        distinct = int(client.command(f"SELECT uniqExact(id) FROM {database}.events"))
        assert final == distinct == count, (final, distinct, count)
        assert in_clickhouse() == expected
        assert out.read() == expected  # at least once: every value, nothing else
        assert out.copies >= count
    finally:
        out.close()
