"""``AvroDeserializerFactory``: what the ``spate.deserializers`` entry point ``avro`` names.

Turns a decoded :class:`~spate_avro.AvroConfig` into a deserializer: loads and parses
the schemas once, checks at build time that a reader schema can resolve each known writer
schema, and in ``confluent`` mode probes the registry and fetches ``prewarm_subjects`` so
an unreachable registry or a missing subject fails start-up with one line naming it (B29).
"""

from __future__ import annotations

import logging
from typing import Any, ClassVar

from spate import BuildContext, ConfigError

from spate_avro._confluent import open_registry
from spate_avro._deserializer import (
    AvroDeserializer,
    ConfluentAvroDeserializer,
    RawAvroDeserializer,
    SingleObjectAvroDeserializer,
)
from spate_avro._schema import (
    build_decoder,
    load_schema_text,
    parse_schema_text,
    resolution_problem,
    single_object_fingerprint,
)
from spate_avro.config import AvroConfig, SchemaSource

logger = logging.getLogger(__name__)


def _load(source: SchemaSource, key: str) -> Any:
    key = f"{key}.{source.key}"
    try:
        return parse_schema_text(load_schema_text(source))
    except ValueError as exc:
        raise ConfigError(key, str(exc)) from None


def _check_reader(writer: Any, reader: Any | None, key: str, what: str) -> None:
    if reader is None:
        return
    problem = resolution_problem(writer, reader)
    if problem is not None:
        raise ConfigError(key, f"cannot read {what}: {problem}")


def _columnar(writer: Any, reader: Any | None, decode: Any) -> Any:
    """The columnar decoder of a raw schema when ``spate[columnar]`` is installed and the
    schema is a record or a union of records read without a reader schema; else None."""
    from spate_avro._columnar import ColumnarAvroDecoder, columnar_available

    if reader is not None or not columnar_available():
        return None
    try:
        return ColumnarAvroDecoder(writer, decode)
    except ValueError as exc:
        logger.info("Avro schema stays on the row path: %s", exc)
        return None


def _columnar_available() -> bool:
    from spate_avro._columnar import columnar_available

    return columnar_available()


class AvroDeserializerFactory:
    """Builds the Avro deserializer of ``deserializer: {avro: ...}``."""

    config_model: ClassVar[type[AvroConfig]] = AvroConfig

    @classmethod
    def build(cls, config: AvroConfig, context: BuildContext) -> AvroDeserializer:
        """Build at start-up (blocks for registry calls in ``confluent`` mode)."""
        base = f"{context.component}.avro"
        reader = None
        if config.reader_schema is not None:
            reader = _load(config.reader_schema, f"{base}.reader_schema")
        if config.mode == "raw":
            if config.schema is None:
                raise ConfigError(f"{base}.schema", "required in raw mode")
            writer = _load(config.schema, f"{base}.schema")
            _check_reader(writer, reader, f"{base}.reader_schema", "the writer schema")
            decode = build_decoder(writer, reader)
            raw = RawAvroDeserializer(
                decode,
                config.on_error,
                reader if reader else writer,
                _columnar(writer, reader, decode) if config.envelope == "none" else None,
            )
            raw.envelope = config.envelope
            return raw
        if config.mode == "single_object":
            sources: list[tuple[SchemaSource, str]] = []
            if config.schema is not None:
                sources.append((config.schema, f"{base}.schema"))
            sources += [
                (source, f"{base}.writer_schemas[{i}]")
                for i, source in enumerate(config.writer_schemas)
            ]
            decoders = {}
            for source, key in sources:
                writer = _load(source, key)
                _check_reader(writer, reader, f"{base}.reader_schema", key)
                decoders[single_object_fingerprint(writer)] = build_decoder(writer, reader)
            single = SingleObjectAvroDeserializer(decoders, config.on_error)
            single.envelope = config.envelope
            return single
        return cls._build_confluent(config, context, reader, base)

    @classmethod
    def _build_confluent(
        cls, config: AvroConfig, context: BuildContext, reader: Any | None, base: str
    ) -> AvroDeserializer:
        def check(subject: str, schema_id: int, writer: Any) -> None:
            _check_reader(
                writer, reader, f"{base}.reader_schema", f"subject {subject!r} (id {schema_id})"
            )

        client, prewarmed = open_registry(config, context, base, check=check)
        # The table is described by the reader schema, else by the latest writer schema of
        # the one prewarmed subject.
        described = reader
        if reader is None and len(prewarmed) == 1:
            described = prewarmed[0]
        deserializer = ConfluentAvroDeserializer(
            client,
            config,
            reader=reader,
            described=described,
            schema_changes=context.schema_changes,
        )
        deserializer.envelope = config.envelope
        if reader is None and config.envelope == "none" and _columnar_available():
            deserializer.columnar = True
        return deserializer
