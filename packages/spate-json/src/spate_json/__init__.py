"""JSON deserializer for spate (orjson).

``deserializer: {json: {framing: single | ndjson | array, ...}}`` in YAML, through the
``spate.deserializers`` entry point ``json``. See the connector guide for the keys.
"""

from spate_json._config import JsonConfig, JsonFraming
from spate_json._deserializer import (
    ArrayJsonDeserializer,
    JsonDeserializer,
    NdjsonDeserializer,
    SingleJsonDeserializer,
)
from spate_json._factory import JsonDeserializerFactory

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
