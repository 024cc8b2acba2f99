"""What an entry point names: a factory carrying its config model and a build method.

Entry-point groups, one per kind (entry name = YAML tag)::

    [project.entry-points."spate.sinks"]
    clickhouse = "spate_clickhouse:ClickHouseSinkFactory"

The object an entry point loads is a :class:`ComponentFactory` (an instance, or a class
with these attributes as class attributes / classmethods). The registry checks the
shape when it loads one. ``config_model`` is a frozen ``kw_only`` dataclass decoded with
:func:`spate.config.decode` from the connector's YAML body at ``<path>.<tag>``; ``build``
turns a decoded config into the component (given a :class:`~spate._context.BuildContext`,
which lives below the sink pool that reads it). Nothing in spate-core knows connectors by
name.
"""

from __future__ import annotations

import enum
from collections.abc import Iterator
from typing import Protocol, TypeVar, runtime_checkable

from spate._context import BuildContext


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
