"""The Avro and JSON deserializers against the loops a user would write.

Measured by the performance rules in docs/development.md.

Data: spate-datagen's storefront events — the example configuration's top-level union
(OrderPlaced, PaymentCaptured, RefundIssued) — generated with a fixed seed, encoded once.

* Avro — framework: spate-avro's ``mode: raw`` deserializer built from that union, given
  the ``memoryview`` of each payload (views are made before timing: making them is the
  source's work, as ``msg.value()`` is the hand-written loop's); baseline: a bare
  ``fastavro.schemaless_reader(io.BytesIO(payload), parsed_union, None, True)`` loop on
  the same ``bytes`` (``return_record_name=True``, so both sides yield the event's name
  with its record: the information a split by event kind needs).
* JSON — the same events as JSON objects; framework: spate-json's ``framing: single``
  deserializer on a ``memoryview`` per payload; baseline: a bare ``orjson.loads`` loop.

* Avro columnar (with ``spate[columnar]``): the same deserializer's
  ``deserialize_batch`` (one polars DataFrame per union branch) on each 10,000-record
  batch, against the same fastavro loop (target: 10x).

Both sides keep every decoded value of a 10,000-record batch in a list (then drop it,
as a sink would after writing). Runs are interleaved, each side at least 3 times after a
warm-up (``bench/_harness.py``); the script prints each side's median, ``ratio:``
(framework throughput / baseline throughput; 1.0 = no overhead) and the peak RSS.
Size with ``SPATE_BENCH_RECORDS`` (default 1,000,000) and ``SPATE_BENCH_RUNS``::

    .venv/bin/python bench/deser.py
"""

from __future__ import annotations

import io
import json
import sys
from pathlib import Path

import fastavro
import orjson
from spate import BuildContext, SystemClock
from spate.config import decode
from spate.metrics import Meter
from spate_avro import AvroConfig, AvroDeserializerFactory
from spate_datagen import encode_avro, encode_json, storefront_events, storefront_schema_text
from spate_json import JsonConfig, JsonDeserializerFactory

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _harness import compare, env_int

BATCH = 10_000
"""Decoded values held at once (what a sink buffers before a write)."""
DISTINCT = 100_000
"""Distinct events encoded; larger runs pass over the same payloads again (less memory)."""


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


def payloads(n: int) -> tuple[list[bytes], list[bytes]]:
    """``n`` storefront events (spate-datagen's) as bare Avro of the union and as JSON."""
    avro: list[bytes] = []
    as_json: list[bytes] = []
    for event in storefront_events(n, seed=7):
        avro.append(encode_avro(event))
        as_json.append(encode_json(event))
    return avro, as_json


def main() -> None:
    total = env_int("SPATE_BENCH_RECORDS", 1_000_000)
    schema_text = storefront_schema_text()
    parsed = fastavro.parse_schema(json.loads(schema_text))
    avro, as_json = payloads(min(total, DISTINCT))
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

    avro_config = decode(AvroConfig, {"mode": "raw", "schema": {"inline": schema_text}}, "avro")
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
    if getattr(avro_deser, "columnar", None) is not None:
        deserialize_batch = avro_deser.deserialize_batch  # type: ignore[attr-defined]

        def avro_columnar() -> int:
            for start, size in batches:
                held = deserialize_batch(avro_views[start : start + size])
                if held[1]:
                    raise SystemExit(f"columnar decoding refused {len(held[1])} records")
                del held
            return total

        compare(
            "avro columnar: deserialize_batch (polars frames) vs fastavro.schemaless_reader",
            avro_columnar,
            avro_baseline,
        )
    compare("json: spate-json single vs orjson.loads", json_framework, json_baseline)


if __name__ == "__main__":
    main()
