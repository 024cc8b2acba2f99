"""The entry point ``spate.sinks`` → ``clickhouse``: builds the sink from its config.

The sink is the shared :class:`~spate.sink.SinkPool`: ``router: key`` (the default) uses
the pool's FNV-1a router of the record key; ``router: distributed`` gives the pool a
:class:`~spate_clickhouse._router.DistributedRouter` that places rows by their sharding
column as ClickHouse's Distributed engine would (B13). Nothing connects here; the
runtime's ``start()`` does. ``create_table: if_missing`` builds the ``CREATE TABLE`` here
(from the declared column types and ``BuildContext.record_fields``), so a column whose
type cannot be derived fails the build with its name (B29); each replica's probe runs it.
``evolve: add_columns`` subscribes the connector to the pipeline's new writer schemas
(``BuildContext.schema_changes``, B60). ``late_data.to`` must name another ClickHouse
sink of the pipeline with the same columns on the same servers (B242): its table takes
the late rows.
A ``*CollapsingMergeTree`` engine in ``table_options.engine`` needs ``pipeline.delivery:
effectively_once`` (B378): a block written twice doubles its signs, and no merge undoes
that.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import ClassVar

from spate.errors import ConfigError
from spate.plugins import BuildContext
from spate.sink import PoolConfig, Router, SinkPool, WeightedHashRouter

from spate_clickhouse._blocks import LateTable
from spate_clickhouse._ddl import DdlError, create_table_sql, table_columns
from spate_clickhouse._health import TableHealth
from spate_clickhouse._router import DistributedRouter
from spate_clickhouse._targets import TargetPlan, TargetRouter
from spate_clickhouse._writer import ClickHouseConnector
from spate_clickhouse.config import ClickHouseSinkConfig, LateDataConfig


def build_sink(config: ClickHouseSinkConfig, context: BuildContext) -> SinkPool:
    """The sink for one ``clickhouse:`` section."""
    if "CollapsingMergeTree" in config.table_options.engine and (
        context.delivery != "effectively_once"
    ):
        raise ConfigError(
            f"{context.component}.table_options.engine",
            f"{config.table_options.engine} needs pipeline.delivery: effectively_once: a "
            "block written twice doubles its signs and corrupts every sum over them",
        )
    create_sql = ""
    if config.create_table == "if_missing" and not config.templated:
        try:
            create_sql = create_table_sql(config, context.record_fields)
        except DdlError as exc:
            raise ConfigError(f"{context.component}.create_table", str(exc)) from None
    connector = ClickHouseConnector(config, context.component, create_sql)
    if config.late_data is not None:
        connector.partitioning.late = late_table(config, config.late_data, context)
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
        connector.replay_blocks = context.replay_blocks
    router: DistributedRouter | TargetRouter | None = None
    if config.router == "distributed":
        function, column = config.sharding
        router = DistributedRouter(
            function,
            column,
            connector.column_names.index(column),
            [shard.weight for shard in config.shards],
            connector.columns,
        )
    if config.templated:
        inner: Router | None = router
        if inner is None and len(config.shards) > 1:
            inner = WeightedHashRouter([shard.weight for shard in config.shards])
        router = _route(config, context, connector, inner)
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


def _route(
    config: ClickHouseSinkConfig,
    context: BuildContext,
    connector: ClickHouseConnector,
    inner: Router | None,
) -> TargetRouter:
    """A templated ``table``/``database`` (B290): the connector writes each row to its
    target, created on first use under ``create_table: if_missing`` (B291), and the pool's
    router checks every row's target as it is offered (B292). Column types come from the
    declarations or the records' schema, as ``create_table`` derives them."""
    plan = TargetPlan(config.database, config.table, config.column_specs)
    try:
        types = table_columns(config, context.record_fields)
    except DdlError as exc:
        raise ConfigError(
            f"{context.component}.table",
            f"a templated table needs every column's type (no target exists at start): {exc}",
        ) from None
    if context.delivery == "effectively_once" and config.create_table != "if_missing":
        raise ConfigError(
            f"{context.component}.create_table",
            "effectively_once with a templated table needs create_table: if_missing, so "
            "every target is created with table_options.dedup_window (B295)",
        )
    create: Callable[[str, str], str] | None = None
    if config.create_table == "if_missing":
        fields = context.record_fields

        def create(database: str, table: str) -> str:
            return create_table_sql(replace(config, database=database, table=table), fields)

    connector.route(plan, types, create)
    return TargetRouter(plan, inner)


def late_table(
    config: ClickHouseSinkConfig, late: LateDataConfig, context: BuildContext
) -> LateTable:
    """The table of the sink ``late_data.to`` names, checked against this sink (B242)."""
    target_name = late.to
    path = f"{context.component}.late_data.to"
    target = context.sinks.get(target_name)
    if target is None:
        declared = ", ".join(sorted(context.sinks)) or "none"
        raise ConfigError(path, f"no sink named {target_name!r} (sinks: {declared})")
    if target_name == context.component:
        raise ConfigError(path, "late rows must go to another sink than this one")
    if not isinstance(target, ClickHouseSinkConfig):
        raise ConfigError(path, f"sink {target_name!r} is not a clickhouse sink")
    mine = [s.name for s in config.column_specs]
    theirs = [s.name for s in target.column_specs]
    if mine != theirs:
        raise ConfigError(
            path,
            f"sink {target_name!r} writes columns {theirs}, this sink {mine}: late rows "
            "are written with this sink's columns",
        )
    if [s.replicas for s in target.shards] != [s.replicas for s in config.shards]:
        raise ConfigError(
            path,
            f"sink {target_name!r} must write to the same shards and replicas: late rows "
            "are inserted through this sink's connections",
        )
    side = ClickHouseConnector(target, target_name)
    return LateTable(target_name, side.database, side.table, side.insert_settings)


class ClickHouseSinkFactory:
    """Builds a ClickHouse sink from ``sinks: {name: {clickhouse: ...}}``."""

    config_model: ClassVar[type[ClickHouseSinkConfig]] = ClickHouseSinkConfig

    @staticmethod
    def build(config: ClickHouseSinkConfig, context: BuildContext) -> SinkPool:
        return build_sink(config, context)
