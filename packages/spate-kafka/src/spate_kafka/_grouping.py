"""Splitting one ``consume()`` result into a :class:`PayloadBatch` per partition.

The hot path of the Kafka source. Each field a batch needs at once (offset, partition,
value) is read for the whole result; the keys, the payload views and the timestamps are
read from the messages only when something asks (the columnar path reads none of them),
and so are the headers (B251).
Only partitions the source still owns become batches: a partition revoked during the
``consume()`` call is left to its next owner (B15); in bounded mode nothing at or past a
partition's end offset is handed out (B33).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Collection, Mapping
from functools import partial
from itertools import groupby
from operator import itemgetter
from typing import cast

from confluent_kafka import KafkaError, Message
from spate.errors import ErrorClass, SourceError
from spate.records import Headers, Lane, PayloadBatch

logger = logging.getLogger(__name__)

# The message fields as plain functions, for ``map`` over a whole ``consume()`` result.
_message_error = Message.error
_message_offset = Message.offset
_message_partition = Message.partition
_message_value = Message.value
_message_key = Message.key
_message_timestamp = Message.timestamp
_message_headers = Message.headers
# A consumed message's headers are a list of (str, bytes | None) pairs or None.
_headers_of_pairs = cast("Callable[[object], Headers]", Headers.of)
_second = itemgetter(1)

# One partition's columns while a ``consume()`` result is split: offsets, values
# (``None`` for a tombstone until the batch is built) and the messages themselves (read
# again only for what a batch builds lazily: keys, timestamps).
_Columns = tuple[list[int], list[bytes | None], list[Message]]

FATAL_CODES = {
    KafkaError._FATAL,
    KafkaError.TOPIC_AUTHORIZATION_FAILED,
    KafkaError.GROUP_AUTHORIZATION_FAILED,
    KafkaError.SASL_AUTHENTICATION_FAILED,
    KafkaError._AUTHENTICATION,
    KafkaError._INVALID_ARG,
}
"""Errors after which the consumer cannot go on; librdkafka retries everything else."""


def _timestamps_of(messages: list[Message]) -> list[int]:
    """The timestamps (milliseconds) of ``messages``, for a batch that is asked for them."""
    return list(map(_second, map(_message_timestamp, messages)))


def _first_timestamp_of(messages: list[Message]) -> int:
    """The first message's timestamp (milliseconds): a batch's event time (freshness)."""
    return int(_second(_message_timestamp(messages[0])))


def _keys_of(messages: list[Message]) -> list[bytes | None]:
    """The keys of ``messages``, for a batch that is asked for them."""
    return list(map(_message_key, messages))


def _headers_of(messages: list[Message]) -> list[Headers]:
    """The headers of ``messages``, for a batch that is asked for them (B251)."""
    return list(map(_headers_of_pairs, map(_message_headers, messages)))


def raise_if_fatal(error: KafkaError | None) -> None:
    """Raise a FATAL :class:`SourceError` for an error the consumer cannot go on after;
    log the others (librdkafka retries them)."""
    if error is None:
        return
    if error.fatal() or error.code() in FATAL_CODES:
        raise SourceError(f"kafka: {error.str()}", ErrorClass.FATAL)
    logger.warning("kafka consumer error (retried by librdkafka): %s", error.str())


def group(
    messages: list[Message],
    topic: str,
    owned: Collection[int],
    end_offsets: Mapping[int, int] | None,
) -> list[PayloadBatch]:
    """Split one ``consume()`` result into a batch per partition of ``owned`` (hot path).

    Each field the batch needs at once (offset, partition, value) is read for the
    whole result (``map`` over the message methods runs without a Python loop turn
    per message); librdkafka hands out messages in runs of one partition, so each
    run becomes slices of those columns. Values stay the ``bytes`` librdkafka
    returned; their views, the keys and the timestamps are read from the messages
    only when something asks (:meth:`PayloadBatch.lazy`). A result with an error, or a message
    without an offset, goes through :func:`group_each`, the message-by-message form
    of the same split.
    """
    if any(map(_message_error, messages)):  # a KafkaError is always true
        return group_each(messages, topic, owned, end_offsets)
    read = list(map(_message_offset, messages))
    if None in read:
        return group_each(messages, topic, owned, end_offsets)
    offsets = cast("list[int]", read)
    partitions = cast("list[int]", list(map(_message_partition, messages)))
    values = cast("list[bytes | None]", list(map(_message_value, messages)))
    lists: dict[int, _Columns] = {}
    stop = 0
    for partition, run in groupby(partitions):
        start = stop
        stop = start + len(list(run))
        # Fetched under an ownership that ended during this call: the next owner
        # reads it again from the committed offset.
        if partition not in owned:
            continue
        if end_offsets is not None and offsets[stop - 1] >= end_offsets.get(partition, 0):
            # Bounded mode: only what lies before the end offset (rare: the last run;
            # offsets rise within a run, so its last offset is its largest).
            limit = end_offsets.get(partition, 0)
            kept = [i for i in range(start, stop) if offsets[i] < limit]
            part: _Columns = (
                [offsets[i] for i in kept],
                [values[i] for i in kept],
                [messages[i] for i in kept],
            )
        elif start == 0 and stop == len(messages):
            part = (offsets, values, messages)
        else:
            part = (
                offsets[start:stop],
                values[start:stop],
                messages[start:stop],
            )
        columns = lists.get(partition)
        if columns is None:
            lists[partition] = part
        else:
            for column, more in zip(columns, part, strict=True):
                column.extend(more)  # type: ignore[attr-defined]
    return _batches(topic, lists)


def group_each(
    messages: list[Message],
    topic: str,
    owned: Collection[int],
    end_offsets: Mapping[int, int] | None,
) -> list[PayloadBatch]:
    """:func:`group` message by message: handles errors and messages without an offset."""
    lists: dict[int, _Columns] = {}
    current = -1
    skip = False
    limit: int | None = None
    # Bound to the current partition's columns at the start of each run.
    scratch: _Columns = ([], [], [])
    add_offset, add_value, add_message = scratch[0].append, scratch[1].append, scratch[2].append
    for message in messages:
        error = message.error()
        if error is not None:
            raise_if_fatal(error)
            continue
        partition = message.partition()
        if partition != current:
            current = partition if partition is not None else -1
            # Fetched under an ownership that ended during this call: the next owner
            # reads it again from the committed offset.
            skip = partition not in owned
            if skip:
                continue
            columns = lists.get(current)
            if columns is None:
                columns = lists[current] = ([], [], [])
            add_offset, add_value = columns[0].append, columns[1].append
            add_message = columns[2].append
            limit = end_offsets.get(current, 0) if end_offsets is not None else None
        elif skip:
            continue
        offset = message.offset()
        if offset is None or (limit is not None and offset >= limit):
            continue
        add_offset(offset)
        add_value(message.value())
        add_message(message)
    return _batches(topic, lists)


def _batches(topic: str, lists: dict[int, _Columns]) -> list[PayloadBatch]:
    """One lazy batch per partition: views, keys and timestamps are read when asked."""
    batches = []
    for partition, (offsets, values, messages) in lists.items():
        if not offsets:
            continue
        try:
            nbytes = sum(map(len, values))  # type: ignore[arg-type]
        except TypeError:  # a message without a value (a tombstone): an empty payload
            values[:] = [v if v is not None else b"" for v in values]
            nbytes = sum(map(len, values))  # type: ignore[arg-type]
        batches.append(
            PayloadBatch.lazy(
                Lane(topic, partition),
                cast("list[bytes]", values),
                first_offset=offsets[0],
                next_offset=offsets[-1] + 1,
                offsets=offsets,
                keys=partial(_keys_of, messages),
                timestamps=partial(_timestamps_of, messages),
                nbytes=nbytes,
                first_timestamp=partial(_first_timestamp_of, messages),
                headers=partial(_headers_of, messages),
            )
        )
    return batches
