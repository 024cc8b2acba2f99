"""Avro deserializer and schema-registry client for spate (fastavro).

``deserializer: {avro: {mode: confluent | raw | single_object, ...}}`` in YAML, through
the ``spate.deserializers`` entry point ``avro``. See the connector guide for the keys.
Values decoded from a top-level union are :class:`NamedRecord` tuples ``(name, record)``.

Importing the package loads its configuration alone; the decoders (fastavro) and the
registry client load on the first use of their names, so a package that needs only the
registry settings (spate-json) starts without them.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

from spate_avro.config import (
    AvroConfig,
    AvroMode,
    RegistryConfig,
    RegistrySettings,
    SchemaSource,
)

if TYPE_CHECKING:
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

_LAZY = {
    "AvroDeserializer": "spate_avro._deserializer",
    "AvroDeserializerFactory": "spate_avro._factory",
    "ConfluentAvroDeserializer": "spate_avro._deserializer",
    "ConfluentDeserializer": "spate_avro._confluent",
    "NamedRecord": "spate_avro._schema",
    "RawAvroDeserializer": "spate_avro._deserializer",
    "RegistryError": "spate_avro._registry",
    "SchemaRegistryClient": "spate_avro._registry",
    "SingleObjectAvroDeserializer": "spate_avro._deserializer",
    "open_registry": "spate_avro._confluent",
    "single_object_fingerprint": "spate_avro._schema",
}
"""Names imported on first use: the decoders and the registry client bring fastavro and an
HTTP client, which a package that only needs the configuration (spate-json's registry
settings) never uses."""


def __getattr__(name: str) -> object:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_LAZY})


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
