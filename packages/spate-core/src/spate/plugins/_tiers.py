"""Built-in composite sinks: ``tiered`` (memory/spool tiers before a terminal) and ``tee``.

Declared as ``spate.sinks`` entry points of spate-core, so YAML reaches them like any
connector (ADR 0005)::

    sink:
      tiered:
        tiers:
          - memory: {max_records: 10000, every: 5m}
          - spool: {dir: /var/spool/spate, ack: spooled, max_bytes: 10GiB}
        terminal:
          clickhouse: {...}

    sink:
      tee:
        sinks:
          - clickhouse: {...}
          - kafka: {...}

Nested connector sections are built through the same registry as the top level. A
memory tier after a spool is refused at validation: it would hold records whose custody
the spool has already passed on (B17). A nested sink with metadata columns is refused
(ADR 0020: the chain adds them for a top-level sink only). Also the built-in ``jsonl``
spool store factory (``spate.stores``).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field, replace
from typing import Any, ClassVar

from spate._context import BuildContext
from spate.config._decode import decode, join_path
from spate.errors import ConfigError, SpateError
from spate.plugins._factory import PluginKind
from spate.sink._contract import MetaColumnsSink, Sink
from spate.sink.tiers._memory import MemoryTier, MemoryTierConfig
from spate.sink.tiers._spool import SpoolConfig, SpoolTier
from spate.sink.tiers._store import JsonlStore, SpoolStore, adopted_directories, worker_directory
from spate.sink.tiers._tee import TeeSink

TIER_MODELS: dict[str, type[Any]] = {"memory": MemoryTierConfig, "spool": SpoolConfig}

MEMORY_AFTER_SPOOL = (
    "a memory tier after a spool breaks the custody chain (the spool passes records on "
    "that a crash would lose from memory); put the memory tier before the spool"
)


def _single(raw: Mapping[str, Any], what: str) -> tuple[str, Any]:
    if len(raw) != 1:
        raise ValueError(f"expected a single-key mapping naming the {what}, got {len(raw)} keys")
    ((tag, body),) = raw.items()
    return str(tag), body if body is not None else {}


@dataclass(frozen=True, slots=True, kw_only=True)
class TieredSinkConfig:
    """``tiered:`` — tiers (``memory``, ``spool``) in the order records travel, then a
    terminal sink section."""

    tiers: list[dict[str, Any]] = field(default_factory=list)
    """The tiers, each ``{memory: {...}}`` or ``{spool: {...}}``, in travel order."""
    terminal: dict[str, Any] = field(default_factory=dict)
    """The terminal sink section, ``{connector: {...}}``, as under ``sink:``."""

    def config_errors(self) -> Iterator[tuple[str, str]]:
        if not self.tiers:
            yield "tiers", "must list at least one tier (memory or spool)"
        if not self.terminal:
            yield "terminal", "required: the sink section the tiers stand in front of"
        spool_at: int | None = None
        for i, raw in enumerate(self.tiers):
            where = join_path("tiers", i)
            try:
                tag, body = _single(raw, "tier (memory or spool)")
            except ValueError as exc:
                yield where, str(exc)
                continue
            model = TIER_MODELS.get(tag)
            if model is None:
                yield where, f"unknown tier {tag!r} (expected memory or spool)"
                continue
            try:
                decode(model, body, "")
            except ConfigError as exc:
                yield join_path(join_path(where, tag), exc.path) if exc.path else where, exc.message
                continue
            if tag == "spool" and spool_at is None:
                spool_at = i
            elif tag == "memory" and spool_at is not None:
                yield where, MEMORY_AFTER_SPOOL
        if self.terminal:
            yield from _nested_errors(self.terminal, "terminal")

    def tier_configs(self) -> list[tuple[str, MemoryTierConfig | SpoolConfig]]:
        """The decoded tiers, in travel order."""
        out: list[tuple[str, MemoryTierConfig | SpoolConfig]] = []
        for raw in self.tiers:
            tag, body = _single(raw, "tier")
            out.append((tag, decode(TIER_MODELS[tag], body, "")))
        return out


@dataclass(frozen=True, slots=True, kw_only=True)
class TeeSinkConfig:
    """``tee:`` — every row to each listed sink; delivered only when all wrote it."""

    sinks: list[dict[str, Any]] = field(default_factory=list)
    """Two or more sink sections, each ``{connector: {...}}``."""

    def config_errors(self) -> Iterator[tuple[str, str]]:
        if len(self.sinks) < 2:
            yield "sinks", "a tee needs at least two sinks"
        for i, raw in enumerate(self.sinks):
            yield from _nested_errors(raw, join_path("sinks", i))


def _nested_errors(raw: Mapping[str, Any], where: str) -> Iterator[tuple[str, str]]:
    """Errors of a nested sink section, decoded by its connector's model (B17, B29).

    Checked through the default registry, as the loader does without a resolver; the
    build decodes again through the pipeline's own registry.
    """
    from spate.config._loader import decode_connector
    from spate.config.models import ConnectorSpec
    from spate.plugins._registry import default_registry

    try:
        tag, body = _single(raw, "sink")
    except ValueError as exc:
        yield where, str(exc)
        return
    path = join_path(where, tag)
    spec = ConnectorSpec(kind="sink", tag=tag, component=where, path=path, body=body)
    try:
        decode_connector(spec, default_registry())
    except ConfigError as exc:
        yield exc.path, exc.message
    except SpateError as exc:
        yield path, str(exc)


def _build_nested(raw: Mapping[str, Any], component: str, context: BuildContext) -> Sink:
    """Build a nested sink section through the registry the pipeline was assembled with."""
    from spate.config._loader import decode_connector
    from spate.config.models import ConnectorSpec
    from spate.plugins._registry import Registry, default_registry

    registry = context.registry if isinstance(context.registry, Registry) else default_registry()
    tag, body = _single(raw, "sink")
    spec = ConnectorSpec(
        kind="sink", tag=tag, component=component, path=f"{component}.{tag}", body=body
    )
    spec = decode_connector(spec, registry)
    factory = registry.factory("sink", tag, path=spec.path)
    sink: Sink = factory.build(spec.config, replace(context, component=component))
    if isinstance(sink, MetaColumnsSink) and sink.meta_columns:
        # The chain adds metadata columns to the rows it offers the outer sink, which a
        # tier or a tee does not ask for (ADR 0020): refuse rather than write rows short.
        raise ConfigError(
            f"{spec.path}.columns",
            "metadata columns ("
            + ", ".join(f"{c.name}: {c.source}" for c in sink.meta_columns)
            + ") are not supported behind a tier or a tee yet; put the sink at the top level",
        )
    return sink


def open_store(config: SpoolConfig, context: BuildContext) -> SpoolStore:
    """The spool store ``config.store`` names (built in: ``jsonl``)."""
    if config.store == "jsonl":
        return JsonlStoreFactory.build(config, context)
    from spate.plugins._registry import Registry, default_registry

    registry = context.registry if isinstance(context.registry, Registry) else default_registry()
    factory = registry.factory(PluginKind.STORE, config.store, path="store")
    store: SpoolStore = factory.build(config, context)
    return store


def build_tiers(
    tiers: list[tuple[str, MemoryTierConfig | SpoolConfig]],
    terminal: Sink,
    context: BuildContext,
) -> Sink:
    """Stack ``tiers`` (travel order) in front of ``terminal``; the first tier is returned."""
    sink = terminal
    name = context.component
    for index in range(len(tiers) - 1, -1, -1):
        tag, cfg = tiers[index]
        tier_name = f"{name}.{tag}" if index else name
        if isinstance(cfg, SpoolConfig):
            store = open_store(cfg, context)
            sink = SpoolTier(
                tier_name,
                replace(cfg, dir=worker_directory(cfg.dir, context.worker)),
                sink,
                store,
                meter=context.meter,
                clock=context.clock,
                pipeline=context.pipeline,
            )
        else:
            sink = MemoryTier(tier_name, cfg, sink, meter=context.meter, clock=context.clock)
    return sink


class TieredSinkFactory:
    """Builds ``sink: {tiered: ...}``: the tiers stacked in front of the terminal."""

    config_model: ClassVar[type[TieredSinkConfig]] = TieredSinkConfig

    @staticmethod
    def build(config: TieredSinkConfig, context: BuildContext) -> Sink:
        terminal = _build_nested(config.terminal, f"{context.component}.terminal", context)
        return build_tiers(config.tier_configs(), terminal, context)


class TeeSinkFactory:
    """Builds ``sink: {tee: {sinks: [...]}}``."""

    config_model: ClassVar[type[TeeSinkConfig]] = TeeSinkConfig

    @staticmethod
    def build(config: TeeSinkConfig, context: BuildContext) -> Sink:
        branches = [
            _build_nested(raw, f"{context.component}.{i}", context)
            for i, raw in enumerate(config.sinks)
        ]
        return TeeSink(context.component, branches, clock=context.clock, meter=context.meter)


class JsonlStoreFactory:
    """The built-in ``jsonl`` spool store (``spate.stores``)."""

    config_model: ClassVar[type[SpoolConfig]] = SpoolConfig

    @staticmethod
    def build(config: SpoolConfig, context: BuildContext) -> SpoolStore:
        """A store in ``dir`` (``dir/w<index>`` in a worker process) that adopts the
        segments no process of this layout reads (B114)."""
        return JsonlStore(
            worker_directory(config.dir, context.worker),
            segment_bytes=config.segment_bytes,
            nonce=context.run_nonce,
            adopt=adopted_directories(config.dir, context.worker),
        )
