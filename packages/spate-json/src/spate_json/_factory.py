"""``JsonDeserializerFactory``: what the ``spate.deserializers`` entry point ``json`` names.

Turns a decoded :class:`~spate_json.JsonConfig` into the deserializer for its framing;
a ``target`` type is imported and its field checks are built once here, so a bad target
fails start-up naming the key (B29).
"""

from __future__ import annotations

from typing import Any, ClassVar

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
        target: type[Any] | None = None
        if config.target is not None:
            try:
                target = load_target(config.target)
                convert = build_converter(
                    target, unknown_fields_error=config.unknown_fields == "error"
                )
            except ValueError as exc:
                raise ConfigError(f"{context.component}.json.target", str(exc)) from None
        objects_only = config.top_level == "object"
        deserializer: JsonDeserializer
        if config.framing == "ndjson":
            deserializer = NdjsonDeserializer(
                on_error=config.on_error, objects_only=objects_only, convert=convert
            )
        elif config.framing == "array":
            return ArrayJsonDeserializer(
                on_error=config.on_error, objects_only=objects_only, convert=convert
            )
        else:
            deserializer = SingleJsonDeserializer.create(
                on_error=config.on_error, objects_only=objects_only, convert=convert
            )
        if objects_only:
            deserializer.columnar = _columnar(config, target, deserializer)
        return deserializer


def _columnar(config: JsonConfig, target: type[Any] | None, deserializer: JsonDeserializer) -> Any:
    """The columnar decoder when ``spate[columnar]`` is installed and the records have a
    columnar form (objects; a ``target`` of scalars and lists of scalars), else None."""
    from spate_json._columnar import ColumnarJsonDecoder, columnar_available, declared_schema

    if not columnar_available():
        return None
    declared = None
    if target is not None:
        declared = declared_schema(target, unknown_fields_error=config.unknown_fields == "error")
        if declared is None:
            return None
    return ColumnarJsonDecoder(
        deserializer.reference, ndjson=config.framing == "ndjson", declared=declared
    )
