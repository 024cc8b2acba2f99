"""The ``clickhouse:`` sink section, decoded strictly by :func:`spate.config.decode`.

Example (the ``sinks:`` map of ``examples/multi_table_split.yaml`` loads as written)::

    clickhouse:
      table: analytics.payments          # or table: payments + database: analytics
      columns: [order_id, {amount_cents: Int64}, reason]   # a type may be declared
      # record metadata as columns (ADR 0020): {kafka_offset: $offset}, {tenant: $header.tenant}
      format: native
      shards:
        - replicas: ["http://ch-1a:8123", "http://ch-1b:8123"]
          weight: 1
      user: default
      password: ""
      settings: {insert_quorum: 2}       # passed to every INSERT; framework keys refused
      compression: lz4                   # lz4 | zstd | none
      tls: {ca: /etc/ssl/ch-ca.pem, cert: client.pem, key: client.key}   # https:// replicas
      timeouts: {connect: 10s, send_receive: 300s}
      validate_schema: full              # off | names | full
      router: key                        # key (FNV-1a of the record key) | distributed
      sharding_key: xxHash64(order_id)   # with router: distributed
      batch: {max_rows: 100000, max_bytes: 32MiB, linger: 1s}
      inflight: {max_per_shard: 2}
      retry: {initial: 100ms, max: 10s, multiplier: 2.0, jitter: 0.2, max_attempts: 0}
      breaker: {failure_threshold: 5, open_for: 10s, half_open_probes: 1}
      on_record_error: fail              # fail | skip

Owns the keys, their defaults and cross-field rules; not the connection (``_client``) or
the write (``_writer``). Upholds B17 (unknown keys and bad values are refused with their
dotted path), B19 (``insert_deduplication_token``, ``insert_deduplicate`` and
``wait_end_of_query`` belong to the framework and are refused in ``settings``) and B29.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Literal

from spate import NO_SECRET, Secret
from spate.config import Duration, tls_file_errors
from spate.errors import ErrorPolicy
from spate.records import MetaColumn, MetaSource
from spate.sink.config import BatchConfig, BreakerConfig, InflightConfig, RetryConfig, ShardConfig

from spate_clickhouse._endpoint import EndpointError, parse_endpoint
from spate_clickhouse._targets import Template, is_template
from spate_clickhouse._types import ChType, TypeSyntaxError, parse_type

__all__ = [
    "ClickHouseSinkConfig",
    "ClickHouseTlsConfig",
    "ColumnSpec",
    "LateDataConfig",
    "TableHealthConfig",
    "TableOptions",
    "TimeoutsConfig",
]

RESERVED_SETTINGS: frozenset[str] = frozenset(
    {"insert_deduplication_token", "insert_deduplicate", "wait_end_of_query"}
)
"""Settings the sink sets itself on every INSERT (B9, B19)."""

_SHARDING_KEY = re.compile(
    r"^\s*(?:(?P<fn>xxHash64|intHash64)\s*\(\s*(?P<arg>[A-Za-z_][A-Za-z0-9_]*)\s*\)"
    r"|(?P<col>[A-Za-z_][A-Za-z0-9_]*))\s*$"
)
_FALSY = ("0", "false", "no", "off")


@dataclass(frozen=True, slots=True, kw_only=True)
class TimeoutsConfig:
    """``timeouts:`` — how long a connection and one request may take."""

    connect: Duration = 10.0
    """Establishing a TCP connection to a replica."""
    send_receive: Duration = 300.0
    """Sending an INSERT and waiting for its answer; a replica that hangs longer is retried."""

    def config_errors(self) -> Iterator[tuple[str, str]]:
        if self.connect <= 0:
            yield "connect", f"must be positive, got {self.connect}s"
        if self.send_receive <= 0:
            yield "send_receive", f"must be positive, got {self.send_receive}s"


@dataclass(frozen=True, slots=True, kw_only=True)
class TableOptions:
    """``table_options:`` — how ``create_table`` and ``spate schema ddl`` create the table."""

    engine: str = "ReplacingMergeTree"
    """Table engine. The default collapses the duplicates an at-least-once replay writes
    (``SELECT ... FINAL``); ``ReplicatedReplacingMergeTree(...)`` on a cluster. A
    collapsing engine (``CollapsingMergeTree(sign)``, ``VersionedCollapsingMergeTree``)
    needs ``pipeline.delivery: effectively_once`` (B378)."""
    order_by: tuple[str, ...] = ()
    """Sorting key columns (default: the first column)."""
    partition_by: str = ""
    """``PARTITION BY`` expression, e.g. ``toYYYYMM(placed_at)``."""
    ttl: str = ""
    """``TTL`` expression, e.g. ``placed_at + INTERVAL 90 DAY``."""
    settings: dict[str, object] = field(default_factory=dict)
    """Table settings (``SETTINGS k = v``)."""
    dedup_window: int = 1000
    """Inserts remembered for deduplication by token (B9): sets
    ``non_replicated_deduplication_window`` (``replicated_deduplication_window`` for a
    Replicated engine) unless ``settings`` does; 0 leaves it to the server."""
    on_cluster: str = ""
    """Create with ``ON CLUSTER name``: ClickHouse creates the table on every host of the
    cluster (each replica's probe sends it; ``IF NOT EXISTS`` makes the repeats no-ops)."""
    strings: Literal["string", "low_cardinality"] = "string"
    """Strings as ``String`` or ``LowCardinality(String)``."""
    enums: Literal["enum", "low_cardinality"] = "enum"
    """Enums as ``Enum8``/``Enum16`` of their symbols or as ``LowCardinality(String)``."""

    def config_errors(self) -> Iterator[tuple[str, str]]:
        if not self.engine.strip():
            yield "engine", "must not be empty"
        if self.dedup_window < 0:
            yield "dedup_window", "must not be negative"
        for key, value in self.settings.items():
            if not isinstance(value, str | int | float | bool):
                yield f"settings.{key}", "must be a string, number or boolean"


@dataclass(frozen=True, slots=True, kw_only=True)
class TableHealthConfig:
    """``health:`` — inserts that follow the table's health (B224-B227, ADR 0019).

    With ``follow_parts`` the sink reads the active parts of the table's busiest
    partition against its ``parts_to_delay_insert`` and ``parts_to_throw_insert`` (from
    the table's ``SETTINGS``, else ``system.merge_tree_settings``) every
    ``check_interval``, and after every ``TOO_MANY_PARTS`` (code 252). Under pressure it
    grows its blocks (``batch.max_rows``, ``max_bytes`` and ``linger`` up to
    ``max_scale`` times), spaces its inserts, and holds an insert while the table is one
    part short of refusing it; healthy again, it returns to the configured sizes.
    """

    follow_parts: bool = False
    """Read the table's parts and adapt to them (needs ``SELECT`` on ``system.parts``,
    ``system.tables`` and ``system.merge_tree_settings``)."""
    check_interval: Duration = 5.0
    """How often the parts are read while the table is healthy (every insert under
    pressure)."""
    max_scale: float = 8.0
    """How much larger blocks and linger may grow under full pressure."""
    max_hold: Duration = 60.0
    """The longest an insert is held while the table is at its limit; then it is sent
    (and retried as any ``TOO_MANY_PARTS``)."""
    max_inserts_per_second: float = 0.0
    """Inserts per second into the table across the whole group (ClickHouse's guidance:
    about one); each member takes ``1/members`` of it. ``0``: no limit."""
    members: int = 0
    """Members of the group sharing ``max_inserts_per_second``; ``0``: the
    ``--processes`` count of this host, else 1."""

    def config_errors(self) -> Iterator[tuple[str, str]]:
        if self.check_interval <= 0:
            yield "check_interval", "must be positive"
        if self.max_scale < 1:
            yield "max_scale", "must be at least 1"
        if self.max_hold < 0:
            yield "max_hold", "must not be negative"
        if self.max_inserts_per_second < 0:
            yield "max_inserts_per_second", "must be 0 (no limit) or positive"
        if self.members < 0:
            yield "members", "must be 0 (the --processes count) or positive"


@dataclass(frozen=True, slots=True, kw_only=True)
class LateDataConfig:
    """``late_data:`` — rows of old partitions written to another sink's table (B242).

    A row is late when its partition (by the table's time-based ``PARTITION BY``: a
    ``toYYYYMM``, ``toYYYYMMDD``, ``toDate`` or ``toStartOfHour`` of a column, or a
    ``Date``/``DateTime`` column itself) ended ``after`` or more before the newest row
    of its block. Late rows are written to the table of the sink named ``to`` (a
    ClickHouse sink of the pipeline with the same columns) instead of creating parts in
    old partitions, in the same write as the rest of the block (B244).
    """

    after: Duration = 0.0
    """How far behind the newest row of its block a partition may end and still be
    written to the sink's own table; e.g. ``7d``."""
    to: str = ""
    """The name of the ClickHouse sink (under ``sinks:``) whose table takes late rows."""

    def config_errors(self) -> Iterator[tuple[str, str]]:
        if self.after <= 0:
            yield "after", "must be positive (e.g. 7d)"
        if not self.to.strip():
            yield "to", "required key is missing (the name of the sink late rows go to)"


@dataclass(frozen=True, slots=True, kw_only=True)
class ClickHouseTlsConfig:
    """``tls:`` — how ``https://`` replicas are verified, and the client certificate (B69)."""

    ca: str = ""
    """CA bundle (PEM) that signed the replicas' certificates; empty: the system's."""
    cert: str = ""
    """Client certificate (PEM) for mutual TLS; needs ``key``."""
    key: str = ""
    """Private key (PEM) of ``cert``."""
    verify: bool = True
    """``false`` accepts any server certificate (logged as a warning at every connect);
    only for a test bench, never in production."""

    def config_errors(self) -> Iterator[tuple[str, str]]:
        yield from tls_file_errors(self.ca, self.cert, self.key)


@dataclass(frozen=True, slots=True)
class ColumnSpec:
    """A configured column: its name and, if declared, its ClickHouse type; or, for a
    metadata column (``{name: $offset}``, ADR 0020), the record metadata it holds."""

    name: str
    type: ChType | None = None
    meta: MetaSource | None = None


def is_meta_entry(entry: object) -> bool:
    """Whether a ``columns:`` entry is a metadata column (``{name: $source}``)."""
    if not isinstance(entry, Mapping) or len(entry) != 1:
        return False
    ((_, value),) = entry.items()
    return isinstance(value, str) and value.strip().startswith("$")


@dataclass(frozen=True, slots=True, kw_only=True)
class ClickHouseSinkConfig:
    """One ClickHouse sink: destination, columns, endpoints, settings and pool keys."""

    table: str = field(default="", metadata={"required": True})
    """Destination table, ``table`` or ``database.table``; or a template such as
    ``events_{kind}`` whose ``{placeholders}`` name sink columns (a field, or a metadata
    column as ``{$header.tenant}``): each row goes to the table its values name (B290)."""
    columns: tuple[str | dict[str, str], ...] = ()
    """Column names in row order; an entry ``{name: Type}`` also declares the type, and an
    entry ``{name: $source}`` fills the column from each row's record instead of the row:
    ``$offset``, ``$partition``, ``$timestamp`` (``DateTime64``), ``$timestamp_ms``,
    ``$topic``, ``$key``, ``$value`` (the raw payload) or ``$header.<name>`` (the header's
    last value; NULL when the record lacks it)."""
    format: Literal["native"] = "native"
    """Wire format of the INSERT (Native, encoded by clickhouse-connect)."""
    shards: tuple[ShardConfig, ...] = field(default=(), metadata={"required": True})
    """Shards, each with its replica URLs (``http://``, ``https://`` or ``chdb://<dir>``)."""
    database: str = ""
    """Database of ``table`` (default: the user's default database); may be a template
    as ``table`` may (``tenant_{$header.tenant}``)."""
    max_targets: int = 1000
    """With a templated ``table`` or ``database``: how many targets the sink keeps as
    created or checked; the least recently used is forgotten past it and checked (or
    created) again on its next row (B293)."""
    user: str = "default"
    """User for ``http://``/``https://`` replicas (a user in a replica's URL wins)."""
    password: Secret = NO_SECRET
    """Password of ``user``: ``${CLICKHOUSE_PASSWORD}``, ``${file:/run/secrets/ch}`` or
    ``password_file: /run/secrets/ch`` keep it out of the file; never logged (B67)."""
    settings: dict[str, object] = field(default_factory=dict)
    """ClickHouse settings sent with every INSERT (scalars only)."""
    compression: Literal["lz4", "zstd", "none"] = "lz4"
    """Compression of INSERT bodies over HTTP: the native block on the row path, the Arrow
    stream's buffers on the columnar path (``chdb://`` never compresses)."""
    timeouts: TimeoutsConfig = field(default_factory=TimeoutsConfig)
    tls: ClickHouseTlsConfig = field(default_factory=ClickHouseTlsConfig)
    validate_schema: Literal["off", "names", "full"] = "names"
    """Start-up check against ``system.columns`` on every replica (B20)."""
    router: Literal["key", "distributed"] = "key"
    """``key``: FNV-1a of the record key; ``distributed``: ClickHouse's own placement."""
    sharding_key: str = ""
    """With ``router: distributed``: ``column``, ``xxHash64(column)`` or ``intHash64(column)``."""
    batch: BatchConfig = field(default_factory=BatchConfig)
    inflight: InflightConfig = field(default_factory=InflightConfig)
    retry: RetryConfig = field(default_factory=RetryConfig)
    breaker: BreakerConfig = field(default_factory=BreakerConfig)
    on_record_error: ErrorPolicy = ErrorPolicy.FAIL
    """A row with a value its column cannot take: ``fail`` the pipeline, ``skip``
    it, or write its record to the ``dead_letter`` sink. Also applies to a row the
    server refuses on its own once its block is bisected (``isolate_max_inserts``): its
    dead letter carries the server's code (``spate.error.code``) and message."""
    isolate_max_inserts: int = 256
    """When the server refuses a block for a value of some row (a constraint, a value it
    cannot parse or convert), the sink inserts the block's halves separately, down to
    the rows refused alone (about ``2·log2(rows)`` inserts per such row), writes the
    others and applies ``on_record_error`` to those rows. At most this many extra inserts
    per block; past it the block fails. ``0`` fails the block at once."""
    event_time_column: str = ""
    """A column holding each row's event time (``DateTime``, ``DateTime64`` or epoch
    seconds): freshness (``spate_sink_event_to_written_seconds``) is measured from it
    instead of the source records' timestamps (the Kafka message timestamp). Empty: the
    records' timestamps."""
    health: TableHealthConfig = field(default_factory=TableHealthConfig)
    """Inserts that follow the table's parts and an insert rate (see below)."""
    max_partitions_per_insert_block: int = 100
    """The most partitions one insert may span (the server's setting of the same name,
    100 by default, refuses more). The sink reads the table's ``PARTITION BY`` at start
    and cuts each block into inserts of at most this many partitions; for a key it
    cannot compute it splits a refused insert in halves. ``0``: never cut."""
    late_data: LateDataConfig | None = None
    """Rows of partitions older than a horizon go to another sink's table (see below)."""
    create_table: Literal["off", "if_missing"] = "off"
    """``if_missing``: create the table at start-up from every replica's probe (``ON
    CLUSTER`` with ``table_options.on_cluster``) before ``validate_schema`` runs; column
    types are the declared ones, else derived from the deserializer's schema."""
    table_options: TableOptions = field(default_factory=TableOptions)
    """Engine, keys, TTL and settings of a created table."""
    evolve: Literal["off", "add_columns"] = "off"
    """``add_columns``: follow the records' writer schemas (Avro or Protobuf from a schema
    registry): before the first record of a new schema is decoded, add the columns its new
    fields need (``ALTER TABLE … ADD COLUMN IF NOT EXISTS``, ``Nullable`` or with the
    schema's default, on every replica) and write those fields from then on; a changed
    type or a removed required field holds the records as not ready with one line. ``off``:
    fields without a column are not written."""
    state_table: str = "spate_block_intents"
    """Under ``pipeline.delivery: effectively_once``: the table (in ``database``) where
    each block's intent is recorded before its insert; created at start unless it
    exists. ``table_options.dedup_window`` is then also the least deduplication window
    the target table must have (checked at start)."""

    # -- derived views ------------------------------------------------------------------

    @property
    def column_specs(self) -> tuple[ColumnSpec, ...]:
        """The columns with their declared types (call after validation)."""
        specs: list[ColumnSpec] = []
        for entry in self.columns:
            if isinstance(entry, str):
                specs.append(ColumnSpec(entry.strip()))
            elif is_meta_entry(entry):
                ((name, source),) = entry.items()
                specs.append(ColumnSpec(name.strip(), meta=MetaSource.parse(source)))
            else:
                ((name, type_name),) = entry.items()
                specs.append(ColumnSpec(name.strip(), parse_type(type_name)))
        return tuple(specs)

    @property
    def meta_columns(self) -> tuple[MetaColumn, ...]:
        """The metadata columns with their positions (call after validation)."""
        return tuple(
            MetaColumn(spec.name, spec.meta, position)
            for position, spec in enumerate(self.column_specs)
            if spec.meta is not None
        )

    @property
    def database_name(self) -> str:
        """The database: from ``database`` or the ``db.`` prefix of ``table`` ('' = default)."""
        if "." in self.table and not self.templated:
            return self.table.split(".", 1)[0].strip("`")
        return self.database

    @property
    def table_name(self) -> str:
        if "." in self.table and not self.templated:
            return self.table.split(".", 1)[1].strip("`")
        return self.table

    @property
    def fixed_database(self) -> str:
        """The database a connection starts in: '' when ``database`` is a template."""
        return "" if is_template(self.database) else self.database_name

    @property
    def templated(self) -> bool:
        """Whether ``table`` or ``database`` is a template (a target per row, B290)."""
        return is_template(self.table) or is_template(self.database)

    @property
    def sharding(self) -> tuple[str, str]:
        """``(function, column)`` of the sharding key; function is '' for a bare column."""
        match = _SHARDING_KEY.match(self.sharding_key)
        if match is None:
            raise ValueError(f"bad sharding key {self.sharding_key!r}")
        if match.group("col"):
            return "", match.group("col")
        return match.group("fn"), match.group("arg")

    # -- validation ---------------------------------------------------------------------

    def config_errors(self) -> Iterator[tuple[str, str]]:
        yield from self._table_errors()
        yield from self._column_errors()
        yield from self._shard_errors()
        yield from self._settings_errors()
        if self.isolate_max_inserts < 0:
            yield "isolate_max_inserts", "must not be negative"
        if self.max_partitions_per_insert_block < 0:
            yield "max_partitions_per_insert_block", "must be 0 (no limit) or positive"
        if self.event_time_column and self.event_time_column not in self._column_names():
            yield "event_time_column", f"{self.event_time_column!r} is not one of the columns"
        if self.router == "distributed":
            if not self.sharding_key:
                yield "sharding_key", "router: distributed needs a sharding_key"
            elif _SHARDING_KEY.match(self.sharding_key) is None:
                yield (
                    "sharding_key",
                    f"expected a column name, xxHash64(column) or intHash64(column), "
                    f"got {self.sharding_key!r}",
                )
            else:
                _, column = self.sharding
                if column not in self._column_names():
                    yield "sharding_key", f"column {column!r} is not one of the sink's columns"
        elif self.sharding_key:
            yield "sharding_key", "only used with router: distributed"
        yield from self._template_errors()

    def _template_errors(self) -> Iterator[tuple[str, str]]:
        if self.max_targets < 1:
            yield "max_targets", "must be at least 1"
        if not self.templated:
            return
        try:
            specs = self.column_specs
        except ValueError:
            return  # the column checks name it
        for key, text in (("table", self.table), ("database", self.database)):
            if is_template(text):
                try:
                    Template.parse(text, specs)
                except ValueError as exc:
                    yield key, str(exc)
        if self.evolve != "off":
            yield "evolve", "a templated table or database cannot evolve its tables yet"
        if self.health.follow_parts:
            yield (
                "health.follow_parts",
                "a templated table or database has no one table whose parts to follow",
            )
        if self.late_data is not None:
            yield (
                "late_data",
                "a templated table or database has no one partition key to cut blocks by "
                "(blocks of a templated sink are not cut by partitions yet)",
            )

    def _column_names(self) -> list[str]:
        """The column names, without parsing types or metadata (for the checks)."""
        return [
            (entry if isinstance(entry, str) else next(iter(entry), "")).strip()
            for entry in self.columns
        ]

    def _table_errors(self) -> Iterator[tuple[str, str]]:
        if not self.table.strip():
            yield "table", "required key is missing"
            return
        if self.templated:
            return
        if self.table.count(".") > 1 or not all(p.strip() for p in self.table.split(".")):
            yield "table", f"expected table or database.table, got {self.table!r}"
        elif "." in self.table and self.database and self.database != self.database_name:
            yield (
                "database",
                f"{self.database!r} disagrees with the database in table {self.table!r}",
            )

    def _column_errors(self) -> Iterator[tuple[str, str]]:
        if not self.columns:
            yield "columns", "required key is missing (list the columns in row order)"
            return
        seen: set[str] = set()
        for i, entry in enumerate(self.columns):
            if isinstance(entry, Mapping):
                if len(entry) != 1:
                    yield f"columns[{i}]", "a typed column is one {name: Type} pair"
                    continue
                ((name, type_name),) = entry.items()
                if is_meta_entry(entry):
                    try:
                        MetaSource.parse(type_name)
                    except ValueError as exc:
                        yield f"columns[{i}].{name.strip()}", str(exc)
                else:
                    try:
                        parse_type(type_name)
                    except TypeSyntaxError as exc:
                        yield f"columns[{i}]", str(exc)
            else:
                name = entry
            name = name.strip()
            if not name:
                yield f"columns[{i}]", "a column name must not be empty"
            elif name in seen:
                yield f"columns[{i}]", f"column {name!r} is listed twice"
            seen.add(name)

    def _shard_errors(self) -> Iterator[tuple[str, str]]:
        if not self.shards:
            yield "shards", "at least one shard with one replica is required"
            return
        chdb_dirs: set[str] = set()
        for i, shard in enumerate(self.shards):
            for j, url in enumerate(shard.replicas):
                try:
                    endpoint = parse_endpoint(url)
                except EndpointError as exc:
                    yield f"shards[{i}].replicas[{j}]", str(exc)
                    continue
                if endpoint.chdb_path is not None:
                    chdb_dirs.add(endpoint.chdb_path)
        if len(chdb_dirs) > 1:
            yield (
                "shards",
                "chdb:// runs one engine per process, so every chdb:// replica must name the "
                f"same directory (got {', '.join(sorted(chdb_dirs))})",
            )

    def _settings_errors(self) -> Iterator[tuple[str, str]]:
        for key, value in self.settings.items():
            if key in RESERVED_SETTINGS:
                yield f"settings.{key}", "is set by spate itself and cannot be passed through"
            elif not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", key):
                yield f"settings.{key}", "is not a ClickHouse setting name"
            elif not isinstance(value, (str, int, float, bool)):
                yield f"settings.{key}", f"expected a scalar value, got {type(value).__name__}"
        async_insert = str(self.settings.get("async_insert", "0")).strip().lower()
        waits = str(self.settings.get("wait_for_async_insert", "1")).strip().lower()
        if async_insert not in _FALSY and waits in _FALSY:
            yield (
                "settings.wait_for_async_insert",
                "async_insert without waiting acknowledges rows before they are written, "
                "which breaks at-least-once delivery; keep wait_for_async_insert: 1",
            )

    def insert_settings(self) -> dict[str, object]:
        """The passthrough settings as sent (booleans as 0/1)."""
        return {k: (int(v) if isinstance(v, bool) else v) for k, v in self.settings.items()}
