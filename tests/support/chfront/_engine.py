"""The front's engine: one chDB connection on one data directory, used one request at a time.

chDB allows one data directory per process, so every simulated replica is its own front
process with its own directory. Requests are serialised with a lock: a request's URL
settings and database are applied to the shared connection with ``SET``/``USE`` just before
its statement and reset right after it (``SET name = DEFAULT``), so nothing a request sets
can leak into the next one — a stale ``insert_deduplication_token`` left in a session would
silently drop the next insert. If the reset itself fails, the connection is reopened.

INSERT data goes through a temporary file and ``INSERT … FROM INFILE``: chDB's streaming
insert (``send_insert``, chDB 4.4) swallows the errors ClickHouse raises while it writes
the rows — a ``CHECK`` constraint, a ``MATERIALIZED`` expression that cannot convert a
value — reporting the rows as written while it writes none, so a server that refuses
rows would look like one that lost them. Only a statement with its own ``SETTINGS``
clause (where ``FROM INFILE`` did not parse) still takes the streaming insert.

The connection is chDB's DB-API style ``chdb.connect`` object (the same object
``chdb.session.Session`` wraps), because only it exposes the streaming insert.
"""

from __future__ import annotations

import logging
import re
import tempfile
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import chdb

from ._errors import ClickHouseError
from ._sql import Statement, set_assignments

logger = logging.getLogger(__name__)

_SETTING_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_APPEND_CHUNK = 4 * 1024 * 1024
_SETTINGS_CLAUSE = re.compile(r"\bSETTINGS\b", re.IGNORECASE)


@dataclass(frozen=True, slots=True)
class Outcome:
    """What one statement produced: the response body and the summary counters."""

    body: bytes
    read_rows: int = 0
    read_bytes: int = 0
    written_rows: int = 0
    written_bytes: int = 0
    elapsed_ns: int = 0


def quote_literal(value: str) -> str:
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


def quote_identifier(name: str) -> str:
    return "`" + name.replace("\\", "\\\\").replace("`", "\\`") + "`"


