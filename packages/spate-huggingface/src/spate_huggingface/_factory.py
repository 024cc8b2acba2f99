"""The entry point ``spate.sinks`` → ``huggingface``: builds the sink from its config.

The token comes from the config or, when that is empty, from ``HF_TOKEN``; either way
it is registered as a secret, so :func:`spate.redact` scrubs it from every text that
leaves the process (B67). Nothing is contacted here; ``start()`` probes the Hub (B29).
"""

from __future__ import annotations

import os
from typing import ClassVar

from spate import register_secret
from spate.plugins import BuildContext

from spate_huggingface._sink import HuggingFaceSink
from spate_huggingface.config import HuggingFaceSinkConfig

TOKEN_ENV = "HF_TOKEN"


def resolve_token(config: HuggingFaceSinkConfig, env: dict[str, str] | None = None) -> str:
    """The write token: ``token:`` of the config, else ``HF_TOKEN`` (registered secret)."""
    token = str.__str__(config.token) or (os.environ if env is None else env).get(TOKEN_ENV, "")
    if token:
        register_secret(token)
    return token


def build_sink(config: HuggingFaceSinkConfig, context: BuildContext) -> HuggingFaceSink:
    """The sink for one ``huggingface:`` section."""
    return HuggingFaceSink(
        context.component,
        config,
        context.clock,
        resolve_token(config),
        io_threads=context.io_threads,
        commit_gates=context.commit_gates,
    )


class HuggingFaceSinkFactory:
    """Builds a Hugging Face sink from ``sinks: {name: {huggingface: ...}}``."""

    config_model: ClassVar[type[HuggingFaceSinkConfig]] = HuggingFaceSinkConfig

    @staticmethod
    def build(config: HuggingFaceSinkConfig, context: BuildContext) -> HuggingFaceSink:
        return build_sink(config, context)
