"""The public face of configuration loading: :func:`load_config` and :func:`load_configs`
with the installed plugins as the connector resolver.

:mod:`spate.config` sits below the plugin registry and never looks it up; these two wrap
its loaders and pass :func:`~spate.plugins.default_registry` when the caller gives no
resolver, so ``spate.load_config(path)`` decodes every connector body (B17, B18).
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from spate.config import ConnectorResolver, PipelineConfig
from spate.config import load_config as _load_config
from spate.config import load_configs as _load_configs
from spate.plugins import default_registry


def load_config(
    source: str | os.PathLike[str],
    *,
    env: Mapping[str, str] | None = None,
    resolver: ConnectorResolver | None = None,
    check_connectors: bool = True,
) -> PipelineConfig:
    """:func:`spate.config.load_config` decoding connector bodies through ``resolver``,
    by default the installed plugins."""
    return _load_config(
        source,
        env=env,
        resolver=_installed(resolver, check_connectors),
        check_connectors=check_connectors,
    )


def load_configs(
    source: str | os.PathLike[str],
    *,
    env: Mapping[str, str] | None = None,
    resolver: ConnectorResolver | None = None,
    check_connectors: bool = True,
) -> list[PipelineConfig]:
    """:func:`spate.config.load_configs` decoding connector bodies through ``resolver``,
    by default the installed plugins."""
    return _load_configs(
        source,
        env=env,
        resolver=_installed(resolver, check_connectors),
        check_connectors=check_connectors,
    )


def _installed(resolver: ConnectorResolver | None, check: bool) -> ConnectorResolver | None:
    if resolver is not None or not check:
        return resolver
    return default_registry()
