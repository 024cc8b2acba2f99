"""What an entry point names: a factory carrying its config model and a build method.

Entry-point groups, one per kind (entry name = YAML tag)::

    [project.entry-points."spate.sinks"]
    clickhouse = "spate_clickhouse:ClickHouseSinkFactory"

The object an entry point loads is a :class:`ComponentFactory` (an instance, or a class
with these attributes as class attributes / classmethods). The registry checks the
shape when it loads one. ``config_model`` is a frozen ``kw_only`` dataclass decoded with
:func:`spate.config.decode` from the connector's YAML body at ``<path>.<tag>``; ``build``
turns a decoded config into the component. Nothing in spate-core knows connectors by
name.
"""

from __future__ import annotations

import enum
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Protocol, TypeVar, runtime_checkable

from spate._clock import Clock
from spate.flow._contract import ByteBudget
from spate.metrics._meter import Meter
from spate.schema import Field, SchemaChanges
from spate.sink._intents import RecordPosition


class PluginKind(enum.Enum):
    """The kinds of plugin and their entry-point groups."""

    SOURCE = "source"
    SINK = "sink"
    STORE = "store"
    DESERIALIZER = "deserializer"
    COORDINATION_STORE = "coordination_store"

    @property
    def group(self) -> str:
        return f"spate.{self.value}s"


COMMANDS_GROUP = "spate.commands"
"""Entry-point group for CLI subcommands contributed by other distributions."""


@dataclass(frozen=True, slots=True, kw_only=True)
class BuildContext:
    """What a factory gets besides its config: names, meter, clock and shared budget.

    ``component`` is the name the component's metrics and logs carry (``source``,
    ``deserializer`` or the sink's name). ``run_nonce`` is unique per process run (dedup
    tokens, B9). ``budget`` is the pipeline's in-flight byte budget (sinks count what
    they hold against it). ``io_threads`` is ``pipeline.io_threads``. ``coordination``
    is the configuration's top-level ``coordination`` section, undecoded (``None`` when
    absent), for sources that split work across instances; spate-coordination decodes it.
    """

    pipeline: str
    component: str
    meter: Meter
    clock: Clock
    run_nonce: str
    budget: ByteBudget
    io_threads: int = 2
    coordination: Mapping[str, object] | None = None
    record_fields: tuple[Field, ...] | None = None
    """For sinks: the fields of the records the deserializer produces, when it can say
    (:mod:`spate.schema`); a sink may create its table from them."""
    registry: object | None = None
    """The plugin registry the pipeline is assembled with, for factories that build
    nested connector sections (the ``tiered`` and ``tee`` sinks); None: the default one."""
    schema_changes: SchemaChanges | None = None
    """The pipeline's new writer schemas: the deserializer publishes, sinks that evolve
    their tables subscribe (:mod:`spate.schema`); None outside a pipeline."""
    delivery: str = "at_least_once"
    """``pipeline.delivery``: ``effectively_once`` asks sinks for per-lane blocks with
    recorded intents (B88); a sink that cannot keep them refuses to start."""
    position: RecordPosition | None = None
    """Under ``effectively_once``: the cell the chain sets to each record's offset."""
    worker: tuple[int, int] | None = None
    """``(index, count)`` in worker process ``index`` of ``count`` (``spate run
    --processes``); None in a single process. Components that keep local state per
    process (a spool's directory, B114) keep it apart per worker."""


@runtime_checkable
class SharedByProcesses(Protocol):
    """A connector config with settings several worker processes cannot share.

    ``spate run --processes N`` (and ``pipeline.processes``) starts N workers on one
    configuration, so every worker has the same sections. Before it starts any worker,
    the parent asks each decoded connector config that has this method, and refuses to
    start on the first answer, naming the key's dotted path.
    """

    def processes_errors(self, processes: int) -> Iterator[tuple[str, str]]:
        """``(key, message)`` for each setting unsafe when ``processes`` workers run this
        section side by side; ``key`` is relative to the section (``orphans``)."""
        ...


ConfigT = TypeVar("ConfigT")
ComponentT_co = TypeVar("ComponentT_co", covariant=True)


@runtime_checkable
class ComponentFactory(Protocol[ConfigT, ComponentT_co]):
    """Builds one kind of component from its decoded config."""

    config_model: type[ConfigT]

    def build(self, config: ConfigT, context: BuildContext) -> ComponentT_co:
        """Build the component; raise ``ConfigError`` for config it cannot use."""
        ...
