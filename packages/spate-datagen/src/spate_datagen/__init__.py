"""Synthetic storefront and wide events for spate demos, tests and benchmarks.

* :func:`storefront_events` — a seeded, deterministic event stream (orders placed,
  payments captured, refunds issued), keyed by order id;
* :func:`wide_events` — seeded, deterministic events of about 1.6 KB each (nested
  objects, UUIDs, strings of varying length, arrays), one record schema;
* :func:`encode_avro` / :func:`encode_confluent_avro` / :func:`encode_json` — the
  payload encodings;
* ``source: {datagen: ...}`` — the same events as a bounded source;
* ``spate datagen`` — produce them into a Kafka topic (needs spate-kafka).
"""

from spate_datagen._codec import (
    encode_avro,
    encode_confluent_avro,
    encode_json,
    storefront_schema_text,
    wide_schema_text,
)
from spate_datagen._events import (
    KINDS,
    Manifest,
    StorefrontEvent,
    manifest_of,
    storefront_events,
)
from spate_datagen._factory import DatagenSourceFactory
from spate_datagen._source import DatagenSource, DatagenSourceConfig
from spate_datagen._wide import (
    WIDE_AVRO_MEAN_BAND,
    WIDE_KIND,
    WIDE_MEAN_BAND,
    events_of,
    wide_events,
)

__version__ = "0.1.0"

__all__ = [
    "KINDS",
    "WIDE_AVRO_MEAN_BAND",
    "WIDE_KIND",
    "WIDE_MEAN_BAND",
    "DatagenSource",
    "DatagenSourceConfig",
    "DatagenSourceFactory",
    "Manifest",
    "StorefrontEvent",
    "__version__",
    "encode_avro",
    "encode_confluent_avro",
    "encode_json",
    "events_of",
    "manifest_of",
    "storefront_events",
    "storefront_schema_text",
    "wide_events",
    "wide_schema_text",
]
