"""JSON deserializer for spate (orjson).

``deserializer: {json: {framing: single | ndjson | array, ...}}`` in YAML, through the
``spate.deserializers`` entry point ``json``. See the connector guide for the keys.
"""

from spate_json._deserializer import (
    ArrayJsonDeserializer,
    JsonDeserializer,
    NdjsonDeserializer,
    SingleJsonDeserializer,
)
from spate_json._factory import JsonDeserializerFactory
from spate_json.config import JsonConfig, JsonFraming

__version__ = "0.1.0"

__all__ = [
    "ArrayJsonDeserializer",
    "JsonConfig",
    "JsonDeserializer",
    "JsonDeserializerFactory",
    "JsonFraming",
    "NdjsonDeserializer",
    "SingleJsonDeserializer",
    "__version__",
]
