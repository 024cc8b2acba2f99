"""The Kafka source: one confluent-kafka consumer, its group protocol, manual commits.

Owns the consumer and everything the runtime must not see of it: partition bookkeeping,
the rebalance callbacks and bounded mode. Its parts live next to it, each found by name:

* :mod:`spate_kafka._grouping` — one ``consume()`` result split into a batch per partition;
* :mod:`spate_kafka._commits` — staged, cadenced, retried and durable commits (B1, B35,
  B36, B89);
* :mod:`spate_kafka._lag` — lag per partition from librdkafka statistics (B23, B32);
* :mod:`spate_kafka._rebalance` — the group protocol: eager, cooperative, consumer
  (B175, B176) and static membership (B178).

The source upholds, together with the runtime:

* B7 — ``pause``/``resume`` stop fetching per partition while ``poll`` keeps the group alive;
* B15 — the revoke callback runs the runtime's drain barrier and commits synchronously
  before it returns, so the next owner starts behind nothing undelivered; under an
  incremental protocol only the partitions that move are revoked (B175);
* B29 — unreachable brokers fail ``start`` naming them;
* B32 — librdkafka keeps an application's pause on a partition that is assigned back, so
  every assignment sets librdkafka's pause state to what spate wants (nothing, after the
  runtime's new epoch); ``fetch_lag`` lets ``/healthz`` notice a partition that is
  behind and silent although spate did not pause it;
* B33 — bounded mode: a member left with no partition once the group settled is drained;
* B34 — bounded mode: a rebalance after this member drained reopens the run
  (``events.undrained()``) until every partition it is then given is read to its end;
* B177 — partitions lost with the session are dropped without a drain or a commit;
* B400 — ``close`` under an incremental protocol unsubscribes and serves the group until
  nothing is assigned (bounded) before closing the consumer, so that a cooperative
  rebalance under way cannot block it, and the partitions it leaves go through the
  runtime's revoke barrier (drained, committed).

Each batch holds the ``bytes`` librdkafka returned as its values (a tombstone as
``b""``); its payload views (``memoryview(message.value())``, so ``view.obj`` gives the
original object back without a copy), its keys and its timestamps are built from the
messages only when something reads them (the columnar path reads none of them).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Collection, Mapping, Sequence
from typing import Any

from confluent_kafka import (
    OFFSET_INVALID,
    Consumer,
    KafkaError,
    KafkaException,
    Message,
    TopicPartition,
)
from spate.errors import ErrorClass, SourceError
from spate.metrics import Meter
from spate.records import Lane, PayloadBatch
from spate.source import SourceEvents

from spate_kafka._commits import OffsetCommits
from spate_kafka._grouping import group, group_each
from spate_kafka._lag import PartitionLag
from spate_kafka._logging import LIBRDKAFKA_LOG
from spate_kafka._rebalance import check_support
from spate_kafka.config import KafkaSourceConfig

logger = logging.getLogger(__name__)

_LEAVE_TIMEOUT = 30.0
"""Seconds ``close`` serves the group after unsubscribing before it closes anyway (B400):
a revocation runs the runtime's barrier, bounded by its own drain and commit timeouts."""

