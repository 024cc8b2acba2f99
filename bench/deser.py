"""The Avro and JSON deserializers against the loops a user would write (DESIGN §12).

Data: storefront events of the example configuration's top-level union (OrderPlaced,
PaymentCaptured, RefundIssued), generated with a fixed seed and encoded once.

* Avro — framework: spate-avro's ``mode: raw`` deserializer built from that union, given
  the ``memoryview`` of each payload (views are made before timing: making them is the
  source's work, as ``msg.value()`` is the hand-written loop's); baseline: a bare
  ``fastavro.schemaless_reader(io.BytesIO(payload), parsed_union, None, True)`` loop on
  the same ``bytes`` (``return_record_name=True``, so both sides yield the event's name
  with its record: the information a split by event kind needs).
* JSON — the same events as JSON objects; framework: spate-json's ``framing: single``
  deserializer on a ``memoryview`` per payload; baseline: a bare ``orjson.loads`` loop.

Both sides keep every decoded value of a 10,000-record batch in a list (then drop it,
as a sink would after writing). Runs are interleaved, each side at least 3 times after a
warm-up (``bench/_harness.py``); the script prints each side's median, ``ratio:``
(framework throughput / baseline throughput; 1.0 = no overhead) and the peak RSS.
Size with ``SPATE_BENCH_RECORDS`` (default 1,000,000) and ``SPATE_BENCH_RUNS``::

    .venv/bin/python bench/deser.py
"""

from __future__ import annotations

import datetime as dt
import io
import json
import random
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import fastavro
import orjson
from spate import BuildContext, SystemClock
from spate.config import decode
from spate.metrics import Meter
from spate_avro import AvroConfig, AvroDeserializerFactory
from spate_json import JsonConfig, JsonDeserializerFactory

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _harness import compare, env_int

BATCH = 10_000
"""Decoded values held at once (what a sink buffers before a write)."""
DISTINCT = 100_000
"""Distinct events encoded; larger runs pass over the same payloads again (less memory)."""

STOREFRONT = [
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

REGIONS = ("eu-west", "eu-central", "us-east", "us-west", "ap-south")
REASONS = ("damaged", "late", "wrong item", "changed mind")
EPOCH = dt.datetime(2024, 1, 1, tzinfo=dt.UTC)


class _NoBudget:
    def acquire(self, nbytes: int) -> None:
        return None

    def release(self, nbytes: int) -> None:
        return None


def _context() -> BuildContext:
    return BuildContext(
        pipeline="bench-deser",
        component="deserializer",
        meter=Meter("bench-deser"),
        clock=SystemClock(),
        run_nonce="bench",
        budget=_NoBudget(),
    )


def events(n: int, seed: int = 7) -> Iterator[tuple[str, dict[str, Any]]]:
    """``n`` storefront events: about half orders, a third payments, the rest refunds."""
    rng = random.Random(seed)
    for i in range(n):
        roll = rng.random()
        if roll < 0.5:
            lines = [
                {
                    "sku": f"sku-{rng.randrange(10_000):05d}",
                    "qty": rng.randrange(1, 5),
                    "unit_cents": rng.randrange(100, 20_000),
                }
                for _ in range(rng.randrange(1, 4))
            ]
            placed = EPOCH + dt.timedelta(milliseconds=i * 37)
            record = {
                "order_id": i,
                "customer_id": rng.randrange(1_000_000),
                "region": rng.choice(REGIONS),
                "placed_at": placed,
                "lines": lines,
            }
            yield "spate.datagen.OrderPlaced", record
        elif roll < 0.85:
            amount = rng.randrange(100, 100_000)
            yield "spate.datagen.PaymentCaptured", {"order_id": i, "amount_cents": amount}
        else:
            refund = {
                "order_id": i,
                "amount_cents": rng.randrange(100, 10_000),
                "reason": rng.choice(REASONS),
            }
            yield "spate.datagen.RefundIssued", refund


def payloads(n: int, parsed: Any) -> tuple[list[bytes], list[bytes]]:
    """The events as bare Avro (written with the union) and as JSON objects."""
    avro: list[bytes] = []
    as_json: list[bytes] = []
    buf = io.BytesIO()
    for name, record in events(n):
        buf.seek(0)
        buf.truncate()
        fastavro.schemaless_writer(buf, parsed, (name, record))
        avro.append(buf.getvalue())
        doc = {"kind": name.rpartition(".")[2], **record}
        if "placed_at" in doc:
            doc["placed_at"] = int(doc["placed_at"].timestamp() * 1000)
        # A copy: orjson's own result keeps a much larger allocation alive per object.
        as_json.append(bytes(memoryview(orjson.dumps(doc))))
    return avro, as_json


def main() -> None:
    total = env_int("SPATE_BENCH_RECORDS", 1_000_000)
    parsed = fastavro.parse_schema(STOREFRONT)
    avro, as_json = payloads(min(total, DISTINCT), parsed)
    distinct = len(avro)
    # The deserializer stage is handed views the source made (the source's work, as a
    # consumer's msg.value() is the hand-written loop's); the baseline gets the bytes.
    avro_views = [memoryview(p) for p in avro]
    json_views = [memoryview(p) for p in as_json]
    batches = [(start % distinct, min(BATCH, total - start)) for start in range(0, total, BATCH)]
    print(
        f"{total:,} storefront events ({distinct:,} distinct); "
        f"Avro {sum(map(len, avro)) / distinct:.1f} B/record, "
        f"JSON {sum(map(len, as_json)) / distinct:.1f} B/record"
    )

    avro_config = decode(
        AvroConfig, {"mode": "raw", "schema": {"inline": json.dumps(STOREFRONT)}}, "avro"
    )
    avro_deser = AvroDeserializerFactory.build(avro_config, _context())
    json_deser = JsonDeserializerFactory.build(decode(JsonConfig, {}, "json"), _context())
    json_deserialize = json_deser.deserialize  # type: ignore[attr-defined]

    for i in range(min(distinct, 100)):  # both sides must produce the same values
        expected = fastavro.schemaless_reader(io.BytesIO(avro[i]), parsed, None, True)
        same_avro = avro_deser.deserialize(avro_views[i]) == expected
        same_json = json_deserialize(json_views[i]) == orjson.loads(as_json[i])
        if not (same_avro and same_json):
            raise SystemExit(f"the two sides decode record {i} differently")

    def avro_framework() -> int:
        deserialize = avro_deser.deserialize
        for start, size in batches:
            held = [deserialize(v) for v in avro_views[start : start + size]]
            del held
        return total

    def avro_baseline() -> int:
        read = fastavro.schemaless_reader
        bytes_io = io.BytesIO
        for start, size in batches:
            held = [read(bytes_io(p), parsed, None, True) for p in avro[start : start + size]]
            del held
        return total

    def json_framework() -> int:
        deserialize = json_deserialize
        for start, size in batches:
            held = [deserialize(v) for v in json_views[start : start + size]]
            del held
        return total

    def json_baseline() -> int:
        loads = orjson.loads
        for start, size in batches:
            held = [loads(p) for p in as_json[start : start + size]]
            del held
        return total

    compare(
        "avro: spate-avro raw union vs fastavro.schemaless_reader", avro_framework, avro_baseline
    )
    compare("json: spate-json single vs orjson.loads", json_framework, json_baseline)


if __name__ == "__main__":
    main()
