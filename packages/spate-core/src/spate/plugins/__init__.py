"""Plugin discovery through entry points, and the factory protocol connectors implement."""

from spate.plugins._factory import COMMANDS_GROUP, BuildContext, ComponentFactory, PluginKind

__all__ = ["COMMANDS_GROUP", "BuildContext", "ComponentFactory", "PluginKind"]
