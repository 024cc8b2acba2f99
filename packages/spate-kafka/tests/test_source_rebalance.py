"""The group protocol setting (``source.kafka.rebalance``), incremental callbacks, lost
partitions, static membership and closing mid-rebalance (B175-B178, B400), on
librdkafka's mock cluster and in isolation. The storms and restarts run on the real
broker (tests/kafka)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import pytest
from confluent_kafka import TopicPartition
from spate.config import decode
from spate.errors import ConfigError
from spate.records import Lane
from spate_kafka import KafkaSource, KafkaSourceConfig
from spate_kafka._rebalance import broker_error, client_error, worker_instance_id

from .conftest import MockCluster, RecordingEvents
from .test_source_mock import make_source

BASE = {"brokers": "127.0.0.1:9092", "topic": "events", "group_id": "etl"}


def load(**extra: object) -> KafkaSourceConfig:
    return decode(KafkaSourceConfig, {**BASE, **extra}, "source.kafka")


def test_b176_each_protocol_sets_its_librdkafka_settings() -> None:
    """eager keeps librdkafka's eager assignors; cooperative picks cooperative-sticky;
    consumer turns on KIP-848 with the broker-side assignor and leaves the session and
    heartbeat to the broker."""
    assert "partition.assignment.strategy" not in load().consumer_settings()
    assert load().rebalance == "eager"
    coop = load(rebalance="cooperative").consumer_settings()
    assert coop["partition.assignment.strategy"] == "cooperative-sticky"
    consumer = load(rebalance="consumer", group_assignor="range").consumer_settings()
    assert consumer["group.protocol"] == "consumer"
    assert consumer["group.remote.assignor"] == "range"
    assert "session.timeout.ms" not in consumer
    assert "heartbeat.interval.ms" not in consumer


@pytest.mark.parametrize(
    ("extra", "path"),
    [
        ({"rebalance": "sticky"}, "source.kafka.rebalance"),
        ({"group_assignor": "range"}, "source.kafka.group_assignor"),
        ({"rdkafka": {"group.protocol": "consumer"}}, "source.kafka.rdkafka.group.protocol"),
        ({"rdkafka": {"group.instance.id": "a"}}, "source.kafka.rdkafka.group.instance.id"),
        (
            {"rdkafka": {"partition.assignment.strategy": "cooperative-sticky"}},
            "source.kafka.rdkafka.partition.assignment.strategy",
        ),
    ],
)
def test_b176_protocol_keys_are_refused_with_their_dotted_path(
    extra: dict[str, object], path: str
) -> None:
    with pytest.raises(ConfigError) as info:
        load(**extra)
    assert info.value.path == path


def test_b176_unsupported_client_or_broker_is_one_line_naming_the_key() -> None:
    """What the client or the broker cannot run is refused at start in one line that
    names ``source.kafka.rebalance``."""
    assert client_error("consumer", "2.16.0") is None
    assert client_error("cooperative", "1.6.0") is None
    too_old = client_error("consumer", "2.11.1")
    assert too_old is not None and too_old.startswith("source.kafka.rebalance: consumer")
    assert "2.12.0" in too_old and "2.11.1" in too_old and "\n" not in too_old
    assert broker_error("consumer", "classic,consumer") is None
    assert broker_error("cooperative", None) is None
    for served in ("classic", None):
        reason = broker_error("consumer", served)
        assert reason is not None and reason.startswith("source.kafka.rebalance: consumer")
        assert "\n" not in reason


def test_b178_static_member_id_carries_the_worker_index(monkeypatch: pytest.MonkeyPatch) -> None:
    """``instance_id`` becomes ``group.instance.id``; under ``--processes N`` every
    worker suffixes its index, so no two members share an id."""
    assert worker_instance_id("host-a", {}) == "host-a"
    assert worker_instance_id("host-a", {"SPATE_WORKER_INDEX": "2"}) == "host-a-2"
    monkeypatch.setenv("SPATE_WORKER_INDEX", "1")
    assert load(instance_id="host-a").consumer_settings()["group.instance.id"] == "host-a-1"
    monkeypatch.delenv("SPATE_WORKER_INDEX")
    assert load(instance_id="host-a").consumer_settings()["group.instance.id"] == "host-a"
    assert "group.instance.id" not in load().consumer_settings()


def _source(cluster: MockCluster, topic: str, group: str, rebalance: str) -> KafkaSource:
    return make_source(cluster, topic, group, rebalance=rebalance)


def _until(sources: list[KafkaSource], done: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + 120  # generous: the machine is shared
    while not done():
        assert time.monotonic() < deadline, what
        for source in sources:
            source.poll(0.05)


def test_b175_cooperative_revokes_only_the_partitions_that_move(
    mock_cluster: MockCluster, topic: str
) -> None:
    """A second member joins a cooperative group: the first gives up only the
    partitions the second takes, never the ones it keeps, and keeps reading them."""
    mock_cluster.produce(topic, 400)
    first_events, second_events = RecordingEvents(), RecordingEvents()
    first = _source(mock_cluster, topic, "g-coop", "cooperative")
    second = _source(mock_cluster, topic, "g-coop", "cooperative")
    first.start(first_events)
    try:
        _until([first], lambda: len(first.assigned_partitions) == 4, "first owns all four")
        second.start(second_events)
        try:
            _until(
                [first, second],
                lambda: (
                    len(first.assigned_partitions) == 2 and len(second.assigned_partitions) == 2
                ),
                "the partitions were not shared",
            )
            kept = first.assigned_partitions
            revoked = {lane.partition for lanes in first_events.revoked_lanes for lane in lanes}
            assert revoked and not revoked & kept
            assert revoked == set(second.assigned_partitions)
            # Each kept partition was assigned once: at the start, never again.
            assigned = [lane.partition for lanes in first_events.assigned_lanes for lane in lanes]
            assert all(assigned.count(p) == 1 for p in kept)
        finally:
            second.close()
        # The first takes everything back (closing mid-rebalance is B400's test).
        _until([first], lambda: len(first.assigned_partitions) == 4, "first took all four back")
    finally:
        first.close()


def _flat(calls: list[list[Lane]]) -> list[int]:
    return sorted(lane.partition for lanes in calls for lane in lanes)


def test_b400_close_during_a_cooperative_rebalance_returns_through_the_barrier(
    mock_cluster: MockCluster, topic: str
) -> None:
    """B400: a member closed while a cooperative rebalance is under way (a third member
    joining, a partition that moves revoked but not yet assigned again) returns, and
    every partition it was given leaves through the revoke barrier; the others end up
    owning all four."""
    mock_cluster.produce(topic, 400)
    events = [RecordingEvents() for _ in range(3)]
    members = [_source(mock_cluster, topic, "g-close", "cooperative") for _ in range(3)]
    first, second, third = members
    first.start(events[0])
    started = [first]
    try:
        _until([first], lambda: len(first.assigned_partitions) == 4, "first owns all four")
        second.start(events[1])
        started.append(second)
        _until(
            [first, second],
            lambda: len(first.assigned_partitions) == len(second.assigned_partitions) == 2,
            "the partitions were not shared",
        )
        revocations = len(events[0].revoked_lanes) + len(events[1].revoked_lanes)
        third.start(events[2])
        started.append(third)
        _until(
            [first, second, third],
            lambda: len(events[0].revoked_lanes) + len(events[1].revoked_lanes) > revocations,
            "a member gave up a partition for the third",
        )
        assert second.assigned_partitions, "the second member keeps a partition"
        closing = threading.Thread(target=second.close, daemon=True)
        closing.start()
        _until([first, third], lambda: not closing.is_alive(), "close() returned")
        started.remove(second)
        assert _flat(events[1].revoked_lanes) == _flat(events[1].assigned_lanes)
        assert events[1].lost_lanes == []
        _until(
            [first, third],
            lambda: first.assigned_partitions | third.assigned_partitions == {0, 1, 2, 3},
            "the other members took every partition",
        )
    finally:
        for source in started:
            source.close()


class _Consumer:
    def __init__(self) -> None:
        self.unassigned: list[list[int]] = []
        self.commits = 0

    def incremental_unassign(self, partitions: list[TopicPartition]) -> None:
        self.unassigned.append([tp.partition for tp in partitions])

    def commit(self, **_: object) -> None:
        self.commits += 1


def test_b177_lost_partitions_are_dropped_without_a_commit() -> None:
    """Partitions lost with the session are reported lost (not revoked), with no drain
    and no commit of what was staged for them; the others stay owned and staged."""
    cfg = load(rebalance="cooperative")
    source = KafkaSource(cfg)
    events = RecordingEvents()
    consumer = _Consumer()
    source._events = events
    source._consumer = consumer  # type: ignore[assignment]
    source._assigned = {0, 1, 2}
    source.commit({Lane("events", 0): 10, Lane("events", 2): 7}, sync=False)
    source._on_lost(consumer, [TopicPartition("events", 0), TopicPartition("events", 1)])  # type: ignore[arg-type]
    assert events.lost_lanes == [[Lane("events", 0), Lane("events", 1)]]
    assert events.revoked_lanes == []
    assert consumer.unassigned == [[0, 1]]
    assert source.assigned_partitions == {2}
    assert consumer.commits == 0
    assert source._commits._pending_commit == {2: 7}
