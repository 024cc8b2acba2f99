"""Entry-point factory of spate-http (``spate.sources`` → ``http_poll``).

Owns :class:`HttpPollSourceFactory`: it loads the ``collector`` and ``key`` functions
named in the config (a name that does not import is a ``ConfigError`` at its dotted
path, B29) and builds an :class:`~spate_http.HttpPollSource`.
"""

from __future__ import annotations

from typing import ClassVar

from spate.errors import ConfigError
from spate.plugins import BuildContext

from spate_http._extract import Extractor, KeyMaker, load_function
from spate_http._source import HttpPollSource
from spate_http.config import HttpPollConfig

_PATH = "source.http_poll"


class HttpPollSourceFactory:
    """Builds an :class:`HttpPollSource` from ``source: {http_poll: ...}``."""

    config_model: ClassVar[type[HttpPollConfig]] = HttpPollConfig

    @staticmethod
    def build(config: HttpPollConfig, context: BuildContext) -> HttpPollSource:
        return HttpPollSource(
            config,
            extractor=extractor_of(config),
            keys=keys_of(config),
            meter=context.meter,
            clock=context.clock,
            component=context.component,
        )


def extractor_of(config: HttpPollConfig) -> Extractor:
    """The extractor ``records`` or ``collector`` asks for."""
    if not config.collector:
        return Extractor(config.records, None)
    try:
        return Extractor("", load_function(config.collector))
    except ValueError as exc:
        raise ConfigError(f"{_PATH}.collector", str(exc)) from None


def keys_of(config: HttpPollConfig) -> KeyMaker | None:
    """The key maker ``key`` asks for (None: no deduplication)."""
    if config.key is None:
        return None
    if isinstance(config.key, list):
        return KeyMaker(config.key)
    try:
        return KeyMaker(function=load_function(config.key))
    except ValueError as exc:
        raise ConfigError(f"{_PATH}.key", str(exc)) from None
