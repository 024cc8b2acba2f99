"""``ProtobufDeserializerFactory``: what the ``spate.deserializers`` entry point ``protobuf`` names.

Turns a decoded :class:`~spate_protobuf.ProtobufConfig` into a deserializer. ``raw`` mode
loads and compiles the descriptor set once (a missing file or type fails start-up with
the key, B29). ``confluent`` mode builds spate-avro's registry client with a parser that
compiles the registry's Protobuf answers (``format=serialized`` file descriptors, with
their schema references fetched through the client) into descriptors, probes the
registry and compiles ``prewarm_subjects`` before anything is consumed.
"""

from __future__ import annotations

import logging
from typing import Any, ClassVar

from google.protobuf import descriptor_pb2
from spate import BuildContext, ConfigError
from spate.schema import Field
from spate_avro import SchemaRegistryClient, open_registry

from spate_protobuf._columnar import columnar_unavailable, no_columnar_form
from spate_protobuf._deserializer import (
    ConfluentProtobufDeserializer,
    ProtobufDeserializer,
    RawProtobufDeserializer,
    body_reference,
)
from spate_protobuf._schema import (
    FileSchema,
    MessageType,
    compile_files,
    decode_serialized,
    describe,
    load_descriptor_set,
)
from spate_protobuf.config import ProtobufConfig

logger = logging.getLogger(__name__)

_MAX_REFERENCES = 256


class RegistrySchemas:
    """The registry client's parser: a Protobuf answer → a compiled :class:`FileSchema`."""

    def __init__(self, enums_as_names: bool) -> None:
        self._enums_as_names = enums_as_names

    def __call__(
        self, client: SchemaRegistryClient, schema_id: int, answer: dict[str, Any]
    ) -> FileSchema:
        kind = answer.get("schemaType", "AVRO")
        if kind != "PROTOBUF":
            raise ValueError(f"a {kind} schema, not Protobuf")
        main = decode_serialized(str(answer["schema"]))
        files = {main.name: main}
        self._references(client, answer, files)
        pool = compile_files(files.values())
        return FileSchema(pool.FindFileByName(main.name), self._enums_as_names)

    def _references(
        self,
        client: SchemaRegistryClient,
        answer: dict[str, Any],
        files: dict[str, descriptor_pb2.FileDescriptorProto],
    ) -> None:
        for reference in answer.get("references") or ():
            if not isinstance(reference, dict) or not {"name", "subject", "version"} <= set(
                reference
            ):
                raise ValueError(f"malformed schema reference {reference!r}")
            if reference["name"] in files:
                continue
            if len(files) >= _MAX_REFERENCES:
                raise ValueError(f"more than {_MAX_REFERENCES} referenced files")
            # A transient failure here propagates as RegistryError: the id is retried.
            referenced = client.version(str(reference["subject"]), reference["version"])
            proto = decode_serialized(str(referenced["schema"]))
            files[str(reference["name"])] = proto
            if proto.name != reference["name"]:
                raise ValueError(
                    f"reference {reference['name']!r} resolved to a file named {proto.name!r}"
                )
            self._references(client, referenced, files)


class ProtobufDeserializerFactory:
    """Builds the Protobuf deserializer of ``deserializer: {protobuf: ...}``."""

    config_model: ClassVar[type[ProtobufConfig]] = ProtobufConfig

    @classmethod
    def build(cls, config: ProtobufConfig, context: BuildContext) -> ProtobufDeserializer:
        """Build at start-up (blocks for registry calls in ``confluent`` mode)."""
        base = f"{context.component}.protobuf"
        enums_as_names = config.enums == "names"
        if config.mode == "raw":
            if config.descriptor_set is None or config.message is None:
                raise ConfigError(base, "raw mode needs descriptor_set and message")
            try:
                message_type = load_descriptor_set(
                    config.descriptor_set, config.message, enums_as_names
                )
            except OSError as exc:
                raise ConfigError(
                    f"{base}.descriptor_set", f"cannot read {config.descriptor_set}: {exc}"
                ) from None
            except ValueError as exc:
                key = "message" if "message type" in str(exc) else "descriptor_set"
                raise ConfigError(f"{base}.{key}", str(exc)) from None
            return RawProtobufDeserializer(
                message_type,
                config.on_error,
                describe(message_type.descriptor, enums_as_names),
                _columnar(message_type, enums_as_names),
            )
        client, prewarmed = open_registry(
            config,
            context,
            base,
            parser=RegistrySchemas(enums_as_names),
            query="?format=serialized",
        )
        described: tuple[Field, ...] | None = None
        if len(prewarmed) == 1:
            # One subject whose file has one top-level type describes the table.
            types = list(prewarmed[0].file.message_types_by_name.values())
            if len(types) == 1:
                described = describe(types[0], enums_as_names)
        deserializer = ConfluentProtobufDeserializer(
            client,
            config,
            described=described,
            enums_as_names=enums_as_names,
            schema_changes=context.schema_changes,
        )
        if columnar_unavailable() is None:
            deserializer.columnar = True  # decoders are built per message type on first use
        return deserializer


def _columnar(message_type: MessageType, enums_as_names: bool) -> Any:
    """The columnar decoder of a raw message type when ``spate[columnar]`` is installed
    and the type has a columnar form, else None (the pipeline keeps rows)."""
    if columnar_unavailable() is not None or no_columnar_form(message_type.descriptor):
        return None
    from spate_protobuf._columnar import ColumnarProtobufDecoder

    return ColumnarProtobufDecoder(message_type, body_reference(message_type), enums_as_names)
