"""Kafka source bookkeeping on librdkafka's mock cluster (fast unit tests).

Delivery, rebalance and crash behaviour are proven on the real broker; these tests pin
the source's own contract: batches per partition over borrowed views, commits only of
what the runtime hands over (B1), pause/resume while polling (B7), bounded mode, lag
reset on revoke (B23) and a clear start-up error for unreachable brokers (B29).
"""

from __future__ import annotations

import time

import pytest
from confluent_kafka import Consumer, KafkaError, TopicPartition
from spate.config import decode
from spate.errors import SourceError
from spate.metrics import Meter
from spate.records import Lane, PayloadBatch
from spate_kafka import KafkaSource, KafkaSourceConfig

from .conftest import MockCluster, RecordingEvents


def make_source(
    cluster: MockCluster, topic: str, group: str = "g1", meter: Meter | None = None, **extra: object
) -> KafkaSource:
    cfg = decode(
        KafkaSourceConfig,
        {
            "brokers": cluster.bootstrap,
            "topic": topic,
            "group_id": group,
            "startup_timeout": "10s",
            "rdkafka": {"session.timeout.ms": 6000, "topic.metadata.refresh.interval.ms": 1000},
            **extra,
        },
        "source.kafka",
    )
    return KafkaSource(cfg, meter=meter)


def drain(source: KafkaSource, want: int, deadline: float = 30.0) -> list[PayloadBatch]:
    batches: list[PayloadBatch] = []
    got = 0
    end = time.monotonic() + deadline
    while got < want and time.monotonic() < end:
        for batch in source.poll(0.2):
            batches.append(batch)
            got += len(batch)
    return batches


def committed(cluster: MockCluster, topic: str, group: str, partitions: int = 4) -> dict[int, int]:
    probe = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": group})
    try:
        tps = probe.committed([TopicPartition(topic, p) for p in range(partitions)], timeout=10)
        return {tp.partition: tp.offset for tp in tps}
    finally:
        probe.close()


def test_batches_are_per_partition_views_over_message_bytes(
    mock_cluster: MockCluster, topic: str, events: RecordingEvents
) -> None:
    mock_cluster.produce(topic, 400)
    source = make_source(mock_cluster, topic)
    source.start(events)
    try:
        batches = drain(source, 400)
    finally:
        source.close()
    assert sum(len(b) for b in batches) == 400
    assert events.assigned_lanes and {lane.partition for lane in events.assigned_lanes[0]} == {
        0,
        1,
        2,
        3,
    }
    seen = set()
    for batch in batches:
        assert batch.offsets == sorted(batch.offsets)
        assert batch.next_offset == batch.offsets[-1] + 1
        for view, key in zip(batch.payloads, batch.keys, strict=True):
            assert isinstance(view, memoryview)
            assert isinstance(view.obj, bytes)  # the message's own bytes, no copy
            assert bytes(view).startswith(b"value-")
            assert key is not None
            seen.add(key)
    assert len(seen) == 400


def test_b1_commits_only_what_the_runtime_hands_over(
    mock_cluster: MockCluster, topic: str, events: RecordingEvents
) -> None:
    mock_cluster.produce(topic, 200)
    source = make_source(mock_cluster, topic, group="g-commit")
    source.start(events)
    try:
        drain(source, 200)
        # Nothing handed over yet: nothing may be committed, even after the cadence.
        assert all(o < 0 for o in committed(mock_cluster, topic, "g-commit").values())
        source.commit({Lane(topic, 0): 7, Lane(topic, 2): 3}, sync=True)
        offsets = committed(mock_cluster, topic, "g-commit")
        assert offsets[0] == 7
        assert offsets[2] == 3
        assert offsets[1] < 0 and offsets[3] < 0
    finally:
        source.close()


def test_async_commit_waits_for_commit_interval(
    mock_cluster: MockCluster, topic: str, events: RecordingEvents
) -> None:
    mock_cluster.produce(topic, 40)
    source = make_source(mock_cluster, topic, group="g-cadence", commit_interval="500ms")
    source.start(events)
    try:
        drain(source, 40)
        source.commit({Lane(topic, 1): 5}, sync=False)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            source.poll(0.1)
            if committed(mock_cluster, topic, "g-cadence")[1] == 5:
                break
        assert committed(mock_cluster, topic, "g-cadence")[1] == 5
    finally:
        source.close()


def test_b7_paused_partition_delivers_nothing_while_polling_continues(
    mock_cluster: MockCluster, topic: str, events: RecordingEvents
) -> None:
    mock_cluster.produce(topic, 8)  # create the topic with its partitions
    source = make_source(mock_cluster, topic, group="g-pause")
    source.start(events)
    try:
        drain(source, 8)
        source.pause([Lane(topic, 0)])
        mock_cluster.produce(topic, 400, prefix="late")
        batches = drain(source, 300, deadline=5)
        assert batches, "unpaused partitions keep flowing"
        assert all(b.lane.partition != 0 for b in batches)
        source.resume([Lane(topic, 0)])
        resumed = drain(source, 100, deadline=20)
        assert any(b.lane.partition == 0 for b in resumed)
    finally:
        source.close()


