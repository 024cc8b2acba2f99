"""The entry point ``spate.sinks`` → ``clickhouse``: builds the sink from its config.

``router: key`` (the default) gives the shared :class:`~spate.sink.SinkPool` itself, with
the pool's FNV-1a router; ``router: distributed`` wraps it in a
:class:`~spate_clickhouse._router.DistributedSink` that places rows as ClickHouse's
Distributed engine would (B13). Nothing connects here; the runtime's ``start()`` does.
"""

from __future__ import annotations

from typing import ClassVar

from spate.plugins import BuildContext
from spate.sink import PoolConfig, SinkPool

from spate_clickhouse._router import DistributedPlacement, DistributedSink, PresetRouter
from spate_clickhouse._writer import ClickHouseConnector
from spate_clickhouse.config import ClickHouseSinkConfig


def build_sink(config: ClickHouseSinkConfig, context: BuildContext) -> SinkPool | DistributedSink:
    """The sink for one ``clickhouse:`` section."""
    connector = ClickHouseConnector(config, context.component)
    pool_config = PoolConfig.of(config)
    if config.router != "distributed":
        return SinkPool.from_context(connector, context, shards=config.shards, config=pool_config)
    router = PresetRouter()
    pool = SinkPool.from_context(
        connector, context, shards=config.shards, config=pool_config, router=router
    )
    function, column = config.sharding
    index = connector.column_names.index(column)
    weights = [shard.weight for shard in config.shards]

    def placement() -> DistributedPlacement:
        return DistributedPlacement(function, connector.columns()[index], weights)

    return DistributedSink(pool, router, placement, column, index)


class ClickHouseSinkFactory:
    """Builds a ClickHouse sink from ``sinks: {name: {clickhouse: ...}}``."""

    config_model: ClassVar[type[ClickHouseSinkConfig]] = ClickHouseSinkConfig

    @staticmethod
    def build(config: ClickHouseSinkConfig, context: BuildContext) -> SinkPool | DistributedSink:
        return build_sink(config, context)
