"""The ClickHouse connector on the shared sink pool: buffers, replica writers, probes.

:class:`ClickHouseConnector` is what :class:`~spate.sink.SinkPool` calls: ``new_buffer``
(pipeline thread) gives a buffer whose ``append`` checks or coerces each value as the row
arrives (:mod:`spate_clickhouse._encoder`), and ``open_writer`` gives one
:class:`ClickHouseShardWriter` per replica. A writer sends one sealed batch as one
``INSERT … FORMAT Native`` through clickhouse-connect's columnar insert, with the column
types known in advance (no ``DESCRIBE`` per batch) and the pool's token as
``insert_deduplication_token`` (with ``insert_deduplicate=1``): a retry — to the same
replica or another replica of the same shard, which the pool decides — sends the same
rows with the same token (B9, B11). Errors are translated by
:mod:`spate_clickhouse._errors` (B12).

``probe`` connects to the replica and runs the schema check of
:mod:`spate_clickhouse._schema` (B20, B29). Everything about retries, breakers, failover,
acks and metrics belongs to the pool.

With ``evolve: add_columns`` the connector follows the records' writer schemas
(:meth:`ClickHouseConnector.evolve`, B60): it adds the columns a new schema needs on every
replica, seals the open batches (their rows keep the columns they were encoded with) and
encodes later rows with the new columns; a buffer remembers its encoder, so a batch is
always written with the columns its rows hold.

A block the server refuses for a value of some row (:mod:`spate_clickhouse._isolate`)
is bisected down to the rows it refuses on their own; the other rows are written and
those rows follow ``on_record_error`` (B190-B193, docs/adr/0017): under
``dead_letter`` the write ends in :class:`~spate.sink.RowsRefused` and the pool charges
each row to its own record, whose dead letter carries the server's code and message
(B245-B249).

Each block is first cut by the table's partitions, late rows set apart
(:mod:`spate_clickhouse._blocks`, B240-B244, docs/adr/0022); every piece is inserted
(and isolated) on its own.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any, TypeVar

from spate.errors import ErrorClass, ErrorPolicy, SinkError
from spate.metrics import CounterSeries, Meter, names
from spate.records import Lane
from spate.schema import Field
from spate.sink import Intent, RefusedRow, RowsFailed, RowsRefused, WriteBatch

from spate_clickhouse._blocks import (
    Columns,
    LateTable,
    Partitioning,
    Piece,
    TooManyPartitions,
    too_many_partitions,
)
from spate_clickhouse._client import connect
from spate_clickhouse._ddl import quote_name
from spate_clickhouse._encoder import Column, ColumnBuffer, RowBlock, RowEncoder
from spate_clickhouse._endpoint import Endpoint, parse_endpoint
from spate_clickhouse._errors import code_name, code_of, to_sink_error
from spate_clickhouse._eventtime import oldest_event_time
from spate_clickhouse._evolve import alter_sql, plan
from spate_clickhouse._health import TableHealth
from spate_clickhouse._intents import (
    DedupWindow,
    check_deduplication,
    check_state_table,
    claim_lane,
    forget_intents,
    lane_epoch,
    load_intents,
    record_intent,
    state_table_sql,
)
from spate_clickhouse._isolate import (
    ISOLABLE_CODES,
    CapReached,
    Insert,
    Refused,
    Rejected,
    isolate,
)
from spate_clickhouse._schema import SchemaCheck, table_columns
from spate_clickhouse._semistructured import wire_type
from spate_clickhouse._targets import OpenTargets, Target, TargetPlan
from spate_clickhouse._types import ChType, TypeSyntaxError, parse_type
from spate_clickhouse.config import ColumnSpec

if TYPE_CHECKING:
    from clickhouse_connect.driver.client import Client
    from clickhouse_connect.driver.insert import InsertContext

    from spate_clickhouse.config import ClickHouseSinkConfig

logger = logging.getLogger(__name__)

_RECHECK_AFTER = 1.0
"""Seconds before a refused schema is checked against the table again."""
_T = TypeVar("_T")
TOO_MANY_PARTS = 252
"""The server's code for an insert into a partition with ``parts_to_throw_insert`` parts."""
_LOGGED_ROWS = 10
"""Rows a refused block names one by one in the log; the rest are counted."""


