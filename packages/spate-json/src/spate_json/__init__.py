"""JSON deserializer for spate (orjson)."""

__version__ = "0.1.0"
