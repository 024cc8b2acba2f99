"""Consumer groups as the broker sees them: their generations, and a group's session.

**Generations.** Neither ``DescribeGroups`` (the classic protocol) nor confluent-kafka's
``describe_consumer_groups`` reports a group's generation, and a member's callbacks only
say what moved for that member. The group coordinator writes every generation it
completes to its log, the ``__consumer_offsets`` partition of the group
(``abs(hash(group)) % offsets.topic.num.partitions``, Java's ``String.hashCode``):

- classic groups (``eager``, ``cooperative``): a ``GroupMetadataKey`` (key version 2)
  whose ``GroupMetadataValue`` holds the ``generation`` after the protocol type;
- consumer groups (KIP-848, ``consumer``): a ``ConsumerGroupMetadataKey`` (key version 3)
  whose ``ConsumerGroupMetadataValue`` starts with the group ``epoch``.

:func:`group_generations` reads that partition from the beginning (a consumer that never
joins a group, so nothing is disturbed) and returns the generations written for one
group, in order. A rebalance writes a new, higher one; a static member that rejoins
within its session is given its assignment back under the same one.

**A group's session under the consumer protocol.** With KIP-848 the broker owns the
session (``group.consumer.session.timeout.ms``, 6 s on the test broker);
:func:`set_consumer_session` sets one group's own (``consumer.session.timeout.ms``, a
group config) before its members join, as a static member's restart needs a longer one
and a test waiting for an expiry a shorter one.
"""

from __future__ import annotations

import struct
import time

OFFSETS_TOPIC = "__consumer_offsets"
_CLASSIC_GROUP = 2
_CONSUMER_GROUP = 3


def _java_hash(text: str) -> int:
    """``String.hashCode`` over UTF-16 code units, as a signed 32-bit int."""
    h = 0
    data = text.encode("utf-16-be")
    for i in range(0, len(data), 2):
        h = (31 * h + int.from_bytes(data[i : i + 2], "big")) & 0xFFFFFFFF
    return h - (1 << 32) if h >= 1 << 31 else h


def offsets_partition(group: str, partitions: int) -> int:
    """The ``__consumer_offsets`` partition of ``group`` (Kafka's ``Utils.abs`` rule)."""
    h = _java_hash(group)
    return (0 if h == -(1 << 31) else abs(h)) % partitions


def _key_group(key: bytes) -> tuple[int, str] | None:
    """``(record type, group)`` of a group metadata key, ``None`` for any other record."""
    if len(key) < 4:
        return None
    (kind, length) = struct.unpack_from(">hh", key)
    if kind not in (_CLASSIC_GROUP, _CONSUMER_GROUP):
        return None
    return kind, key[4 : 4 + length].decode()


def _uvarint(data: bytes, at: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        byte = data[at]
        at += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, at
        shift += 7


def _generation(kind: int, value: bytes) -> int:
    (version,) = struct.unpack_from(">h", value)
    if kind == _CONSUMER_GROUP:
        return int(struct.unpack_from(">i", value, 2)[0])
    if version >= 4:  # flexible versions: the protocol type is a compact string
        length, at = _uvarint(value, 2)
        at += max(length - 1, 0)
    else:
        (length,) = struct.unpack_from(">h", value, 2)
        at = 4 + max(length, 0)
    return int(struct.unpack_from(">i", value, at)[0])


def group_generations(bootstrap: str, group: str, *, timeout: float = 30.0) -> list[int]:
    """Every generation (classic) or group epoch (consumer protocol) the coordinator
    wrote for ``group``, oldest first; a deleted group's tombstone ends the list."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"group-log-reader-{group}",
            "enable.auto.commit": False,
            "log_level": 3,
        }
    )
    try:
        topics = consumer.list_topics(OFFSETS_TOPIC, timeout=timeout).topics
        partition = offsets_partition(group, len(topics[OFFSETS_TOPIC].partitions))
        low, high = consumer.get_watermark_offsets(
            TopicPartition(OFFSETS_TOPIC, partition), timeout=timeout, cached=False
        )
        consumer.assign([TopicPartition(OFFSETS_TOPIC, partition, low)])
        generations: list[int] = []
        deadline = time.monotonic() + timeout
        # The position, not the last message: control records (transactional offset
        # commits) are skipped by the client but advance it.
        while consumer.position([TopicPartition(OFFSETS_TOPIC, partition)])[0].offset < high:
            if time.monotonic() > deadline:
                raise TimeoutError(f"{OFFSETS_TOPIC}[{partition}] not read to {high}")
            for message in consumer.consume(1000, timeout=1.0):
                parsed = _key_group(message.key() or b"") if message.error() is None else None
                if parsed is None or parsed[1] != group:
                    continue
                value = message.value()
                if value is None:
                    generations.clear()
                else:
                    generations.append(_generation(parsed[0], value))
        return generations
    finally:
        consumer.close()


def set_consumer_session(bootstrap: str, group: str, ms: int, *, timeout: float = 30.0) -> None:
    """Set ``group``'s ``consumer.session.timeout.ms`` (KIP-848 groups; the broker bounds it
    by ``group.consumer.min/max.session.timeout.ms``)."""
    from confluent_kafka.admin import (
        AdminClient,
        AlterConfigOpType,
        ConfigEntry,
        ConfigResource,
        ResourceType,
    )

    entry = ConfigEntry(
        "consumer.session.timeout.ms", str(ms), incremental_operation=AlterConfigOpType.SET
    )
    resource = ConfigResource(ResourceType.GROUP, group, incremental_configs=[entry])
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.incremental_alter_configs([resource]).values():
        future.result(timeout)