class ClickHouseConnector:
    """Buffers and per-replica writers for one ClickHouse sink (a ``SinkConnector``)."""

    def __init__(
        self, config: ClickHouseSinkConfig, name: str = "clickhouse", create_sql: str = ""
    ) -> None:
        self.config = config
        self.name = name
        self.create_sql = create_sql
        """``CREATE TABLE IF NOT EXISTS`` run by every probe (``create_table: if_missing``)."""
        self.specs = config.column_specs
        self.column_names = [s.name for s in self.specs]
        self.database = config.database_name
        self.table = config.table_name
        qualified = f"{self.database}.{self.table}" if self.database else self.table
        self.destination = qualified
        """The table, for the freshness metrics' ``table`` label (B220)."""
        self.schema = SchemaCheck(config.validate_schema, qualified, self.specs)
        self._settings = config.insert_settings()
        self.effectively_once = False
        """Set by the factory under ``pipeline.delivery: effectively_once`` (B88, B90)."""
        self.replay_blocks = 0
        """Set by the factory: the blocks of a partition between a block and its replay
        (B123); 0 when not known, then ``table_options.dedup_window`` stands for it."""
        self.dedup_window: DedupWindow | None = None
        """The target's deduplication window, read by the effectively-once probe (B345)."""
        self.late_window: DedupWindow | None = None
        """The ``late_data`` table's window, read before the first block with late rows
        is written (that table may be created by its own sink after this one starts, B347)."""
        self._encoder: RowEncoder | None = None
        self._lock = threading.Lock()
        self.takes_frames = config.evolve == "off"
        """A sink that evolves its table stays on the row path (columns may change)."""
        self.takes_rows = config.evolve == "off"
        """A sink that evolves its table takes rows one at a time: a row is encoded with
        the columns of the moment it is offered (B60), not of the end of its batch."""
        self.seal_open: Callable[[], None] = lambda: None
        """Seals the pool's open batches (set by the factory); called before new columns."""
        self._seen: set[str] = set()
        """Field names of the writer schemas met so far (removed fields are checked)."""
        self._refused: dict[str, tuple[float, str]] = {}
        """Schemas refused lately: the runtime retries their records every loop turn, the
        table is read again only every ``_RECHECK_AFTER`` seconds."""
        self._meter: tuple[Meter, str] | None = None
        self._m_rejected: dict[tuple[int, str], CounterSeries] = {}
        self._m_isolate: CounterSeries | None = None
        self.health: TableHealth | None = None
        """Set by the factory when ``health`` follows the parts or a rate (B224)."""
        self.refuses_rows = (
            config.on_record_error in (ErrorPolicy.DEAD_LETTER, ErrorPolicy.SKIP)
            and config.isolate_max_inserts > 0
        )
        """Whether a write may end in ``RowsRefused`` (a ``RowRefusingConnector``): rows
        the server refuses on their own are dead-lettered by the pool (B245), or skipped
        under their records' source positions (B349)."""
        self.targets: TargetPlan | None = None
        """The templates of a templated ``table``/``database`` (B290); set by :meth:`route`."""
        self.open_targets = OpenTargets(config.max_targets)
        self._create_target: Callable[[str, str], str] | None = None

        late = config.late_data
        self.partitioning = Partitioning(
            name, config.max_partitions_per_insert_block, late.after if late else None, None
        )
        """Blocks cut by the table's partitions, late rows apart (B240-B244); the factory
        sets its late table, the first probe its key."""

    def route(
        self,
        plan: TargetPlan,
        types: Sequence[tuple[str, str]],
        create: Callable[[str, str], str] | None,
    ) -> None:
        """Write each row to the target ``plan`` names for it (B290). ``types`` are the
        columns' types (declared or derived from the records' schema: no target exists
        at start to read them from); ``create`` gives a target's ``CREATE TABLE`` under
        ``create_table: if_missing`` (B291). Called by the factory before start."""
        self.targets = plan
        self._create_target = create
        self.database = self.config.fixed_database  # where the intents are kept
        by_name = dict(types)
        self.specs = tuple(
            ColumnSpec(s.name, parse_type(by_name[s.name]), s.meta) for s in self.specs
        )
        self.schema = SchemaCheck("off", self.destination, self.specs)

    def ready_target(self, writer: ClickHouseShardWriter, target: Target) -> None:
        """Create ``target`` on ``writer``'s replica (``create_table: if_missing``) or
        check that it exists, once per replica while it stays among the open targets
        (:class:`~spate_clickhouse._targets.OpenTargets`, B291, B293). Worker thread;
        blocks. ``SinkError`` (RECORD) for a target that cannot be made ready."""
        database, table = target

        def ready() -> None:
            create = self._create_target
            if create is not None:
                if database and database != self.config.fixed_database:
                    writer.command(
                        f"CREATE DATABASE IF NOT EXISTS {quote_name(database)}",
                        f"creating database {database}",
                    )
                writer.command(create(database, table), f"creating table {database}.{table}")
                return
            if writer.columns_of(database, table) is None:
                raise SinkError(
                    f"target {_qualified(database, table)} does not exist (create_table: off)",
                    ErrorClass.RECORD,
                )

        try:
            self.open_targets.use((writer.endpoint, database, table), ready)
        except SinkError as exc:
            if exc.error_class is ErrorClass.RETRYABLE:
                raise
            raise SinkError(exc.reason, ErrorClass.RECORD) from exc

    def unroutable(self, target: Target, rows: int, seq: int, reason: str) -> None:
        """Apply ``on_record_error`` at write time to the rows of a target that cannot be
        made ready (B292): logged with the target and the batch;
        returns under ``skip``, raises a fatal ``SinkError`` otherwise. Worker thread."""
        summary = (
            f"{rows} row(s) of batch {seq} for target {_qualified(*target)} cannot be "
            f"written: {reason}"
        )
        self._write_time_error(summary)

    def _write_time_error(self, summary: str) -> None:
        """``on_record_error`` for rows found at write time that are not dead-lettered:
        logged and skipped, or a fatal ``SinkError``. Rows the server refuses on their own
        are dead-lettered by the pool (:class:`RowsRefused`, B245); the rows of a target
        that cannot be made ready are not (ADR 0024)."""
        if self.config.on_record_error is ErrorPolicy.SKIP:
            logger.warning(
                "sink %s: %s; skipped (on_record_error: skip)",
                self.name,
                summary,
                extra={"component": self.name},
            )
            return
        if self.config.on_record_error is ErrorPolicy.DEAD_LETTER:
            summary += (
                "; the rows of a target that cannot be made ready cannot be dead-lettered "
                "(on_record_error: dead_letter), so the batch fails"
            )
        raise SinkError(f"sink {self.name}: {summary}", ErrorClass.FATAL)

    def bind_meter(self, meter: Meter, component_type: str = "sink") -> None:
        """Count isolated rows and the inserts spent finding them in ``meter``."""
        self._meter = (meter, component_type)
        self._m_isolate = meter.counter(
            names.SINK_ISOLATE_INSERTS, component=self.name, component_type=component_type
        )
        self.partitioning.bind_meter(meter, component_type)

    def rejected(self, rows: list[Rejected], inserts: int, seq: int, endpoint: str) -> None:
        """Apply ``on_record_error`` to rows the server refused on their own (B190).

        Worker thread. Logs the rows with the server's code and message and counts them;
        under ``skip`` raises ``RowsRefused`` marked ``skipped``: the pool counts each row
        as a skipped record and logs it under its record's source position (B349), and
        the batch counts as written; under ``dead_letter`` raises ``RowsRefused`` naming
        each row with its code and message, which the pool charges to the rows' records
        (B245); raises
        ``RowsFailed`` (fatal) naming them under ``fail`` (the batch fails for good and
        its offsets are not committed past them; a spool keeps it, B322).
        """
        policy = self.config.on_record_error
        for row in rows[:_LOGGED_ROWS]:
            logger.warning(
                "sink %s: %s refused row %d of batch %d [code %d %s]: %s",
                self.name,
                endpoint,
                row.row,
                seq,
                row.code,
                code_name(row.code),
                row.message,
                extra={"component": self.name},
            )
        if self._m_isolate is not None:
            self._m_isolate.inc(inserts)
        if self._meter is not None:
            meter, component_type = self._meter
            for row in rows:
                key = (row.code, policy.value)
                series = self._m_rejected.get(key)
                if series is None:
                    series = self._m_rejected[key] = meter.counter(
                        names.SINK_SERVER_REJECTED,
                        component=self.name,
                        component_type=component_type,
                        code=str(row.code),
                        policy=policy.value,
                    )
                series.inc()
        first = rows[0]
        summary = (
            f"{endpoint} refused {len(rows)} row(s) of batch {seq} on their own "
            f"(rows {', '.join(str(r.row) for r in rows[:_LOGGED_ROWS])}"
            f"{', …' if len(rows) > _LOGGED_ROWS else ''}; first [code {first.code} "
            f"{code_name(first.code)}]: {first.message}); its other rows were written "
            f"in {inserts} inserts"
        )
        if policy is ErrorPolicy.DEAD_LETTER:
            raise RowsRefused(
                f"sink {self.name}: {summary}; dead-lettered (on_record_error: dead_letter)",
                tuple(_refused_row(row, endpoint) for row in rows),
            )
        if policy is ErrorPolicy.SKIP:
            if not self.refuses_rows:
                self._write_time_error(summary)  # logged, and the batch counts as written
                return
            # The pool names each row's record in the skip log and counts it (B349).
            raise RowsRefused(
                f"sink {self.name}: {summary}; skipped (on_record_error: skip)",
                tuple(_refused_row(row, endpoint) for row in rows),
                skipped=True,
            )
        raise RowsFailed(f"sink {self.name}: {summary}; the batch fails (on_record_error: fail)")

    def event_time(self, buffer: ColumnBuffer) -> float | None:
        """The oldest ``event_time_column`` value of a written buffer, wall-clock seconds
        (B220); None without the setting or a value. Worker thread, after the write."""
        column = self.config.event_time_column
        if not column:
            return None
        encoder = buffer.encoder or self._encoder
        if encoder is None:
            return None
        return oldest_event_time(buffer, [c.name for c in encoder.columns].index(column))

    def follows(self, fields: tuple[Field, ...] | None) -> None:
        """The fields known at start-up count as met (a field they lose is a removal)."""
        self._seen.update(f.name for f in fields or ())

    # -- SinkConnector -------------------------------------------------------------------

    def new_buffer(self, shard: int) -> ColumnBuffer:
        """An empty buffer for the next batch of ``shard``. Pipeline thread."""
        encoder = self._encoder
        if encoder is None:
            encoder = self.encoder()
        return encoder.new_buffer()

    def open_writer(self, shard: int, replica: int, endpoint: str) -> ClickHouseShardWriter:
        return ClickHouseShardWriter(self, parse_endpoint(endpoint), shard)

    # -- shared state ------------------------------------------------------------------

    def encoder(self) -> RowEncoder:
        """The row encoder, built once the column types are known (after the probes)."""
        with self._lock:
            if self._encoder is None:
                types = self.schema.types
                if types is None:
                    types = self._learn_types()
                columns = [Column(name, types[name]) for name in self.column_names]
                self._encoder = RowEncoder(
                    columns, strict_first=self.config.validate_schema == "full"
                )
            return self._encoder

    def _learn_types(self) -> dict[str, ChType]:
        """Ask the first replica for the column types (a buffer is wanted before any probe:
        the pool always probes first, a connector used on its own may not)."""
        url = self.config.shards[0].replicas[0]
        writer = ClickHouseShardWriter(self, parse_endpoint(url), 0)
        try:
            writer.probe()
        finally:
            writer.close()
        types = self.schema.types
        if types is None:  # pragma: no cover - probe() either learns them or raises
            raise SinkError(f"sink {self.name}: no column types from {url}", ErrorClass.FATAL)
        return types

    def columns(self) -> list[Column]:
        """The sink's columns with the types it writes with."""
        return list(self.encoder().columns)

    def evolve(self, schema: str, fields: tuple[Field, ...]) -> None:
        """Make the table and the encoder fit a new writer schema (B60, B61). Pipeline
        thread, before the first record of ``schema`` is decoded; blocks.

        Raises ``SinkError`` with one line when the schema does not fit (the deserializer
        then holds its records as not ready) or a replica cannot be altered now.
        """
        refused = self._refused.get(schema)
        if refused is not None and time.monotonic() - refused[0] < _RECHECK_AFTER:
            raise SinkError(refused[1], ErrorClass.FATAL)
        encoder = self.encoder()
        written = {c.name: c.type for c in encoder.columns}
        fills = {c.name: c.fill for c in encoder.columns}
        urls = [url for shard in self.config.shards for url in shard.replicas]
        table = self._server_types(urls[0])
        decided = plan(fields, written, fills, table, self._seen, self.config.table_options)
        if decided.problems:
            reason = f"sink {self.name}: {self.schema.table} cannot take {schema}: " + "; ".join(
                decided.problems
            )
            self._refused[schema] = (time.monotonic(), reason)
            raise SinkError(reason, ErrorClass.FATAL)
        self._refused.pop(schema, None)
        if decided.add:
            on_cluster = self.config.table_options.on_cluster
            sql = alter_sql(self._quoted_table(), decided.add, on_cluster)
            for url in urls[:1] if on_cluster else urls:
                self._run(url, sql, "adding columns")
            logger.info(
                "sink %s: added %s to %s for %s",
                self.name,
                ", ".join(f"{name} {definition}" for name, definition in decided.add),
                self.schema.table,
                schema,
            )
            table = self._server_types(urls[0])
        self._seen.update(f.name for f in fields)
        if not decided.write:
            return
        missing = [name for name in decided.write if name not in table]
        if missing:
            raise SinkError(
                f"sink {self.name}: column(s) {', '.join(missing)} not in {self.schema.table} "
                f"after adding them",
                ErrorClass.RETRYABLE,
            )
        columns = [
            *encoder.columns,
            *(Column(name, table[name], decided.fills[name]) for name in decided.write),
        ]
        self.seal_open()
        with self._lock:
            self._encoder = RowEncoder(columns)
            self.column_names = [c.name for c in columns]
        logger.info("sink %s: writes %s from %s on", self.name, ", ".join(decided.write), schema)

    def _quoted_table(self) -> str:
        from spate_clickhouse._ddl import quote_name

        table = quote_name(self.table)
        return f"{quote_name(self.database)}.{table}" if self.database else table

    def _run(self, url: str, sql: str, what: str) -> None:
        writer = ClickHouseShardWriter(self, parse_endpoint(url), 0)
        try:
            writer.command(sql, what)
        finally:
            writer.close()

    def _server_types(self, url: str) -> dict[str, ChType]:
        """Every column of the table on ``url`` with its type."""
        writer = ClickHouseShardWriter(self, parse_endpoint(url), 0)
        try:
            found = writer.table_columns()
        finally:
            writer.close()
        types: dict[str, ChType] = {}
        for name, type_name in found or ():
            try:
                types[name] = parse_type(type_name)
            except TypeSyntaxError:
                types[name] = ChType(type_name)
        return types

    def prepare_rows(self, rows: list[object]) -> tuple[RowBlock, list[tuple[int, Exception]]]:
        """Check a source batch's rows at once (B95); see :meth:`RowEncoder.prepare_rows`."""
        return self.encoder().prepare_rows(rows)

    def prepare_frame(self, frame: object) -> tuple[object, list[tuple[int, str]]]:
        """Check a polars frame per column; ``(arrow table, bad rows)`` (columnar path)."""
        from spate_clickhouse._frames import prepare_frame

        plan = self.targets
        return prepare_frame(
            frame, self.encoder().columns, plan.refused if plan is not None else None
        )

    def take_rows(self, table: object, rows: list[int]) -> object:
        from spate_clickhouse._frames import take_rows

        return take_rows(table, rows)

    def insert_settings(self, token: str) -> dict[str, object]:
        settings = dict(self._settings)
        settings["insert_deduplicate"] = 1
        settings["insert_deduplication_token"] = token
        if self.effectively_once:
            settings["async_insert"] = 0  # a profile's default must not batch blocks again
        return settings


