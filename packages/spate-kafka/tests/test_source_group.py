"""How the Kafka source splits one ``consume()`` result into batches per partition.

The split reads each message field for the whole result at once; this pins it against
the message-by-message definition: only owned partitions (a partition revoked during the
call is left to its next owner, B15), in bounded mode nothing at or past the end offset
(B33), errors and messages without an offset skipped, tombstones as empty payloads, and
every batch in offset order with ``next_offset`` one past its last record (B1: the
checkpointer commits exactly what was handed over).
"""

from __future__ import annotations

from dataclasses import dataclass

import pytest
from confluent_kafka import KafkaError, Message
from hypothesis import given, settings
from hypothesis import strategies as st
from spate.config import decode
from spate.records import Lane
from spate_kafka import KafkaSource, KafkaSourceConfig, _grouping

from tests.support.scale import scaled

TOPIC = "t"


def make_source(
    assigned: set[int], revoked: set[int], end_offsets: dict[int, int] | None
) -> KafkaSource:
    config = decode(
        KafkaSourceConfig,
        {"brokers": "127.0.0.1:1", "topic": TOPIC, "group_id": "g"},
        "source.kafka",
    )
    source = KafkaSource(config)
    source._assigned = set(assigned)
    source._revoked_in_call = set(revoked)
    source._end_offsets = end_offsets
    return source


@dataclass
class Run:
    partition: int | None
    length: int
    error_at: int | None
    no_offset_at: int | None


runs = st.lists(
    st.builds(
        Run,
        partition=st.one_of(st.integers(0, 4), st.none()),
        length=st.integers(1, 6),
        error_at=st.one_of(st.none(), st.integers(0, 5)),
        no_offset_at=st.one_of(st.none(), st.integers(0, 5)),
    ),
    max_size=8,
)


def messages_of(plan: list[Run], with_errors: bool, data: st.DataObject) -> list[Message]:
    """Messages in runs of one partition, offsets increasing per partition (as librdkafka)."""
    next_offset: dict[int | None, int] = {}
    out: list[Message] = []
    for run in plan:
        for i in range(run.length):
            offset = next_offset.get(run.partition, data.draw(st.integers(0, 3)))
            next_offset[run.partition] = offset + data.draw(st.integers(1, 2))
            error = None
            if with_errors and run.error_at == i:
                error = KafkaError(KafkaError._PARTITION_EOF)
            if with_errors and run.no_offset_at == i:
                offset = -1001  # librdkafka's invalid offset: ``offset()`` is None
            value = data.draw(st.one_of(st.none(), st.binary(max_size=4)))
            key = data.draw(st.one_of(st.none(), st.binary(max_size=3)))
            timestamp = data.draw(st.integers(0, 2**41))
            out.append(
                Message(
                    topic=TOPIC,
                    partition=-1 if run.partition is None else run.partition,
                    offset=offset,
                    key=key,
                    value=value,
                    timestamp=(1, timestamp),
                    error=error,
                )
            )
    return out


def reference(
    messages: list[Message],
    owned: set[int],
    end_offsets: dict[int, int] | None,
) -> list[tuple[Lane, list[int], list[bytes], list[bytes | None], list[int], int]]:
    """The split, one message at a time."""
    parts: dict[int, tuple[list[int], list[bytes], list[bytes | None], list[int]]] = {}
    for message in messages:
        partition, offset = message.partition(), message.offset()
        if message.error() is not None or partition not in owned or offset is None:
            continue
        if end_offsets is not None and offset >= end_offsets.get(partition, 0):
            continue
        offsets, values, keys, timestamps = parts.setdefault(partition, ([], [], [], []))
        offsets.append(offset)
        values.append(message.value() or b"")
        keys.append(message.key())
        timestamps.append(message.timestamp()[1])
    return [
        (Lane(TOPIC, p), offsets, values, keys, timestamps, offsets[-1] + 1)
        for p, (offsets, values, keys, timestamps) in parts.items()
    ]


