"""Plugin discovery through entry points, and the factory protocol connectors implement."""

from spate._context import BuildContext
from spate.plugins._command import Command
from spate.plugins._entry_points import install_hint
from spate.plugins._factory import (
    COMMANDS_GROUP,
    ComponentFactory,
    PluginKind,
    SharedByProcesses,
)
from spate.plugins._references import import_reference
from spate.plugins._registry import COMMAND_KIND, PluginInfo, Registry, default_registry
from spate.plugins._tiers import JsonlStoreFactory, TeeSinkFactory, TieredSinkFactory

__all__ = [
    "COMMANDS_GROUP",
    "COMMAND_KIND",
    "BuildContext",
    "Command",
    "ComponentFactory",
    "JsonlStoreFactory",
    "PluginInfo",
    "PluginKind",
    "Registry",
    "SharedByProcesses",
    "TeeSinkFactory",
    "TieredSinkFactory",
    "default_registry",
    "import_reference",
    "install_hint",
]
