"""Plugin discovery through entry points, and the factory protocol connectors implement."""

from spate.plugins._command import Command
from spate.plugins._entry_points import install_hint
from spate.plugins._factory import (
    COMMANDS_GROUP,
    BuildContext,
    ComponentFactory,
    PluginKind,
    SharedByProcesses,
)
from spate.plugins._references import import_reference
from spate.plugins._registry import COMMAND_KIND, PluginInfo, Registry, default_registry

__all__ = [
    "COMMANDS_GROUP",
    "COMMAND_KIND",
    "BuildContext",
    "Command",
    "ComponentFactory",
    "PluginInfo",
    "PluginKind",
    "Registry",
    "SharedByProcesses",
    "default_registry",
    "import_reference",
    "install_hint",
]
