"""The ``parquet:`` sink section, decoded strictly by :func:`spate.config.decode`.

Example::

    parquet:
      path: s3://lake/events            # or a local directory (/data/lake, file:///data/lake)
      publish: manifest                 # files | manifest
      table: events                     # manifest mode: parts under events.parts/
      schema: {id: int64, name: string, ts: "timestamp[ms]"}   # inferred when absent
      partition_by: [country]           # Hive directories country=DE/
      time_partitions: "dt=%Y-%m-%d/hour=%H"   # from the window's start time
      max_records: 100000               # a file holds at most this many rows
      max_bytes: 64MiB                  # ... or about this many in-memory bytes
      window: 1h                        # ... and never spans two windows (0: off)
      window_time: record               # record (time_column) | processing
      time_column: ts
      compression: zstd                 # zstd | snappy | gzip | lz4 | brotli | none
      compression_level: 3
      row_group_size: 65536
      audits: {not_empty: true, not_null: [id], unique: [id], check: "pkg.mod:fn", on_failure: fail}
      gate_timeout: 30s
      keep_manifests: 10                # manifest versions kept after each publish
      s3: {endpoint_url: "http://127.0.0.1:9000", region: us-east-1, path_style: true}

Owns the keys, their defaults and cross-field rules (B17); not the writing
(``_sink``), the naming (``_encode``) or the manifest (``_manifest``).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Literal

from spate import NO_SECRET, Secret
from spate.config import ByteSize, Duration, tls_file_errors
from spate.errors import ErrorPolicy
from spate.sink.config import BreakerConfig, RetryConfig

from spate_parquet._schema import SchemaError, parse_schema

__all__ = [
    "AuditConfig",
    "Compression",
    "ParquetSinkConfig",
    "S3Config",
]

Compression = Literal["zstd", "snappy", "gzip", "lz4", "brotli", "none"]


@dataclass(frozen=True, slots=True, kw_only=True)
class S3Config:
    """``s3:`` — how to reach an ``s3://`` path: explicit keys (with a session token), a
    profile, or the usual AWS credential chain."""

    endpoint_url: str = ""
    """An S3-compatible endpoint (MinIO, moto, …); empty for AWS."""
    region: str = ""
    """The region; empty takes it from the environment or the shared config."""
    path_style: bool | None = None
    """Path-style addressing (``true``) or virtual-hosted (``false``); by default on when
    ``endpoint_url`` is set, else AWS's choice."""
    access_key_id: str = ""
    """Static credentials; empty uses the default chain (environment, ``profile``, shared
    files, instance or pod role)."""
    secret_access_key: Secret = NO_SECRET
    """Goes with ``access_key_id`` (``secret_access_key_file:`` reads it from a file)."""
    session_token: Secret = NO_SECRET
    """Session token of temporary credentials (with the two keys above)."""
    profile: str = ""
    """A named profile of the shared AWS config and credentials files."""
    request_timeout: Duration = 60.0
    """Connect and read timeout of one request."""
    ca: str = ""
    """CA bundle (PEM) that signed the endpoint's certificate (a private CA of an
    S3-compatible store); empty: the CAs botocore trusts by default."""

    def config_errors(self) -> Iterator[tuple[str, str]]:
        if self.ca and self.endpoint_url.startswith("http://"):
            yield "ca", "only used with an https:// endpoint_url"
        yield from tls_file_errors(self.ca, "", "")
        if bool(self.access_key_id) != bool(self.secret_access_key):
            yield "access_key_id", "access_key_id and secret_access_key go together"
        if self.session_token and not self.access_key_id:
            yield "session_token", "needs access_key_id and secret_access_key"
        if self.profile and self.access_key_id:
            yield "profile", "give a profile or explicit keys, not both"
        if self.request_timeout <= 0:
            yield "request_timeout", f"must be positive, got {self.request_timeout}s"


