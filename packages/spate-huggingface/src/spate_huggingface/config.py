"""The ``huggingface:`` sink section, decoded strictly by :func:`spate.config.decode`.

Example::

    huggingface:
      repo: my-org/weather              # a dataset repository
      branch: main
      token: ${HF_TOKEN}                # empty: the environment variable HF_TOKEN
      window: 1h                        # one commit per window
      window_time: processing           # processing | record (time_column)
      path_template: "data/date={start:%Y-%m-%d}/station={station}/part-{start:%H%M%S}-{hash}.{ext}"
      encoder: {format: parquet, compression: zstd, level: 3}
      retry: {initial: 1s, max: 1m, max_attempts: 6}

Owns the keys, their defaults and cross-field rules (B17); not the commit (``_hub``),
the files (``_encode``) or the windows (``_sink``).
"""

from __future__ import annotations

import datetime as dt
import string
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Literal

from spate import NO_SECRET, Secret
from spate.config import Duration
from spate.errors import ErrorPolicy
from spate.sink.config import BreakerConfig, RetryConfig
from spate_parquet import SchemaError, parse_schema

__all__ = [
    "CommitRetryConfig",
    "EncoderConfig",
    "HuggingFaceSinkConfig",
]

DEFAULT_ENDPOINT = "https://huggingface.co"
DEFAULT_TEMPLATE = (
    "data/date={start:%Y-%m-%d}/hour={start:%H}/part-{start:%Y%m%dT%H%M%S}-{hash}.{ext}"
)
TEMPLATE_FIELDS = frozenset({"start", "end", "hash", "ext"})
"""Placeholders a path template may use besides row columns."""


def template_columns(template: str) -> list[str]:
    """The row columns a path template names (its placeholders other than the built-ins)."""
    columns: list[str] = []
    for _text, name, _spec, _conv in string.Formatter().parse(template):
        if name is not None and name not in TEMPLATE_FIELDS and name not in columns:
            columns.append(name)
    return columns


@dataclass(frozen=True, slots=True, kw_only=True)
class EncoderConfig:
    """``encoder:`` — how a window's rows become one file per partition."""

    format: Literal["parquet", "jsonl", "csv"] = "parquet"
    """``parquet``, ``jsonl`` (one JSON object a line) or ``csv`` (a header line)."""
    compression: Literal["none", "zstd"] = "none"
    """Parquet only: ``none`` or ``zstd``."""
    level: int | None = None
    """The zstd level, 1 to 22; only with ``compression: zstd`` (default: zstd's own)."""
    row_group_size: int = 65_536
    """Parquet only: rows per row group."""

    def config_errors(self) -> Iterator[tuple[str, str]]:
        if self.compression != "none" and self.format != "parquet":
            yield "compression", f"only applies to format: parquet, not {self.format}"
        if self.level is not None:
            if self.compression != "zstd":
                yield "level", "only applies with compression: zstd"
            elif not 1 <= self.level <= 22:
                yield "level", f"must be between 1 and 22 for zstd, got {self.level}"
        if self.row_group_size < 1:
            yield "row_group_size", f"must be at least 1, got {self.row_group_size}"


@dataclass(frozen=True, slots=True, kw_only=True)
class CommitRetryConfig:
    """``retry:`` — backoff between attempts of a failed commit (B12, B79).

    Transport errors, timeouts, 429 and 5xx (and 409/412 conflicts) are retried; a
    ``Retry-After`` longer than the backoff is waited out (up to 5 minutes). After
    ``max_attempts`` the window's batch fails and its records stay upstream.
    """

    initial: Duration = 1.0
    """Wait before the first retry."""
    max: Duration = 60.0
    """Longest backoff between two attempts."""
    multiplier: float = 2.0
    """Factor by which each wait grows over the previous one."""
    jitter: float = 0.2
    """Largest random fraction taken off a wait, in [0, 1)."""
    max_attempts: int = 6
    """Commit attempts per window including the first; ``0`` retries until the drain
    deadline."""

    def as_retry(self) -> RetryConfig:
        return RetryConfig(
            initial=self.initial,
            max=self.max,
            multiplier=self.multiplier,
            jitter=self.jitter,
            max_attempts=self.max_attempts,
        )

    def config_errors(self) -> Iterator[tuple[str, str]]:
        yield from self.as_retry().config_errors()
        if self.max_attempts < 0:
            yield "max_attempts", f"must be 0 or positive, got {self.max_attempts}"


