"""JSON deserializer for spate (orjson).

``deserializer: {json: {framing: single | ndjson | array, ...}}`` in YAML, through the
``spate.deserializers`` entry point ``json``; ``mode: confluent`` reads Confluent's
``JSONSerializer`` framing with schemas from a registry. See the connector guide.

``mode: confluent`` and :class:`ConfluentJsonDeserializer` load the registry client (and
spate-avro's decoders) on first use, not with the package: a pipeline reading plain JSON
starts without them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from spate_json._deserializer import (
    ArrayJsonDeserializer,
    JsonDeserializer,
    NdjsonDeserializer,
    SingleJsonDeserializer,
)
from spate_json._factory import JsonDeserializerFactory
from spate_json.config import JsonConfig, JsonFraming, JsonMode

if TYPE_CHECKING:
    from spate_json._confluent import ConfluentJsonDeserializer


def __getattr__(name: str) -> object:
    if name == "ConfluentJsonDeserializer":
        from spate_json._confluent import ConfluentJsonDeserializer

        return ConfluentJsonDeserializer
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__version__ = "0.1.0"

__all__ = [
    "ArrayJsonDeserializer",
    "ConfluentJsonDeserializer",
    "JsonConfig",
    "JsonDeserializer",
    "JsonDeserializerFactory",
    "JsonFraming",
    "JsonMode",
    "NdjsonDeserializer",
    "SingleJsonDeserializer",
    "__version__",
]