def test_bounded_mode_stops_at_end_offsets_seen_at_start(
    mock_cluster: MockCluster, topic: str, events: RecordingEvents
) -> None:
    mock_cluster.produce(topic, 120)
    source = make_source(mock_cluster, topic, group="g-bounded", stop_at="end")
    source.start(events)
    try:
        mock_cluster.produce(topic, 40, prefix="after-start")
        total = 0
        keys: set[bytes] = set()
        deadline = time.monotonic() + 30
        while events.drained_calls == 0 and time.monotonic() < deadline:
            for batch in source.poll(0.2):
                total += len(batch)
                keys.update(k for k in batch.keys if k is not None)
        assert events.drained_calls == 1
        assert total == 120
        assert not any(k.startswith(b"after-start") for k in keys)
        assert source.poll(0.2) == ()
    finally:
        source.close()


def test_b23_lag_is_reported_and_zeroed_on_close(
    mock_cluster: MockCluster, topic: str, events: RecordingEvents
) -> None:
    mock_cluster.produce(topic, 100)
    meter = Meter("lag-test")
    source = make_source(
        mock_cluster, topic, group="g-lag", meter=meter, statistics_interval="100ms"
    )
    source.start(events)

    def lag_samples() -> dict[str, float]:
        out = {}
        for metric in meter.registry.collect():
            if metric.name == "spate_source_lag_records":
                for sample in metric.samples:
                    out[sample.labels["lane"]] = sample.value
        return out

    try:
        drain(source, 100)
        deadline = time.monotonic() + 10
        while len(lag_samples()) < 4 and time.monotonic() < deadline:
            source.poll(0.1)
        assert len(lag_samples()) == 4
    finally:
        source.close()
    assert set(lag_samples().values()) == {0.0}


def test_b29_unreachable_brokers_fail_start_naming_them(events: RecordingEvents) -> None:
    cfg = decode(
        KafkaSourceConfig,
        {"brokers": "127.0.0.1:1", "topic": "x", "group_id": "g", "startup_timeout": "1s"},
        "source.kafka",
    )
    source = KafkaSource(cfg)
    with pytest.raises(SourceError) as info:
        source.start(events)
    assert "127.0.0.1:1" in str(info.value)


def test_b35_rejected_async_commit_is_sent_again_and_counted(
    mock_cluster: MockCluster, topic: str, events: RecordingEvents, caplog: pytest.LogCaptureFixture
) -> None:
    """B35: librdkafka's commit callback reports a rejected asynchronous commit; the
    partition goes back into the pending commits, the next commit sends it, and the
    rejection is counted and logged. (The real broker test provokes the rejection.)"""
    mock_cluster.produce(topic, 40)
    meter = Meter("rejected-commit-test")
    source = make_source(
        mock_cluster, topic, group="g-rejected", meter=meter, commit_interval="100ms"
    )
    source.start(events)
    try:
        drain(source, 40)
        # What librdkafka does after an asynchronous commit of [1]@5 that the broker
        # refused: call on_commit with the error (the commit itself never reached it).
        source._commits._inflight_commit[1] = 5
        with caplog.at_level("WARNING", logger="spate_kafka._commits"):
            source._commits.on_commit(
                KafkaError(KafkaError.REBALANCE_IN_PROGRESS), [TopicPartition(topic, 1, 5)]
            )
        assert "rejected" in caplog.text
        deadline = time.monotonic() + 10
        while committed(mock_cluster, topic, "g-rejected")[1] != 5:
            assert time.monotonic() < deadline, "the rejected commit was not sent again"
            source.poll(0.1)
    finally:
        source.close()
    rejected = meter.registry.get_sample_value(
        "spate_checkpoint_commits_total",
        {
            "pipeline": "rejected-commit-test",
            "component": "source",
            "component_type": "kafka",
            "outcome": "rejected",
        },
    )
    assert rejected == 1


def test_b89_durable_commits_are_those_the_broker_answered(
    mock_cluster: MockCluster, topic: str, events: RecordingEvents
) -> None:
    """B89: a position handed over without ``sync`` is only stored (sent on the commit
    cadence); ``durable_commits`` reports it once librdkafka's answer came back without an
    error, and never one the broker refused."""
    mock_cluster.produce(topic, 40)
    source = make_source(mock_cluster, topic, group="g-durable", commit_interval="1h")
    source.start(events)
    try:
        drain(source, 40)
        lane = Lane(topic, 1)
        source.commit({lane: 5}, sync=False)
        source.poll(0.1)
        assert source.durable_commits() == {}  # stored for the cadence, not sent
        source._commits._inflight_commit[1] = 5  # sent; the broker refuses it
        source._commits.on_commit(
            KafkaError(KafkaError.REBALANCE_IN_PROGRESS), [TopicPartition(topic, 1, 5)]
        )
        assert source.durable_commits() == {}
        source._commits.flush(sync=False)  # sent again; answered inside poll
        deadline = time.monotonic() + 10
        while source.durable_commits() != {lane: 5}:
            assert time.monotonic() < deadline, "the broker's answer never counted"
            source.poll(0.1)
        assert committed(mock_cluster, topic, "g-durable")[1] == 5
    finally:
        source.close()
