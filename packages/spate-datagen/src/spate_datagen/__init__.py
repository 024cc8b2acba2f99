"""Synthetic storefront events for spate demos, tests and benchmarks.

* :func:`storefront_events` — a seeded, deterministic event stream (orders placed,
  payments captured, refunds issued), keyed by order id;
* :func:`encode_avro` / :func:`encode_json` — the payload encodings the flagship reads;
* ``source: {datagen: ...}`` — the same events as a bounded source;
* ``spate datagen`` — produce them into a Kafka topic (needs spate-kafka).
"""

from spate_datagen._codec import encode_avro, encode_json, storefront_schema_text
from spate_datagen._events import (
    KINDS,
    Manifest,
    StorefrontEvent,
    manifest_of,
    storefront_events,
)
from spate_datagen._factory import DatagenSourceFactory
from spate_datagen._source import DatagenSource, DatagenSourceConfig

__version__ = "0.1.0"

__all__ = [
    "KINDS",
    "DatagenSource",
    "DatagenSourceConfig",
    "DatagenSourceFactory",
    "Manifest",
    "StorefrontEvent",
    "__version__",
    "encode_avro",
    "encode_json",
    "manifest_of",
    "storefront_events",
    "storefront_schema_text",
]
