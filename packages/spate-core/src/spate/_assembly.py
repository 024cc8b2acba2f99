"""Assembly of a pipeline from a loaded configuration (``Pipeline.from_config``).

Owns the path from :class:`~spate.config.PipelineConfig` to a runnable
:class:`~spate.pipeline.Pipeline`: one meter, clock, run nonce and byte budget per
pipeline; each connector's factory looked up in the plugin registry and handed its
decoded config and a :class:`~spate.plugins.BuildContext`; the admin server attached as
a service of the run (unless ``admin.listen: none``). It builds objects only; nothing
connects until ``run()``, whose start-up fails with one line naming the endpoint (B29).
When a component cannot be built after the deserializer was, the deserializer is closed.

Does not own: the runtime (``spate.pipeline``), the chain compiler (``spate.ops``), or
config parsing (``spate.config``).
"""

from __future__ import annotations

import dataclasses
import logging
import math
import uuid
from dataclasses import dataclass
from typing import Any

from spate._clock import Clock, SystemClock
from spate._context import BuildContext
from spate.admin._server import AdminServer
from spate.config._loader import decode_connector
from spate.config.models import ConnectorSpec, PipelineConfig
from spate.errors import ConfigError
from spate.flow._budget import InflightBudget
from spate.metrics import names
from spate.metrics._meter import Meter
from spate.ops._deadletter import is_kafka_sink
from spate.plugins._registry import Registry, default_registry
from spate.schema import Field, SchemaChanges, record_fields_of
from spate.sink._contract import records_intents
from spate.sink._gate import CommitGates
from spate.sink._intents import RecordPosition

logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Parts:
    """Every component of a configuration, built and checked, for
    :func:`spate.pipeline._builder.assemble` to wire into a pipeline."""

    config: PipelineConfig
    source: Any
    sinks: dict[str, Any]
    deserializer: Any
    dead_letter: Any
    dead_letter_settings: Any
    position: RecordPosition | None
    clock: Clock
    meter: Meter
    run_nonce: str
    budget: InflightBudget
    admin: AdminServer | None
    """None when ``admin.listen`` is ``none``."""


def build_parts(
    config: PipelineConfig,
    *,
    registry: Registry | None = None,
    clock: Clock | None = None,
    meter: Meter | None = None,
    run_nonce: str | None = None,
    worker: tuple[int, int] | None = None,
    commit_gates: CommitGates | None = None,
) -> Parts:
    """Build every component of ``config`` through ``registry``.

    Connector sections loaded without checking (``spec.config is None``) are decoded
    here. Raises ``ConfigError`` / ``MissingConnectorError`` for what the configuration
    gets wrong; factories may raise ``ConfigError`` for settings they cannot use.
    ``worker``: ``(index, count)`` when this process is one of ``spate run --processes``
    workers (factories see it in their ``BuildContext``). ``commit_gates``: the registry
    of commit-gate locks every sink of the pipeline shares (B231); a new one when None —
    pass one to several pipelines of a process that write the same destination.
    """
    registry = registry if registry is not None else default_registry()
    name = config.pipeline.name
    clock = clock if clock is not None else SystemClock()
    if meter is None:
        coordinated = config.coordination is not None
        meter = Meter(name, declare=names.ALL_FAMILIES if coordinated else names.PIPELINE_FAMILIES)
    run_nonce = run_nonce if run_nonce is not None else new_run_nonce()
    budget = InflightBudget(config.backpressure.max_inflight_bytes)
    schema_changes = SchemaChanges()
    delivery = config.pipeline.delivery
    position = RecordPosition() if delivery == "effectively_once" else None
    replay_blocks = blocks_before_replay(config, registry)[0] if position is not None else 0
    gates = commit_gates if commit_gates is not None else CommitGates()

    # Decoded up front: a sink may name another (``late_data.to``) and read its section.
    sink_specs = {
        sink_name: spec if spec.config is not None else decode_connector(spec, registry)
        for sink_name, spec in config.sinks.items()
    }
    sink_sections = {sink_name: spec.config for sink_name, spec in sink_specs.items()}

    def build(
        spec: ConnectorSpec,
        record_fields: tuple[Field, ...] | None = None,
        *,
        sink: bool = False,
    ) -> Any:
        if spec.config is None:
            spec = decode_connector(spec, registry)
        factory = registry.factory(spec.kind, spec.tag, path=spec.path)
        context = BuildContext(
            pipeline=name,
            component=spec.component,
            meter=meter,
            clock=clock,
            run_nonce=run_nonce,
            budget=budget,
            io_threads=config.pipeline.io_threads,
            coordination=config.coordination,
            record_fields=record_fields,
            registry=registry,
            schema_changes=schema_changes,
            delivery=delivery if sink else "at_least_once",
            position=position if sink else None,
            replay_blocks=replay_blocks if sink else 0,
            worker=worker,
            commit_gates=gates,
            sinks=sink_sections if sink else {},
        )
        logger.debug(
            "building %s %s (%s) for pipeline %s", spec.kind, spec.component, spec.tag, name
        )
        return factory.build(spec.config, context)

    source = build(config.source)
    deserializer = build(config.deserializer) if config.deserializer is not None else None
    try:
        fields = record_fields_of(deserializer)
        sinks = {
            sink_name: build(spec, fields, sink=True) for sink_name, spec in sink_specs.items()
        }
        if position is not None:
            _check_effectively_once(config, sinks)
            _check_dedup_windows(config, registry)
        dead_letter = None
        dl_settings = config.dead_letter_settings
        if config.dead_letter is not None:
            dead_letter = build(config.dead_letter)
            kafka = is_kafka_sink(dl_settings, config.dead_letter.tag)
            dl_settings = dataclasses.replace(dl_settings, format="kafka" if kafka else "row")
        admin = None
        if config.admin.listen != "none":
            admin = AdminServer(
                config.admin.listen,
                registry=meter.registry if config.metrics.exporter == "prometheus" else None,
                stall_after=config.admin.stall_after,
                pipeline=name,
                metrics_auth=config.admin.metrics_auth,
            )
    except BaseException:
        # The pipeline that would own (and close) the deserializer never came to be.
        close_deserializer(deserializer, name)
        raise
    return Parts(
        config=config,
        source=source,
        sinks=sinks,
        deserializer=deserializer,
        dead_letter=dead_letter,
        dead_letter_settings=dl_settings,
        position=position,
        clock=clock,
        meter=meter,
        run_nonce=run_nonce,
        budget=budget,
        admin=admin,
    )


