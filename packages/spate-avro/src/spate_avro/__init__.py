"""Avro deserializer and schema-registry client for spate (fastavro).

``deserializer: {avro: {mode: confluent | raw | single_object, ...}}`` in YAML, through
the ``spate.deserializers`` entry point ``avro``. See the connector guide for the keys.
Values decoded from a top-level union are :class:`NamedRecord` tuples ``(name, record)``.
"""

from spate_avro._confluent import ConfluentDeserializer, open_registry
from spate_avro._deserializer import (
    AvroDeserializer,
    ConfluentAvroDeserializer,
    RawAvroDeserializer,
    SingleObjectAvroDeserializer,
)
from spate_avro._factory import AvroDeserializerFactory
from spate_avro._registry import RegistryError, SchemaRegistryClient
from spate_avro._schema import NamedRecord, single_object_fingerprint
from spate_avro.config import (
    AvroConfig,
    AvroMode,
    RegistryConfig,
    RegistrySettings,
    SchemaSource,
)

__version__ = "0.1.0"

__all__ = [
    "AvroConfig",
    "AvroDeserializer",
    "AvroDeserializerFactory",
    "AvroMode",
    "ConfluentAvroDeserializer",
    "ConfluentDeserializer",
    "NamedRecord",
    "RawAvroDeserializer",
    "RegistryConfig",
    "RegistryError",
    "RegistrySettings",
    "SchemaRegistryClient",
    "SchemaSource",
    "SingleObjectAvroDeserializer",
    "__version__",
    "open_registry",
    "single_object_fingerprint",
]
