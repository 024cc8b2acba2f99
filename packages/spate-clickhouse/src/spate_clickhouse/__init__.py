"""ClickHouse sink for spate, on clickhouse-connect (and chDB for ``chdb://`` replicas).

``sinks: {name: {clickhouse: {table, columns, shards, ...}}}`` — see
:class:`ClickHouseSinkConfig` and the connector guide. The sink is the shared sink pool
(batching, retries with dedup tokens, breakers, failover within a shard) with a ClickHouse
connector: per-record value checks, one Native INSERT per batch, exception-code error
classes, ``system.columns`` validation and ClickHouse-compatible Distributed placement.
"""

from spate_clickhouse._encoder import Column, RowEncoder
from spate_clickhouse._errors import FATAL_CODES, classify, classify_code
from spate_clickhouse._factory import ClickHouseSinkFactory, build_sink
from spate_clickhouse._router import DistributedPlacement, DistributedRouter
from spate_clickhouse._types import ChType, parse_type
from spate_clickhouse._writer import ClickHouseConnector, ClickHouseShardWriter
from spate_clickhouse.config import (
    RESERVED_SETTINGS,
    ClickHouseSinkConfig,
    ClickHouseTlsConfig,
    TimeoutsConfig,
)

__version__ = "0.1.0"

__all__ = [
    "FATAL_CODES",
    "RESERVED_SETTINGS",
    "ChType",
    "ClickHouseConnector",
    "ClickHouseShardWriter",
    "ClickHouseSinkConfig",
    "ClickHouseSinkFactory",
    "ClickHouseTlsConfig",
    "Column",
    "DistributedPlacement",
    "DistributedRouter",
    "RowEncoder",
    "TimeoutsConfig",
    "__version__",
    "build_sink",
    "classify",
    "classify_code",
    "parse_type",
]
