"""Pauses and bounded runs across rebalances on the real broker (B7, B15, B32, B33, B34).

librdkafka keeps a partition the application paused paused when it is assigned back to
the same member. Most tests run pipelines in this process — Kafka source → a capture
sink whose writes are scripted — so a sink can be held full (every write retried) and
released while members join, leave or die: the held sink keeps a drained bounded member
running, as a slow sink does.
"""

from __future__ import annotations

import signal
import subprocess
import sys
from collections.abc import Collection
from pathlib import Path

import pytest
from confluent_kafka import TopicPartition
from spate.records import Lane
from spate.testing import OK
from spate_kafka import KafkaSource, KafkaSourceConfig

from tests.kafka._members import GROUP_SETTINGS, Member, plain_member, start_member
from tests.support.delivery import wait_until
from tests.support.services import (
    committed_offsets,
    create_topic,
    end_offsets,
    produce_keyed,
    unique_name,
)

pytestmark = pytest.mark.integration


def test_pause_held_through_a_join_and_a_leave_is_lifted(
    kafka_bootstrap: str,
) -> None:
    """B7, B15: lanes paused by a full sink while a member joins and leaves are fetched
    again once the sink is released: every record delivered and committed."""
    topic, group = unique_name("pause-rebalance"), unique_name("g")
    create_topic(kafka_bootstrap, topic, 4)
    positions = produce_keyed(kafka_bootstrap, topic, 2000, value=lambda i: b"k%d" % i)
    member = start_member(kafka_bootstrap, topic, group)
    try:
        wait_until(lambda: member.source.assigned_partitions == {0, 1, 2, 3}, 120, "assignment")
        wait_until(member.held, 120, "the full sink to pause the source")
        with plain_member(kafka_bootstrap, topic, group):
            wait_until(lambda: len(member.source.assigned_partitions) == 2, 120, "a split group")
        wait_until(lambda: member.source.assigned_partitions == {0, 1, 2, 3}, 120, "all back")
        member.script.always(OK)
        wait_until(lambda: member.delivered() >= set(positions), 120, "every record delivered")
        ends = end_offsets(kafka_bootstrap, topic)
        wait_until(
            lambda: committed_offsets(kafka_bootstrap, group, topic) == ends, 60, "final commits"
        )
    finally:
        report = member.stop()
    assert report.state == "completed", report.summary()


class _Events:
    """The source's events with no runtime behind them (the test drives ``poll``)."""

    def assigned(self, lanes: Collection[Lane]) -> None:
        pass

    def revoked(self, lanes: Collection[Lane]) -> None:
        pass

    def lost(self, lanes: Collection[Lane]) -> None:
        pass

    def drained(self) -> None:
        pass

    def undrained(self) -> None:
        pass


def test_fetch_lag_names_a_partition_paused_behind_spates_back_only(
    kafka_bootstrap: str,
) -> None:
    """B32: what /healthz reads — records waiting on an owned partition that librdkafka
    holds paused although spate did not pause it; a partition spate paused is left out."""
    topic, group = unique_name("fetch-lag"), unique_name("g")
    create_topic(kafka_bootstrap, topic, 4)
    produce_keyed(kafka_bootstrap, topic, 2000)
    source = KafkaSource(
        KafkaSourceConfig(
            brokers=kafka_bootstrap,
            topic=topic,
            group_id=group,
            statistics_interval=0.2,
            consume_batch=10,
            rdkafka=dict(GROUP_SETTINGS),
        )
    )
    source.start(_Events())
    try:
        # Batches of 10 from about 500 records a partition: partition 0 is far from its
        # end when its first batch arrives, and librdkafka knows its high watermark.

        def batch_from_partition_0() -> bool:
            """Poll on while batches come (the other partitions' may all come first)."""
            while batches := source.poll(0.1):
                if any(b.lane.partition == 0 for b in batches):
                    return True
            return False

        wait_until(batch_from_partition_0, 120, "a batch from partition 0")
        consumer = source._consumer
        assert consumer is not None
        consumer.pause([TopicPartition(topic, 0)])  # as librdkafka kept it across a rebalance
        source.pause([Lane(topic, 1)])  # spate's own pause: not a stall

        def drained_with_lag() -> bool:
            """Read the unpaused partitions until a poll brings nothing (batches of 10:
            one poll per wait step would take a hundred steps), then look at the lag."""
            while source.poll(0.1):
                pass
            return bool(source.fetch_lag().get(Lane(topic, 0)))

        wait_until(
            drained_with_lag, 120, "lag reported on the partition paused behind spate's back"
        )
        assert Lane(topic, 1) not in source.fetch_lag()
    finally:
        source.close()


