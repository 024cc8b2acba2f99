"""What the ``spate.sinks`` entry point ``sqlite`` names: config model plus ``build``.

The factory only wires the connector into spate's sink pool; nothing is opened here.
The runtime calls the sink's ``start()``, which probes the file before anything is
consumed (B29).
"""

from __future__ import annotations

from typing import ClassVar

from spate.plugins import BuildContext
from spate.sink import ShardConfig, SinkPool

from spate_sqlite._connector import SqliteConnector
from spate_sqlite.config import SqliteSinkConfig


class SqliteSinkFactory:
    """Builds the SQLite sink from ``sink: {sqlite: ...}``."""

    config_model: ClassVar[type[SqliteSinkConfig]] = SqliteSinkConfig

    @staticmethod
    def build(config: SqliteSinkConfig, context: BuildContext) -> SinkPool:
        """One shard whose one endpoint is the database file."""
        return SinkPool.from_context(
            SqliteConnector(config),
            context,
            shards=[ShardConfig(replicas=(config.path,))],
            config=config.pool_config(),
            component_type="sqlite",
        )
