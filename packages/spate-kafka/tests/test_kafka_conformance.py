"""spate-kafka passes spate's source and sink conformance suites on the mock cluster.

Source (bounded with ``stop_at: end``): every message once per partition in offset order,
then ``drained()`` once; positions never pass what was handed out; no commit of its own
(auto commit and offset store are off); a reopened consumer of the same group resumes
exactly at a synchronous commit (B1); pause holds a partition (B7).

Sink: delivered acks mean messages in the topic (B2); teardown fails what is held (B4);
a retried batch is produced again — Kafka has no dedup token, so at least once (B9);
oversized or mistyped rows are refused on append (B28); a frame of ``key`` and ``value``
columns is taken whole, its oversized or null-valued rows refused by position (B172).
Delivery under broker failures is proven on the real broker (tests/kafka); the mock
cluster only stands in for it here.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, TopicPartition
from spate.config import decode
from spate.sink import SinkConnector
from spate.source import Source
from spate.testing.conformance import SinkConformance, SourceConformance
from spate_kafka import (
    KafkaSinkConfig,
    KafkaSinkFactory,
    KafkaSource,
    KafkaSourceConfig,
    KafkaSourceFactory,
)
from spate_kafka._sink import KafkaSinkConnector

from .conftest import MockCluster

FAST = {"session.timeout.ms": 6000, "topic.metadata.refresh.interval.ms": 1000}


class TestKafkaSourceConformance(SourceConformance):
    factory = KafkaSourceFactory
    tag = "kafka"
    poll_timeout = 0.2
    patience = 30.0

    @pytest.fixture(autouse=True)
    def _cluster(self, mock_cluster: MockCluster) -> None:
        self.cluster = mock_cluster

    def config(self) -> Mapping[str, object]:
        return {"brokers": "localhost:9092", "topic": "t", "group_id": "g"}

    def invalid_configs(self) -> Sequence[tuple[Mapping[str, object], str]]:
        base = dict(self.config())
        return [
            ({**base, "topic": " "}, "topic"),
            ({**base, "rdkafka": {"enable.auto.commit": True}}, "rdkafka.enable.auto.commit"),
            ({**base, "commit_interval": "1ms"}, "commit_interval"),
        ]

    def produce(self, partitions: int, records: int) -> dict[int, list[bytes]]:
        self.topic = f"conf-{uuid.uuid4().hex[:8]}"
        self.group = f"g-{uuid.uuid4().hex[:8]}"
        produced: dict[int, list[bytes]] = {p: [] for p in range(partitions)}
        producer = self.cluster.producer
        for i in range(records * partitions):
            p = i % partitions
            value = f"{self.topic}-{p}-{i}".encode()
            producer.produce(self.topic, value=value, key=str(i).encode(), partition=p)
            produced[p].append(value)
        assert producer.flush(30) == 0
        return produced

    def open_source(self) -> Source:
        cfg = decode(
            KafkaSourceConfig,
            {
                "brokers": self.cluster.bootstrap,
                "topic": self.topic,
                "group_id": self.group,
                "stop_at": "end",
                "startup_timeout": "10s",
                "consume_batch": 7,
                "rdkafka": FAST,
            },
            "source.kafka",
        )
        return KafkaSource(cfg)


class TestKafkaSinkConformance(SinkConformance):
    factory = KafkaSinkFactory
    tag = "kafka"
    dedup_by_token = False
    rows_per_test = 20

    @pytest.fixture(autouse=True)
    def _cluster(self, mock_cluster: MockCluster) -> None:
        self.cluster = mock_cluster
        self.topic = f"conf-{uuid.uuid4().hex[:8]}"
        self.cluster.produce(self.topic, 1, partitions=1, prefix="seed")  # create the topic

    def config(self) -> Mapping[str, object]:
        return {
            "brokers": self.cluster.bootstrap,
            "topic": self.topic,
            "batch": {"max_rows": 1000, "linger": "1s"},
            "max_message_bytes": 1000,
        }

    def invalid_configs(self) -> Sequence[tuple[Mapping[str, object], str]]:
        base = dict(self.config())
        return [
            ({**base, "brokers": ""}, "brokers"),
            ({**base, "rdkafka": {"acks": "1"}}, "rdkafka.acks"),
            ({**base, "compression": "brotli"}, "compression"),
        ]

    def rows(self, count: int) -> list[object]:
        run = uuid.uuid4().hex[:6]
        return [(f"k{i}".encode(), f"{run}-{i}".encode()) for i in range(count)]

    def written(self) -> list[object]:
        """Every message in the topic, read by assignment (no group join) up to its end."""
        consumer = Consumer(
            {
                "bootstrap.servers": self.cluster.bootstrap,
                "group.id": "conformance-reader",
                "enable.partition.eof": True,
                "enable.auto.commit": False,
            }
        )
        out: list[object] = []
        try:
            metadata = consumer.list_topics(self.topic, timeout=10).topics[self.topic]
            consumer.assign(
                [TopicPartition(self.topic, p, OFFSET_BEGINNING) for p in metadata.partitions]
            )
            at_end: set[int] = set()
            for _ in range(200):
                for message in consumer.consume(1000, timeout=0.1):
                    error = message.error()
                    if error is None and message.key() != b"seed0":
                        out.append((message.key(), message.value()))
                    elif error is not None and error.code() == KafkaError._PARTITION_EOF:
                        at_end.add(message.partition())
                if len(at_end) == len(metadata.partitions):
                    break
        finally:
            consumer.close()
        return out

    def bad_rows(self) -> Sequence[object]:
        return [(b"k", b"x" * 2000), (b"k", 42), ("only", "a", "triple"), None]

    def frame(self, rows: Sequence[object]) -> object:
        """Rows as a frame of ``key`` and ``value`` columns (B172)."""
        import polars as pl

        pairs = [row if isinstance(row, tuple) else (None, row) for row in rows]
        return pl.DataFrame(
            {
                "key": [k for k, _ in pairs],
                "value": [v for _, v in pairs],
                "__spate_row": list(range(len(pairs))),
            },
            schema={"key": pl.Binary, "value": pl.Binary, "__spate_row": pl.UInt32},
        )

    def bad_frame_rows(self) -> Sequence[object]:
        return [(b"k", b"x" * 2000), (b"k", None)]

    def open_connector(self) -> tuple[SinkConnector, str]:
        config = decode(KafkaSinkConfig, dict(self.config()), "sink.kafka")
        return KafkaSinkConnector(config), self.cluster.bootstrap