def close_deserializer(deserializer: object, pipeline: str) -> None:
    """Call the deserializer's optional ``close()``; log (never raise) what it raises."""
    close = getattr(deserializer, "close", None)
    if close is None:
        return
    try:
        close()
    except Exception:
        logger.exception("closing the deserializer of pipeline %s failed", pipeline)


def new_run_nonce() -> str:
    """A token unique to this process run (dedup tokens never repeat across runs, B9)."""
    return uuid.uuid4().hex[:12]


def _check_effectively_once(config: PipelineConfig, sinks: dict[str, Any]) -> None:
    """Every sink must keep block intents under ``delivery: effectively_once`` (B90)."""
    for sink_name, sink in sinks.items():
        if not records_intents(sink):
            tag = config.sinks[sink_name].tag
            raise ConfigError(
                "pipeline.delivery",
                f"effectively_once needs ClickHouse sinks; sink {sink_name} ({tag}) cannot "
                "record block intents",
            )


_TAKEOVER = 10.0
"""Seconds allowed, past the session timeout, for another member (or the restarted one)
to take a killed member's partitions and replay them (B123)."""


def blocks_before_replay(config: PipelineConfig, registry: Registry) -> tuple[int, str]:
    """The blocks one partition may seal between a block's first write and its replay
    after a ``kill -9``, and how they were counted (B123, B345)."""
    interval = config.checkpoint.interval
    source = _decoded(config.source, registry)
    commit = float(getattr(source, "commit_interval", 0.0) or 0.0)
    settings = getattr(source, "rdkafka", None)
    session_ms = 0.0
    if isinstance(settings, dict):
        session_ms = float(settings.get("session.timeout.ms", 45_000))
    span = interval + commit + session_ms / 1000 + _TAKEOVER
    per_partition = math.ceil(span / interval)
    why = (
        f"{per_partition} blocks per partition in {span:g}s: checkpoint.interval "
        f"{interval:g}s, commit interval {commit:g}s, session timeout "
        f"{session_ms / 1000:g}s, {_TAKEOVER:g}s to take the partitions over"
    )
    return per_partition, why


def _check_dedup_windows(config: PipelineConfig, registry: Registry) -> None:
    """Size each sink's ``table_options.dedup_window`` against a ``kill -9`` (B123).

    A killed member's partitions are replayed only after its session times out and
    another member takes them; meanwhile every partition writing the table seals at least
    one block per ``checkpoint.interval``. A window smaller than one partition's blocks
    over that time is refused with its dotted key path; otherwise the number of
    partitions it covers is logged (more partitions need a larger window).
    """
    per_partition, why = blocks_before_replay(config, registry)
    for spec in config.sinks.values():
        options = getattr(_decoded(spec, registry), "table_options", None)
        window = getattr(options, "dedup_window", None)
        if not isinstance(window, int) or window <= 0:
            continue
        key = f"{spec.path}.table_options.dedup_window"
        if window < per_partition:
            raise ConfigError(
                key,
                f"{window} cannot hold the blocks written between a block and its replay "
                f"after a kill -9 ({why}); see docs/concepts/delivery.md",
            )
        logger.info(
            "%s = %d holds the blocks of up to %d partition(s) writing the table across "
            "a kill -9 (%s)",
            key,
            window,
            window // per_partition,
            why,
        )


def _decoded(spec: ConnectorSpec, registry: Registry) -> object | None:
    if spec.config is None:
        spec = decode_connector(spec, registry)
    return spec.config
