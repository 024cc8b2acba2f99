"""Configuration models of the Kafka source (``source: {kafka: ...}``).

Defaults are chosen for a Python consumer's throughput (see the Kafka connector page):
librdkafka's default fetch backoff of one second leaves a fast consumer waiting on an
empty queue, so the source lowers it; everything else keeps librdkafka's defaults unless
set through the ``rdkafka:`` passthrough, which refuses the keys spate owns (B19).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Literal

from spate.config import Duration

from spate_kafka._passthrough import CONSUMER_OWNED, librdkafka_errors, passthrough_errors
from spate_kafka._rebalance import protocol_settings, worker_instance_id
from spate_kafka._security import KafkaSecurityConfig

__all__ = [
    "KafkaSourceConfig",
]

CONSUMER_DEFAULTS: Mapping[str, str] = {
    # A new group reads the topic from the start, as Kafka Connect sinks do.
    "auto.offset.reset": "earliest",
    # librdkafka's 1000ms backoff starves a consumer that drains its queue quickly.
    "fetch.queue.backoff.ms": "100",
    # Short enough for tests and rebalances, long enough for a busy pipeline thread.
    "session.timeout.ms": "45000",
    "max.poll.interval.ms": "300000",
}
"""Consumer settings applied before the passthrough (which overrides them)."""

HEARTBEAT_MS = 1000
"""Heartbeat interval unless ``rdkafka:`` sets one (a third of the session timeout when
that is shorter). A member learns of a rebalance from a heartbeat's answer: at
librdkafka's 3 s a member that started first reads every partition for up to 3 s more
after another joined (B108)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class KafkaSourceConfig:
    """``source: {kafka: ...}``."""

    brokers: str
    """Bootstrap servers, ``host:port[,host:port...]``."""
    topic: str
    """The topic to consume (one per pipeline)."""
    group_id: str
    """Consumer group; scale out by running more processes with the same group."""
    commit_interval: Duration = 5.0
    """How often offsets handed over by the checkpointer are committed to the broker."""
    startup_timeout: Duration = 30.0
    """Brokers must answer within this time at start, or the pipeline fails naming them."""
    assignment_timeout: Duration | None = None
    """Fail when no partition has been assigned for this long (off by default)."""
    statistics_interval: Duration = 1.0
    """librdkafka statistics cadence, which feeds the per-partition lag gauges; 0 disables."""
    stop_at: Literal["never", "end"] = "never"
    """``end``: bounded mode — stop at the end offsets seen at start, drain, exit 0."""
    consume_batch: int = 5000
    """Messages taken per ``consume()`` call."""
    rebalance: Literal["eager", "cooperative", "consumer"] = "eager"
    """The group protocol. ``eager``: every rebalance revokes every partition of every
    member. ``cooperative``: the classic protocol with the ``cooperative-sticky`` assignor,
    only the partitions that move are revoked. ``consumer``: the broker-driven protocol of
    KIP-848 (``group.protocol: consumer``; Kafka 4.0+, librdkafka 2.12+), incremental too."""
    group_assignor: Literal["uniform", "range"] | None = None
    """``rebalance: consumer`` only: the broker-side assignor (``group.remote.assignor``);
    unset leaves the broker's default (``uniform``)."""
    instance_id: str | None = None
    """Static membership (``group.instance.id``), e.g. ``${HOSTNAME}``: a member restarted
    within ``session.timeout.ms`` gets its partitions back without a rebalance. Under
    ``spate run --processes N`` each worker appends ``-<worker index>``."""
    revoke_commit_timeout: Duration = 30.0
    """How long a commit on revocation is retried while the broker or group coordinator is
    unavailable; after that the revocation completes without it (the next owner replays)."""
    security: KafkaSecurityConfig = field(default_factory=KafkaSecurityConfig)
    """TLS and SASL: ``protocol``, ``ca``, ``cert``, ``key``, ``sasl`` (B70)."""
    rdkafka: dict[str, str | int | float | bool] = field(default_factory=dict)
    """Other librdkafka consumer settings (TLS, SASL, fetch tuning), passed through."""

    def config_errors(self) -> Iterator[tuple[str, str]]:
        if not self.brokers.strip():
            yield "brokers", "must name at least one host:port"
        if not self.topic.strip():
            yield "topic", "must not be empty"
        if not self.group_id.strip():
            yield "group_id", "must not be empty"
        if self.commit_interval < 0.1:
            yield "commit_interval", "must be at least 100ms"
        if self.startup_timeout <= 0:
            yield "startup_timeout", "must be positive"
        if self.assignment_timeout is not None and self.assignment_timeout <= 0:
            yield "assignment_timeout", "must be positive"
        if self.statistics_interval < 0:
            yield "statistics_interval", "must not be negative"
        if self.consume_batch < 1:
            yield "consume_batch", "must be at least 1"
        if self.revoke_commit_timeout < 0:
            yield "revoke_commit_timeout", "must not be negative"
        if self.group_assignor is not None and self.rebalance != "consumer":
            yield "group_assignor", "is read only with rebalance: consumer"
        if self.instance_id is not None and not self.instance_id.strip():
            yield "instance_id", "must not be empty"
        refused = False
        for key, message in passthrough_errors(self.rdkafka, CONSUMER_OWNED):
            refused = True
            yield f"rdkafka.{key}", message
        for key, message in self.security.conflicts(self.rdkafka):
            refused = True
            yield f"rdkafka.{key}", message
        checked = self.rdkafka or self.security.protocol != "PLAINTEXT"
        if checked and not refused and self.brokers.strip() and self.group_id.strip():
            yield from librdkafka_errors(self.consumer_settings(), self.rdkafka, producer=False)

    def consumer_settings(self) -> dict[str, str | int | float | bool]:
        """The librdkafka configuration this source runs with (callbacks added later)."""
        settings: dict[str, str | int | float | bool] = dict(CONSUMER_DEFAULTS)
        settings.update(self.security.librdkafka())
        settings.update(self.rdkafka)
        settings.update(
            {
                "bootstrap.servers": self.brokers,
                "group.id": self.group_id,
                "enable.auto.commit": False,
                "enable.auto.offset.store": False,
                "enable.partition.eof": False,
                "statistics.interval.ms": int(self.statistics_interval * 1000),
            }
        )
        settings.update(protocol_settings(self.rebalance, self.group_assignor))
        if self.instance_id is not None:
            settings["group.instance.id"] = worker_instance_id(self.instance_id)
        if self.rebalance == "consumer":
            # The broker owns the session and the heartbeat under KIP-848; librdkafka
            # refuses these with group.protocol=consumer.
            for key in ("session.timeout.ms", "heartbeat.interval.ms"):
                settings.pop(key, None)
            return settings
        session = str(settings["session.timeout.ms"])
        if "heartbeat.interval.ms" not in self.rdkafka and session.isdigit():
            settings["heartbeat.interval.ms"] = max(min(HEARTBEAT_MS, int(session) // 3), 1)
        return settings
