"""The framework's own config sections and their defaults (docs/reference/configuration.md, B17).

Connector sections (``source``, ``deserializer``, each sink) are validated by the
connector's own model; these are the sections spate itself owns. Every field has a
default, documented in the configuration reference (generated from these models).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Literal

from spate._secrets import NO_SECRET, Secret
from spate.config._decode import ByteSize, Duration


@dataclass(frozen=True, slots=True, kw_only=True)
class PipelineSection:
    """``pipeline:`` — identity and threads."""

    name: str = "spate"
    """Pipeline name: the ``pipeline`` label of every metric and the dedup-token prefix."""
    io_threads: int = 2
    """Sink and I/O worker threads."""
    gc_threshold: int = 50_000
    """Python's generation-0 garbage-collection threshold while the pipeline runs (0 keeps
    the interpreter's own). Records and rows in flight are many short-lived containers;
    Python's default of 700 makes the collector scan them over and over."""
    status_interval: Duration = 30.0
    """How often a running pipeline logs its status line (records per second in and out,
    lag, last commit, paused lanes, dropped records); ``0`` turns it off."""
    processes: int | Literal["auto"] = 1
    """Worker processes running this pipeline (``spate run --processes`` overrides it).
    ``auto`` is the number of cores this process may use. With more than one, a parent
    process starts the workers, serves one admin endpoint for all of them, forwards
    SIGTERM/SIGINT and restarts a worker that died (the ``supervisor:`` rules)."""

    delivery: Literal["at_least_once", "effectively_once"] = "at_least_once"
    """``effectively_once`` (ClickHouse sinks only): every block's positions are recorded
    in a state table before its insert and a replay rebuilds the same blocks with the
    same dedup tokens, so a crash, rebalance or outage writes no duplicate rows (see
    docs/concepts/delivery.md for what it costs and the table settings it needs)."""

    def config_errors(self) -> Iterator[tuple[str, str]]:
        if not self.name.strip():
            yield "name", "must not be empty"
        if self.status_interval < 0:
            yield "status_interval", "must be 0 (off) or positive"
        if self.processes != "auto" and self.processes < 1:
            yield "processes", "must be at least 1, or auto"
        if self.io_threads < 1:
            yield "io_threads", "must be at least 1"
        if self.gc_threshold < 0:
            yield "gc_threshold", "must be 0 (keep the interpreter's) or positive"


@dataclass(frozen=True, slots=True, kw_only=True)
class CheckpointConfig:
    """``checkpoint:`` — commit cadence, pending bound, drain and stall limits."""

    interval: Duration = 5.0
    """How often watermarks are computed, handed to the source and partial buffers sealed."""
    max_pending_batches: int = 1024
    """Hard bound on unresolved batches per lane, checked before polling more (B6)."""
    drain_timeout: Duration = 30.0
    """How long a drain may write before the rest is abandoned (B14)."""
    stalled_fail_after: Duration = 60.0
    """How long a failed batch may block the head of a lane before the pipeline fails (B5)."""

    def config_errors(self) -> Iterator[tuple[str, str]]:
        if self.interval < 0.1:
            yield "interval", "must be at least 100ms"
        if self.max_pending_batches < 1:
            yield "max_pending_batches", "must be at least 1"
        if self.drain_timeout <= 0:
            yield "drain_timeout", "must be positive"
        if self.stalled_fail_after <= 0:
            yield "stalled_fail_after", "must be positive"


