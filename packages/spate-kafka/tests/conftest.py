"""Fixtures for fast Kafka unit tests on librdkafka's in-process mock cluster.

The mock cluster is for unit tests of configuration and bookkeeping only; delivery,
rebalance and failure behaviour is proven on the real broker (tests/integration).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field

import pytest
from confluent_kafka import Producer
from spate.records import Lane
from spate_kafka.testing import MockKafkaCluster


@dataclass
class MockCluster:
    producer: Producer
    bootstrap: str

    def produce(self, topic: str, count: int, *, partitions: int = 4, prefix: str = "k") -> None:
        for i in range(count):
            self.producer.produce(
                topic,
                value=f"value-{i}".encode(),
                key=f"{prefix}{i}".encode(),
                partition=i % partitions,
            )
            if i % 10_000 == 0:
                self.producer.poll(0)
        remaining = self.producer.flush(30)
        assert remaining == 0, "mock cluster did not take every message"


@pytest.fixture
def mock_cluster() -> Iterator[MockCluster]:
    """A one-broker mock cluster whose groups form at once (no 3 s initial delay)."""
    with MockKafkaCluster() as cluster:
        mock = MockCluster(
            Producer({"bootstrap.servers": cluster.bootstrap, "linger.ms": 5}), cluster.bootstrap
        )
        yield mock
        mock.producer.flush(5)
        # The producer goes before the cluster, so it never retries a broker that is gone.
        del mock.producer


@pytest.fixture
def topic() -> str:
    return f"t-{uuid.uuid4().hex[:8]}"


@dataclass
class RecordingEvents:
    """A SourceEvents that records what the source told it (no runtime involved)."""

    assigned_lanes: list[list[Lane]] = field(default_factory=list)
    revoked_lanes: list[list[Lane]] = field(default_factory=list)
    lost_lanes: list[list[Lane]] = field(default_factory=list)
    drained_calls: int = 0
    undrained_calls: int = 0

    def assigned(self, lanes: object) -> None:
        self.assigned_lanes.append(sorted(lanes))  # type: ignore[call-overload]

    def revoked(self, lanes: object) -> None:
        self.revoked_lanes.append(sorted(lanes))  # type: ignore[call-overload]

    def lost(self, lanes: object) -> None:
        self.lost_lanes.append(sorted(lanes))  # type: ignore[call-overload]

    def drained(self) -> None:
        self.drained_calls += 1

    def undrained(self) -> None:
        self.undrained_calls += 1


@pytest.fixture
def events() -> RecordingEvents:
    return RecordingEvents()
