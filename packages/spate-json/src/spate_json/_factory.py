"""``JsonDeserializerFactory``: what the ``spate.deserializers`` entry point ``json`` names.

Turns a decoded :class:`~spate_json.JsonConfig` into the deserializer for its framing;
a ``target`` type is imported and its field checks are built once here, so a bad target
fails start-up naming the key (B29).
"""

from __future__ import annotations

from typing import ClassVar

from spate import BuildContext, ConfigError

from spate_json._config import JsonConfig
from spate_json._deserializer import (
    ArrayJsonDeserializer,
    JsonDeserializer,
    NdjsonDeserializer,
    SingleJsonDeserializer,
)
from spate_json._target import Converter, build_converter, load_target


class JsonDeserializerFactory:
    """Builds the JSON deserializer of ``deserializer: {json: ...}``."""

    config_model: ClassVar[type[JsonConfig]] = JsonConfig

    @classmethod
    def build(cls, config: JsonConfig, context: BuildContext) -> JsonDeserializer:
        """Build at start-up; imports the target type if one is configured."""
        convert: Converter | None = None
        if config.target is not None:
            try:
                target = load_target(config.target)
                convert = build_converter(
                    target, unknown_fields_error=config.unknown_fields == "error"
                )
            except ValueError as exc:
                raise ConfigError(f"{context.component}.json.target", str(exc)) from None
        objects_only = config.top_level == "object"
        if config.framing == "ndjson":
            return NdjsonDeserializer(
                on_error=config.on_error, objects_only=objects_only, convert=convert
            )
        if config.framing == "array":
            return ArrayJsonDeserializer(
                on_error=config.on_error, objects_only=objects_only, convert=convert
            )
        return SingleJsonDeserializer.create(
            on_error=config.on_error, objects_only=objects_only, convert=convert
        )
