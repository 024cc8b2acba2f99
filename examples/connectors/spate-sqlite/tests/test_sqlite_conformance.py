"""spate-sqlite passes spate's sink conformance suite, on a real SQLite file.

Every promise the suite checks (B2, B4, B9, B12, B17, B28, B29) is exercised against the
database the sink writes; nothing is mocked. The outage is real too: another connection
holds SQLite's write lock, so the sink's write times out on ``SQLITE_BUSY``.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager

from spate.sink import SinkConnector
from spate.testing.conformance import SinkConformance
from spate_sqlite import SqliteConnector, SqliteSinkFactory, read_rows

COLUMNS = ("id", "name", "amount", "payload")


class TestSqliteSinkConformance(SinkConformance):
    factory = SqliteSinkFactory
    tag = "sqlite"
    dedup_by_token = True

    @property
    def path(self) -> str:
        return str(self.workdir / "out.db")

    def config(self) -> Mapping[str, object]:
        return {
            "path": self.path,
            "table": "events",
            "columns": list(COLUMNS),
            "busy_timeout": "200ms",
            "batch": {"max_rows": 1000, "linger": "1s"},
            "retry": {"initial": "10ms", "max": "100ms"},
        }

    def invalid_configs(self) -> Sequence[tuple[Mapping[str, object], str]]:
        base = dict(self.config())
        return [
            ({**base, "path": " "}, "path"),
            ({**base, "columns": []}, "columns"),
            ({**base, "columns": ["id", "bad name"]}, "columns[1]"),
            ({**base, "table": "drop table"}, "table"),
            ({**base, "busy_timeout": "soon"}, "busy_timeout"),
            ({**base, "batch": {"max_rows": 0}}, "batch.max_rows"),
        ]

    def rows(self, count: int) -> list[object]:
        return [(i, f"name-{i}", i * 1.5, f"p{i}".encode()) for i in range(count)]

    def written(self) -> list[object]:
        try:
            return list(read_rows(self.path, "events", COLUMNS))
        except sqlite3.OperationalError:  # no table yet: nothing written
            return []

    def bad_rows(self) -> Sequence[object]:
        return [
            (1, "too few"),
            (1, "x", 1.0, b"", "too many"),
            {"id": 1, "name": "no amount or payload"},
            (1, "x", object(), b""),
            (2**70, "too big", 0.0, b""),
            "not a row",
        ]

    def open_connector(self) -> tuple[SinkConnector, str]:
        return SqliteConnector(self.decode_config()), self.path

    def unreachable(self) -> tuple[Mapping[str, object], str]:
        missing = str(self.workdir / "no-such-dir" / "out.db")
        return {**self.config(), "path": missing}, missing

    @contextmanager
    def outage(self) -> Iterator[None]:
        """Another connection holds the write lock for as long as the context lasts."""
        holder = sqlite3.connect(self.path, isolation_level=None)
        try:
            holder.execute("BEGIN EXCLUSIVE")
            yield
        finally:
            holder.execute("ROLLBACK")
            holder.close()
