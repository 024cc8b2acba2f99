"""Protobuf deserializer for spate: Confluent framing with a schema registry, or raw.

``deserializer: {protobuf: {mode: confluent | raw, ...}}`` in YAML, through the
``spate.deserializers`` entry point ``protobuf``. Records are dicts keyed by the schema's
field names; see the connector guide for the keys and the value mapping.
"""

from spate_protobuf._deserializer import (
    ConfluentProtobufDeserializer,
    ProtobufDeserializer,
    RawProtobufDeserializer,
)
from spate_protobuf._factory import ProtobufDeserializerFactory
from spate_protobuf._schema import FileSchema, MessageType
from spate_protobuf.config import EnumStyle, ProtobufConfig, ProtobufMode

__version__ = "0.1.0"

__all__ = [
    "ConfluentProtobufDeserializer",
    "EnumStyle",
    "FileSchema",
    "MessageType",
    "ProtobufConfig",
    "ProtobufDeserializer",
    "ProtobufDeserializerFactory",
    "ProtobufMode",
    "RawProtobufDeserializer",
    "__version__",
]
