"""The SQLite connector on spate's sink pool: row buffers and one writer per database file.

spate's :class:`~spate.sink.SinkPool` does batching, retries, the breaker, acks and
metrics; a connector implements only what is specific to its destination:

* :class:`SqliteRowBuffer` — checks and converts each row when it is appended (a tuple in
  column order, a dict read by column name, or for a one-column table the bare value;
  values SQLite can store, payload views copied to ``bytes``), so a bad value
  is a record error found at once, never a failed batch later (B28);
* :class:`SqliteShardWriter` — ``probe()`` opens the file and creates or checks the
  table at start-up, naming the file on failure (B29); ``write(batch)`` inserts a sealed
  batch in one transaction and returns only after ``COMMIT`` (B2). The batch's dedup
  token is recorded in the same transaction, so a retried batch whose first attempt did
  commit is recognised and not inserted twice (B9). Busy, locked and I/O errors are
  retryable; everything else is fatal (B12, see :func:`classify`).
"""

from __future__ import annotations

import logging
import sqlite3
import threading
from pathlib import Path

from spate.errors import ErrorClass, SinkError
from spate.sink import RowBuffer, WriteBatch, estimate_row_bytes

from spate_sqlite.config import TOKENS_TABLE, SqliteSinkConfig

logger = logging.getLogger(__name__)

_INT64 = (-(2**63), 2**63 - 1)

Value = None | int | float | str | bytes

# Result codes (primary, by name) a retry can get past: another writer holds the lock,
# the file system hiccuped, the disk is full for now.
_RETRYABLE_CODES = frozenset(
    {"SQLITE_BUSY", "SQLITE_LOCKED", "SQLITE_IOERR", "SQLITE_FULL", "SQLITE_PROTOCOL"}
)


def classify(exc: sqlite3.Error, where: str) -> SinkError:
    """Translate a sqlite3 exception into a ``SinkError`` of the right class (B12).

    Busy/locked, I/O and disk-full errors are RETRYABLE (the pool retries the same batch
    with the same token); schema, constraint, corruption and misuse errors are FATAL.
    """
    name = getattr(exc, "sqlite_errorname", "") or ""
    primary = name.split("_", 2)
    code = "_".join(primary[:2]) if len(primary) >= 2 else name
    if code in _RETRYABLE_CODES:
        error_class = ErrorClass.RETRYABLE
    elif not name and isinstance(exc, sqlite3.OperationalError):
        error_class = ErrorClass.RETRYABLE  # no code reported: assume the file system
    else:
        error_class = ErrorClass.FATAL
    label = f" [{name}]" if name else ""
    return SinkError(f"sqlite {where}: {exc}{label}", error_class)


def _value(value: object, column: str) -> Value:
    if value is None or isinstance(value, str | float):
        return value
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, int):
        if not _INT64[0] <= value <= _INT64[1]:
            raise SinkError(f"column {column}: {value} does not fit 64 bits", ErrorClass.RECORD)
        return value
    if isinstance(value, bytes):
        return value
    if isinstance(value, bytearray | memoryview):
        return bytes(value)  # never keep a borrowed view past the batch
    raise SinkError(
        f"column {column}: SQLite cannot store a {type(value).__name__}", ErrorClass.RECORD
    )


class SqliteRowBuffer:
    """The rows of one batch as tuples in column order, checked on append."""

    __slots__ = ("_columns", "rows")

    def __init__(self, columns: tuple[str, ...]) -> None:
        self._columns = columns
        self.rows: list[tuple[Value, ...]] = []

    def append(self, row: object) -> int:
        """Convert and keep ``row``; ``SinkError(RECORD)`` leaves the buffer unchanged."""
        columns = self._columns
        if isinstance(row, tuple | list):
            if len(row) != len(columns):
                raise SinkError(
                    f"a row has {len(row)} values for {len(columns)} columns", ErrorClass.RECORD
                )
            values = tuple(_value(v, c) for v, c in zip(row, columns, strict=True))
        elif isinstance(row, dict):
            missing = [c for c in columns if c not in row]
            if missing:
                raise SinkError(f"a row has no value for {missing}", ErrorClass.RECORD)
            extra = [k for k in row if k not in columns]
            if extra:
                raise SinkError(f"a row has keys that are no column: {extra}", ErrorClass.RECORD)
            values = tuple(_value(row[c], c) for c in columns)
        elif len(columns) == 1:
            # One column: the bare value is the row (a decoded record, a payload view).
            values = (_value(row, columns[0]),)
        else:
            raise SinkError(
                f"a row is a tuple or a dict, got {type(row).__name__}", ErrorClass.RECORD
            )
        self.rows.append(values)
        return estimate_row_bytes(values)

    def __len__(self) -> int:
        return len(self.rows)


def _quote(identifier: str) -> str:
    return '"' + identifier.replace('"', '""') + '"'