PEER = """
import sys
from confluent_kafka import Consumer, TopicPartition

bootstrap, topic, group = sys.argv[1:4]
consumer = Consumer({
    "bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False,
    "session.timeout.ms": 6000, "heartbeat.interval.ms": 500,
})

def on_assign(consumer, partitions):
    # Reads nothing and commits nothing: whatever it owns is left for the next owner.
    consumer.pause(partitions)
    print("assigned", sorted(tp.partition for tp in partitions), flush=True)

consumer.subscribe([topic], on_assign=on_assign)
while True:
    consumer.poll(0.2)
"""


def test_partition_of_a_peer_killed_after_this_member_drained_is_read(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    """B34, B16: a bounded member that drained its partition is handed the partition of a
    peer killed with nothing committed: it reads it to its end offset and completes."""
    topic, group = unique_name("late-partition"), unique_name("g")
    create_topic(kafka_bootstrap, topic, 2)
    positions = produce_keyed(kafka_bootstrap, topic, 100, value=lambda i: b"k%d" % i)
    sizes = end_offsets(kafka_bootstrap, topic)
    log = tmp_path / "peer.log"
    with log.open("wb") as out:
        peer = subprocess.Popen(
            [sys.executable, "-c", PEER, kafka_bootstrap, topic, group],
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    member: Member | None = None
    try:
        wait_until(lambda: "assigned [0, 1]" in log.read_text(), 120, "the peer owns both")
        # One poll takes its whole partition, then the sink refuses rows (capacity 40).
        member = start_member(kafka_bootstrap, topic, group, bounded=True, consume_batch=1000)
        wait_until(lambda: len(member.source.assigned_partitions) == 1, 120, "a split group")
        (mine,) = member.source.assigned_partitions
        # Its partition read to the end: drained, but the held sink keeps the run going.
        wait_until(lambda: member.polled(mine) >= sizes[mine], 120, "its partition read")
        peer.send_signal(signal.SIGKILL)
        peer.wait(30)
        wait_until(lambda: member.source.assigned_partitions == {0, 1}, 120, "the peer's too")
        member.script.always(OK)
        report = member.join(180)
    finally:
        if peer.poll() is None:
            peer.kill()
            peer.wait(30)
        if member is not None and member.thread.is_alive():
            member.stop()
    assert report.state == "completed", report.summary()
    assert member.delivered() >= set(positions)
    assert committed_offsets(kafka_bootstrap, group, topic) == sizes


def test_bounded_member_left_without_a_partition_finishes_while_the_owners_run(
    kafka_bootstrap: str,
) -> None:
    """B33, B16: 3 bounded members on 2 partitions. The one the settled group leaves
    without a partition completes on its own, while the owners are still held; then the
    owners read everything, commit the end offsets and complete."""
    topic, group = unique_name("spare"), unique_name("g")
    create_topic(kafka_bootstrap, topic, 2)
    positions = produce_keyed(kafka_bootstrap, topic, 400, value=lambda i: b"k%d" % i)
    owners = [
        start_member(kafka_bootstrap, topic, group, bounded=True, client_id=f"a{i}")
        for i in range(2)
    ]
    spare: Member | None = None
    try:
        wait_until(
            lambda: [len(o.source.assigned_partitions) for o in owners] == [1, 1],
            120,
            "one partition for each owner",
        )
        # The range assignor orders members by id (client.id first): the last one joining
        # sorts after the owners and is left without a partition.
        spare = start_member(kafka_bootstrap, topic, group, bounded=True, client_id="z")
        wait_until(
            lambda: (
                spare.metric(
                    "spate_source_rebalances_total",
                    component="source",
                    component_type="source",
                    event="assigned",
                )
                > 0
            ),
            120,
            "the third member's (empty) assignment",
        )
        assert not spare.source.assigned_partitions
        report = spare.join(120)
        assert report.state == "completed", report.summary()
        assert all(m.thread.is_alive() for m in owners)  # still held: it did not wait for them
        for owner in owners:
            owner.script.always(OK)
        reports = [owner.join(120) for owner in owners]
    finally:
        for member in [*owners, spare]:
            if member is not None and member.thread.is_alive():
                member.stop()
    assert [r.state for r in reports] == ["completed", "completed"], [r.summary() for r in reports]
    assert not spare.delivered()
    assert set().union(*(o.delivered() for o in owners)) == set(positions)
    assert committed_offsets(kafka_bootstrap, group, topic) == end_offsets(kafka_bootstrap, topic)
