"""The Kafka source against a hand-written ``Consumer.consume()`` loop.

Measured by the performance rules in docs/development.md.

Data lives in the real broker (``make services-up``; the mock cluster drops old data):
``SPATE_BENCH_RECORDS`` (default 1,000,000) messages of 100 bytes in a 4-partition
topic, produced once and reused by later invocations. Each run reads the whole topic
with a fresh consumer group.

* framework: ``KafkaSource`` (bounded mode) in a ``Pipeline`` with no chain, into a sink
  that acknowledges every batch at once — the source, runtime and checkpointing cost.
  The deserializer hands each payload on as it is, the ``bytes`` the message holds
  (``takes_bytes``): the baseline does not copy or wrap payloads either;
* baseline: the loop a user would write: ``consume(5000)``, read value, key, partition,
  offset and timestamp of every message, stop at the end offsets seen at start, commit
  asynchronously once a second.

Both use the same librdkafka settings (spate's consumer defaults). Run::

    make services-up && .venv/bin/python bench/kafka_source.py
"""

from __future__ import annotations

import os
import sys
import time
import uuid
from pathlib import Path

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from spate import AckToken, Lane, Offer, Pipeline
from spate.config import decode
from spate.config.models import CheckpointConfig
from spate_kafka import CONSUMER_DEFAULTS, KafkaSource, KafkaSourceConfig

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _harness import compare, env_int

PARTITIONS = 4
BATCH = 5000
VALUE = b"x" * 100


# A module constant, as spate's own sinks return: on Python 3.11 each ``Offer.ACCEPTED`` is
# an enum attribute lookup (~70 ns per row) that the baseline does not pay.
_ACCEPTED = Offer.ACCEPTED


class ViewDeserializer:
    """Hands the payload on unchanged (no decode, no copy): the message's ``bytes``."""

    many = False
    takes_bytes = True

    def deserialize(self, payload: memoryview | bytes) -> object:
        return payload


class NullSink:
    """Accepts every row and reports each batch written at the next tick or flush."""

    name = "null"

    def __init__(self) -> None:
        self._held: list[AckToken] = []
        self._last: AckToken | None = None
        self.rows = 0

    def start(self) -> None:
        pass

    def offer(self, row: object, key: bytes | None, lane: Lane, ack: AckToken) -> Offer:
        if ack is not self._last:
            ack.retain(self)
            self._held.append(ack)
            self._last = ack
        self.rows += 1
        return _ACCEPTED

    def tick(self) -> None:
        held, self._held, self._last = self._held, [], None
        for ack in held:
            ack.release(True, holder=self)

    def flush(self, deadline: float) -> bool:
        self.tick()
        return True

    def abandon(self) -> int:
        held, self._held, self._last = self._held, [], None
        for ack in held:
            ack.release(False, holder=self)
        return 0

    def ready(self) -> bool:
        return True

    def close(self) -> None:
        self.abandon()


def bootstrap() -> str:
    env = os.environ.get("SPATE_KAFKA_BOOTSTRAP")
    if env:
        return env
    env_file = Path(__file__).resolve().parent.parent / ".services" / "env"
    if env_file.exists():
        for line in env_file.read_text().splitlines():
            if line.startswith("SPATE_KAFKA_BOOTSTRAP="):
                return line.split("=", 1)[1].strip()
    raise SystemExit("no Kafka broker: run `make services-up` or set SPATE_KAFKA_BOOTSTRAP")


def ensure_data(brokers: str, topic: str, count: int, partitions: int = PARTITIONS) -> None:
    admin = AdminClient({"bootstrap.servers": brokers})
    if topic in admin.list_topics(timeout=30).topics:
        return
    admin.create_topics([NewTopic(topic, num_partitions=partitions)])[topic].result(60)
    producer = Producer(
        {"bootstrap.servers": brokers, "linger.ms": 50, "batch.num.messages": 10_000}
    )
    for i in range(count):
        while True:
            try:
                producer.produce(topic, VALUE, b"%d" % i)
                break
            except BufferError:
                producer.poll(0.05)
    if producer.flush(300):
        raise SystemExit("could not produce the benchmark data")


def framework_run(brokers: str, topic: str) -> int:
    config = decode(
        KafkaSourceConfig,
        {
            "brokers": brokers,
            "topic": topic,
            "group_id": f"bench-fw-{uuid.uuid4().hex[:8]}",
            "stop_at": "end",
            "consume_batch": BATCH,
            "commit_interval": "1s",
            "statistics_interval": "0ms",
        },
        "source.kafka",
    )
    sink = NullSink()
    pipeline = Pipeline(
        "bench-kafka",
        KafkaSource(config),
        {"null": sink},
        deserializer=ViewDeserializer(),
        checkpoint=CheckpointConfig(interval=1.0),
        handle_signals=False,
    )
    report = pipeline.run()
    if report.exit_code != 0:
        raise SystemExit(f"framework run failed: {report.reason}")
    return sink.rows


def baseline_run(brokers: str, topic: str) -> int:
    consumer = Consumer(
        {
            **CONSUMER_DEFAULTS,
            "bootstrap.servers": brokers,
            "group.id": f"bench-base-{uuid.uuid4().hex[:8]}",
            "enable.auto.commit": False,
        }
    )
    ends = {}
    for p in range(PARTITIONS):
        _low, high = consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=30)
        ends[p] = high
    consumer.subscribe([topic])
    done: set[int] = {p for p, end in ends.items() if end == 0}
    records = 0
    fields = 0
    last_commit = time.monotonic()
    while len(done) < PARTITIONS:
        for msg in consumer.consume(BATCH, timeout=1.0):
            if msg.error() is not None:
                continue
            value, key = msg.value(), msg.key()
            partition, offset = msg.partition(), msg.offset()
            timestamp = msg.timestamp()[1]
            fields += len(value or b"") + len(key or b"") + timestamp % 2
            records += 1
            if offset + 1 >= ends[partition]:
                done.add(partition)
        if time.monotonic() - last_commit >= 1.0:
            consumer.commit(asynchronous=True)
            last_commit = time.monotonic()
    consumer.commit(asynchronous=False)
    consumer.close()
    return records


def main() -> int:
    brokers = bootstrap()
    count = env_int("SPATE_BENCH_RECORDS", 1_000_000)
    topic = f"bench-kafka-source-{count}"
    ensure_data(brokers, topic, count)
    compare(
        f"Kafka source: {count:,} messages of {len(VALUE)} bytes, {PARTITIONS} partitions",
        lambda: framework_run(brokers, topic),
        lambda: baseline_run(brokers, topic),
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