class SqliteShardWriter:
    """Writes sealed batches to one database file over one connection."""

    def __init__(self, config: SqliteSinkConfig, endpoint: str) -> None:
        self.endpoint = endpoint
        self._config = config
        self._lock = threading.Lock()  # the pool may run two writes of a shard at once
        self._conn: sqlite3.Connection | None = None
        table, columns = _quote(config.table), ", ".join(_quote(c) for c in config.columns)
        marks = ", ".join("?" for _ in config.columns)
        self._insert = f"INSERT INTO {table} ({columns}) VALUES ({marks})"
        self._create = f"CREATE TABLE IF NOT EXISTS {table} ({columns})"

    def _connect(self) -> sqlite3.Connection:
        conn = sqlite3.connect(
            self.endpoint,
            timeout=self._config.busy_timeout,
            isolation_level=None,  # transactions are explicit: BEGIN IMMEDIATE … COMMIT
            check_same_thread=False,  # probed on the pipeline thread, written by workers
        )
        try:
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute(f"PRAGMA synchronous={self._config.synchronous.upper()}")
            conn.execute(
                f"CREATE TABLE IF NOT EXISTS {TOKENS_TABLE} "
                "(seq INTEGER PRIMARY KEY, token TEXT NOT NULL UNIQUE, rows INTEGER NOT NULL)"
            )
        except BaseException:
            conn.close()
            raise
        return conn

    def probe(self) -> None:
        """Open the file; create or check the table. Raises ``SinkError`` naming the file."""
        where = f"{self.endpoint} ({Path(self.endpoint).resolve()})"
        try:
            with self._lock:
                conn = self._conn = self._conn or self._connect()
                if self._config.create_table:
                    conn.execute(self._create)
                info = conn.execute(f"PRAGMA table_info({_quote(self._config.table)})")
                have = {row[1] for row in info}
        except sqlite3.Error as exc:
            raise SinkError(f"sqlite {where}: cannot open: {exc}", ErrorClass.FATAL) from exc
        if not have:
            raise SinkError(
                f"sqlite {where}: table {self._config.table!r} does not exist "
                "(create it, or set create_table: true)",
                ErrorClass.FATAL,
            )
        missing = [c for c in self._config.columns if c not in have]
        if missing:
            raise SinkError(
                f"sqlite {where}: table {self._config.table!r} has no column {missing}",
                ErrorClass.FATAL,
            )

    def write(self, batch: WriteBatch) -> None:
        """Insert the batch in one transaction, unless its token was already applied (B9).

        Called on a sink worker thread; blocks up to ``busy_timeout`` on another
        writer's lock, then raises a retryable ``SinkError``.
        """
        buffer = batch.buffer
        if not isinstance(buffer, SqliteRowBuffer):
            raise SinkError("sqlite sink got a foreign buffer", ErrorClass.FATAL)
        with self._lock:
            try:
                conn = self._conn = self._conn or self._connect()
                self._write(conn, buffer, batch.token)
            except sqlite3.Error as exc:
                self._drop()  # the retry starts from a fresh connection
                raise classify(exc, self.endpoint) from exc

    def _drop(self) -> None:
        """Close and forget the connection (lock held)."""
        if self._conn is not None:
            try:
                self._conn.close()
            except sqlite3.Error:
                logger.debug("sqlite %s: closing a failed connection", self.endpoint, exc_info=True)
            self._conn = None

    def _write(self, conn: sqlite3.Connection, buffer: SqliteRowBuffer, token: str) -> None:
        conn.execute("BEGIN IMMEDIATE")
        try:
            seen = conn.execute(
                f"SELECT rows FROM {TOKENS_TABLE} WHERE token = ?", (token,)
            ).fetchone()
            if seen is not None:
                conn.execute("ROLLBACK")
                logger.info(
                    "sqlite %s: batch %s was already written (%d rows); not inserting it again",
                    self.endpoint,
                    token,
                    seen[0],
                )
                return
            conn.executemany(self._insert, buffer.rows)
            cursor = conn.execute(
                f"INSERT INTO {TOKENS_TABLE} (token, rows) VALUES (?, ?)", (token, len(buffer))
            )
            if cursor.lastrowid is not None and cursor.lastrowid > self._config.dedup_window:
                conn.execute(
                    f"DELETE FROM {TOKENS_TABLE} WHERE seq <= ?",
                    (cursor.lastrowid - self._config.dedup_window,),
                )
            conn.execute("COMMIT")
        except BaseException:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise

    def close(self) -> None:
        with self._lock:
            self._drop()


class SqliteConnector:
    """What the pool asks for: a buffer per batch and a writer per endpoint (file)."""

    def __init__(self, config: SqliteSinkConfig) -> None:
        self._config = config

    def new_buffer(self, shard: int) -> RowBuffer:
        return SqliteRowBuffer(self._config.columns)

    def open_writer(self, shard: int, replica: int, endpoint: str) -> SqliteShardWriter:
        return SqliteShardWriter(self._config, endpoint)


def read_rows(path: str | Path, table: str, columns: tuple[str, ...]) -> list[tuple[Value, ...]]:
    """Every row of ``table`` in insertion order (for tests and tools)."""
    conn = sqlite3.connect(path)
    try:
        cols = ", ".join(_quote(c) for c in columns)
        query = f"SELECT {cols} FROM {_quote(table)} ORDER BY rowid"
        return [tuple(r) for r in conn.execute(query)]
    finally:
        conn.close()