@settings(max_examples=scaled(300, minimum=60), deadline=None)
@given(
    plan=runs,
    with_errors=st.booleans(),
    assigned=st.sets(st.integers(0, 4)),
    revoked=st.sets(st.integers(0, 4)),
    bounded=st.booleans(),
    ends=st.dictionaries(st.integers(0, 4), st.integers(0, 12)),
    data=st.data(),
)
def test_group_matches_the_message_by_message_split_b1_b15_b33(
    plan: list[Run],
    with_errors: bool,
    assigned: set[int],
    revoked: set[int],
    bounded: bool,
    ends: dict[int, int],
    data: st.DataObject,
) -> None:
    messages = messages_of(plan, with_errors, data)
    end_offsets = ends if bounded else None
    source = make_source(assigned, revoked, end_offsets)
    expected = reference(messages, assigned - revoked, end_offsets)
    for split in (source._group, source._group_each):
        batches = split(messages)
        got = [
            (
                b.lane,
                b.offsets,
                [bytes(p) for p in b.payloads],
                b.keys,
                b.timestamps,
                b.next_offset,
            )
            for b in batches
        ]
        assert got == expected
        for batch in batches:
            assert all(type(p) is memoryview for p in batch.payloads)
            # B97: the values are the bytes the views span (a tombstone: b"").
            assert batch.values is not None
            assert [bytes(p) for p in batch.payloads] == batch.values
            assert all(p.obj is v for p, v in zip(batch.payloads, batch.values, strict=True))


def test_payload_views_borrow_the_message_values() -> None:
    """The views span the bytes librdkafka returned: ``view.obj`` is that object."""
    messages = [
        Message(topic=TOPIC, partition=0, offset=i, value=b"v%d" % i, timestamp=(1, i))
        for i in range(3)
    ]
    source = make_source({0}, set(), None)
    (batch,) = source._group(messages)
    for message, view in zip(messages, batch.payloads, strict=True):
        assert view.obj is message.value()


def test_batches_hold_the_message_bytes_and_read_timestamps_only_when_asked_b97(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Values are the very ``bytes`` of the messages; a message's timestamp and its view
    are made only when something reads them, and then give what the message holds."""
    reads: list[Message] = []
    timestamp = _grouping._message_timestamp

    def counted(message: Message) -> tuple[int, int]:
        reads.append(message)
        return timestamp(message)

    monkeypatch.setattr(_grouping, "_message_timestamp", counted)
    messages = [
        Message(topic=TOPIC, partition=p, offset=i, value=b"v%d" % i, timestamp=(1, 100 + i))
        for p, i in [(0, 0), (0, 1), (1, 5), (0, 2)]
    ]
    source = make_source({0, 1}, set(), None)
    for split in (source._group, source._group_each):
        reads.clear()
        first, second = split(messages)
        assert first.values is not None and second.values is not None
        assert [first.lane.partition, second.lane.partition] == [0, 1]
        assert all(
            v is m.value() for v, m in zip(first.values, messages[:2] + messages[3:], strict=True)
        )
        assert second.values[0] is messages[2].value()
        assert (len(first), first.first_offset, first.next_offset) == (3, 0, 3)
        assert first.payload_bytes() == 6
        assert not reads  # nothing asked for a timestamp yet
        assert first._payloads is None  # nor for a view
        assert first.timestamps == [100, 101, 102]
        assert second.timestamps == [105]
        assert len(reads) == 4
        assert [view.obj for view in first.payloads] == first.values


def test_batches_read_keys_only_when_asked_b97(monkeypatch: pytest.MonkeyPatch) -> None:
    """A message's key is read only when something asks for the batch's keys (the
    columnar path never does unless its sink places rows by key), and then reads what
    the message holds, for both forms of the split."""
    reads: list[Message] = []
    key = _grouping._message_key

    def counted(message: Message) -> bytes | None:
        reads.append(message)
        return key(message)

    monkeypatch.setattr(_grouping, "_message_key", counted)
    messages = [
        Message(topic=TOPIC, partition=p, offset=i, value=b"v", key=k, timestamp=(1, i))
        for p, i, k in [(0, 0, b"a"), (0, 1, None), (1, 5, b"c"), (0, 2, b"d")]
    ]
    source = make_source({0, 1}, set(), None)
    for split in (source._group, source._group_each):
        reads.clear()
        first, second = split(messages)
        assert first.values == [b"v", b"v", b"v"]
        assert not reads  # nothing asked for a key yet
        assert first.keys == [b"a", None, b"d"]
        assert second.keys == [b"c"]
        assert len(reads) == 4
