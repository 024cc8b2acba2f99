"""JSON deserializer for spate (orjson).

``deserializer: {json: {framing: single | ndjson | array, ...}}`` in YAML, through the
``spate.deserializers`` entry point ``json``; ``mode: confluent`` reads Confluent's
``JSONSerializer`` framing with schemas from a registry. See the connector guide.
"""

from spate_json._confluent import ConfluentJsonDeserializer
from spate_json._deserializer import (
    ArrayJsonDeserializer,
    JsonDeserializer,
    NdjsonDeserializer,
    SingleJsonDeserializer,
)
from spate_json._factory import JsonDeserializerFactory
from spate_json.config import JsonConfig, JsonFraming, JsonMode

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