@dataclass(frozen=True, slots=True, kw_only=True)
class BackpressureConfig:
    """``backpressure:`` — the in-flight byte budget and its hysteresis (B7)."""

    max_inflight_bytes: ByteSize = 256 * 1024 * 1024
    """Estimated bytes of buffered rows held by unresolved batches."""
    high_ratio: float = 0.9
    """Pause the source at this fraction of the budget."""
    low_ratio: float = 0.5
    """Resume under this fraction (and after ``min_pause``)."""
    min_pause: Duration = 0.1
    """Shortest pause, so the source does not flap."""

    def config_errors(self) -> Iterator[tuple[str, str]]:
        if self.max_inflight_bytes <= 0:
            yield "max_inflight_bytes", "must be positive"
        if not 0 < self.high_ratio <= 1:
            yield "high_ratio", "must be in (0, 1]"
        if not 0 < self.low_ratio < self.high_ratio:
            yield "low_ratio", "must be greater than 0 and less than high_ratio"
        if self.min_pause < 0:
            yield "min_pause", "must not be negative"


DEFAULT_ADMIN_PORT = 9484
"""The admin server's default port: clear of Prometheus's own 9090 (B68)."""
DEFAULT_ADMIN_LISTEN = f"127.0.0.1:{DEFAULT_ADMIN_PORT}"
"""The admin server's default address: loopback only, so ``/metrics`` is not offered to
every interface unasked; taken, a free port is chosen and logged instead (B134)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class MetricsAuthConfig:
    """``admin.metrics_auth:`` — credentials ``/metrics`` asks for (B68).

    Either ``user`` and ``password`` (HTTP basic auth) or ``token`` (``Authorization:
    Bearer``), or both; with neither, ``/metrics`` is open. The probes stay open, since
    the kubelet does not authenticate.
    """

    user: str = ""
    """User name of HTTP basic auth (with ``password``)."""
    password: Secret = NO_SECRET
    """Password of HTTP basic auth; ``password_file:`` reads it from a file."""
    token: Secret = NO_SECRET
    """Bearer token; ``token_file:`` reads it from a file."""

    @property
    def enabled(self) -> bool:
        return bool(self.user or self.token)

    def config_errors(self) -> Iterator[tuple[str, str]]:
        if bool(self.user) != bool(self.password):
            yield "user", "user and password are given together (HTTP basic auth)"


@dataclass(frozen=True, slots=True, kw_only=True)
class AdminConfig:
    """``admin:`` — the HTTP server for ``/metrics``, ``/healthz`` and ``/readyz`` (B22)."""

    listen: str = DEFAULT_ADMIN_LISTEN
    """``host:port`` to bind (port 0 picks a free port), or ``none`` to bind nothing. The
    default listens on loopback only; when its port is taken (a second instance on the
    host) a free port is chosen and logged. Any other address that is taken fails at
    start-up. Bind ``0.0.0.0:9484`` for Prometheus on another host (with
    ``metrics_auth`` where that matters)."""
    metrics_auth: MetricsAuthConfig = field(default_factory=MetricsAuthConfig)
    """Credentials ``/metrics`` asks for (basic auth or a bearer token); open by default."""
    stall_after: Duration = 30.0
    """``/healthz`` turns 503 when the pipeline thread or a sink worker made no progress
    for this long, or the watermark is stuck while data flows."""
    lane_stall_after: Duration | None = None
    """``/healthz`` also turns 503 when an owned partition has records to fetch yet
    returned nothing for this long although spate did not pause it (fetching stopped
    behind spate's back). Unset: the same as ``stall_after``."""

    def config_errors(self) -> Iterator[tuple[str, str]]:
        if self.lane_stall_after is not None and self.lane_stall_after <= 0:
            yield "lane_stall_after", "must be positive"
        if self.listen == "none":
            return
        host, sep, port = self.listen.rpartition(":")
        if not sep or not host or not port.isdigit() or not 0 <= int(port) <= 65535:
            yield "listen", f"expected host:port or none, got {self.listen!r}"


@dataclass(frozen=True, slots=True, kw_only=True)
class ReadinessConfig:
    """``readiness:`` — what else ``/readyz`` asks of a running pipeline (B222)."""

    max_freshness: Duration | None = None
    """``/readyz`` turns 503 while the p99 of event time → written (any sink, over the
    last ``freshness_window``) exceeds this; unset, freshness does not count. A window
    with no rows written does not fail it (``/healthz`` watches a stuck pipeline)."""
    freshness_window: Duration = 60.0
    """How far back the p99 of ``max_freshness`` and the status line's freshness look
    (10 s to 10 min)."""

    def config_errors(self) -> Iterator[tuple[str, str]]:
        if self.max_freshness is not None and self.max_freshness <= 0:
            yield "max_freshness", "must be positive"
        if not 10 <= self.freshness_window <= 600:
            yield "freshness_window", "must be between 10s and 10m"


@dataclass(frozen=True, slots=True, kw_only=True)
class MetricsConfig:
    """``metrics:`` — which exporter serves the metrics."""

    exporter: Literal["prometheus", "none"] = "prometheus"
    """``prometheus`` serves every ``spate_*`` family on the admin server's ``/metrics``;
    ``none`` answers 404 there (the families are still counted in-process)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class DeadLetterSettings:
    """``dead_letter:`` — besides ``sink:`` (any sink connector section): the format of
    what the dead-letter sink is offered and the limits (B71, B72)."""

    format: Literal["auto", "kafka", "row"] = "auto"
    """What the dead-letter sink is offered: ``kafka`` (original key and value, error in
    ``spate.error.*`` headers), ``row`` (a mapping of payload and error columns), or
    ``auto``: ``kafka`` for a Kafka sink, ``row`` for any other."""
    max_consecutive: int = 1000
    """Fail the pipeline when this many records of one lane in a row are dead-lettered
    (0: no limit)."""
    max_ratio: float = 0.5
    """Fail the pipeline when more than this fraction of the records seen over the last
    ``window`` records were dead-lettered (1: no limit)."""
    window: int = 10_000
    """Records the ``max_ratio`` is measured over (it is checked once this many were seen)."""

    def config_errors(self) -> Iterator[tuple[str, str]]:
        if self.max_consecutive < 0:
            yield "max_consecutive", "must be 0 (no limit) or positive"
        if not 0 < self.max_ratio <= 1:
            yield "max_ratio", "must be in (0, 1]"
        if self.window < 1:
            yield "window", "must be at least 1"


@dataclass(frozen=True, slots=True, kw_only=True)
class SupervisorConfig:
    """``supervisor:`` — rebuild a failed pipeline (or restart a dead worker process).

    Present in the YAML (even empty: ``supervisor: {}``), it makes ``spate run`` rebuild
    the pipeline from its configuration after a failed run, waiting ``initial_backoff``,
    then ``multiplier`` times longer after each further failure, up to ``max_backoff``.
    It gives up, and the run exits 1, when more than ``max_restarts`` failures fall
    within ``window`` with no healthy run between them. With ``--processes N`` the same
    rules restart dead worker processes, whether or not the section is given.
    """

    max_restarts: int = 5
    """Restarts allowed within ``window``; the next failure gives up (exit 1)."""
    window: Duration = 600.0
    """Failures older than this no longer count towards ``max_restarts``."""
    initial_backoff: Duration = 1.0
    """Wait before the first restart."""
    max_backoff: Duration = 60.0
    """Cap on the wait between restarts."""
    multiplier: float = 2.0
    """Each further consecutive failure multiplies the wait by this."""
    healthy_after: Duration = 60.0
    """A run that lasted this long before failing was healthy: the failure count and the
    backoff start again from zero."""

    def config_errors(self) -> Iterator[tuple[str, str]]:
        if self.max_restarts < 0:
            yield "max_restarts", "must not be negative"
        if self.window <= 0:
            yield "window", "must be positive"
        if self.initial_backoff < 0:
            yield "initial_backoff", "must not be negative"
        if self.max_backoff < self.initial_backoff:
            yield "max_backoff", "must be at least initial_backoff"
        if self.multiplier < 1:
            yield "multiplier", "must be at least 1"
        if self.healthy_after <= 0:
            yield "healthy_after", "must be positive"

    def backoff(self, failures: int) -> float:
        """The wait before restarting after ``failures`` consecutive failures (≥ 1)."""
        exponent = max(failures - 1, 0)
        # Cap the exponent as well, so a long history cannot overflow the float.
        delay = self.initial_backoff * self.multiplier ** min(exponent, 64)
        return float(min(delay, self.max_backoff))


@dataclass(frozen=True, slots=True, kw_only=True)
class FrameworkSections:
    """The framework-owned top-level sections, decoded together."""

    pipeline: PipelineSection = field(default_factory=PipelineSection)
    checkpoint: CheckpointConfig = field(default_factory=CheckpointConfig)
    backpressure: BackpressureConfig = field(default_factory=BackpressureConfig)
    admin: AdminConfig = field(default_factory=AdminConfig)
    metrics: MetricsConfig = field(default_factory=MetricsConfig)
    readiness: ReadinessConfig = field(default_factory=ReadinessConfig)


@dataclass(frozen=True, slots=True, kw_only=True)
class ConnectorSpec:
    """One connector section: ``{tag: body}`` under ``source``, ``deserializer`` or a sink.

    ``tag`` is the connector's name (its entry-point name, e.g. ``kafka``), ``body`` the
    interpolated YAML under it, ``path`` the dotted path of the body (e.g.
    ``sinks.payments.clickhouse``) and ``component`` the name the built component's
    metrics and logs carry (``source``, ``deserializer``, or the sink's name).
    ``config`` is the body decoded by the connector's own model, or None when the
    configuration was loaded without checking connectors.
    """

    kind: Literal["source", "deserializer", "sink"]
    tag: str
    component: str
    path: str
    body: Mapping[str, object]
    config: object | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class PipelineConfig:
    """A whole pipeline configuration: framework sections plus connector sections.

    Exactly one of ``sink:`` and ``sinks:`` is given in YAML. A single ``sink:`` becomes
    ``sinks == {"sink": spec}`` with ``sinks_map`` False; a ``sinks:`` map keeps its
    names (``sink`` and the empty name are reserved) and sets ``sinks_map``, which makes
    an operator chain mandatory (there is no implicit routing between several sinks).
    ``coordination`` is kept as an opaque mapping; spate-coordination validates it.
    """

    pipeline: PipelineSection = field(default_factory=PipelineSection)
    checkpoint: CheckpointConfig = field(default_factory=CheckpointConfig)
    backpressure: BackpressureConfig = field(default_factory=BackpressureConfig)
    admin: AdminConfig = field(default_factory=AdminConfig)
    metrics: MetricsConfig = field(default_factory=MetricsConfig)
    readiness: ReadinessConfig = field(default_factory=ReadinessConfig)
    source: ConnectorSpec
    deserializer: ConnectorSpec | None = None
    sinks: Mapping[str, ConnectorSpec]
    sinks_map: bool = False
    coordination: Mapping[str, object] | None = None
    dead_letter: ConnectorSpec | None = None
    """The dead-letter sink (``dead_letter.sink``), if any (B71)."""
    dead_letter_settings: DeadLetterSettings = field(default_factory=DeadLetterSettings)
    """The other ``dead_letter:`` keys (format, limits)."""
    supervisor: SupervisorConfig | None = None
    """The ``supervisor:`` section when the YAML has one (rebuild after a failure)."""
    file: str | None = None
    """The file the configuration was read from, if any (for error messages)."""
    index: int | None = None
    """Where the pipeline stands in its file's ``pipelines:`` list; None for a file of
    one pipeline. The pipelines of one list share the file's admin endpoint."""

    @property
    def name(self) -> str:
        """The pipeline's name (``pipeline.name``)."""
        return self.pipeline.name

    def connectors(self) -> list[ConnectorSpec]:
        """Every connector section in build order: source, deserializer, sinks."""
        specs = [self.source]
        if self.deserializer is not None:
            specs.append(self.deserializer)
        specs.extend(self.sinks.values())
        if self.dead_letter is not None:
            specs.append(self.dead_letter)
        return specs
