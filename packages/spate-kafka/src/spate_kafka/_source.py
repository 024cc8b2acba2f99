"""The Kafka source: one confluent-kafka consumer, eager rebalances, manual commits.

Owns the consumer and everything the runtime must not see of it: partition bookkeeping,
the commit cadence, bounded mode and lag statistics. Upholds, together with the runtime:

* B1 — offsets are committed only as handed over by the checkpointer (never auto-commit);
* B7 — ``pause``/``resume`` stop fetching per partition while ``poll`` keeps the group alive;
* B15 — the revoke callback runs the runtime's drain barrier and commits synchronously
  before it returns, so the next owner starts behind nothing undelivered;
* B23 — lag per partition from librdkafka statistics, set to 0 when a partition is revoked;
* B29 — unreachable brokers fail ``start`` naming them;
* B32 — librdkafka keeps an application's pause on a partition that is assigned back, so
  every assignment sets librdkafka's pause state to what spate wants (nothing, after the
  runtime's new epoch); ``fetch_lag`` lets ``/healthz`` notice a partition that is
  behind and silent although spate did not pause it;
* B33 — bounded mode: a member left with no partition once the group settled is drained;
* B34 — bounded mode: a rebalance after this member drained reopens the run
  (``events.undrained()``) until every partition it is then given is read to its end.
* B35 — an asynchronous commit the broker rejects is counted, logged and sent again;
* B36 — a commit on revocation that the broker cannot take (coordinator unavailable, the
  member's session gone) is retried within ``revoke_commit_timeout`` and then given up,
  so the revocation completes and the member rejoins instead of failing;
* B89 — :meth:`KafkaSource.durable_commits` reports only commits the broker
  acknowledged, so block intents are never deleted ahead of a durable commit.

Each batch holds the ``bytes`` librdkafka returned as its values (a tombstone as
``b""``); its payload views (``memoryview(message.value())``, so ``view.obj`` gives the
original object back without a copy), its keys and its timestamps are built from the
messages only when something reads them (the columnar path reads none of them).
"""

from __future__ import annotations

import json
import logging
import math
import threading
import time
from collections.abc import Collection, Mapping, Sequence
from functools import partial
from itertools import groupby
from operator import itemgetter
from typing import Any, cast

from confluent_kafka import (
    OFFSET_INVALID,
    Consumer,
    KafkaError,
    KafkaException,
    Message,
    TopicPartition,
)
from spate.errors import ErrorClass, SourceError
from spate.metrics import GaugeSeries, Meter
from spate.metrics import names as metric_names
from spate.records import Lane, PayloadBatch
from spate.source import SourceEvents

from spate_kafka._logging import LIBRDKAFKA_LOG
from spate_kafka.config import KafkaSourceConfig

logger = logging.getLogger(__name__)

# The message fields as plain functions, for ``map`` over a whole ``consume()`` result.
_message_error = Message.error
_message_offset = Message.offset
_message_partition = Message.partition
_message_value = Message.value
_message_key = Message.key
_message_timestamp = Message.timestamp
_second = itemgetter(1)

# One partition's columns while a ``consume()`` result is split: offsets, values
# (``None`` for a tombstone until the batch is built) and the messages themselves (read
# again only for what a batch builds lazily: keys, timestamps).
_Columns = tuple[list[int], list[bytes | None], list[Message]]


def _timestamps_of(messages: list[Message]) -> list[int]:
    """The timestamps (milliseconds) of ``messages``, for a batch that is asked for them."""
    return list(map(_second, map(_message_timestamp, messages)))


def _keys_of(messages: list[Message]) -> list[bytes | None]:
    """The keys of ``messages``, for a batch that is asked for them."""
    return list(map(_message_key, messages))


_EMPTY_ASSIGNMENT_SETTLE = 3.0
"""Bounded mode: seconds an empty assignment must hold before the member counts as drained
(a group that is still forming hands out partitions again within a rebalance or two)."""

# Errors after which the consumer cannot go on; everything else librdkafka retries itself.
_FATAL_CODES = {
    KafkaError._FATAL,
    KafkaError.TOPIC_AUTHORIZATION_FAILED,
    KafkaError.GROUP_AUTHORIZATION_FAILED,
    KafkaError.SASL_AUTHENTICATION_FAILED,
    KafkaError._AUTHENTICATION,
    KafkaError._INVALID_ARG,
}

