"""spate-sqlite: a SQLite sink for spate, written as any third-party connector is.

The ``spate.sinks`` entry point ``sqlite`` names :class:`SqliteSinkFactory`; with this
distribution installed, ``sink: {sqlite: {path: out.db, columns: [...]}}`` works in any
pipeline file, with no change to spate (B27).
"""

from spate_sqlite._connector import (
    SqliteConnector,
    SqliteRowBuffer,
    SqliteShardWriter,
    classify,
    read_rows,
)
from spate_sqlite._factory import SqliteSinkFactory
from spate_sqlite.config import SqliteSinkConfig

__all__ = [
    "SqliteConnector",
    "SqliteRowBuffer",
    "SqliteShardWriter",
    "SqliteSinkConfig",
    "SqliteSinkFactory",
    "classify",
    "read_rows",
]
