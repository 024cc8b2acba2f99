"""Avro deserializer and schema-registry client for spate (fastavro)."""

__version__ = "0.1.0"
