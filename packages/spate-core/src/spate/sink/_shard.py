"""The state of one shard: its replicas, its open batch, its queue of sealed batches.

A shard holds at most one open batch (filled by the pipeline thread), a queue of sealed
batches waiting for a write (new ones, and retries waiting out their backoff), and the
batches being written (at most ``inflight.max_per_shard``). Writes go to the replicas of
this shard only: the preferred replica first, the next one after a failure; a replica
whose breaker is open is skipped, and a shard with no usable replica keeps its batches
queued, so its queue fills and the sink refuses rows, which pauses the source (B11).
Everything here is mutated under the pool lock.
"""

from __future__ import annotations

from collections import deque

from spate._secrets import display_url
from spate.metrics._meter import CounterSeries, GaugeSeries, HistogramSeries, Meter
from spate.metrics.names import (
    SINK_ABANDONED,
    SINK_BREAKER_STATE,
    SINK_BYTES,
    SINK_ERRORS,
    SINK_FLUSHES,
    SINK_HEALTHY,
    SINK_INFLIGHT,
    SINK_RECORDS,
    SINK_RETRIES,
    SINK_WRITE_SECONDS,
)
from spate.sink._batching import PoolBatch, SealReason
from spate.sink._breaker import Breaker, BreakerState
from spate.sink._writer import ShardWriter
from spate.sink.config import BreakerConfig

_SEAL_REASONS: tuple[SealReason, ...] = (
    "max_rows",
    "max_bytes",
    "linger",
    "tick",
    "drain",
    "tier",
    "replay",
)
_ERROR_CLASSES = ("retryable", "fatal", "record")
_OUTCOMES = ("ok", "retryable", "fatal")


class Replica:
    """One endpoint of a shard: its writer (after start) and its breaker."""

    __slots__ = ("breaker", "endpoint", "index", "m_breaker", "m_healthy", "writer")

    def __init__(
        self,
        index: int,
        endpoint: str,
        breaker_config: BreakerConfig,
        label: str,
        meter: Meter,
        component: str,
        component_type: str,
        shard: str,
    ) -> None:
        self.index = index
        self.endpoint = endpoint
        self.writer: ShardWriter | None = None
        self.m_healthy = meter.gauge(
            SINK_HEALTHY,
            component=component,
            component_type=component_type,
            shard=shard,
            replica=display_url(endpoint),
        )
        self.m_breaker = meter.gauge(
            SINK_BREAKER_STATE,
            component=component,
            component_type=component_type,
            shard=shard,
            replica=display_url(endpoint),
        )
        self.m_healthy.set(1)
        self.m_breaker.set(0)
        self.breaker = Breaker(breaker_config, label, self._on_breaker)

    def _on_breaker(self, state: BreakerState) -> None:
        self.m_healthy.set(1 if state is BreakerState.CLOSED else 0)
        self.m_breaker.set(0 if state is BreakerState.CLOSED else 1)


class Shard:
    """One shard of a sink pool."""

    def __init__(
        self,
        index: int,
        endpoints: tuple[str, ...],
        breaker_config: BreakerConfig,
        sink: str,
        meter: Meter,
        component_type: str,
    ) -> None:
        self.index = index
        label = str(index)
        self.replicas = [
            Replica(
                i,
                endpoint,
                breaker_config,
                f"sink {sink} shard {index} replica {endpoint}",
                meter,
                sink,
                component_type,
                label,
            )
            for i, endpoint in enumerate(endpoints)
        ]
        self.open: PoolBatch | None = None
        self.queue: deque[PoolBatch] = deque()
        self.writing: set[PoolBatch] = set()
        self.next_seq = 1
        self.preferred = 0
        base = {"component": sink, "component_type": component_type, "shard": label}
        self.m_records: CounterSeries = meter.counter(SINK_RECORDS, **base)
        self.m_bytes: CounterSeries = meter.counter(SINK_BYTES, **base)
        self.m_retries: CounterSeries = meter.counter(SINK_RETRIES, **base)
        self.m_abandoned: CounterSeries = meter.counter(SINK_ABANDONED, **base)
        self.m_inflight: GaugeSeries = meter.gauge(SINK_INFLIGHT, **base)
        self.m_flushes: dict[str, CounterSeries] = {
            reason: meter.counter(SINK_FLUSHES, reason=reason, **base) for reason in _SEAL_REASONS
        }
        self.m_errors: dict[str, CounterSeries] = {
            cls: meter.counter(SINK_ERRORS, error_class=cls, **base) for cls in _ERROR_CLASSES
        }
        self.m_write_seconds: dict[str, HistogramSeries] = {
            outcome: meter.histogram(SINK_WRITE_SECONDS, outcome=outcome, **base)
            for outcome in _OUTCOMES
        }

    @property
    def idle(self) -> bool:
        """Nothing sealed is waiting or being written (the open batch does not count)."""
        return not self.queue and not self.writing

    def pick(self, now: float, max_inflight: int) -> tuple[PoolBatch, Replica] | None:
        """The next batch to write and the replica to write it to, or None.

        Takes the first queued batch whose backoff has passed, if the shard is under its
        in-flight limit and has a usable replica (preferred one first).
        """
        if not self.queue or len(self.writing) >= max_inflight:
            return None
        batch = None
        for candidate in self.queue:
            if candidate.next_at <= now:
                batch = candidate
                break
        if batch is None:
            return None
        replica = self.usable_replica(now)
        if replica is None:
            return None
        self.queue.remove(batch)
        self.writing.add(batch)
        replica.breaker.acquire(now)
        batch.attempts += 1
        self.m_inflight.set(len(self.writing))
        return batch, replica

    def usable_replica(self, now: float) -> Replica | None:
        n = len(self.replicas)
        for step in range(n):
            replica = self.replicas[(self.preferred + step) % n]
            if replica.breaker.available(now):
                return replica
        return None

    def next_wake(self, now: float, max_inflight: int) -> float | None:
        """When this shard may have work to start (None: not before something changes)."""
        if not self.queue or len(self.writing) >= max_inflight:
            return None
        due = min(b.next_at for b in self.queue)
        if self.usable_replica(max(now, due)) is not None:
            return due
        reopen = [r.breaker.reopens_at() for r in self.replicas]
        times = [t for t in reopen if t is not None]
        return max(due, min(times)) if times else None