class ClickHouseShardWriter:
    """Writes sealed batches to one replica (a ``ShardWriter``)."""

    def __init__(self, connector: ClickHouseConnector, endpoint: Endpoint, shard: int) -> None:
        self.connector = connector
        self.endpoint = endpoint.redacted
        self._endpoint = endpoint
        self._shard = shard
        self._client: Client | None = None
        self._lock = threading.Lock()
        # ``compression`` covers Arrow inserts over HTTP too (B109); chDB reads in-process.
        compression = connector.config.compression
        self._stream_compression = (
            None if endpoint.embedded or compression == "none" else compression
        )
        # One insert context per worker thread, reused batch after batch (B105): a
        # clickhouse-connect InsertContext refers to itself (a bound method among its
        # attributes) and keeps the batch's columns, so one per batch is cyclic garbage
        # that holds the rows until a full collection of the cyclic collector.
        self._contexts = threading.local()
        self._found = threading.local()
        """The rows refused in the write running on this thread, and the inserts spent
        finding them (``rows``, ``inserts``): reported once the write ends (B244)."""

    def _get_client(self) -> Client:
        with self._lock:
            if self._client is None:
                self._client = connect(self._endpoint, self.connector.config)
                logger.info(
                    "sink %s connected to %s (shard %d)",
                    self.connector.name,
                    self.endpoint,
                    self._shard,
                    extra={"component": self.connector.name},
                )
            return self._client

    def _drop_client(self) -> None:
        with self._lock:
            client, self._client = self._client, None
        if client is not None:
            try:
                client.close()
            except Exception:
                logger.debug("closing the client of %s failed", self.endpoint, exc_info=True)

    def probe(self) -> None:
        """Connect and check the table on this replica (B20, B29), then read its
        partition key (B240; a templated sink has no one table to read it from, and its
        blocks are not cut by partitions) and engine: a collapsing table needs
        effectively-once delivery (B378). Blocks; start-up only."""
        self._probe()
        if self.connector.targets is None:
            self._learn_partitions(self._get_client())
            engine = self.connector.partitioning.engine
            if "CollapsingMergeTree" in engine and not self.connector.effectively_once:
                raise SinkError(
                    f"sink {self.connector.name} on {self.endpoint}: "
                    f"{self.connector.schema.table} is {engine}, which needs "
                    "pipeline.delivery: effectively_once: a block written twice doubles its "
                    "signs and corrupts every sum over them",
                    ErrorClass.FATAL,
                )

    def _probe(self) -> None:
        client = self._get_client()
        if self.connector.create_sql:
            try:
                client.command(self.connector.create_sql)
            except Exception as exc:
                raise to_sink_error(exc, self.endpoint, "creating the table") from exc
            logger.info(
                "sink %s: created %s on %s unless it existed",
                self.connector.name,
                self.connector.schema.table,
                self.endpoint,
            )
        if self.connector.effectively_once:
            self._probe_effectively_once(client)
        check = self.connector.schema
        if not check.needs_server and check.types is not None:
            try:
                client.ping()
            except Exception as exc:
                raise to_sink_error(exc, self.endpoint, "ping") from exc
            return
        if check.mode == "off" and check.types is not None:
            return
        check.check(self.endpoint, self.table_columns())
        logger.info(
            "sink %s: %s on %s checked (validate_schema: %s)",
            self.connector.name,
            check.table,
            self.endpoint,
            check.mode,
        )

    def _learn_partitions(self, client: Client) -> None:
        """Read the table's partition key (B240); fatal for a ``late_data`` it cannot
        serve (B242)."""
        connector = self.connector
        # The types the probe learnt, not encoder(): a first buffer builds the encoder
        # under its lock and probes a replica to learn them (``_learn_types``).
        known = connector.schema.types or {}
        types = {name: known[name] for name in connector.column_names if name in known}
        try:
            connector.partitioning.learn(client, connector.database, connector.table, types)
        except SinkError:
            raise
        except Exception as exc:
            raise to_sink_error(exc, self.endpoint, "reading the partition key") from exc

    def command(self, sql: str, what: str) -> None:
        """Run one statement on this replica (``SinkError`` naming it on failure)."""
        try:
            self._get_client().command(sql)
        except SinkError:
            raise
        except Exception as exc:
            raise to_sink_error(exc, self.endpoint, what) from exc

    def table_columns(self) -> list[tuple[str, str]] | None:
        """``(name, type)`` of the table's columns on this replica; None if it is missing."""
        return self.columns_of(self.connector.database, self.connector.table)

    def _probe_effectively_once(self, client: Client) -> None:
        """Create the state table and check the target can deduplicate replays (B90)."""
        connector = self.connector
        config = connector.config
        try:
            client.command(state_table_sql(connector.database, config.state_table))
        except Exception as exc:
            raise to_sink_error(exc, self.endpoint, "creating the intent table") from exc
        if connector.targets is not None:
            # No target exists yet: each is created with table_options.dedup_window (the
            # factory requires create_table: if_missing under effectively once, B295).
            return
        try:
            connector.dedup_window = check_deduplication(
                client,
                connector.database,
                connector.table,
                config.table_options.dedup_window or 1,
                f"sink {connector.name} on {self.endpoint}",
                connector.replay_blocks,
            )
            check_state_table(
                client,
                connector.database,
                connector.table,
                config.state_table,
                f"sink {connector.name} on {self.endpoint}",
            )
        except SinkError:
            raise
        except Exception as exc:
            raise to_sink_error(exc, self.endpoint, "reading the table settings") from exc

    # -- block intents (IntentWriter, effectively once) ------------------------------------

    def record_intent(self, pipeline: str, sink: str, intent: Intent) -> None:
        """Record a block's intent before its insert (B88). Worker thread; blocks."""
        self._intent_call(
            "recording a block intent",
            lambda c: record_intent(
                c,
                self.connector.database,
                self.connector.config.state_table,
                pipeline,
                sink,
                intent,
            ),
        )

    def load_intents(self, pipeline: str, sink: str, lane: Lane, since: int) -> list[Intent]:
        found: list[Intent] = self._intent_call(
            "reading block intents",
            lambda c: load_intents(
                c,
                self.connector.database,
                self.connector.config.state_table,
                pipeline,
                sink,
                self._shard,
                lane,
                since,
            ),
        )
        return found

    def forget_intents(self, pipeline: str, sink: str, lane: Lane, below: int) -> None:
        self._intent_call(
            "deleting committed block intents",
            lambda c: forget_intents(
                c,
                self.connector.database,
                self.connector.config.state_table,
                pipeline,
                sink,
                lane,
                below,
            ),
        )

    def claim_lane(self, pipeline: str, sink: str, lane: Lane) -> int:
        """Fence the lane for this owner before its intents are read (B125)."""
        return self._lane_call("claiming a partition", claim_lane, pipeline, sink, lane)

    def owns_lane(self, pipeline: str, sink: str, lane: Lane, epoch: int) -> bool:
        """Whether no later owner has claimed the lane (after an intent, before its
        insert; B125)."""
        what = "checking who owns a partition"
        return self._lane_call(what, lane_epoch, pipeline, sink, lane) <= epoch

    def _lane_call(
        self,
        what: str,
        call: Callable[[Client, str, str, str, str, int, Lane], int],
        pipeline: str,
        sink: str,
        lane: Lane,
    ) -> int:
        connector = self.connector
        database, table = connector.database, connector.config.state_table
        found: int = self._intent_call(
            what, lambda c: call(c, database, table, pipeline, sink, self._shard, lane)
        )
        return found

    def _intent_call(self, what: str, call: Callable[[Client], _T]) -> _T:
        try:
            return call(self._get_client())
        except SinkError:
            raise
        except Exception as exc:
            error = to_sink_error(exc, self.endpoint, what)
            if code_of(exc) is None and not self._endpoint.embedded:
                self._drop_client()
            raise error from exc

    def write(self, batch: WriteBatch) -> None:
        """One INSERT of the whole batch with its dedup token. Worker thread; blocks.

        The rows the server refuses on their own in any piece or target of the batch are
        reported once every piece is written (B190, B244, B349): a refusal in one piece
        never keeps the next ones from being inserted."""
        found = self._found
        found.rows, found.inserts = [], 0
        try:
            self._write(batch)
            rows: list[Rejected] = found.rows
            if rows:
                self.connector.rejected(rows, found.inserts, batch.seq, self.endpoint)
        finally:
            found.rows = []

    def _write(self, batch: WriteBatch) -> None:
        connector = self.connector
        buffer = batch.buffer
        if not isinstance(buffer, ColumnBuffer):
            raise SinkError(f"unexpected buffer type {type(buffer).__name__}", ErrorClass.FATAL)
        health = connector.health
        if health is not None and health.enabled:
            # Follow the table's parts and the insert rate (B224-B227); may wait here.
            self._intent_call("reading the table's parts", health.before_insert)
        if connector.targets is not None:
            self._write_targets(batch, buffer, connector.targets)
            return
        if buffer.frames is not None:
            self._write_frames(batch, buffer)
            return
        encoder = buffer.encoder or connector.encoder()
        data = buffer.columns(len(encoder.columns), encoder.binary_columns())
        rows = len(data[0]) if data else 0
        pieces = connector.partitioning.pieces(
            batch.token, rows, lambda wanted: _row_arrays(encoder, data, wanted)
        )
        self._check_window(pieces, lambda wanted: _row_arrays(encoder, data, wanted))
        for piece in pieces:
            block = data if piece.rows is None else [[c[i] for i in piece.rows] for c in data]
            self._write_piece(
                batch, piece, piece.size(rows), self._row_insert(encoder, block, piece)
            )
        connector.partitioning.written(pieces, rows)

    def _check_window(self, pieces: list[Piece], columns: Columns) -> None:
        """Refuse a block whose parts overflow its share of a table's deduplication
        window, before any piece is written: its on-time parts against the target's
        (B345, B346), its late parts against the ``late_data`` table's own (B347)."""
        connector = self.connector
        window = connector.dedup_window
        if window is None:
            return
        where = f"sink {connector.name} on {self.endpoint}"
        window.check(sum(piece.partitions for piece in pieces if not piece.late), where)
        partitioning = connector.partitioning
        late = partitioning.late
        if late is None or not any(piece.late for piece in pieces):
            return
        if connector.late_window is None:
            client = self._get_client()
            try:
                late_window = check_deduplication(
                    client,
                    late.database or connector.database,
                    late.table,
                    1,  # its own sink checks it against table_options.dedup_window (B90)
                    where,
                    window.blocks,
                )
                known = connector.schema.types or {}
                types = {n: known[n] for n in connector.column_names if n in known}
                partitioning.learn_late(client, connector.database, types)
            except SinkError:
                raise
            except Exception as exc:
                raise to_sink_error(exc, self.endpoint, "reading the late table") from exc
            connector.late_window = late_window
        parts = partitioning.late_parts(pieces, columns)
        if parts is not None:
            connector.late_window.check(parts, where)

    def _row_insert(self, encoder: RowEncoder, data: list[list[object]], piece: Piece) -> Insert:
        """Inserts rows ``[start, stop)`` of one piece's columns on the row path."""
        connector = self.connector
        rows = len(data[0]) if data else 0
        late = connector.partitioning.late if piece.late else None

        def insert(start: int, stop: int, token: str) -> None:
            part = data if start == 0 and stop == rows else [c[start:stop] for c in data]
            try:
                client = self._get_client()
                if late is not None:
                    client.insert(
                        late.table,
                        part,
                        column_names=[c.name for c in encoder.columns],
                        database=late.database or None,
                        column_type_names=[wire_type(c.type) for c in encoder.columns],
                        column_oriented=True,
                        settings=late.settings(token),
                    )
                    return
                context = self._insert_context(client, encoder)
                context.settings = connector.insert_settings(token)
                context.insert_exception = None
                client.insert(data=part, context=context)
            except SinkError:
                raise
            except Exception as exc:
                raise self._failed(exc) from exc

        return insert

    def _write_piece(self, batch: WriteBatch, piece: Piece, rows: int, insert: Insert) -> None:
        """Insert one piece of a block with its token, split in halves when refused for
        too many partitions (B241) and isolating refused rows (B190)."""
        if piece.rows is not None:
            batch = dataclasses.replace(batch, token=piece.token, rows=rows)
        halving = self.connector.partitioning.halving(insert, piece.token)
        self._write_isolating(batch, rows, halving, piece.rows)

    def _write_targets(self, batch: WriteBatch, buffer: ColumnBuffer, plan: TargetPlan) -> None:
        """A templated sink's batch: one insert per target, in the order targets first
        appear, each with the batch's token and the target (B294, B295); a retry sends
        every part again with the same tokens, so the parts written before are dropped
        by the server's deduplication."""
        connector = self.connector
        if buffer.frames is not None:
            from spate_clickhouse._frames import concat_tables, take_rows

            table = concat_tables(buffer.frames)
            for target, indices in plan.group_table(table):
                part = take_rows(table, indices)
                positions = [int(i) for i in indices]
                self._write_target(
                    batch, target, positions, self._target_frame_insert(part, target)
                )
            return
        encoder = buffer.encoder or connector.encoder()
        data = buffer.columns(len(encoder.columns), encoder.binary_columns())
        rows = len(data[0]) if data else 0
        groups: dict[Target, list[int]] = {}
        for position, target in enumerate(plan.targets_of_columns(data, rows)):
            groups.setdefault(target, []).append(position)
        for target, positions in groups.items():
            part = data if len(positions) == rows else [[c[p] for p in positions] for c in data]
            self._write_target(batch, target, positions, self._rows_insert(part, target))

    def _rows_insert(self, part: list[list[object]], target: Target) -> Insert:
        """The insert of rows ``start:stop`` of one target's columns (the row path)."""
        connector = self.connector
        encoder_columns = connector.encoder().columns
        names = [c.name for c in encoder_columns]
        types = [wire_type(c.type) for c in encoder_columns]
        rows = len(part[0]) if part else 0

        def insert(start: int, stop: int, token: str) -> None:
            cut = part if start == 0 and stop == rows else [c[start:stop] for c in part]
            try:
                self._get_client().insert(
                    target[1],
                    cut,
                    column_names=names,
                    database=target[0] or None,
                    column_type_names=types,
                    column_oriented=True,
                    settings=connector.insert_settings(token),
                )
            except SinkError:
                raise
            except Exception as exc:
                raise self._failed(exc) from exc

        return insert

    def _target_frame_insert(self, part: Any, target: Target) -> Insert:
        """The insert of rows ``start:stop`` of one target's Arrow table (columnar path)."""
        from spate_clickhouse._frames import arrow_stream

        def insert(start: int, stop: int, token: str) -> None:
            piece = (
                part if start == 0 and stop == part.num_rows else part.slice(start, stop - start)
            )
            self._insert_stream(
                token, arrow_stream([piece], self._stream_compression), _qualified(*target)
            )

        return insert

    def _write_target(
        self, batch: WriteBatch, target: Target, positions: list[int], insert: Insert
    ) -> None:
        """Make ``target`` ready and insert its rows of ``batch`` (at ``positions`` of the
        batch) with its own token; a row the server refuses is reported at its position
        in the batch, so its record is the one charged (B245)."""
        rows = len(positions)
        try:
            self.connector.ready_target(self, target)
        except SinkError as exc:
            if exc.error_class is not ErrorClass.RECORD:
                raise
            self.connector.unroutable(target, rows, batch.seq, exc.reason)
            return
        token = f"{batch.token}-{_qualified(*target)}"
        self._write_isolating(replace(batch, token=token, rows=rows), rows, insert, positions)

    def columns_of(self, database: str, table: str) -> list[tuple[str, str]] | None:
        """``(name, type)`` of a table's columns on this replica; None if it is missing."""
        try:
            return table_columns(self._get_client(), database, table)
        except SinkError:
            raise
        except Exception as exc:
            raise to_sink_error(exc, self.endpoint, "reading system.columns") from exc

    def _failed(self, exc: Exception) -> Exception:
        """What an insert's exception becomes: :class:`Refused` for a refusal of some
        row's value (the block can be bisected), a ``SinkError`` otherwise."""
        error = to_sink_error(exc, self.endpoint)
        code = code_of(exc)
        if too_many_partitions(code, str(exc)):
            return TooManyPartitions(error)  # split in halves (B241), not a parts problem
        if code == TOO_MANY_PARTS and self.connector.health is not None:
            self.connector.health.too_many_parts()
        if code in ISOLABLE_CODES:
            return Refused(code, _server_message(exc), error)
        if code is None and not self._endpoint.embedded:
            # A transport failure (no server answer): the connection pool may hold dead
            # sockets, so connect afresh next time. A server error leaves it usable.
            self._drop_client()
        return error

    def _write_isolating(
        self,
        batch: WriteBatch,
        rows: int,
        insert: Insert,
        positions: list[int] | None = None,
    ) -> None:
        """Insert the whole batch; when the server refuses a value of some row, bisect
        it (B190, B191) and apply ``on_record_error`` to the rows refused alone.
        ``positions`` maps a part's rows to their places in the pool's batch (a piece of
        a block cut by partitions, B244, or a templated sink's target, B294), so refused
        rows are named, and charged, by their place in the batch."""
        try:
            insert(0, rows, batch.token)
            return
        except Refused as exc:
            first = exc
        whole = first.error
        if not isinstance(whole, SinkError):  # pragma: no cover - _failed() always sets it
            raise SinkError(first.message, ErrorClass.FATAL)
        cap = self.connector.config.isolate_max_inserts
        if cap <= 0 or rows == 0:
            raise whole
        try:
            found, inserts = isolate(rows, first, insert, batch.token, cap)
        except CapReached as exc:
            raise SinkError(
                f"{whole.reason} (isolating the refused rows stopped at isolate_max_inserts: "
                f"{exc.inserts} inserts, {len(exc.found)} row(s) found)",
                ErrorClass.FATAL,
            ) from None
        except Refused as exc:  # pragma: no cover - isolate() catches every Refused
            raise whole from exc
        if found:
            if positions is not None:
                found = [r._replace(row=positions[r.row]) for r in found]
            refused = self._found  # reported by write() once every piece is written
            refused.rows.extend(found)
            refused.inserts += inserts

    def _insert_context(self, client: Client, encoder: RowEncoder) -> InsertContext:
        """This thread's insert context for ``encoder``'s columns (made at its first use)."""
        held: tuple[RowEncoder, InsertContext] | None = getattr(self._contexts, "held", None)
        if held is None or held[0] is not encoder:
            connector = self.connector
            context = client.create_insert_context(
                connector.table,
                column_names=[c.name for c in encoder.columns],
                database=connector.database or None,
                column_type_names=[wire_type(c.type) for c in encoder.columns],
                column_oriented=True,
            )
            held = self._contexts.held = (encoder, context)
        return held[1]

    def _write_frames(self, batch: WriteBatch, buffer: ColumnBuffer) -> None:
        """One ``INSERT … FORMAT ArrowStream`` of the batch's tables with its dedup token."""
        from spate_clickhouse._frames import arrow_stream, read_stream

        frames = buffer.frames or []
        if len(frames) == 1 and isinstance(frames[0], _EncodedStream):
            data = frames[0].data
        else:
            data = arrow_stream(frames, self._stream_compression)
            buffer.frames = [_EncodedStream(data, len(buffer))]  # a retry sends these bytes
        rows = len(buffer)
        table: list[object] = []

        def whole() -> Any:
            if not table:
                table.append(read_stream(data))
            return table[0]

        partitioning = self.connector.partitioning

        def columns(wanted: tuple[str, ...]) -> dict[str, Any]:
            return {n: whole().column(n) for n in wanted}

        pieces = partitioning.pieces(batch.token, rows, columns)
        self._check_window(pieces, columns)
        for piece in pieces:
            if piece.rows is None:
                insert = self._frame_insert(data, whole, rows, None)
            else:
                taken = whole().take(piece.rows)
                stream = arrow_stream([taken], self._stream_compression)
                late = partitioning.late if piece.late else None
                insert = self._frame_insert(
                    stream, functools.partial(_same, taken), len(taken), late
                )
            self._write_piece(batch, piece, piece.size(rows), insert)
        partitioning.written(pieces, rows)

    def _frame_insert(
        self, stream: bytes, table: Callable[[], Any], rows: int, late: LateTable | None
    ) -> Insert:
        """Inserts rows ``[start, stop)`` of one piece on the columnar path: ``stream``
        whole, else slices of ``table()`` (read from it only when a piece is cut)."""
        from spate_clickhouse._frames import arrow_stream

        target = late.qualified if late is not None else None

        def insert(start: int, stop: int, token: str) -> None:
            settings = late.settings(token) if late is not None else None
            if start == 0 and stop == rows:
                self._insert_stream(token, stream, target, settings)
                return
            part = table().slice(start, stop - start)
            self._insert_stream(
                token, arrow_stream([part], self._stream_compression), target, settings
            )

        return insert

    def _insert_stream(
        self,
        token: str,
        data: bytes,
        target: str | None = None,
        settings: dict[str, object] | None = None,
    ) -> None:
        connector = self.connector
        table = connector.table
        if connector.database:
            table = f"{connector.database}.{table}"
        if target is not None:
            table = target  # the late_data sink's table (B242)
        try:
            client = self._get_client()
            client.raw_insert(
                table,
                connector.column_names,
                insert_block=data,
                settings=settings if settings is not None else connector.insert_settings(token),
                fmt="ArrowStream",
            )
        except SinkError:
            raise
        except Exception as exc:
            raise self._failed(exc) from exc

    def close(self) -> None:
        self._drop_client()


