"""Synchronous commits of the Kafka source against a scripted consumer (B36, B218).

``OffsetCommits`` is driven alone: the consumer's ``commit`` answers from a script, so
each case decides which error the broker returns and how often. The real-broker cases
(a broker killed during a revocation, a storm) are in tests/kafka.
"""

from __future__ import annotations

import pytest
from confluent_kafka import KafkaError, KafkaException, TopicPartition
from spate.errors import ErrorClass, SourceError
from spate.records import Lane
from spate_kafka._commits import OffsetCommits


class ScriptedConsumer:
    """``commit`` raises the scripted errors in turn, then succeeds."""

    def __init__(self, *errors: int) -> None:
        self.errors = list(errors)
        self.committed: list[list[tuple[int, int]]] = []
        self.attempts = 0

    def commit(self, *, offsets: list[TopicPartition], asynchronous: bool) -> None:
        assert not asynchronous
        self.attempts += 1
        if self.errors:
            raise KafkaException(KafkaError(self.errors.pop(0)))
        self.committed.append([(tp.partition, tp.offset) for tp in offsets])


def commits(consumer: ScriptedConsumer, timeout: float) -> OffsetCommits:
    return OffsetCommits(
        "events",
        commit_interval=1.0,
        revoke_commit_timeout=timeout,
        consumer=lambda: consumer,  # type: ignore[arg-type,return-value]
        owned=lambda: {0, 1},
        meter=None,
        component="kafka",
    )


OFFSETS = {Lane("events", 0): 10, Lane("events", 1): 20}


@pytest.mark.parametrize(
    "code",
    [
        KafkaError.ILLEGAL_GENERATION,
        KafkaError.UNKNOWN_MEMBER_ID,
        KafkaError.STALE_MEMBER_EPOCH,
        KafkaError.REBALANCE_IN_PROGRESS,
        KafkaError.COORDINATOR_NOT_AVAILABLE,
    ],
)
def test_b218_a_final_commit_meeting_a_rejoin_is_tried_again_until_it_lands(code: int) -> None:
    """Outside a revocation (the drain's final commit) a rebalance under way — the member
    rejoining under a new generation, as under an incremental protocol while it keeps
    its partitions — delays the commit; it is sent again and made."""
    consumer = ScriptedConsumer(code, code)
    book = commits(consumer, timeout=30.0)
    book.stage(OFFSETS, sync=True)
    assert consumer.committed == [[(0, 10), (1, 20)]]
    assert consumer.attempts == 3
    assert book.durable() == OFFSETS


def test_b218_a_final_commit_that_never_lands_fails_after_the_timeout() -> None:
    consumer = ScriptedConsumer(*[KafkaError.ILLEGAL_GENERATION] * 100)
    book = commits(consumer, timeout=0.5)
    with pytest.raises(SourceError, match="synchronous commit failed") as info:
        book.stage(OFFSETS, sync=True)
    assert info.value.error_class is not ErrorClass.FATAL
    assert 1 < consumer.attempts < 100


def test_b36_b218_inside_a_revocation_an_illegal_generation_gives_up_at_once() -> None:
    """The group moved on without this member: the revocation completes without the
    commit (B36), where a final commit would wait for a rejoin (B218)."""
    consumer = ScriptedConsumer(KafkaError.ILLEGAL_GENERATION)
    book = commits(consumer, timeout=30.0)
    with book.revoking(), pytest.raises(SourceError, match="not possible after 1 attempt"):
        book.stage(OFFSETS, sync=True)
    assert consumer.attempts == 1


def test_b218_authorization_failures_are_never_tried_again() -> None:
    consumer = ScriptedConsumer(KafkaError.GROUP_AUTHORIZATION_FAILED)
    book = commits(consumer, timeout=30.0)
    with pytest.raises(SourceError) as info:
        book.stage(OFFSETS, sync=True)
    assert info.value.error_class is ErrorClass.FATAL
    assert consumer.attempts == 1
