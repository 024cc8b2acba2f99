"""Offset commits of the Kafka source: staged, sent on a cadence, retried, made durable.

The checkpointer hands over watermarks through :meth:`OffsetCommits.stage`; they are sent
asynchronously every ``commit_interval`` or synchronously when asked (a revocation). The
broker's answers come back to :meth:`OffsetCommits.on_commit`:

* B1 — offsets are committed only as handed over by the checkpointer (never auto-commit);
* B35 — an asynchronous commit the broker rejects is counted, logged and sent again;
* B36 — a commit on revocation that the broker cannot take (coordinator unavailable, the
  member's session gone) is retried within ``revoke_commit_timeout`` and then given up,
  so the revocation completes and the member rejoins instead of failing;
* B89 — :meth:`OffsetCommits.durable` reports only commits the broker acknowledged, so
  block intents are never deleted ahead of a durable commit;
* B218 — a synchronous commit outside a revocation (the final commit of a drain) that
  meets a rebalance under way — the member rejoining under a new generation, which an
  incremental protocol does while it keeps its partitions — or an unavailable
  coordinator is tried again within ``revoke_commit_timeout`` before it fails.

Only partitions the source owns are committed; a partition released (revoked or lost)
takes its staged and acknowledged positions with it.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Collection, Iterator, Mapping
from contextlib import contextmanager

from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition
from spate.errors import ErrorClass, SourceError
from spate.metrics import Meter
from spate.metrics import names as metric_names
from spate.records import Lane

from spate_kafka._grouping import FATAL_CODES

logger = logging.getLogger(__name__)

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
# A synchronous commit outside a revocation meets these while the member rejoins the group
# under a new generation (classic protocol) or waits for its new member epoch from the
# next heartbeat (KIP-848), as it does under an incremental protocol while it keeps its
# partitions (a peer joined or left during the drain); tried again they succeed once it
# has rejoined (B218). Inside a revocation they mean the group moved on without it (B36).
_REJOINING_CODES = {
    KafkaError.ILLEGAL_GENERATION,
    KafkaError.UNKNOWN_MEMBER_ID,
    KafkaError.STALE_MEMBER_EPOCH,
}

# First and longest pause between attempts of a synchronous commit, in seconds (B36, B218).
_REVOKE_COMMIT_BACKOFF = (0.1, 1.0)


class OffsetCommits:
    """The commit bookkeeping of one topic's partitions (pipeline thread only)."""

    def __init__(
        self,
        topic: str,
        *,
        commit_interval: float,
        revoke_commit_timeout: float,
        consumer: Callable[[], Consumer | None],
        owned: Callable[[], Collection[int]],
        meter: Meter | None,
        component: str,
    ) -> None:
        self._topic = topic
        self._commit_interval = commit_interval
        self._revoke_commit_timeout = revoke_commit_timeout
        self._consumer = consumer
        self._owned = owned
        self._pending_commit: dict[int, int] = {}
        self._last_commit = time.monotonic()
        # Asynchronous commits sent and not yet answered: partition -> offset (B35), and
        # those of partitions released since (their failures are reported, not re-sent).
        self._inflight_commit: dict[int, int] = {}
        self._inflight_revoked: dict[int, int] = {}
        # What the broker acknowledged per owned partition (B89: DurableCommitSource).
        self._durable: dict[int, int] = {}
        self._revoke_deadline: float | None = None
        self.fatal: SourceError | None = None
        """A commit answer the consumer cannot go on after (authorization, fatal)."""
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

    @contextmanager
    def revoking(self) -> Iterator[None]:
        """Within: a synchronous commit the broker cannot take now is retried until
        ``revoke_commit_timeout`` has passed (B36)."""
        self._revoke_deadline = time.monotonic() + self._revoke_commit_timeout
        try:
            yield
        finally:
            self._revoke_deadline = None

    def released(self, partitions: Collection[int]) -> None:
        """``partitions`` are no longer owned: forget what was staged or acknowledged;
        an answer still due for them is reported, not sent again."""
        for p in partitions:
            sent = self._inflight_commit.pop(p, None)
            if sent is not None:
                self._inflight_revoked[p] = sent
            self._pending_commit.pop(p, None)
            self._durable.pop(p, None)

    def stage(self, offsets: Mapping[Lane, int], *, sync: bool) -> None:
        """Take the checkpointer's watermarks; commit now when ``sync``, else on cadence."""
        for lane, offset in offsets.items():
            if lane.stream == self._topic:
                self._pending_commit[lane.partition] = offset
        if sync:
            self.flush(sync=True)

    def maybe_flush(self) -> None:
        if self._pending_commit and (time.monotonic() - self._last_commit >= self._commit_interval):
            self.flush(sync=False)

    def flush(self, *, sync: bool) -> None:
        consumer = self._consumer()
        self._last_commit = time.monotonic()
        if consumer is None or not self._pending_commit:
            return
        owned_now = self._owned()
        owned = {p: o for p, o in self._pending_commit.items() if p in owned_now}
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
        from the last commit (B36). Outside a revocation (the final commit of a drain)
        the same errors, and an illegal generation or unknown member while the member
        rejoins the group, are tried again until ``revoke_commit_timeout`` has passed
        since the first attempt, and then raised (B218). Errors that cannot recover
        (authorization) are FATAL. An attempt in progress is not interrupted: librdkafka
        bounds it. Blocks the pipeline thread for the length of the retries.
        """
        backoff, backoff_cap = _REVOKE_COMMIT_BACKOFF
        revoking = self._revoke_deadline is not None
        deadline = self._revoke_deadline or time.monotonic() + self._revoke_commit_timeout
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
                if error.fatal() or code in FATAL_CODES:
                    raise SourceError(
                        f"kafka: synchronous commit failed: {error.str()}", ErrorClass.FATAL
                    ) from exc
                retry = (
                    code in _UNAVAILABLE_CODES
                    or error.retriable()
                    or (not revoking and code in _REJOINING_CODES)
                )
                if retry and time.monotonic() + backoff < deadline:
                    logger.info(
                        "kafka commit %s failed (%s); trying again in %.1fs",
                        "on revocation" if revoking else "before stopping",
                        error.str(),
                        backoff,
                    )
                    time.sleep(backoff)
                    backoff = min(backoff * 2, backoff_cap)
                    continue
                if not revoking:
                    raise SourceError(f"kafka: synchronous commit failed: {exc}") from exc
                raise SourceError(
                    f"kafka: commit on revocation not possible after {attempts} attempt(s): "
                    f"{error.str()}"
                ) from exc

    def on_commit(self, err: KafkaError | None, partitions: list[TopicPartition]) -> None:
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
            if error.fatal() or error.code() in FATAL_CODES:
                self.fatal = SourceError(f"kafka: commit failed: {error.str()}", ErrorClass.FATAL)
            failed.append((tp.partition, tp.offset))
            if owned and tp.partition in self._owned():
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

    def durable(self) -> dict[Lane, int]:
        """Per owned partition, the newest commit the broker acknowledged (B89).

        An asynchronous commit counts once its answer came back without an error
        (:meth:`on_commit`), a synchronous one once it returned: effectively-once sinks
        delete block intents below these positions only.
        """
        owned = self._owned()
        return {Lane(self._topic, p): o for p, o in self._durable.items() if p in owned}
