"""Kafka source and sink for spate (confluent-kafka)."""

__version__ = "0.1.0"