# A commit failing with one of these may succeed when tried again: the broker or the group
# coordinator is unreachable, moving, loading, or busy with a rebalance (B36).
_UNAVAILABLE_CODES = {
    KafkaError._WAIT_COORD,
    KafkaError._TRANSPORT,
    KafkaError._TIMED_OUT,
    KafkaError._ALL_BROKERS_DOWN,
    KafkaError.REQUEST_TIMED_OUT,
    KafkaError.NETWORK_EXCEPTION,
    KafkaError.COORDINATOR_NOT_AVAILABLE,
    KafkaError.COORDINATOR_LOAD_IN_PROGRESS,
    KafkaError.NOT_COORDINATOR,
    KafkaError.REBALANCE_IN_PROGRESS,
}

# A failed asynchronous commit is logged at most once per this many seconds (B35).
_COMMIT_FAILURE_LOG_INTERVAL = 10.0
# First and longest pause between attempts of a commit on revocation, in seconds (B36).
_REVOKE_COMMIT_BACKOFF = (0.1, 1.0)


def _offset(info: Mapping[str, Any], field: str) -> int | None:
    value = info.get(field, -1)
    return value if isinstance(value, int) and value >= 0 else None


def _partition_lags(info: Mapping[str, Any], from_start: bool) -> tuple[int, int] | None:
    """``(position lag, committed lag)`` of a partition from librdkafka's statistics.

    Both count records up to the partition's end: the last stable offset when librdkafka
    reports one (``read_committed``), else the high watermark. The position lag counts
    from the consumer's position — the next record the pipeline takes — and says how far
    behind the pipeline reads; the committed lag counts from the group's committed offset
    and says how much a crash now would replay. Before the first record is taken the
    position is where the consumer resumes: the committed offset, or without one the
    start (``auto.offset.reset: earliest``, the low watermark) or the end of the partition.
    None while librdkafka knows no end yet.
    """
    end = _offset(info, "ls_offset")
    if end is None:
        end = _offset(info, "hi_offset")
    if end is None:
        return None
    committed = _offset(info, "committed_offset")
    if committed is None:
        low = _offset(info, "lo_offset")
        committed = (low if low is not None else 0) if from_start else end
    position = _offset(info, "app_offset")
    if position is None:
        position = committed
    return max(0, end - position), max(0, end - committed)


def _fetch_lag(info: Mapping[str, Any], end: int | None) -> int | None:
    """Records of a partition the consumer has not fetched yet (B32).

    From librdkafka's next fetch offset (which a pause rewinds to the application's
    position, and which steps over transaction markers) or the application's position,
    to the last stable offset (the high watermark without one), capped at the bounded
    run's end offset. None while librdkafka knows neither end.
    """
    known = [
        value
        for value in (info.get("next_offset"), info.get("app_offset"))
        if isinstance(value, int) and value >= 0
    ]
    position = max(known) if known else info.get("committed_offset", -1)
    high = info.get("ls_offset", -1)
    if not isinstance(high, int) or high < 0:
        high = info.get("hi_offset", -1)
    if not isinstance(high, int) or not isinstance(position, int) or high < 0 or position < 0:
        return None
    if end is not None:
        high = min(high, end)
    return max(0, high - position)


