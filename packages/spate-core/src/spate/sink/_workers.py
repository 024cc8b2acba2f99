"""The sink pool's workers: they take sealed batches, write them and settle each one.

A collaborator of :class:`~spate.sink.SinkPool` that imports downward only (shards,
batches, writers, the shared attempt rules of :mod:`spate.sink._attempts`): the pool
hands it the lock it shares and what it needs of the pool as callables, so no module
here imports the pool. One write (:meth:`PoolWorkers.write`) runs the batch's fence (the
effectively-once intent, B88, B125) and the writer, then, under the pool's lock, tells
the replica's breaker (B11), moves the shard's preference to its next replica after a
retryable failure, queues the batch again after its backoff on the pipeline clock
(B9, B12) or settles it (B2, B4); budget and acks are released outside the lock. A
batch failed for good — rows the destination refused under ``fail``
(:class:`~spate.sink.RowsFailed`), or refused rows that cannot be charged to records —
says why on its acks first (``AckToken.failure``, B322).

:class:`PoolWorkers` is the pool's client of the one write-behind engine
(:mod:`spate.sink._engine`, ADR 0028): the engine runs ``io_threads`` writer threads, or
none and the pool's ``pump``, ``tick`` and ``flush`` write on the calling thread; each
takes the next due batch under the pool's lock (:meth:`PoolWorkers.take`: a shard's queue
front first, so per-shard order holds) and writes it with :meth:`PoolWorkers.write`.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from spate._clock import Clock
from spate.checkpoint._ack import AckToken
from spate.flow._contract import ByteBudget
from spate.sink._attempts import judge_breaker
from spate.sink._batching import PoolBatch
from spate.sink._engine import claim, release, verdict
from spate.sink._freshness import WriteFreshness
from spate.sink._intents import Intent
from spate.sink._retry import Backoff
from spate.sink._shard import Replica, Shard
from spate.sink._writer import RowsFailed, RowsRefused, WriteBatch

logger = logging.getLogger("spate.sink._pool")

Settled = tuple[PoolBatch, list[AckToken], int, bool]
"""A settled batch: its acks, the budget bytes it held and whether it was written."""

Work = tuple[Shard, PoolBatch, Replica]


def settle_batch(batch: PoolBatch, ok: bool) -> Settled:
    """Claim ``batch`` settled (pool lock held; its callers checked it was not); release
    what it returns with :func:`release_settled` once the lock is given back."""
    claim(batch)
    return batch, list(batch.acks), batch.acquired, ok


def failed_for_good(batch: PoolBatch, reason: str) -> None:
    """Tell the holders of ``batch``'s acks that it failed for good (rows the destination
    refused on their own: a retry would meet ``reason`` again): a spool with
    ``ack: spooled`` keeps it rather than retry (B322). Pool lock held, before the batch
    is settled."""
    for ack in batch.acks:
        if ack.failure is None:
            ack.failure = reason


def release_settled(budget: ByteBudget, settled: list[Settled]) -> None:
    """Release budget and acks of settled batches. Called WITHOUT the lock.

    Every ack is released even when one raises (a resolver's bug, or ``AckError`` for a
    second release, which the token has already reported to the pipeline): stopping at
    the first would leave the rest held forever (B4).
    """
    for batch, acks, nbytes, ok in settled:
        if nbytes:
            budget.release(nbytes)
        release(batch, ok, acks)


class PoolWorkers:
    """The writing side of one sink pool."""

    def __init__(
        self,
        name: str,
        *,
        cond: threading.Condition,
        clock: Clock,
        backoff: Backoff,
        budget: ByteBudget,
        next_work: Callable[[float], Work | None],
        next_wake: Callable[[float], float | None],
        fence: Callable[[Shard, object, PoolBatch, Intent], None],
        freshness: WriteFreshness | None = None,
        refused: Callable[[PoolBatch, RowsRefused], str | None] | None = None,
    ) -> None:
        """``next_work(now)`` (lock held): seal lingering batches and pick one due now;
        ``next_wake(now)`` (lock held): when something may come due; ``fence`` (lock NOT
        held): record a block's intent and check the lane is still the pool's;
        ``stopping()`` (lock held): the workers should return; ``refused(batch, error)``
        (lock held): hand a batch whose other rows are written, with the rows the
        destination refused on their own, to be charged to their records on the pipeline
        thread (B245) — None once queued, else why they cannot be (the batch fails)."""
        self.name = name
        self._cond = cond
        self._clock = clock
        self._backoff = backoff
        self._budget = budget
        self._next_work = next_work
        self._next_wake = next_wake
        self._fence = fence
        self._freshness = freshness
        self._refused = refused

    def take(self, now: float) -> Work | None:
        """The next batch due at ``now`` with its shard and replica (lock held)."""
        return self._next_work(now)

    def next_wake(self, now: float) -> float | None:
        """When a batch may come due (lock held)."""
        return self._next_wake(now)

    def write(self, work: Work) -> None:
        """One attempt at a picked batch (lock NOT held), then its verdict."""
        self.write_to(*work)

    def write_to(self, shard: Shard, batch: PoolBatch, replica: Replica) -> None:
        """One attempt at ``batch`` on ``replica`` (lock NOT held), then its verdict."""
        writer = replica.writer
        if writer is None:  # cannot happen after start(); keeps the type checker honest
            raise RuntimeError(f"sink {self.name}: no writer for {replica.endpoint}")
        request = WriteBatch(
            batch.buffer,
            batch.rows,
            batch.nbytes,
            shard.index,
            batch.seq,
            batch.token,
            batch.attempts,
        )

        def write() -> None:
            intent = batch.intent
            if intent is not None and not batch.fenced:
                # Only this worker touches a batch it is writing (it is in shard.writing).
                self._fence(shard, writer, batch, intent)
            writer.write(request)

        judged = verdict(
            write,
            what=f"sink {self.name}: writer for {replica.endpoint}",
            clock=self._clock,
            backoff=self._backoff,
            attempts=batch.attempts,
        )
        error, result, now, elapsed = judged.error, judged.result, judged.now, judged.elapsed
        charged = isinstance(error, RowsRefused) and self._refused is not None
        freshness = self._freshness if error is None or charged else None
        column = freshness.column_time(batch.buffer) if freshness is not None else None
        settled: list[Settled] = []
        with self._cond:
            shard.writing.discard(batch)
            shard.m_inflight.set(len(shard.writing))
            judge_breaker(replica.breaker, result, now)
            shard.m_write_seconds["fatal" if result == "record" else result].observe(elapsed)
            if result != "ok":
                shard.m_errors[result].inc()
            if isinstance(error, RowsRefused) and self._refused is not None and not batch.settled:
                why = self._refused(batch, error)
                if why is None:
                    # Written but for the refused rows: settled once they are charged.
                    shard.m_records.inc(batch.rows - len(error.rows))
                    shard.m_bytes.inc(batch.nbytes)
                    if freshness is not None:
                        freshness.written(batch, self._clock.time(), column)
                elif error.skipped:
                    # Skipped by the writer already: only their positions are unknown.
                    logger.warning(
                        "sink %s shard %d: batch %d: %s; %s",
                        self.name,
                        shard.index,
                        batch.seq,
                        error.reason,
                        why,
                    )
                    shard.m_records.inc(batch.rows - len(error.rows))
                    shard.m_bytes.inc(batch.nbytes)
                    if freshness is not None:
                        freshness.written(batch, self._clock.time(), column)
                    settled.append(settle_batch(batch, True))
                else:
                    logger.error(
                        "sink %s shard %d: batch %d failed on %s: %s; %s",
                        self.name,
                        shard.index,
                        batch.seq,
                        replica.endpoint,
                        error.reason,
                        why,
                    )
                    shard.m_abandoned.inc(batch.rows)
                    failed_for_good(batch, f"{error.reason}; {why}")
                    settled.append(settle_batch(batch, False))
            elif error is None:
                if not batch.settled:
                    shard.m_records.inc(batch.rows)
                    shard.m_bytes.inc(batch.nbytes)
                    if freshness is not None:
                        freshness.written(batch, self._clock.time(), column)
                    settled.append(settle_batch(batch, True))
            elif result == "retryable":
                if len(shard.replicas) > 1 and shard.preferred == replica.index:
                    shard.preferred = (replica.index + 1) % len(shard.replicas)
                if not batch.settled:
                    due = judged.retry_at
                    if due is None:
                        logger.error(
                            "sink %s shard %d: batch %d failed after %d attempts: %s",
                            self.name,
                            shard.index,
                            batch.seq,
                            batch.attempts,
                            error.reason,
                        )
                        shard.m_abandoned.inc(batch.rows)
                        settled.append(settle_batch(batch, False))
                    else:
                        batch.next_at = due
                        shard.queue.appendleft(batch)
                        shard.m_retries.inc()
            else:
                logger.error(
                    "sink %s shard %d: batch %d failed on %s: %s",
                    self.name,
                    shard.index,
                    batch.seq,
                    replica.endpoint,
                    error.reason,
                )
                if not batch.settled:
                    shard.m_abandoned.inc(batch.rows)
                    if isinstance(error, RowsFailed):
                        failed_for_good(batch, error.reason)
                    settled.append(settle_batch(batch, False))
            self._cond.notify_all()
        release_settled(self._budget, settled)