class Engine:
    """A chDB connection plus the lock that serialises requests on it."""

    def __init__(self, data_dir: str) -> None:
        self._data_dir = data_dir
        self._lock = threading.Lock()
        self._conn: Any = chdb.connect(data_dir)
        version, timezone = self._scalar_row("SELECT version(), timezone()")
        self.version = version
        self.timezone = timezone
        names = self._conn.query(
            "SELECT number, errorCodeToName(number) FROM numbers(2000) "
            "WHERE errorCodeToName(number) != ''",
            "TabSeparated",
        )
        self._error_names: dict[int, str] = {}
        for line in names.bytes().decode().splitlines():
            code, name = line.split("\t")
            self._error_names[int(code)] = name
        logger.info("chDB %s (timezone %s) opened on %s", version, timezone, data_dir)

    def _scalar_row(self, sql: str) -> list[str]:
        return str(self._conn.query(sql, "TabSeparated").bytes().decode()).rstrip("\n").split("\t")

    def error_name(self, code: int) -> str:
        """ClickHouse's name for an exception code (``UNKNOWN_EXCEPTION`` if it has none)."""
        return self._error_names.get(code, "UNKNOWN_EXCEPTION")

    def close(self, timeout: float = 10.0) -> None:
        """Close the connection once the running request (if any) has finished."""
        acquired = self._lock.acquire(timeout=timeout)
        try:
            if self._conn is not None:
                self._conn.close()
                self._conn = None
        finally:
            if acquired:
                self._lock.release()

    def run(
        self,
        statement: Statement,
        *,
        settings: Mapping[str, str],
        database: str | None,
        params: Mapping[str, str],
        default_format: str,
    ) -> Outcome:
        """Execute one request's statement with its settings and database; may block on the lock.

        ``settings`` maps a setting name to an SQL literal (already quoted). A ``SET`` or ``USE``
        statement is executed (so bad names fail as on a server) and then undone like the rest:
        session state is kept by the HTTP layer, never in the connection.
        """
        for name in settings:
            if not _SETTING_NAME.match(name):
                raise ClickHouseError(115, "UNKNOWN_SETTING", f"Unknown setting '{name}'")
        with self._lock:
            if self._conn is None:
                raise ClickHouseError(
                    236, "ABORTED", "Server is shutting down", status=503
                )  # pragma: no cover - shutdown race
            applied: list[str] = []
            switched = False
            try:
                if database and database != "default":
                    self._call(f"USE {quote_identifier(database)}")
                    switched = True
                if settings:
                    assignments = ", ".join(f"{k} = {v}" for k, v in settings.items())
                    self._call(f"SET {assignments}")
                    applied = list(settings)
                if statement.kind == "insert_data":
                    return self._insert(statement)
                if statement.keyword == "USE":
                    switched = True
                outcome = self._query(statement, params, default_format)
                if statement.keyword == "SET":
                    applied += [name for name, _ in set_assignments(statement.sql)]
                return outcome
            finally:
                self._restore(applied, switched)

    def _call(self, sql: str) -> None:
        try:
            self._conn.query(sql, "TabSeparated")
        except Exception as exc:
            raise ClickHouseError.from_engine(str(exc)) from exc

    def _restore(self, applied: list[str], switched: bool) -> None:
        try:
            if applied:
                self._conn.query("SET " + ", ".join(f"{k} = DEFAULT" for k in applied), "TSV")
            if switched:
                self._conn.query("USE default", "TSV")
        except Exception:
            logger.exception("could not reset request state; reopening chDB on %s", self._data_dir)
            self._conn.close()
            self._conn = chdb.connect(self._data_dir)

    def _insert(self, statement: Statement) -> Outcome:
        assert statement.fmt is not None and statement.data is not None
        if _SETTINGS_CLAUSE.search(statement.sql) is None:
            return self._insert_file(statement)
        started = time.perf_counter_ns()
        try:
            inserter = self._conn.send_insert(statement.sql, statement.fmt)
        except Exception as exc:
            raise ClickHouseError.from_engine(str(exc)) from exc
        data = statement.data
        try:
            for offset in range(0, len(data), _APPEND_CHUNK):
                inserter.append(data[offset : offset + _APPEND_CHUNK])
            result = inserter.finish()
        except Exception as exc:
            try:
                inserter.cancel()
            except Exception:  # the insert already failed; keep the engine's first error
                logger.debug("cancel after a failed insert also failed", exc_info=True)
            raise ClickHouseError.from_engine(str(exc)) from exc
        return Outcome(
            b"",
            written_rows=int(result.rows_written),
            written_bytes=int(result.bytes_written),
            elapsed_ns=time.perf_counter_ns() - started,
        )

    def _insert_file(self, statement: Statement) -> Outcome:
        """One insert through a temporary file (errors are reported, see the module)."""
        assert statement.fmt is not None and statement.data is not None
        started = time.perf_counter_ns()
        with tempfile.NamedTemporaryFile(prefix="chfront-insert-", suffix=".bin") as body:
            body.write(statement.data)
            body.flush()
            sql = f"{statement.sql} FROM INFILE {quote_literal(body.name)} FORMAT {statement.fmt}"
            try:
                result = self._conn.query(sql, "TabSeparated")
            except Exception as exc:
                raise ClickHouseError.from_engine(str(exc)) from exc
        return Outcome(
            b"",
            written_rows=int(result.rows_written()),
            written_bytes=int(result.bytes_written()),
            elapsed_ns=time.perf_counter_ns() - started,
        )

    def _query(
        self, statement: Statement, params: Mapping[str, str], default_format: str
    ) -> Outcome:
        started = time.perf_counter_ns()
        try:
            result = self._conn.query(statement.sql, default_format, params=dict(params))
        except Exception as exc:
            raise ClickHouseError.from_engine(str(exc)) from exc
        return Outcome(
            bytes(result.bytes()),
            read_rows=int(result.rows_read()),
            read_bytes=int(result.bytes_read()),
            written_rows=int(result.rows_written()),
            written_bytes=int(result.bytes_written()),
            elapsed_ns=time.perf_counter_ns() - started,
        )