@dataclass(frozen=True, slots=True, kw_only=True)
class AuditConfig:
    """``audits:`` — checks each part passes before it is published (write-audit-publish)."""

    not_empty: bool = True
    """The part holds at least one row."""
    not_null: list[str] = field(default_factory=list)
    """Columns that may hold no null."""
    unique: list[str] = field(default_factory=list)
    """Columns whose combined value is unique within the part."""
    check: str = ""
    """``module:function`` called with the part's ``pyarrow.Table``; returns ``None`` or
    ``True`` when the part passes, ``False`` or a reason (str) when it fails."""
    on_failure: Literal["fail", "skip"] = "fail"
    """``fail``: the batch fails (its acks fail, nothing is committed past it); ``skip``:
    the part is deleted, its rows are dropped and counted, and the pipeline goes on."""

    def config_errors(self) -> Iterator[tuple[str, str]]:
        if self.check and ":" not in self.check:
            yield "check", f"must be module:function, got {self.check!r}"


@dataclass(frozen=True, slots=True, kw_only=True)
class ParquetSinkConfig:
    """``sinks: {name: {parquet: ...}}``."""

    path: str = ""
    """Where files go: ``s3://bucket/prefix``, ``file:///dir`` or a local directory."""
    publish: Literal["files", "manifest"] = "files"
    """``files``: every written file is visible at once; ``manifest``: parts are listed in
    ``{table}.parts/_manifest.json``, replaced atomically, and only listed parts count."""
    table: str = ""
    """The table name of manifest mode (``{table}.parts/``)."""
    schema: dict[str, str] = field(default_factory=dict)
    """Column name -> Arrow type (``int64``, ``string``, ``timestamp[ms]``, …); rows are
    checked against it on offer. Empty: inferred per file from the rows (dicts)."""
    partition_by: list[str] = field(default_factory=list)
    """Columns whose values name Hive directories (``col=value/``), in this order."""
    time_partitions: str = ""
    """``strftime`` pattern of the window start, as directories (``dt=%Y-%m-%d/hour=%H``)."""
    max_records: int = 100_000
    """A file is cut after this many rows."""
    max_bytes: ByteSize = 64 * 1024 * 1024
    """A file is cut once its rows' estimated in-memory size reaches this."""
    window: Duration = 0.0
    """A file never spans two windows of this length (0: no time windows)."""
    window_time: Literal["record", "processing"] = "record"
    """Which clock places a row in a window: ``time_column`` of the row, or the wall clock
    when the row arrives (not replay-identical)."""
    time_column: str = ""
    """The row's time (datetime, or epoch milliseconds as int) for record-time windows."""
    compression: Compression = "zstd"
    """Parquet codec; part of the file identity."""
    compression_level: int | None = None
    """Codec level (zstd, gzip, brotli); part of the file identity."""
    row_group_size: int = 65_536
    """Rows per row group; part of the file identity."""
    audits: AuditConfig | None = None
    """Checks before publish; none when absent."""
    gate: Literal["local", "coordination"] = "local"
    """The commit gate of manifest mode: ``local`` (writers in this process) or
    ``coordination`` (writers in every process, through a lease in the store of the
    pipeline's top-level ``coordination`` section)."""
    gate_timeout: Duration = 30.0
    """How long a writer waits for the commit gate before publishing without it (the
    manifest's compare-and-set keeps that correct)."""
    max_pending: int = 4
    """Sealed files waiting for the writer before the sink refuses rows (B7)."""
    keep_manifests: int = 10
    """Manifest mode: after each publish, versions under ``{table}.parts/_manifests/``
    older than the newest this many are deleted (never the one ``_manifest.json`` names,
    nor one younger than ``manifest_grace``); 0 keeps every version."""
    manifest_grace: Duration = 300.0
    """Manifest mode: a version written less than this long ago is never deleted (a
    reader may still be reading it)."""
    orphans: Literal["keep", "delete"] = "keep"
    """Manifest mode, at start: parts written but never published are kept (a replay
    rewrites and adopts them) or deleted. ``delete`` needs the table to have one writer:
    it is refused with ``--processes N`` and ``gate: coordination`` (B129)."""
    one_row_per_record: bool = True
    """The chain gives this sink exactly one row per source record, so a row's position
    is its record's offset: a replay skips exactly the rows already in durable files and
    writes the same files. Set to false for chains that filter, split or fan out: then
    only whole source batches already in files are skipped (no loss; replays may repeat
    rows and cut other files)."""
    s3: S3Config = field(default_factory=S3Config)
    """Endpoint and credentials for ``s3://`` paths."""
    retry: RetryConfig = field(default_factory=RetryConfig)
    """Backoff between attempts of a failed write (B12)."""
    breaker: BreakerConfig | None = None
    """After ``failure_threshold`` failed writes in a row, wait ``open_for`` before one
    trial write (B11, B156); none when absent (only ``retry`` spaces the attempts)."""
    on_record_error: ErrorPolicy = ErrorPolicy.FAIL
    """What the chain does with a row that does not fit the schema (B28)."""

    def config_errors(self) -> Iterator[tuple[str, str]]:
        if not self.path:
            yield "path", "is required (s3://bucket/prefix or a local directory)"
        if self.publish == "manifest" and not self.table:
            yield "table", "is required with publish: manifest"
        if self.table and ("/" in self.table or self.table.startswith(".")):
            yield "table", f"must be a plain name, got {self.table!r}"
        try:
            parse_schema(self.schema)
        except SchemaError as exc:
            yield "schema", str(exc)
        if self.max_records < 1:
            yield "max_records", f"must be at least 1, got {self.max_records}"
        if self.max_bytes < 1:
            yield "max_bytes", f"must be at least 1 byte, got {self.max_bytes}"
        if self.window < 0:
            yield "window", f"must be 0 or positive, got {self.window}s"
        record_time = self.window_time == "record" and (self.window or self.time_partitions)
        if record_time and not self.time_column:
            yield "time_column", "is required for record-time windows or time_partitions"
        if self.time_partitions and not self.window:
            yield "window", "is required with time_partitions (directories name its start)"
        if self.row_group_size < 1:
            yield "row_group_size", f"must be at least 1, got {self.row_group_size}"
        if self.gate_timeout <= 0:
            yield "gate_timeout", f"must be positive, got {self.gate_timeout}s"
        if self.keep_manifests < 0:
            yield "keep_manifests", f"must be 0 (keep all) or positive, got {self.keep_manifests}"
        if self.manifest_grace < 0:
            yield "manifest_grace", f"must be 0 or positive, got {self.manifest_grace}s"
        if self.max_pending < 1:
            yield "max_pending", f"must be at least 1, got {self.max_pending}"
        if self.publish == "manifest" and self.orphans == "delete" and self.gate != "local":
            yield (
                "orphans",
                (
                    "delete needs one writer per table, but gate: coordination has writers "
                    "in several processes: a starting writer would delete the parts others "
                    "wrote and have not published yet; use keep (B129)"
                ),
            )
        declared = set(self.schema)
        for column in self.partition_by:
            if declared and column not in declared:
                yield "partition_by", f"column {column!r} is not in schema"

    def processes_errors(self, processes: int) -> Iterator[tuple[str, str]]:
        """Refuses ``orphans: delete`` for several worker processes (B129): every worker
        writes the same table, and one (re)starting would delete the parts its siblings
        uploaded and have not published yet — acknowledged rows lost."""
        if self.publish == "manifest" and self.orphans == "delete":
            yield (
                "orphans",
                (
                    f"delete needs one writer per table, but {processes} worker processes "
                    "write it: a starting worker would delete the parts its siblings wrote "
                    "and have not published yet; use keep (a replay adopts them) (B129)"
                ),
            )

    @property
    def is_s3(self) -> bool:
        return self.path.startswith("s3://")


def settings_identity(config: ParquetSinkConfig) -> Mapping[str, object]:
    """The encoder settings that are part of every file's identity (its name hash)."""
    return {
        "compression": config.compression,
        "compression_level": config.compression_level,
        "row_group_size": config.row_group_size,
        "format": "parquet-2.6",
    }