_EMPTY_ASSIGNMENT_SETTLE = 3.0
"""Bounded mode: seconds an empty assignment must hold before the member counts as drained
(a group that is still forming hands out partitions again within a rebalance or two)."""


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
        self._closing = False
        self._end_offsets: dict[int, int] | None = None
        self._done: set[int] = set()
        self._handed_out: dict[int, int] = {}  # bounded mode: next offset per partition
        self._drained = False
        self._last_assignment_change = time.monotonic()
        self._empty_since: float | None = None
        self._revoked_in_call: set[int] = set()
        self._fatal: SourceError | None = None
        self._client_error = ""
        """The last connection error librdkafka reported (the cause of a failed start)."""
        self._subscribed = False
        self._leaving: set[int] | None = None
        """While ``close`` leaves the group: the partitions the runtime was given (B400)."""
        from_start = str(config.consumer_settings().get("auto.offset.reset", "")).lower() in (
            "earliest",
            "smallest",
            "beginning",
        )
        self._lag = PartitionLag(self._topic, meter, component, from_start)
        self._commits = OffsetCommits(
            self._topic,
            commit_interval=config.commit_interval,
            revoke_commit_timeout=config.revoke_commit_timeout,
            consumer=lambda: self._consumer,
            owned=lambda: self._assigned,
            meter=meter,
            component=component,
        )

    # -- lifecycle -----------------------------------------------------------------

    def start(self, events: SourceEvents) -> None:
        """Connect, check the topic exists, read end offsets for bounded mode, subscribe."""
        self._events = events
        settings: dict[str, Any] = dict(self._config.consumer_settings())
        settings["error_cb"] = self._on_error
        settings["on_commit"] = self._commits.on_commit
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
        try:
            check_support(
                self._config.rebalance, self._config.brokers, self._config.consumer_settings()
            )
        except SourceError:
            consumer.close()
            raise
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
        if self._config.rebalance == "eager":
            # A lost session comes to on_revoke: its commit fails and is given up (B36).
            consumer.subscribe([self._topic], on_assign=self._on_assign, on_revoke=self._on_revoke)
        else:
            consumer.subscribe(
                [self._topic],
                on_assign=self._on_assign,
                on_revoke=self._on_revoke,
                on_lost=self._on_lost,
            )
        self._last_assignment_change = time.monotonic()
        self._subscribed = True
        logger.info(
            "kafka source subscribed topic=%s group=%s brokers=%s rebalance=%s",
            self._topic,
            self._config.group_id,
            self._config.brokers,
            self._config.rebalance,
        )

    def close(self) -> None:
        """Leave the group, then close the consumer (B400).

        Under an incremental protocol a dynamic member first unsubscribes and serves the
        group until nothing is assigned (at most ``_LEAVE_TIMEOUT``), its revocations
        going to the runtime's barrier like any other: librdkafka can block for good in
        ``close()`` when a cooperative rebalance is under way. A static member closes at
        once: unsubscribing would leave the group and move its partitions (B180). The
        final revoke inside ``close()`` itself does not call back the runtime.
        """
        consumer = self._consumer
        if consumer is None:
            return
        if self._subscribed and self._incremental() and not self._config.instance_id:
            self._leave_group(consumer)
        self._closing = True
        self._commits.flush(sync=True)
        try:
            consumer.close()
        except (KafkaException, RuntimeError) as exc:
            logger.warning("kafka consumer close failed: %s", exc)
        self._consumer = None
        self._lag.release_all()

    def _leave_group(self, consumer: Consumer) -> None:
        """Unsubscribe and serve the group until this member owns nothing (B400).

        Revocations run the runtime's barrier (drained, committed) for the partitions it
        was given; an assignment still arriving is not announced to the runtime and is
        revoked again at once. What ``consume()`` returns meanwhile is dropped: it was
        never handed out nor committed, so the next owner reads it.
        """
        self._leaving = set(self._assigned)
        deadline = time.monotonic() + _LEAVE_TIMEOUT
        try:
            consumer.unsubscribe()
            while True:
                consumer.consume(num_messages=self._config.consume_batch, timeout=0.1)
                self._raise_fatal()
                if not self._assigned and not consumer.assignment():
                    return
                if time.monotonic() >= deadline:
                    logger.warning(
                        "kafka: partitions %s still assigned %gs after unsubscribing; "
                        "closing anyway",
                        sorted(self._assigned),
                        _LEAVE_TIMEOUT,
                    )
                    return
        except (KafkaException, RuntimeError) as exc:
            logger.warning("kafka: leaving the group before close failed: %s", exc)
        finally:
            self._leaving = None

    # -- polling -------------------------------------------------------------------

    def poll(self, timeout: float) -> Sequence[PayloadBatch]:
        consumer = self._require_consumer()
        self._raise_fatal()
        self._commits.maybe_flush()
        self._check_assignment_timeout()
        self._revoked_in_call.clear()
        if self._drained:
            # Every owned partition is paused; this serves group events (heartbeats,
            # rebalances). A rebalance inside this call may reopen the run (B34): then
            # what it returned is read, not dropped.
            timeout = min(timeout, 0.1)
        messages = consumer.consume(num_messages=self._config.consume_batch, timeout=timeout)
        self._raise_fatal()
        if self._drained:
            return ()
        batches = self._group(messages) if messages else ()
        if self._end_offsets is not None:
            self._check_bounded_end(batches)
        return batches

    def _group(self, messages: list[Message]) -> list[PayloadBatch]:
        """Split a ``consume()`` result into batches of the partitions still owned."""
        return group(messages, self._topic, self._owned_in_call(), self._end_offsets)

    def _group_each(self, messages: list[Message]) -> list[PayloadBatch]:
        """:meth:`_group` message by message (errors, messages without an offset)."""
        return group_each(messages, self._topic, self._owned_in_call(), self._end_offsets)

    def _owned_in_call(self) -> set[int]:
        # Fetched under an ownership that ended during this call: the next owner reads
        # it again from the committed offset.
        return self._assigned - self._revoked_in_call

    def _raise_fatal(self) -> None:
        fatal = self._fatal or self._commits.fatal
        if fatal is not None:
            raise fatal

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
        self._commits.stage(offsets, sync=sync)

    def durable_commits(self) -> dict[Lane, int]:
        """Per owned partition, the newest commit the broker acknowledged (B89)."""
        return self._commits.durable()

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

    def _incremental(self) -> bool:
        """Whether the group protocol is incremental (cooperative or consumer): the
        callbacks then receive only the partitions that move (B175)."""
        return self._config.rebalance != "eager"

    def _on_assign(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        """Partitions added to this member: all of them under the eager protocol, only
        the new ones under an incremental protocol (B175)."""
        parts = [tp.partition for tp in partitions]
        incremental = self._incremental()
        if incremental:
            self._assigned.update(parts)
            self._paused.difference_update(parts)
        else:
            self._assigned = set(parts)
            self._paused.clear()
        self._empty_since = None if self._assigned else time.monotonic()
        self._revoked_in_call.difference_update(parts)
        self._last_assignment_change = time.monotonic()
        if self._leaving is None:
            logger.info("partitions assigned topic=%s partitions=%s", self._topic, sorted(parts))
        else:  # B400: never announced to the runtime, handed back unread
            logger.info(
                "kafka: while leaving the group, given topic=%s partitions=%s; handing back",
                self._topic,
                sorted(parts),
            )
        self._lag.unknown(parts)  # until librdkafka's next statistics (B23)
        bounded = self._end_offsets is not None and not self._closing
        if bounded:
            self._done.difference_update(parts)
            self._mark_done_from_committed(parts)
            if self._drained and not self._done.issuperset(parts):
                self._reopen("assigned partitions it has not read to their end offsets")
        if self._events is not None and not self._closing and self._leaving is None:
            self._events.assigned([Lane(self._topic, p) for p in parts])
        if incremental:
            consumer.incremental_assign(partitions)
        else:
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
        """Partitions taken from this member: every one under the eager protocol, only
        those that move under an incremental one (B175). The runtime's barrier drains
        and commits exactly these lanes; the others keep fetching (B15)."""
        parts = [tp.partition for tp in partitions]
        logger.info("partitions revoked topic=%s partitions=%s", self._topic, sorted(parts))
        # Commits on revocation are retried while the broker is unavailable (B36).
        with self._commits.revoking():
            try:
                announced = parts if self._leaving is None else self._leaving.intersection(parts)
                if self._events is not None and not self._closing and announced:
                    # The barrier: drains these lanes, commits them through commit(sync=True).
                    self._events.revoked([Lane(self._topic, p) for p in sorted(announced)])
                self._commits.flush(sync=True)
            except SourceError as exc:
                if exc.error_class is ErrorClass.FATAL:
                    raise
                logger.warning(
                    "partitions %s revoked without their last commit (%s); the next owner "
                    "replays from the previous commit",
                    sorted(parts),
                    exc.reason,
                )
        incremental = self._incremental()
        self._release(parts)
        if incremental:
            consumer.incremental_unassign(partitions)
        elif self._drained and self._end_offsets is not None and not self._closing:
            # The assignment that follows may hold a partition a peer did not finish.
            self._reopen("a rebalance started after this member drained")

    def _on_lost(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        """Partitions this member lost (its session expired, it was fenced): another
        member may own them already, so they are dropped without a drain or a commit;
        the next owner replays from the last commit (B177)."""
        parts = [tp.partition for tp in partitions]
        logger.warning(
            "partitions lost topic=%s partitions=%s (session lost); dropped without a commit",
            self._topic,
            sorted(parts),
        )
        self._release(parts)  # first: nothing of these lanes is committed from here on
        announced = parts if self._leaving is None else self._leaving.intersection(parts)
        if self._events is not None and not self._closing and announced:
            self._events.lost([Lane(self._topic, p) for p in sorted(announced)])
        if self._incremental():
            consumer.incremental_unassign(partitions)
        else:
            consumer.unassign()

    def _release(self, parts: Collection[int]) -> None:
        """Forget ``parts``: no longer owned, paused, staged for commit nor measured."""
        self._commits.released(parts)
        self._assigned.difference_update(parts)
        self._paused.difference_update(parts)
        self._revoked_in_call.update(parts)
        self._last_assignment_change = time.monotonic()
        self._lag.released(parts)
        self._empty_since = None  # a rebalance under way, or incremental: still owning

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
        self._lag.on_stats(raw, self._assigned, self._end_offsets)

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
        unfetched = self._lag.unfetched()
        return {
            Lane(self._topic, p): lag
            for p, lag in unfetched.items()
            if p in assigned and p not in paused
        }

    # -- helpers ---------------------------------------------------------------------

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
