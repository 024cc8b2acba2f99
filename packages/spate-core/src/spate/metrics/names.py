"""Every metric family spate exports: name, kind, help and extra labels (B23).

The monitoring guide (docs/guides/monitoring.md) documents each of them.

Names exist only here. All start with ``spate_``; counters end in ``_total``; measured
values carry a unit suffix. Every series also has the :data:`BASE_LABELS`. The monitoring
guide in the docs is checked against :data:`ALL_FAMILIES` by a test.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from spate.metrics._freshness import FRESHNESS_BUCKETS

BASE_LABELS: tuple[str, ...] = ("pipeline", "component", "component_type")

_LATENCY_BUCKETS = (0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60)


@dataclass(frozen=True, slots=True)
class MetricFamily:
    name: str
    kind: Literal["counter", "gauge", "histogram"]
    help: str
    labels: tuple[str, ...] = ()
    buckets: tuple[float, ...] | None = None
    weighted: bool = False
    """A histogram whose observations carry a count (rows of a batch): exported alike,
    recorded through :class:`spate.metrics.Freshness` (B220)."""


def _c(name: str, help: str, *labels: str) -> MetricFamily:
    return MetricFamily(name, "counter", help, labels)


def _g(name: str, help: str, *labels: str) -> MetricFamily:
    return MetricFamily(name, "gauge", help, labels)


def _h(name: str, help: str, *labels: str) -> MetricFamily:
    return MetricFamily(name, "histogram", help, labels, _LATENCY_BUCKETS)


# Source
SOURCE_RECORDS = _c("spate_source_records_total", "Records polled from the source.", "lane")
SOURCE_BYTES = _c("spate_source_bytes_total", "Payload bytes polled from the source.", "lane")
SOURCE_POLL_SECONDS = _h("spate_source_poll_duration_seconds", "Time spent in one source poll.")
SOURCE_LAG = _g(
    "spate_source_lag_records",
    "Records between the consumer's position and the end of the lane; NaN until measured, "
    "0 when not owned.",
    "lane",
)
SOURCE_COMMITTED_LAG = _g(
    "spate_source_committed_lag_records",
    "Records between the committed position and the end of the lane (what a crash would "
    "replay); NaN until measured, 0 when not owned.",
    "lane",
)
SOURCE_DROPPED = _c(
    "spate_source_dropped_total",
    "Records (or whole responses) a source dropped: duplicates, or record errors skipped.",
    "reason",
)
SOURCE_REQUESTS = _c(
    "spate_source_requests_total",
    "Requests a polling source made, by outcome (ok, retried, failed).",
    "outcome",
)
SOURCE_REBALANCES = _c(
    "spate_source_rebalances_total", "Lane assignment changes seen by the source.", "event"
)

# Deserializer
DESER_RECORDS = _c(
    "spate_deser_records_total",
    "Payloads through the deserializer by outcome (ok, skipped, failed, not_ready, empty).",
    "outcome",
)
DESER_DROPPED = _c(
    "spate_deser_dropped_total", "Records the deserializer dropped, by reason.", "reason"
)

# Operators
OPS_IN = _c("spate_operator_records_in_total", "Records entering the operator chain.")
OPS_OUT = _c("spate_operator_records_out_total", "Rows the chain emitted to sinks.", "sink")
OPS_DROPPED = _c(
    "spate_operator_dropped_total",
    "Records the chain dropped on purpose (filter, skip policy, unrouted), by reason.",
    "reason",
)
OPS_ERRORS = _c("spate_operator_errors_total", "Operator exceptions, by policy taken.", "policy")

# Dead letters
DLQ_RECORDS = _c(
    "spate_dead_letter_records_total",
    "Records written to the dead-letter sink, by stage (deserializer, operator, sink) and reason.",
    "stage",
    "reason",
)
DLQ_LIMIT_BREACHES = _c(
    "spate_dead_letter_limit_breaches_total",
    "Times a dead-letter limit (max_ratio, max_consecutive) failed the pipeline.",
    "limit",
)

# Backpressure
BP_PAUSED = _g("spate_backpressure_paused", "1 while the source is paused for backpressure.")
BP_PAUSE_EVENTS = _c(
    "spate_backpressure_pause_events_total", "Times the source was paused, by cause.", "cause"
)
BP_INFLIGHT_BYTES = _g(
    "spate_backpressure_inflight_bytes", "Estimated bytes held by unresolved batches."
)

# Sinks (per shard)
SINK_RECORDS = _c("spate_sink_records_total", "Rows durably written.", "shard")
SINK_BYTES = _c("spate_sink_bytes_total", "Encoded bytes durably written.", "shard")
SINK_FLUSHES = _c(
    "spate_sink_flushes_total",
    "Batches sealed, by reason (max_rows, max_bytes, linger, tick, drain, tier, replay).",
    "shard",
    "reason",
)
SINK_WRITE_SECONDS = _h(
    "spate_sink_write_duration_seconds", "Duration of one batch write attempt.", "shard", "outcome"
)
SINK_RETRIES = _c("spate_sink_retries_total", "Batch write retries.", "shard")
SINK_ERRORS = _c("spate_sink_errors_total", "Write errors by class.", "shard", "error_class")
SINK_INFLIGHT = _g("spate_sink_inflight_batches", "Batches being written.", "shard")
SINK_HEALTHY = _g(
    "spate_sink_replica_healthy", "1 when the replica's breaker is closed.", "shard", "replica"
)
SINK_BREAKER_STATE = _g(
    "spate_sink_breaker_open",
    "1 while the replica's circuit breaker is open or half-open.",
    "shard",
    "replica",
)
SINK_ABANDONED = _c(
    "spate_sink_abandoned_rows_total", "Rows abandoned without a successful write.", "shard"
)
SINK_SERVER_REJECTED = _c(
    "spate_sink_server_rejected_rows_total",
    "Rows the server refused on their own after their block was bisected, by code and policy.",
    "code",
    "policy",
)
SINK_ISOLATE_INSERTS = _c(
    "spate_sink_isolate_inserts_total",
    "Extra inserts made to isolate the rows of blocks the server refused.",
)
SINK_LATE_ROWS = _c(
    "spate_sink_late_rows_total",
    "Rows older than late_data.after written to the late_data sink's table, by table.",
    "table",
)
SINK_PARTITION_INSERTS = _c(
    "spate_sink_partition_inserts_total",
    "Extra inserts made to keep each insert within max_partitions_per_insert_block.",
)

SINK_EVENT_TO_WRITTEN = MetricFamily(
    "spate_sink_event_to_written_seconds",
    "histogram",
    "Seconds from a row's event time (its source record's timestamp, or the sink's "
    "event-time column) to the end of the insert that wrote it; one count per row.",
    ("table",),
    FRESHNESS_BUCKETS,
    weighted=True,
)

SINK_TABLE_PARTS = _g(
    "spate_sink_table_active_parts",
    "Active parts of the busiest partition of the sink's table, as last read (a sink "
    "that follows its table's health).",
    "table",
)
SINK_TABLE_PRESSURE = _g(
    "spate_sink_table_pressure",
    "0 while the table is healthy, rising to 1 at parts_to_throw_insert or after TOO_MANY_PARTS.",
    "table",
)
SINK_BATCH_MAX_ROWS = _g(
    "spate_sink_batch_max_rows",
    "The max_rows batches seal at now: the configured one, grown under table pressure.",
    "table",
)
SINK_INSERT_WAIT = _c(
    "spate_sink_insert_wait_seconds_total",
    "Seconds inserts waited before being sent, by cause (pressure, rate).",
    "table",
    "cause",
)

# Tiers (memory, spool, tee)
TIER_HELD_RECORDS = _g(
    "spate_tier_held_records", "Records a tier holds that the next tier has not settled."
)
TIER_HELD_BYTES = _g("spate_tier_held_bytes", "Bytes a tier holds (on disk for a spool).")
TIER_OLDEST_AGE = _g(
    "spate_tier_oldest_record_age_seconds", "Age of the oldest record a tier holds (0: none)."
)
TIER_FLUSHES = _c("spate_tier_flushes_total", "Batches a tier sealed and passed on.")
SPOOL_SEGMENTS = _g("spate_spool_segments", "Segment files the spool holds on disk.")
SPOOL_REPLAYED = _c(
    "spate_spool_replayed_records_total", "Records replayed from the spool on start."
)
SPOOL_RETRIED = _c(
    "spate_spool_retried_batches_total",
    "Spooled batches handed to the next tier again after it failed them (ack: spooled).",
)
SPOOL_FSYNC_SECONDS = _h("spate_spool_fsync_duration_seconds", "Duration of one spool fsync.")
SPOOL_WRITE_ERRORS = _c(
    "spate_spool_write_errors_total", "Spool appends or fsyncs that failed (a full disk)."
)
TEE_BRANCH_RECORDS = _c(
    "spate_tee_branch_records_total",
    "Records a tee branch settled, by branch sink and outcome (delivered, failed).",
    "branch",
    "outcome",
)

# Checkpoint
CKPT_PENDING = _g("spate_checkpoint_pending_batches", "Unresolved batches per lane.", "lane")
CKPT_COMMITS = _c(
    "spate_checkpoint_commits_total",
    "Commits by outcome: handed to the source (ok), refused (error), skipped on a "
    "revocation (skipped), rejected by the broker after an asynchronous send (rejected).",
    "outcome",
)
CKPT_WATERMARK_AGE = _g(
    "spate_checkpoint_watermark_age_seconds",
    "Seconds since the lane's committable watermark last advanced while work was pending.",
    "lane",
)
CKPT_WRITTEN_TO_COMMITTED = MetricFamily(
    "spate_checkpoint_written_to_committed_seconds",
    "histogram",
    "Seconds from a sink's write of a source batch to the commit of a position past it, "
    "by sink (component) and table; one count per record.",
    ("table",),
    FRESHNESS_BUCKETS,
    weighted=True,
)

# Coordination
COORD_OWNED = _g("spate_coordination_owned_splits", "Splits this instance owns.")
COORD_COMPLETED = _c("spate_coordination_completed_splits_total", "Splits completed.")
COORD_QUARANTINED = _c(
    "spate_coordination_quarantined_splits_total", "Splits this instance put in quarantine."
)
COORD_IN_QUARANTINE = _g(
    "spate_coordination_splits_in_quarantine",
    "Splits of the job in quarantine, as last read by this instance.",
)
COORD_LIVE_WORKERS = _g("spate_coordination_live_workers", "Live workers seen.")
COORD_LEADER = _g("spate_coordination_leader", "1 while this instance is the leader.")
COORD_ACQUISITIONS = _c("spate_coordination_acquisitions_total", "Splits acquired.")
COORD_LOSSES = _c("spate_coordination_losses_total", "Splits lost or revoked.")
COORD_STORE_SECONDS = _h(
    "spate_coordination_store_op_duration_seconds", "Coordination store operations.", "op"
)

# Supervisor (restarts of a pipeline or of worker processes)
SUPERVISOR_FAILURES = _c(
    "spate_supervisor_failures_total",
    "Failed runs of a supervised pipeline (or deaths of a worker process).",
    "worker",
)
SUPERVISOR_RESTARTS = _c(
    "spate_supervisor_restarts_total",
    "Restarts of a supervised pipeline (or of a worker process) after a failure.",
    "worker",
)
SUPERVISOR_GIVE_UPS = _c(
    "spate_supervisor_give_ups_total",
    "Times the supervisor gave up after max_restarts failures within its window.",
    "worker",
)
SUPERVISOR_BACKOFF = _g(
    "spate_supervisor_backoff_seconds",
    "The wait before the pending restart; 0 while running.",
    "worker",
)

DROPPED_FAMILIES: tuple[MetricFamily, ...] = (SOURCE_DROPPED, DESER_DROPPED, OPS_DROPPED)
"""Families of records dropped on purpose, summed by reason in the run summary and the
status line (B42)."""

ALL_FAMILIES: tuple[MetricFamily, ...] = tuple(
    value for value in list(globals().values()) if isinstance(value, MetricFamily)
)

COORDINATION_FAMILIES: tuple[MetricFamily, ...] = tuple(
    family for family in ALL_FAMILIES if family.name.startswith("spate_coordination_")
)
"""Families that apply only to a pipeline with a ``coordination:`` section."""

FRESHNESS_FAMILIES: tuple[MetricFamily, ...] = (SINK_EVENT_TO_WRITTEN, CKPT_WRITTEN_TO_COMMITTED)
"""The weighted histograms of end-to-end freshness (B220-B223)."""

PIPELINE_FAMILIES: tuple[MetricFamily, ...] = tuple(
    family for family in ALL_FAMILIES if family not in COORDINATION_FAMILIES
)
"""Families every pipeline has; what a new :class:`~spate.metrics.Meter` declares."""
