"""The Kafka source's commits on the real broker when the broker goes away (B35, B36).

The source is driven directly (no runtime), so the test decides what is handed over
for commit and when the broker dies.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Collection

import pytest
from spate.config import decode
from spate.metrics import Meter
from spate.records import Lane
from spate_kafka import KafkaSource, KafkaSourceConfig

from tests.support.services import (
    SESSION_TIMEOUT_MS,
    create_topic,
    kill_kafka,
    produce_keyed,
    start_kafka,
    unique_name,
)

pytestmark = pytest.mark.integration


class _Events:
    """SourceEvents that only records revocations (the test plays the runtime)."""

    def __init__(self) -> None:
        self.revoked_lanes: list[Lane] = []

    def assigned(self, lanes: Collection[Lane]) -> None:
        pass

    def revoked(self, lanes: Collection[Lane]) -> None:
        self.revoked_lanes.extend(lanes)

    def drained(self) -> None:
        pass


def _rejected(meter: Meter) -> float:
    value = meter.registry.get_sample_value(
        "spate_checkpoint_commits_total",
        {
            "pipeline": meter.pipeline,
            "component": "source",
            "component_type": "kafka",
            "outcome": "rejected",
        },
    )
    return value or 0.0


@pytest.mark.e2e
def test_b35_async_commit_lost_in_a_broker_crash_is_counted_and_logged(
    kafka_bootstrap: str, caplog: pytest.LogCaptureFixture
) -> None:
    """B35: an asynchronous commit sent while the broker is down fails once the member's
    session expires (``_WAIT_COORD``). The failure is counted as ``rejected`` and logged
    instead of passing for a commit that happened."""
    topic, group = unique_name("rejected-commit"), unique_name("g")
    create_topic(kafka_bootstrap, topic, 2)
    produce_keyed(kafka_bootstrap, topic, 200)
    meter = Meter(unique_name("rejected-commit"))
    config = decode(
        KafkaSourceConfig,
        {
            "brokers": kafka_bootstrap,
            "topic": topic,
            "group_id": group,
            "commit_interval": "100ms",
            "statistics_interval": "0ms",
            "rdkafka": {"session.timeout.ms": SESSION_TIMEOUT_MS, "heartbeat.interval.ms": 500},
        },
        "source.kafka",
    )
    source = KafkaSource(config, meter=meter)
    events = _Events()
    source.start(events)
    try:
        ends: dict[int, int] = {}
        deadline = time.monotonic() + 60
        while sum(ends.values()) < 200:
            assert time.monotonic() < deadline, f"read only {ends} of 200 records"
            for batch in source.poll(0.2):
                ends[batch.lane.partition] = batch.next_offset
        caplog.set_level(logging.WARNING, logger="spate_kafka._commits")
        kill_kafka()
        try:
            source.commit({Lane(topic, p): end for p, end in ends.items()}, sync=False)
            # The commit is sent on the next poll and waits for the coordinator until the
            # session expires; the member then revokes its partitions.
            deadline = time.monotonic() + 60
            while not events.revoked_lanes:
                assert time.monotonic() < deadline, "the session never expired"
                source.poll(0.2)
        finally:
            start_kafka()
        deadline = time.monotonic() + 120
        while _rejected(meter) < 1:
            assert time.monotonic() < deadline, "the failed commit was never reported"
            source.poll(0.2)
    finally:
        source.close()
    assert any("rejected" in r.getMessage() for r in caplog.records), caplog.text
