"""Config models of the shared sink pool, embedded by every sink connector's own model.

A connector's config model includes these as fields so that every sink reads alike in
YAML::

    batch:    {max_rows: 100000, max_bytes: 32MiB, linger: 1s}
    inflight: {max_per_shard: 2}
    retry:    {initial: 100ms, max: 10s, multiplier: 2.0, jitter: 0.2, max_attempts: 0}
    breaker:  {failure_threshold: 5, open_for: 10s, half_open_probes: 1}
    shards:   [{replicas: [endpoint, ...], weight: 1}]

Each model is a frozen ``kw_only`` dataclass with a default for every field and a
``config_errors()`` method with its cross-field rules, so :func:`spate.config.decode`
reports mistakes with their dotted path (B17). Upholds B10 (batch sealing), B11
(breaker), B12 (retries) and B13 (shard weights).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Protocol

from spate.config._decode import ByteSize, Duration
from spate.errors import ErrorPolicy


@dataclass(frozen=True, slots=True, kw_only=True)
class BatchConfig:
    """When a shard's open batch is sealed and handed to a writer (B10).

    A batch seals when it holds ``max_rows`` rows or ``max_bytes`` estimated bytes, when
    its first row is ``linger`` old, on every checkpoint tick and on drain.
    """

    max_rows: int = 100_000
    """Rows per batch at most."""
    max_bytes: ByteSize = 32 * 1024 * 1024
    """Estimated in-memory bytes per batch at most (the estimate comes from the encoder)."""
    linger: Duration = 1.0
    """How long a partial batch may wait for more rows, counted from its first row."""

    def config_errors(self) -> Iterator[tuple[str, str]]:
        if self.max_rows < 1:
            yield "max_rows", f"must be at least 1, got {self.max_rows}"
        if self.max_bytes < 1:
            yield "max_bytes", f"must be at least 1 byte, got {self.max_bytes}"
        if self.linger <= 0:
            yield "linger", f"must be positive, got {self.linger}s"


@dataclass(frozen=True, slots=True, kw_only=True)
class InflightConfig:
    """How many batches of one shard may be written at the same time.

    As many sealed batches again may wait behind them; when that queue is full the sink
    refuses rows (``Offer.REJECTED``) and the pipeline pauses its source (B7).
    """

    max_per_shard: int = 2
    """Batches of one shard written at the same time (at least 1)."""

    def config_errors(self) -> Iterator[tuple[str, str]]:
        if self.max_per_shard < 1:
            yield "max_per_shard", f"must be at least 1, got {self.max_per_shard}"


@dataclass(frozen=True, slots=True, kw_only=True)
class RetryConfig:
    """Capped exponential backoff for retryable write errors (B12).

    The n-th retry waits ``min(max, initial * multiplier ** (n - 1))``, shortened by a
    random fraction of at most ``jitter`` (jitter never lengthens a wait).
    ``max_attempts`` counts write attempts including the first; 0 retries until the
    drain deadline.
    """

    initial: Duration = 0.1
    """Wait before the first retry."""
    max: Duration = 10.0
    """Longest wait between two attempts (at least ``initial``)."""
    multiplier: float = 2.0
    """Factor by which each wait grows over the previous one (at least 1.0)."""
    jitter: float = 0.2
    """Largest random fraction taken off a wait, in [0, 1); spreads retries of many
    writers."""
    max_attempts: int = 0
    """Write attempts per batch including the first; ``0`` retries until the drain
    deadline, after that the batch fails and its lane stalls (B5)."""

    def config_errors(self) -> Iterator[tuple[str, str]]:
        if self.initial <= 0:
            yield "initial", f"must be positive, got {self.initial}s"
        if self.max < self.initial:
            yield "max", f"must be at least initial ({self.initial}s), got {self.max}s"
        if self.multiplier < 1.0:
            yield "multiplier", f"must be at least 1.0, got {self.multiplier}"
        if not 0.0 <= self.jitter < 1.0:
            yield "jitter", f"must be in [0, 1), got {self.jitter}"
        if self.max_attempts < 0:
            yield "max_attempts", f"must be 0 (until drain) or more, got {self.max_attempts}"


@dataclass(frozen=True, slots=True, kw_only=True)
class BreakerConfig:
    """The circuit breaker kept per replica (B11).

    After ``failure_threshold`` consecutive failed writes the replica is not used for
    ``open_for``; then one trial write at a time is let through, and
    ``half_open_probes`` successful trials in a row close the breaker again.
    """

    failure_threshold: int = 5
    """Consecutive failed writes that open the replica's breaker."""
    open_for: Duration = 10.0
    """How long an open breaker keeps the replica out before trial writes."""
    half_open_probes: int = 1
    """Successful trial writes in a row that close the breaker again."""

    def config_errors(self) -> Iterator[tuple[str, str]]:
        if self.failure_threshold < 1:
            yield "failure_threshold", f"must be at least 1, got {self.failure_threshold}"
        if self.open_for <= 0:
            yield "open_for", f"must be positive, got {self.open_for}s"
        if self.half_open_probes < 1:
            yield "half_open_probes", f"must be at least 1, got {self.half_open_probes}"


@dataclass(frozen=True, slots=True, kw_only=True)
class ShardConfig:
    """One shard: the replicas (endpoints) that hold the same data, and its weight (B13).

    Writes fail over between the replicas of a shard, never to another shard.
    """

    replicas: tuple[str, ...] = field(default=(), metadata={"required": True})
    """Endpoints of this shard, in order of preference; at least one."""
    weight: int = 1
    """Share of the key space routed to this shard, relative to the other shards."""

    def config_errors(self) -> Iterator[tuple[str, str]]:
        if not self.replicas:
            yield "replicas", "a shard needs at least one replica"
        if len(set(self.replicas)) != len(self.replicas):
            yield "replicas", "the same replica is listed twice"
        if self.weight < 1:
            yield "weight", f"must be at least 1, got {self.weight}"


@dataclass(frozen=True, slots=True, kw_only=True)
class PoolConfig:
    """Everything the pool needs besides the connector; connectors may embed it whole.

    ``on_record_error`` is the policy for a row the encoder refuses (B28): ``fail``
    stops the pipeline, ``skip`` drops the row and counts it.
    """

    batch: BatchConfig = field(default_factory=BatchConfig)
    inflight: InflightConfig = field(default_factory=InflightConfig)
    retry: RetryConfig = field(default_factory=RetryConfig)
    breaker: BreakerConfig = field(default_factory=BreakerConfig)
    on_record_error: ErrorPolicy = ErrorPolicy.FAIL

    @classmethod
    def of(cls, section: PoolKeys) -> PoolConfig:
        """The pool settings of a connector section that embeds the pool keys."""
        return cls(
            batch=section.batch,
            inflight=section.inflight,
            retry=section.retry,
            breaker=section.breaker,
            on_record_error=section.on_record_error,
        )


class PoolKeys(Protocol):
    """A connector config model that embeds the pool's keys at its top level."""

    @property
    def batch(self) -> BatchConfig: ...
    @property
    def inflight(self) -> InflightConfig: ...
    @property
    def retry(self) -> RetryConfig: ...
    @property
    def breaker(self) -> BreakerConfig: ...
    @property
    def on_record_error(self) -> ErrorPolicy: ...