class KafkaSource:
    """A :class:`spate.source.Source` over one topic in one consumer group."""

    def __init__(
        self,
        config: KafkaSourceConfig,
        *,
        meter: Meter | None = None,
        component: str = "source",
    ) -> None:
        self._config = config
        self._topic = config.topic
        self._meter = meter
        self._component = component
        self._consumer: Consumer | None = None
        self._events: SourceEvents | None = None
        self._assigned: set[int] = set()
        self._paused: set[int] = set()
        self._pending_commit: dict[int, int] = {}
        self._last_commit = time.monotonic()
        self._closing = False
        self._end_offsets: dict[int, int] | None = None
        self._done: set[int] = set()
        self._handed_out: dict[int, int] = {}  # bounded mode: next offset per partition
        self._drained = False
        self._last_assignment_change = time.monotonic()
        self._lag_lock = threading.Lock()
        self._lag: dict[int, tuple[GaugeSeries, GaugeSeries]] = {}
        self._unfetched: dict[int, int] = {}
        self._empty_since: float | None = None
        self._revoked_in_call: set[int] = set()
        self._fatal: SourceError | None = None
        self._client_error = ""
        """The last connection error librdkafka reported (the cause of a failed start)."""
        self._subscribed = False
        self._from_start = str(config.consumer_settings().get("auto.offset.reset", "")).lower() in (
            "earliest",
            "smallest",
            "beginning",
        )
        # Asynchronous commits sent and not yet answered: partition -> offset (B35), and
        # those of partitions revoked since (their failures are reported, not re-sent).
        self._inflight_commit: dict[int, int] = {}
        self._inflight_revoked: dict[int, int] = {}
        # What the broker acknowledged per owned partition (B89: DurableCommitSource).
        self._durable: dict[int, int] = {}
        self._revoke_deadline: float | None = None
        self._rejected_commits = (
            meter.counter(
                metric_names.CKPT_COMMITS,
                component=component,
                component_type="kafka",
                outcome="rejected",
            )
            if meter is not None
            else None
        )
        self._rejected_unlogged = 0
        self._rejected_logged_at = -_COMMIT_FAILURE_LOG_INTERVAL

    # -- lifecycle -----------------------------------------------------------------

    def start(self, events: SourceEvents) -> None:
        """Connect, check the topic exists, read end offsets for bounded mode, subscribe."""
        self._events = events
        settings: dict[str, Any] = dict(self._config.consumer_settings())
        settings["error_cb"] = self._on_error
        settings["on_commit"] = self._on_commit
        # librdkafka's own log lines go through logging, not straight to stderr.
        settings["logger"] = LIBRDKAFKA_LOG
        if self._config.statistics_interval > 0:
            settings["stats_cb"] = self._on_stats
        try:
            consumer = Consumer(settings)
        except KafkaException as exc:
            raise SourceError(
                f"kafka: cannot create a consumer for {self._config.brokers}: {exc}",
                ErrorClass.FATAL,
            ) from exc
        self._consumer = consumer
        logger.info(
            "waiting for brokers at %s (up to %gs, startup_timeout)",
            self._config.brokers,
            self._config.startup_timeout,
        )
        try:
            metadata = consumer.list_topics(self._topic, timeout=self._config.startup_timeout)
        except KafkaException as exc:
            consumer.poll(0.2)  # serves the error callback: why the brokers did not answer
            consumer.close()
            raise SourceError(
                f"kafka: brokers {self._config.brokers} unreachable within "
                f"{self._config.startup_timeout:g}s: {self._client_error or exc.args[0]}",
                ErrorClass.FATAL,
            ) from exc
        topic_meta = metadata.topics.get(self._topic)
        if topic_meta is None or topic_meta.error is not None or not topic_meta.partitions:
            consumer.close()
            reason = topic_meta.error if topic_meta is not None else "not found"
            raise SourceError(
                f"kafka: topic {self._topic!r} is not available on {self._config.brokers}: "
                f"{reason}",
                ErrorClass.FATAL,
            )
        if self._config.stop_at == "end":
            self._end_offsets = {}
            for partition in topic_meta.partitions:
                _low, high = consumer.get_watermark_offsets(
                    TopicPartition(self._topic, partition),
                    timeout=self._config.startup_timeout,
                    cached=False,
                )
                self._end_offsets[partition] = high
            logger.info(
                "bounded mode: stopping at end offsets",
                extra={"topic": self._topic, "end_offsets": dict(self._end_offsets)},
            )
        consumer.subscribe([self._topic], on_assign=self._on_assign, on_revoke=self._on_revoke)
        self._last_assignment_change = time.monotonic()
        self._subscribed = True
        logger.info(
            "kafka source subscribed topic=%s group=%s brokers=%s",
            self._topic,
            self._config.group_id,
            self._config.brokers,
        )

    def close(self) -> None:
        """Leave the group. The final revoke during close does not call back the runtime."""
        consumer = self._consumer
        if consumer is None:
            return
        self._closing = True
        self._flush_pending_commit(sync=True)
        try:
            consumer.close()
        except (KafkaException, RuntimeError) as exc:
            logger.warning("kafka consumer close failed: %s", exc)
        self._consumer = None
        for partition in list(self._lag):
            self._set_lag(partition, 0)

    # -- polling -------------------------------------------------------------------

    def poll(self, timeout: float) -> Sequence[PayloadBatch]:
        consumer = self._require_consumer()
        if self._fatal is not None:
            raise self._fatal
        self._maybe_commit()
        self._check_assignment_timeout()
        self._revoked_in_call.clear()
        if self._drained:
            # Every owned partition is paused; this serves group events (heartbeats,
            # rebalances). A rebalance inside this call may reopen the run (B34): then
            # what it returned is read, not dropped.
            timeout = min(timeout, 0.1)
        messages = consumer.consume(num_messages=self._config.consume_batch, timeout=timeout)
        if self._fatal is not None:
            raise self._fatal
        if self._drained:
            return ()
        batches = self._group(messages) if messages else ()
        if self._end_offsets is not None:
            self._check_bounded_end(batches)
        return batches

    def _group(self, messages: list[Message]) -> list[PayloadBatch]:
        """Split one ``consume()`` result into a batch per partition (hot path).

        Each field the batch needs at once (offset, partition, value) is read for the
        whole result (``map`` over the message methods runs without a Python loop turn
        per message); librdkafka hands out messages in runs of one partition, so each
        run becomes slices of those columns. Values stay the ``bytes`` librdkafka
        returned; their views, the keys and the timestamps are read from the messages
        only when something asks (:meth:`PayloadBatch.lazy`). A result with an error, or a message
        without an offset, goes through :meth:`_group_each`, the message-by-message form
        of the same split.
        """
        if any(map(_message_error, messages)):  # a KafkaError is always true
            return self._group_each(messages)
        read = list(map(_message_offset, messages))
        if None in read:
            return self._group_each(messages)
        offsets = cast("list[int]", read)
        partitions = cast("list[int]", list(map(_message_partition, messages)))
        values = cast("list[bytes | None]", list(map(_message_value, messages)))
        owned = self._assigned - self._revoked_in_call
        end_offsets = self._end_offsets
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
        return self._batches(lists)

    def _group_each(self, messages: list[Message]) -> list[PayloadBatch]:
        """:meth:`_group` message by message: handles errors and messages without an offset."""
        owned = self._assigned - self._revoked_in_call
        end_offsets = self._end_offsets
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
                self._handle_message_error(error)
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
        return self._batches(lists)

    def _batches(self, lists: dict[int, _Columns]) -> list[PayloadBatch]:
        """One lazy batch per partition: views, keys and timestamps are read when asked."""
        topic = self._topic
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
                )
            )
        return batches

    def _handle_message_error(self, error: KafkaError | None) -> None:
        if error is None:
            return
        if error.fatal() or error.code() in _FATAL_CODES:
            raise SourceError(f"kafka: {error.str()}", ErrorClass.FATAL)
        logger.warning("kafka consumer error (retried by librdkafka): %s", error.str())

    # -- bounded mode --------------------------------------------------------------

    def _check_bounded_end(self, batches: Sequence[PayloadBatch]) -> None:
        end_offsets = self._end_offsets
        consumer = self._consumer
        if end_offsets is None or consumer is None or self._drained:
            return
        if not self._assigned:
            # B33: more members than partitions. Once the group settled with nothing for
            # this member, it has nothing to read. (A revocation not yet followed by an
            # assignment is a rebalance under way: _empty_since is None then.)
            since = self._empty_since
            if since is not None and time.monotonic() - since >= _EMPTY_ASSIGNMENT_SETTLE:
                self._drained = True
                logger.info(
                    "bounded mode: no partition of %s assigned after the group settled",
                    self._topic,
                )
                if self._events is not None:
                    self._events.drained()
            return
        for batch in batches:
            self._handed_out[batch.lane.partition] = batch.next_offset
            if batch.next_offset >= end_offsets.get(batch.lane.partition, 0):
                self._done.add(batch.lane.partition)
        undone = [p for p in self._assigned if p not in self._done]
        if undone:
            positions = consumer.position([TopicPartition(self._topic, p) for p in undone])
            for tp in positions:
                if tp.offset >= 0 and tp.offset >= end_offsets.get(tp.partition, 0):
                    self._done.add(tp.partition)
        if all(p in self._done for p in self._assigned):
            self._drained = True
            consumer.pause([TopicPartition(self._topic, p) for p in self._assigned])
            logger.info("bounded mode: reached the end offsets of every assigned partition")
            if self._events is not None:
                self._events.drained()

    def _mark_done_from_committed(self, partitions: Collection[int]) -> None:
        end_offsets = self._end_offsets
        consumer = self._consumer
        if end_offsets is None or consumer is None:
            return
        tps = [TopicPartition(self._topic, p) for p in partitions]
        committed = consumer.committed(tps, timeout=self._config.startup_timeout)
        for tp in committed:
            end = end_offsets.get(tp.partition, 0)
            if end == 0 or (tp.offset != OFFSET_INVALID and tp.offset >= end):
                self._done.add(tp.partition)
        for partition in partitions:
            low, _high = consumer.get_watermark_offsets(
                TopicPartition(self._topic, partition), timeout=self._config.startup_timeout
            )
            if low >= end_offsets.get(partition, 0):
                self._done.add(partition)

    # -- commits ---------------------------------------------------------------------

    def commit(self, offsets: Mapping[Lane, int], *, sync: bool) -> None:
        """Take the checkpointer's watermarks; commit now when ``sync``, else on cadence."""
        for lane, offset in offsets.items():
            if lane.stream == self._topic:
                self._pending_commit[lane.partition] = offset
        if sync:
            self._flush_pending_commit(sync=True)

    def _maybe_commit(self) -> None:
        if self._pending_commit and (
            time.monotonic() - self._last_commit >= self._config.commit_interval
        ):
            self._flush_pending_commit(sync=False)

    def _flush_pending_commit(self, *, sync: bool) -> None:
        consumer = self._consumer
        self._last_commit = time.monotonic()
        if consumer is None or not self._pending_commit:
            return
        owned = {p: o for p, o in self._pending_commit.items() if p in self._assigned}
        self._pending_commit.clear()
        if not owned:
            return
        tps = [TopicPartition(self._topic, p, o) for p, o in sorted(owned.items())]
        if sync:
            self._commit_sync(consumer, tps)
            return
        try:
            consumer.commit(offsets=tps, asynchronous=True)
        except KafkaException as exc:
            error = exc.args[0] if exc.args else None
            if isinstance(error, KafkaError) and error.code() == KafkaError._NO_OFFSET:
                return
            logger.warning("kafka commit failed (retried on the next cadence): %s", exc)
            for p, o in owned.items():
                self._pending_commit.setdefault(p, o)
            return
        # The broker's answer comes to _on_commit; until then these are only sent.
        self._inflight_commit.update(owned)

    def _commit_sync(self, consumer: Consumer, tps: list[TopicPartition]) -> None:
        """Commit ``tps`` before returning; raise ``SourceError`` when that fails.

        Inside a revocation, a commit the broker cannot take right now (coordinator
        unavailable or loading, transport failure, timeout, rebalance in progress) is
        tried again until ``revoke_commit_timeout`` has passed since the revocation
        began; then, or at once when the group has moved on without this member (its
        session expired: unknown member, illegal generation), a RETRYABLE error tells the
        runtime to complete the revocation without the commit — the next owner replays
        from the last commit (B36). Errors that cannot recover (authorization) are FATAL.
        An attempt in progress is not interrupted: librdkafka bounds it.
        """
        backoff, backoff_cap = _REVOKE_COMMIT_BACKOFF
        attempts = 0
        while True:
            attempts += 1
            try:
                consumer.commit(offsets=tps, asynchronous=False)
                for tp in tps:
                    self._durable[tp.partition] = tp.offset
                return
            except KafkaException as exc:
                error = exc.args[0] if exc.args else None
                if not isinstance(error, KafkaError):
                    raise SourceError(f"kafka: synchronous commit failed: {exc}") from exc
                code = error.code()
                if code == KafkaError._NO_OFFSET:
                    return
                if error.fatal() or code in _FATAL_CODES:
                    raise SourceError(
                        f"kafka: synchronous commit failed: {error.str()}", ErrorClass.FATAL
                    ) from exc
                deadline = self._revoke_deadline
                if deadline is None:
                    raise SourceError(f"kafka: synchronous commit failed: {exc}") from exc
                retry = code in _UNAVAILABLE_CODES or error.retriable()
                if retry and time.monotonic() + backoff < deadline:
                    logger.info(
                        "kafka commit on revocation failed (%s); trying again in %.1fs",
                        error.str(),
                        backoff,
                    )
                    time.sleep(backoff)
                    backoff = min(backoff * 2, backoff_cap)
                    continue
                raise SourceError(
                    f"kafka: commit on revocation not possible after {attempts} attempt(s): "
                    f"{error.str()}"
                ) from exc

    def _on_commit(self, err: KafkaError | None, partitions: list[TopicPartition]) -> None:
        """librdkafka's answer to a commit (pipeline thread, inside poll/consume/close).

        A partition whose asynchronous commit failed goes back into the pending commits
        unless a newer position was handed over since, so the next commit sends it again;
        the failure is counted (``outcome="rejected"``) and logged at most every
        :data:`_COMMIT_FAILURE_LOG_INTERVAL` seconds. A partition revoked since is only
        reported: the revoke barrier committed it or left it to the next owner. Answers
        to synchronous commits and to commits superseded by a newer one are ignored (a
        synchronous commit raises its own error) (B35).
        """
        failed: list[tuple[int, int]] = []
        reason = err
        for tp in partitions:
            if tp.topic != self._topic:
                continue
            if self._inflight_commit.get(tp.partition) == tp.offset:
                owned = True
                del self._inflight_commit[tp.partition]
            elif self._inflight_revoked.get(tp.partition) == tp.offset:
                owned = False
                del self._inflight_revoked[tp.partition]
            else:
                continue
            error = tp.error if tp.error is not None else err
            if error is None:
                if owned:
                    self._durable[tp.partition] = tp.offset
                continue
            if error.code() == KafkaError._NO_OFFSET:
                continue
            reason = error
            if error.fatal() or error.code() in _FATAL_CODES:
                self._fatal = SourceError(f"kafka: commit failed: {error.str()}", ErrorClass.FATAL)
            failed.append((tp.partition, tp.offset))
            if owned and tp.partition in self._assigned:
                self._pending_commit.setdefault(tp.partition, tp.offset)
        if not failed:
            return
        if self._rejected_commits is not None:
            self._rejected_commits.inc()
        self._rejected_unlogged += 1
        now = time.monotonic()
        if now - self._rejected_logged_at >= _COMMIT_FAILURE_LOG_INTERVAL:
            logger.warning(
                "kafka commit of %s rejected (%d rejected commit(s) since the last report): "
                "%s; sent again with the next commit while the partition is owned",
                ", ".join(f"{self._topic}[{p}]@{o}" for p, o in sorted(failed)),
                self._rejected_unlogged,
                reason.str() if reason is not None else "no reason given",
            )
            self._rejected_logged_at = now
            self._rejected_unlogged = 0

    def durable_commits(self) -> dict[Lane, int]:
        """Per owned partition, the newest commit the broker acknowledged (B89).

        An asynchronous commit counts once its answer came back without an error
        (:meth:`_on_commit`), a synchronous one once it returned: effectively-once sinks
        delete block intents below these positions only.
        """
        return {Lane(self._topic, p): o for p, o in self._durable.items() if p in self._assigned}

    # -- flow control ----------------------------------------------------------------

    def pause(self, lanes: Collection[Lane]) -> None:
        consumer = self._require_consumer()
        parts = [lane.partition for lane in lanes if lane.partition in self._assigned]
        fresh = [p for p in parts if p not in self._paused]
        if fresh:
            consumer.pause([TopicPartition(self._topic, p) for p in fresh])
            self._paused.update(fresh)

    def resume(self, lanes: Collection[Lane]) -> None:
        consumer = self._require_consumer()
        parts = [lane.partition for lane in lanes if lane.partition in self._paused]
        if self._drained:
            self._paused.difference_update(parts)
            return
        if parts:
            consumer.resume([TopicPartition(self._topic, p) for p in parts])
            self._paused.difference_update(parts)

    # -- rebalance callbacks (called inside consume/poll on the pipeline thread) -----

    def _on_assign(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        parts = [tp.partition for tp in partitions]
        self._assigned = set(parts)
        self._paused.clear()
        self._empty_since = None if parts else time.monotonic()
        self._revoked_in_call.difference_update(parts)
        self._last_assignment_change = time.monotonic()
        logger.info("partitions assigned topic=%s partitions=%s", self._topic, sorted(parts))
        for p in parts:  # unknown until librdkafka's next statistics (B23)
            self._set_lag(p, math.nan)
        bounded = self._end_offsets is not None and not self._closing
        if bounded:
            self._done.difference_update(parts)
            self._mark_done_from_committed(parts)
            if self._drained and not self._done.issuperset(parts):
                self._reopen("assigned partitions it has not read to their end offsets")
        if self._events is not None and not self._closing:
            self._events.assigned([Lane(self._topic, p) for p in parts])
        consumer.assign(partitions)
        self._apply_pauses(consumer, parts)
        if bounded and self._assigned:
            self._check_bounded_end(())

    def _apply_pauses(self, consumer: Consumer, parts: Collection[int]) -> None:
        """Set librdkafka's pause state of newly assigned partitions to spate's (B32).

        librdkafka keeps an application's pause on a partition assigned back to this
        member, while the runtime starts each assignment unpaused: without this, a
        backpressure pause active during a rebalance would never be lifted.
        """
        # Drained: every partition is read to its end offset and stays paused.
        wanted = set(parts) if self._drained else self._paused.intersection(parts)
        fetch = [TopicPartition(self._topic, p) for p in parts if p not in wanted]
        hold = [TopicPartition(self._topic, p) for p in parts if p in wanted]
        if fetch:
            consumer.resume(fetch)
        if hold:
            consumer.pause(hold)

    def _reopen(self, why: str) -> None:
        """B34: a drained bounded member may be handed unread partitions; read them."""
        self._drained = False
        logger.info("bounded mode: reading on, %s", why)
        if self._events is not None and not self._closing:
            self._events.undrained()

    def _on_revoke(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        parts = [tp.partition for tp in partitions]
        logger.info("partitions revoked topic=%s partitions=%s", self._topic, sorted(parts))
        # Commits on revocation are retried while the broker is unavailable, until here (B36).
        self._revoke_deadline = time.monotonic() + self._config.revoke_commit_timeout
        try:
            if self._events is not None and not self._closing:
                # The barrier: drains these lanes and commits them through commit(sync=True).
                self._events.revoked([Lane(self._topic, p) for p in parts])
            self._flush_pending_commit(sync=True)
        except SourceError as exc:
            if exc.error_class is ErrorClass.FATAL:
                raise
            logger.warning(
                "partitions %s revoked without their last commit (%s); the next owner "
                "replays from the previous commit",
                sorted(parts),
                exc.reason,
            )
        finally:
            self._revoke_deadline = None
        for p in parts:
            sent = self._inflight_commit.pop(p, None)
            if sent is not None:
                self._inflight_revoked[p] = sent
        self._assigned.difference_update(parts)
        self._paused.difference_update(parts)
        self._revoked_in_call.update(parts)
        self._last_assignment_change = time.monotonic()
        for p in parts:
            self._pending_commit.pop(p, None)
            self._durable.pop(p, None)
            self._set_lag(p, 0)
        with self._lag_lock:
            for p in parts:
                self._unfetched.pop(p, None)
        self._empty_since = None
        if self._drained and self._end_offsets is not None and not self._closing:
            # The assignment that follows may hold a partition a peer did not finish.
            self._reopen("a rebalance started after this member drained")

    def _check_assignment_timeout(self) -> None:
        limit = self._config.assignment_timeout
        if limit is None or self._assigned:
            return
        idle = time.monotonic() - self._last_assignment_change
        if idle >= limit:
            raise SourceError(
                f"kafka: no partition of {self._topic!r} assigned to group "
                f"{self._config.group_id!r} for {idle:.0f}s (assignment_timeout)",
                ErrorClass.FATAL,
            )

    # -- librdkafka callbacks --------------------------------------------------------

    def _on_error(self, error: KafkaError) -> None:
        if error.fatal():
            self._fatal = SourceError(f"kafka: fatal client error: {error.str()}", ErrorClass.FATAL)
        elif error.code() == KafkaError._ALL_BROKERS_DOWN and self._subscribed:
            # Before subscribing, start() reports unreachable brokers itself (B29).
            logger.warning("kafka: all brokers down (%s); retrying", self._config.brokers)
        else:
            logger.debug("kafka client error: %s", error.str())
        if error.code() != KafkaError._ALL_BROKERS_DOWN:
            # A TLS or SASL failure names its cause (B29, B70); "brokers are down" does not.
            self._client_error = error.str()

    def _on_stats(self, raw: str) -> None:
        try:
            stats = json.loads(raw)
            partitions = stats["topics"][self._topic]["partitions"]
        except (ValueError, KeyError, TypeError):
            return
        for key, info in partitions.items():
            try:
                partition = int(key)
            except ValueError:
                continue
            if partition < 0 or partition not in self._assigned:
                continue
            lags = _partition_lags(info, self._from_start)
            if lags is not None:
                self._set_lag(partition, *lags)
            end = self._end_offsets.get(partition) if self._end_offsets is not None else None
            unfetched = _fetch_lag(info, end)
            if unfetched is not None:
                with self._lag_lock:
                    self._unfetched[partition] = unfetched

    def assignment_wait(self) -> str | None:
        """What the consumer waits for while it owns no partition (B43)."""
        if self._assigned or self._drained:
            return None
        session = str(self._config.consumer_settings().get("session.timeout.ms"))
        seconds = f"{int(session) / 1000:g}s" if session.isdigit() else "its session timeout"
        return (
            f"consumer group {self._config.group_id!r} to assign partitions of {self._topic} "
            f"(a member that died without leaving holds its partitions until its session "
            f"times out: session.timeout.ms, {seconds} after it died)"
        )

    def fetch_lag(self) -> dict[Lane, int]:
        """Records waiting per owned partition spate is not pausing (any thread, B32)."""
        if self._drained:
            return {}
        assigned = frozenset(self._assigned)
        paused = frozenset(self._paused)
        with self._lag_lock:
            unfetched = dict(self._unfetched)
        return {
            Lane(self._topic, p): lag
            for p, lag in unfetched.items()
            if p in assigned and p not in paused
        }

    # -- helpers ---------------------------------------------------------------------

    def _set_lag(self, partition: int, value: float, committed: float | None = None) -> None:
        """Set a partition's position lag and committed lag (``committed`` defaults to
        ``value``); NaN says "not measured yet" (B23)."""
        meter = self._meter
        if meter is None:
            return
        with self._lag_lock:
            gauges = self._lag.get(partition)
            if gauges is None:
                lane = str(Lane(self._topic, partition))
                labels = {"component": self._component, "component_type": "kafka", "lane": lane}
                gauges = (
                    meter.gauge(metric_names.SOURCE_LAG, **labels),
                    meter.gauge(metric_names.SOURCE_COMMITTED_LAG, **labels),
                )
                self._lag[partition] = gauges
        gauges[0].set(value)
        gauges[1].set(value if committed is None else committed)

    def _require_consumer(self) -> Consumer:
        if self._consumer is None:
            raise SourceError("kafka: the source is not started", ErrorClass.FATAL)
        return self._consumer

    @property
    def assigned_partitions(self) -> frozenset[int]:
        """Partitions currently owned (for tests and health)."""
        return frozenset(self._assigned)

    def remaining(self) -> int | None:
        """Records of the owned partitions left before the bounded end (``stop_at: end``),
        for a progress display; None when unbounded or nothing was handed out yet. Any
        thread: reads only what the pipeline thread recorded, never the consumer."""
        end_offsets = self._end_offsets
        if end_offsets is None:
            return None
        todo = [p for p in list(self._assigned) if p not in self._done]
        if not todo:
            return 0
        handed_out = dict(self._handed_out)
        # A partition nothing was read from yet counts once something was.
        known = [p for p in todo if p in handed_out]
        if not known:
            return None
        return sum(max(0, end_offsets.get(p, 0) - handed_out[p]) for p in known)