@dataclass(frozen=True, slots=True, kw_only=True)
class HuggingFaceSinkConfig:
    """``sinks: {name: {huggingface: ...}}``."""

    repo: str = field(default="", metadata={"required": True})
    """The dataset repository, ``owner/name``."""
    branch: str = "main"
    """The revision commits go to."""
    endpoint: str = DEFAULT_ENDPOINT
    """The Hub's address."""
    token: Secret = NO_SECRET
    """A write token; empty: the environment variable ``HF_TOKEN``. A secret: never in a
    log line, an error or a metric (B67)."""
    path_template: str = DEFAULT_TEMPLATE
    """Where each file goes in the repository: a Python format string of ``{start}`` and
    ``{end}`` (the window's bounds, UTC datetimes: ``{start:%Y-%m-%d}``), ``{hash}`` (16
    hex digits of the file's bytes and encoder settings; required), ``{ext}`` and any
    row column (``station={station}``: rows are split into one file per value, Hive
    style)."""
    window: Duration = 3600.0
    """Rows are grouped into windows of this length; a window is committed once the clock
    passes its end (checked every checkpoint tick), on drain, or at ``max_records``."""
    window_time: Literal["processing", "record"] = "processing"
    """Which time places a row in a window: the clock when the row arrives, or the row's
    ``time_column``."""
    time_column: str = ""
    """The row's time (datetime, or epoch milliseconds) for ``window_time: record``."""
    schema: dict[str, str] = field(default_factory=dict)
    """Column name -> Arrow type (``int64``, ``string``, ``timestamp[ms]``, …); rows are
    checked against it on offer. Empty: inferred per file from the rows (dicts)."""
    encoder: EncoderConfig = field(default_factory=EncoderConfig)
    """The file format."""
    commit_message: str = "spate: {rows} rows, window {start:%Y-%m-%dT%H:%M:%S}Z"
    """The commit summary: ``{rows}``, ``{files}``, ``{start}``, ``{end}``."""
    max_records: int = 1_000_000
    """A window holding this many rows is committed at once (a later commit takes the
    rest of the window)."""
    max_pending: int = 4
    """Windows waiting for their commit before the sink refuses rows (B7)."""
    request_timeout: Duration = 60.0
    """Connect, read and write timeout of one request: a commit that makes no progress
    for this long is abandoned and retried, so it cannot hold the commit gate."""
    gate_timeout: Duration = 300.0
    """How long a commit waits for the repository's commit gate (another commit to the
    same repository and branch in this process) before the attempt counts as failed."""
    retry: CommitRetryConfig = field(default_factory=CommitRetryConfig)
    """Backoff between commit attempts."""
    breaker: BreakerConfig | None = None
    """After ``failure_threshold`` failed commits in a row, wait ``open_for`` before one
    trial commit (B11, B156); none when absent (only ``retry`` spaces the attempts)."""
    on_record_error: ErrorPolicy = ErrorPolicy.FAIL
    """What the chain does with a row that does not fit the schema or the path (B28)."""

    def config_errors(self) -> Iterator[tuple[str, str]]:
        owner, _, name = self.repo.partition("/")
        if not owner or not name or "/" in name:
            yield "repo", f"must be owner/name, got {self.repo!r}"
        if not self.branch:
            yield "branch", "must not be empty"
        if not self.endpoint.startswith(("http://", "https://")):
            yield "endpoint", f"must be an http:// or https:// URL, got {self.endpoint!r}"
        yield from _template_errors(self.path_template)
        if self.window <= 0:
            yield "window", f"must be positive, got {self.window}s"
        if self.window_time == "record" and not self.time_column:
            yield "time_column", "is required with window_time: record"
        try:
            parse_schema(self.schema)
        except SchemaError as exc:
            yield "schema", str(exc)
        declared = set(self.schema)
        for column in template_columns(self.path_template):
            if declared and column not in declared:
                yield "path_template", f"column {column!r} is not in schema"
        try:
            self.commit_message.format(rows=0, files=0, start=_EPOCH, end=_EPOCH)
        except (KeyError, ValueError, IndexError, AttributeError) as exc:
            yield "commit_message", f"is not a valid template: {exc}"
        if self.max_records < 1:
            yield "max_records", f"must be at least 1, got {self.max_records}"
        if self.max_pending < 1:
            yield "max_pending", f"must be at least 1, got {self.max_pending}"
        if self.request_timeout <= 0:
            yield "request_timeout", f"must be positive, got {self.request_timeout}s"
        if self.gate_timeout <= 0:
            yield "gate_timeout", f"must be positive, got {self.gate_timeout}s"


def _template_errors(template: str) -> Iterator[tuple[str, str]]:
    try:
        parsed = list(string.Formatter().parse(template))
    except ValueError as exc:
        yield "path_template", f"is not a valid template: {exc}"
        return
    names = [name for _t, name, _s, _c in parsed if name is not None]
    if any(not name or not name.isidentifier() for name in names):
        yield "path_template", "placeholders must be names ({start:%Y}, {station}), not {} or {0}"
        return
    if "hash" not in names:
        yield "path_template", "must contain {hash}, so different files never share a path"
    if template.startswith("/") or ".." in template.split("/") or template.endswith("/"):
        yield "path_template", f"must be a relative file path, got {template!r}"
    try:
        template.format_map(_Probe())
    except (KeyError, ValueError, IndexError, AttributeError) as exc:
        yield "path_template", f"is not a valid template: {exc}"


class _Probe(dict[str, object]):
    """Values to try a template with: datetimes for the window bounds, text otherwise."""

    def __missing__(self, key: str) -> object:
        return _EPOCH if key in ("start", "end") else "x"


_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