def _qualified(database: str, table: str) -> str:
    return f"{database}.{table}" if database else table


class _EncodedStream:
    """A batch's tables once encoded: a retry resends these bytes (B9)."""

    __slots__ = ("data", "rows")

    def __init__(self, data: bytes, rows: int) -> None:
        self.data = data
        self.rows = rows

    def __len__(self) -> int:
        return self.rows


def _refused_row(row: Rejected, endpoint: str) -> RefusedRow:
    """What the dead letter of a refused row says: the server's code, its name and its
    message (B246)."""
    name = code_name(row.code)
    return RefusedRow(
        row.row,
        f"{endpoint} refused the row [code {row.code} {name}]: {row.message}",
        (("code", str(row.code)), ("code.name", name)),
    )


def _same(value: _T) -> _T:
    return value


def _row_arrays(
    encoder: RowEncoder, data: list[list[object]], wanted: tuple[str, ...]
) -> Mapping[str, Any]:
    """The row path's columns named ``wanted`` as Arrow arrays (the partition key's)."""
    from spate_clickhouse._partition import arrow_column

    index = {c.name: i for i, c in enumerate(encoder.columns)}
    return {n: arrow_column(data[index[n]], encoder.columns[index[n]].type) for n in wanted}


def _server_message(exc: BaseException) -> str:
    """The server's message of a refusal, on one line and at most 500 characters."""
    text = " ".join(str(exc).split())
    return text if len(text) <= 500 else text[:497] + "..."
