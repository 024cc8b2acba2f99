"""Fixtures for the Avro deserializer tests: the registry test server, schemas, contexts."""

from __future__ import annotations

import io
import json
from typing import Any

import fastavro
import pytest
from spate import BuildContext, Clock, ManualClock
from spate.config import decode
from spate.metrics._meter import Meter
from spate_avro import AvroConfig, AvroDeserializer, AvroDeserializerFactory

from tests.support.schema_registry import schema_registry  # noqa: F401  (fixture)

STOREFRONT_UNION: list[dict[str, Any]] = [
    {
        "type": "record",
        "name": "OrderPlaced",
        "namespace": "spate.datagen",
        "fields": [
            {"name": "order_id", "type": "long"},
            {"name": "customer_id", "type": "int"},
            {"name": "region", "type": "string"},
            {"name": "placed_at", "type": {"type": "long", "logicalType": "timestamp-millis"}},
            {
                "name": "lines",
                "type": {
                    "type": "array",
                    "items": {
                        "type": "record",
                        "name": "OrderLine",
                        "fields": [
                            {"name": "sku", "type": "string"},
                            {"name": "qty", "type": "int"},
                            {"name": "unit_cents", "type": "int"},
                        ],
                    },
                },
            },
        ],
    },
    {
        "type": "record",
        "name": "PaymentCaptured",
        "namespace": "spate.datagen",
        "fields": [
            {"name": "order_id", "type": "long"},
            {"name": "amount_cents", "type": "long"},
        ],
    },
    {
        "type": "record",
        "name": "RefundIssued",
        "namespace": "spate.datagen",
        "fields": [
            {"name": "order_id", "type": "long"},
            {"name": "amount_cents", "type": "long"},
            {"name": "reason", "type": "string"},
        ],
    },
]
"""The storefront event union of the example configuration (branch order matters)."""


class CountingBudget:
    """A byte budget that only adds up (factories here never use it)."""

    def __init__(self) -> None:
        self.held = 0

    def acquire(self, nbytes: int) -> None:
        self.held += nbytes

    def release(self, nbytes: int) -> None:
        self.held -= nbytes


def make_context(name: str = "avro-test", clock: Clock | None = None) -> BuildContext:
    return BuildContext(
        pipeline=name,
        component="deserializer",
        meter=Meter(name),
        clock=clock if clock is not None else ManualClock(),
        run_nonce="r1",
        budget=CountingBudget(),
    )


def build(raw: dict[str, Any], clock: Clock | None = None) -> AvroDeserializer:
    """Decode ``raw`` as the body of ``deserializer: {avro: ...}`` and build it."""
    config = decode(AvroConfig, raw, "deserializer.avro")
    return AvroDeserializerFactory.build(config, make_context(clock=clock))


def encode(schema: Any, datum: Any) -> bytes:
    """Bare Avro binary of ``datum`` written with ``schema`` (a union takes a tuple)."""
    buf = io.BytesIO()
    fastavro.schemaless_writer(buf, fastavro.parse_schema(schema), datum)
    return buf.getvalue()


def confluent(schema_id: int, body: bytes) -> bytes:
    return b"\x00" + schema_id.to_bytes(4, "big") + body


def inline(schema: Any) -> dict[str, str]:
    return {"inline": json.dumps(schema)}


class AvroKit:
    """Helpers the tests reach through the ``kit`` fixture (test files cannot import
    this conftest under importlib mode)."""

    union = STOREFRONT_UNION
    build = staticmethod(build)
    encode = staticmethod(encode)
    confluent = staticmethod(confluent)
    inline = staticmethod(inline)
    make_context = staticmethod(make_context)


@pytest.fixture(scope="session")
def kit() -> AvroKit:
    return AvroKit()
