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
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, TypeVar

from spate.errors import ErrorClass, SinkError
from spate.records import Lane
from spate.sink import WriteBatch
from spate.sink._intents import Intent

from spate_clickhouse._client import Endpoint, connect, parse_endpoint
from spate_clickhouse._encoder import Column, ColumnBuffer, RowEncoder
from spate_clickhouse._errors import code_of, to_sink_error
from spate_clickhouse._intents import (
    check_deduplication,
    forget_intents,
    load_intents,
    record_intent,
    state_table_sql,
)
from spate_clickhouse._schema import SchemaCheck, table_columns
from spate_clickhouse._types import ChType

if TYPE_CHECKING:
    from clickhouse_connect.driver.client import Client

    from spate_clickhouse.config import ClickHouseSinkConfig

logger = logging.getLogger(__name__)

_T = TypeVar("_T")


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
        self.schema = SchemaCheck(config.validate_schema, qualified, self.specs)
        self._settings = config.insert_settings()
        self.effectively_once = False
        """Set by the factory under ``pipeline.delivery: effectively_once`` (B88, B90)."""
        self._encoder: RowEncoder | None = None
        self._lock = threading.Lock()

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

    def prepare_frame(self, frame: object) -> tuple[object, list[tuple[int, str]]]:
        """Check a polars frame per column; ``(arrow table, bad rows)`` (columnar path)."""
        from spate_clickhouse._frames import prepare_frame

        return prepare_frame(frame, self.encoder().columns)

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
        self._type_names: list[str] | None = None

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
        """Connect and check the table on this replica (B20, B29). Blocks; start-up only."""
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
        try:
            found = table_columns(client, self.connector.database, self.connector.table)
        except Exception as exc:
            raise to_sink_error(exc, self.endpoint, "reading system.columns") from exc
        check.check(self.endpoint, found)
        logger.info(
            "sink %s: %s on %s checked (validate_schema: %s)",
            self.connector.name,
            check.table,
            self.endpoint,
            check.mode,
        )

    def _probe_effectively_once(self, client: Client) -> None:
        """Create the state table and check the target can deduplicate replays (B90)."""
        connector = self.connector
        config = connector.config
        try:
            client.command(state_table_sql(connector.database, config.state_table))
        except Exception as exc:
            raise to_sink_error(exc, self.endpoint, "creating the intent table") from exc
        try:
            check_deduplication(
                client,
                connector.database,
                connector.table,
                config.table_options.dedup_window or 1,
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
        """One INSERT of the whole batch with its dedup token. Worker thread; blocks."""
        connector = self.connector
        buffer = batch.buffer
        if not isinstance(buffer, ColumnBuffer):
            raise SinkError(f"unexpected buffer type {type(buffer).__name__}", ErrorClass.FATAL)
        if buffer.frames is not None:
            self._write_frames(batch, buffer)
            return
        encoder = connector.encoder()
        names = connector.column_names
        if self._type_names is None:
            self._type_names = [str(c.type) for c in encoder.columns]
        data = buffer.columns(len(names), encoder.binary_columns())
        try:
            client = self._get_client()
            client.insert(
                connector.table,
                data,
                column_names=names,
                database=connector.database or None,
                column_type_names=self._type_names,
                column_oriented=True,
                settings=connector.insert_settings(batch.token),
            )
        except SinkError:
            raise
        except Exception as exc:
            error = to_sink_error(exc, self.endpoint)
            if code_of(exc) is None and not self._endpoint.embedded:
                # A transport failure (no server answer): the connection pool may hold dead
                # sockets, so connect afresh next time. A server error leaves it usable.
                self._drop_client()
            raise error from exc

    def _write_frames(self, batch: WriteBatch, buffer: ColumnBuffer) -> None:
        """One ``INSERT … FORMAT ArrowStream`` of the batch's tables with its dedup token."""
        from spate_clickhouse._frames import arrow_stream

        frames = buffer.frames or []
        if len(frames) == 1 and isinstance(frames[0], _EncodedStream):
            data = frames[0].data
        else:
            data = arrow_stream(frames)
            buffer.frames = [_EncodedStream(data, len(buffer))]  # a retry sends these bytes
        self._insert_stream(batch, data)

    def _insert_stream(self, batch: WriteBatch, data: bytes) -> None:
        connector = self.connector
        table = connector.table
        if connector.database:
            table = f"{connector.database}.{table}"
        try:
            client = self._get_client()
            client.raw_insert(
                table,
                connector.column_names,
                insert_block=data,
                settings=connector.insert_settings(batch.token),
                fmt="ArrowStream",
            )
        except SinkError:
            raise
        except Exception as exc:
            error = to_sink_error(exc, self.endpoint)
            if code_of(exc) is None and not self._endpoint.embedded:
                self._drop_client()
            raise error from exc

    def close(self) -> None:
        self._drop_client()


class _EncodedStream:
    """A batch's tables once encoded: a retry resends these bytes (B9)."""

    __slots__ = ("data", "rows")

    def __init__(self, data: bytes, rows: int) -> None:
        self.data = data
        self.rows = rows

    def __len__(self) -> int:
        return self.rows
