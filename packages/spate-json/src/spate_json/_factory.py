"""``JsonDeserializerFactory``: what the ``spate.deserializers`` entry point ``json`` names.

Turns a decoded :class:`~spate_json.JsonConfig` into the deserializer for its framing;
a ``target`` type is imported and its field checks are built once here, so a bad target
fails start-up naming the key (B29). ``mode: confluent`` builds spate-avro's registry
client with a parser of ``schemaType: JSON`` answers, probes the registry and fetches
``prewarm_subjects`` before anything is consumed (B300, B303).
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any, ClassVar

from spate import BuildContext, ConfigError
from spate.schema import Field

from spate_json._deserializer import (
    ArrayJsonDeserializer,
    JsonDeserializer,
    NdjsonDeserializer,
    SingleJsonDeserializer,
)
from spate_json._jsonschema import JsonSchemaError, record_fields
from spate_json._target import Converter, build_converter, load_target
from spate_json.config import JsonConfig, JsonSchemaSource

if TYPE_CHECKING:
    from spate_json._confluent import ConfluentJsonDeserializer


class JsonDeserializerFactory:
    """Builds the JSON deserializer of ``deserializer: {json: ...}``."""

    config_model: ClassVar[type[JsonConfig]] = JsonConfig

    @classmethod
    def build(cls, config: JsonConfig, context: BuildContext) -> JsonDeserializer:
        """Build at start-up; imports the target type if one is configured (blocks for
        registry calls in ``confluent`` mode)."""
        if config.mode == "confluent":
            return _confluent(config, context)
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
        described = (
            _described(config.schema, f"{context.component}.json.schema")
            if config.schema is not None
            else None
        )
        objects_only = config.top_level == "object"
        deserializer: JsonDeserializer
        if config.framing == "ndjson":
            deserializer = NdjsonDeserializer(
                on_error=config.on_error, objects_only=objects_only, convert=convert
            )
        elif config.framing == "array":
            deserializer = ArrayJsonDeserializer(
                on_error=config.on_error, objects_only=objects_only, convert=convert
            )
            deserializer.described = described
            return deserializer  # no columnar form: one payload holds many records
        else:
            deserializer = SingleJsonDeserializer.create(
                on_error=config.on_error, objects_only=objects_only, convert=convert
            )
        deserializer.described = described
        if objects_only:
            deserializer.columnar = _columnar(config, target, deserializer)
        return deserializer


def _confluent(config: JsonConfig, context: BuildContext) -> ConfluentJsonDeserializer:
    """``mode: confluent``: the registry client, probed and prewarmed, and the deserializer;
    the one prewarmed subject's latest schema describes the table (B59). Its modules (the
    registry client, fastavro through spate-avro) load here, not with the package."""
    from spate_avro import open_registry

    from spate_json._confluent import ConfluentJsonDeserializer, RegistryJsonSchemas

    client, prewarmed = open_registry(
        config,
        context,
        f"{context.component}.json",
        parser=RegistryJsonSchemas(config.validate),
    )
    deserializer = ConfluentJsonDeserializer(
        client,
        config,
        objects_only=config.top_level == "object",
        described=prewarmed[0].fields if len(prewarmed) == 1 else None,
        schema_changes=context.schema_changes,
    )
    if config.top_level == "object":
        from spate_json._columnar import ColumnarJsonDecoder, columnar_available

        if columnar_available():
            deserializer.columnar = ColumnarJsonDecoder(
                deserializer.body_reference, ndjson=False, declared=None
            )
    return deserializer


def _described(source: JsonSchemaSource, key: str) -> tuple[Field, ...]:
    """The record fields of the configured JSON Schema; a bad one fails naming ``key``."""
    at = f"{key}.{source.key}"
    try:
        text = source.read_text()
    except ValueError as exc:
        raise ConfigError(at, str(exc)) from None
    try:
        schema = json.loads(text)
    except ValueError as exc:
        raise ConfigError(at, f"not JSON: {exc}") from None
    if not isinstance(schema, dict):
        raise ConfigError(at, "a JSON Schema is a JSON object")
    try:
        return record_fields(schema)
    except JsonSchemaError as exc:
        raise ConfigError(at, str(exc)) from None


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
