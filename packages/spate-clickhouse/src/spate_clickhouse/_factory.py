"""The entry point ``spate.sinks`` → ``clickhouse``: builds the sink from its config.

The sink is the shared :class:`~spate.sink.SinkPool`: ``router: key`` (the default) uses
the pool's FNV-1a router of the record key; ``router: distributed`` gives the pool a
:class:`~spate_clickhouse._router.DistributedRouter` that places rows by their sharding
column as ClickHouse's Distributed engine would (B13). Nothing connects here; the
runtime's ``start()`` does. ``create_table: if_missing`` builds the ``CREATE TABLE`` here
(from the declared column types and ``BuildContext.record_fields``), so a column whose
type cannot be derived fails the build with its name (B29); each replica's probe runs it.
``evolve: add_columns`` subscribes the connector to the pipeline's new writer schemas
(``BuildContext.schema_changes``, B60).
"""

from __future__ import annotations

from typing import ClassVar

from spate.errors import ConfigError
from spate.plugins import BuildContext
from spate.sink import PoolConfig, SinkPool

from spate_clickhouse._ddl import DdlError, create_table_sql
from spate_clickhouse._health import TableHealth
from spate_clickhouse._router import DistributedRouter
from spate_clickhouse._writer import ClickHouseConnector
from spate_clickhouse.config import ClickHouseSinkConfig


def build_sink(config: ClickHouseSinkConfig, context: BuildContext) -> SinkPool:
    """The sink for one ``clickhouse:`` section."""
    create_sql = ""
    if config.create_table == "if_missing":
        try:
            create_sql = create_table_sql(config, context.record_fields)
        except DdlError as exc:
            raise ConfigError(f"{context.component}.create_table", str(exc)) from None
    connector = ClickHouseConnector(config, context.component, create_sql)
    connector.bind_meter(context.meter)
    if context.delivery == "effectively_once":
        async_insert = str(config.settings.get("async_insert", "0")).strip().lower()
        if async_insert not in ("0", "false", "no", "off"):
            raise ConfigError(
                f"{context.component}.settings.async_insert",
                "effectively_once inserts each block synchronously with its own token; "
                "remove async_insert",
            )
        connector.effectively_once = True
    router: DistributedRouter | None = None
    if config.router == "distributed":
        function, column = config.sharding
        router = DistributedRouter(
            function,
            column,
            connector.column_names.index(column),
            [shard.weight for shard in config.shards],
            connector.columns,
        )
    pool = SinkPool.from_context(
        connector, context, shards=config.shards, config=PoolConfig.of(config), router=router
    )
    pool.meta_columns = config.meta_columns
    health = TableHealth(
        config.health,
        database=connector.database,
        table=connector.table,
        batch=config.batch,
        clock=context.clock,
        members=context.worker[1] if context.worker is not None else 1,
    )
    if health.enabled:
        health.bind(pool.resize, context.meter, context.component, "sink")
        connector.health = health
    if config.evolve == "add_columns":
        if context.schema_changes is None:
            raise ConfigError(
                f"{context.component}.evolve",
                "needs a pipeline whose deserializer announces schemas",
            )
        connector.follows(context.record_fields)
        connector.seal_open = pool.tick
        context.schema_changes.subscribe(connector.evolve)
    return pool


class ClickHouseSinkFactory:
    """Builds a ClickHouse sink from ``sinks: {name: {clickhouse: ...}}``."""

    config_model: ClassVar[type[ClickHouseSinkConfig]] = ClickHouseSinkConfig

    @staticmethod
    def build(config: ClickHouseSinkConfig, context: BuildContext) -> SinkPool:
        return build_sink(config, context)
