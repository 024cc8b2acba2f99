"""The Avro, JSON and Protobuf deserializers against the loops a user would write.

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
* Protobuf — the same events as a ``StorefrontEvent`` message with a ``oneof`` of the three
  kinds (``placed_at`` a ``google.protobuf.Timestamp``); framework: spate-protobuf's
  ``mode: raw`` deserializer from a descriptor set, on a ``memoryview`` per payload;
  baseline: a bare ``Message.FromString`` + ``json_format.MessageToDict`` loop (the
  runtime's own message-to-dict path) on the same ``bytes``.

* Avro columnar (with ``spate[columnar]``): the same deserializer's
  ``deserialize_batch`` (one polars DataFrame per union branch) on batches of the
  flagship's ``consume_batch`` (20,000 records in ``examples/kafka_avro_to_clickhouse.yaml``),
  against the same fastavro loop on the same batches (target: 10x). ``avro-columnar``
  runs only this comparison; ``SPATE_BENCH_COLUMNAR_BATCH`` sets another batch size.
* JSON columnar (with ``spate[columnar]``): spate-json's ``framing: single``
  ``deserialize_batch`` (one polars DataFrame per batch, pyarrow's JSON reader) on each
  10,000-record batch, against the same bare ``orjson.loads`` loop (which stops at
  dicts), and against the same loop ending in columns as a user would get them:
  ``polars.from_dicts(decoded, infer_schema_length=None)`` per batch, the same frame the
  framework returns (``pyarrow.Table.from_pylist`` would infer its columns from the first
  record only and miss the other events' fields). Target: 3x orjson into columns.
* Protobuf columnar (with ``spate[columnar]``): spate-protobuf's ``mode: raw``
  ``deserialize_batch`` (one polars DataFrame per batch: upb checks the batch, ptars
  decodes it into Arrow) on batches of the flagship's ``consume_batch``, against the row
  path's decode of the same batches (``deserialize`` per payload, into dicts), both on
  the payloads' ``bytes`` as a Kafka batch hands them over (``takes_bytes``). At least 5
  interleaved runs (``SPATE_BENCH_RUNS`` raises it); the spread of the pairs' ratios is
  printed. Target: 5x the row path. ``protobuf-columnar`` runs only this comparison.

Both sides keep every decoded value of a 10,000-record batch in a list (then drop it,
as a sink would after writing). Runs are interleaved, each side at least 3 times after a
warm-up (``bench/_harness.py``); the script prints each side's median, ``ratio:``
(framework throughput / baseline throughput; 1.0 = no overhead) and the peak RSS.
Size with ``SPATE_BENCH_RECORDS`` (default 1,000,000) and ``SPATE_BENCH_RUNS``; name
formats (``avro``, ``avro-columnar``, ``json``, ``protobuf``, ``protobuf-columnar``) to run
only those::

    .venv/bin/python bench/deser.py
    .venv/bin/python bench/deser.py json
    SPATE_BENCH_RUNS=5 .venv/bin/python bench/deser.py avro-columnar
"""

from __future__ import annotations

import io
import json
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import fastavro
import orjson
import yaml
from google.protobuf import (
    descriptor_pb2,
    descriptor_pool,
    json_format,
    message_factory,
    text_format,
    timestamp_pb2,
)
from spate import BuildContext, SystemClock
from spate.config import decode
from spate.metrics import Meter
from spate_avro import AvroConfig, AvroDeserializerFactory
from spate_datagen import encode_avro, encode_json, storefront_events, storefront_schema_text
from spate_json import JsonConfig, JsonDeserializerFactory
from spate_protobuf import ProtobufConfig, ProtobufDeserializerFactory

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _harness import compare, env_int

BATCH = 10_000
"""Decoded values held at once (what a sink buffers before a write)."""
DISTINCT = 100_000
"""Distinct events encoded; larger runs pass over the same payloads again (less memory)."""
ROOT = Path(__file__).resolve().parent.parent


def flagship_consume_batch() -> int:
    """The flagship's ``source.kafka.consume_batch``: the messages a columnar decode call
    gets at most in the pipeline (one ``consume()``, before the split by partition)."""
    text = (ROOT / "examples" / "kafka_avro_to_clickhouse.yaml").read_text()
    return int(yaml.safe_load(text)["source"]["kafka"].get("consume_batch", 5000))


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


def payloads(n: int) -> tuple[list[bytes], list[bytes], list[Any]]:
    """``n`` storefront events (spate-datagen's) as bare Avro of the union and as JSON."""
    avro: list[bytes] = []
    as_json: list[bytes] = []
    events = list(storefront_events(n, seed=7))
    for event in events:
        avro.append(encode_avro(event))
        as_json.append(encode_json(event))
    return avro, as_json, events


STOREFRONT_PROTO = """
name: "storefront.proto" package: "spate.datagen" syntax: "proto3"
dependency: "google/protobuf/timestamp.proto"
message_type {
  name: "OrderLine"
  field { name: "sku" number: 1 label: LABEL_OPTIONAL type: TYPE_STRING }
  field { name: "qty" number: 2 label: LABEL_OPTIONAL type: TYPE_INT32 }
  field { name: "unit_cents" number: 3 label: LABEL_OPTIONAL type: TYPE_INT32 }
}
message_type {
  name: "OrderPlaced"
  field { name: "order_id" number: 1 label: LABEL_OPTIONAL type: TYPE_INT64 }
  field { name: "customer_id" number: 2 label: LABEL_OPTIONAL type: TYPE_INT32 }
  field { name: "region" number: 3 label: LABEL_OPTIONAL type: TYPE_STRING }
  field { name: "placed_at" number: 4 label: LABEL_OPTIONAL type: TYPE_MESSAGE
          type_name: ".google.protobuf.Timestamp" }
  field { name: "lines" number: 5 label: LABEL_REPEATED type: TYPE_MESSAGE
          type_name: ".spate.datagen.OrderLine" }
}
message_type {
  name: "PaymentCaptured"
  field { name: "order_id" number: 1 label: LABEL_OPTIONAL type: TYPE_INT64 }
  field { name: "amount_cents" number: 2 label: LABEL_OPTIONAL type: TYPE_INT64 }
}
message_type {
  name: "RefundIssued"
  field { name: "order_id" number: 1 label: LABEL_OPTIONAL type: TYPE_INT64 }
  field { name: "amount_cents" number: 2 label: LABEL_OPTIONAL type: TYPE_INT64 }
  field { name: "reason" number: 3 label: LABEL_OPTIONAL type: TYPE_STRING }
}
message_type {
  name: "StorefrontEvent"
  field { name: "order_placed" number: 1 label: LABEL_OPTIONAL type: TYPE_MESSAGE
          type_name: ".spate.datagen.OrderPlaced" oneof_index: 0 }
  field { name: "payment_captured" number: 2 label: LABEL_OPTIONAL type: TYPE_MESSAGE
          type_name: ".spate.datagen.PaymentCaptured" oneof_index: 0 }
  field { name: "refund_issued" number: 3 label: LABEL_OPTIONAL type: TYPE_MESSAGE
          type_name: ".spate.datagen.RefundIssued" oneof_index: 0 }
  oneof_decl { name: "event" }
}
"""
"""The storefront events as Protobuf, in text format (no protoc needed to run the bench)."""

_ONEOF = {
    "OrderPlaced": "order_placed",
    "PaymentCaptured": "payment_captured",
    "RefundIssued": "refund_issued",
}


def protobuf_side(events: list[Any], directory: Path) -> tuple[Path, Any, list[bytes]]:
    """A descriptor-set file, the ``StorefrontEvent`` class and the events encoded with it."""
    file = text_format.Parse(STOREFRONT_PROTO, descriptor_pb2.FileDescriptorProto())
    timestamp = descriptor_pb2.FileDescriptorProto()
    timestamp_pb2.DESCRIPTOR.CopyToProto(timestamp)
    descriptor_set = directory / "storefront.pb"
    descriptor_set.write_bytes(
        descriptor_pb2.FileDescriptorSet(file=[timestamp, file]).SerializeToString()
    )
    pool = descriptor_pool.DescriptorPool()
    pool.Add(timestamp)
    pool.Add(file)
    cls = message_factory.GetMessageClass(
        pool.FindMessageTypeByName("spate.datagen.StorefrontEvent")
    )
    encoded = []
    for event in events:
        message = cls()
        record = dict(event.record)
        placed_at = record.pop("placed_at", None)
        branch = getattr(message, _ONEOF[event.kind])
        lines = record.pop("lines", [])
        for key, value in record.items():
            setattr(branch, key, value)
        for line in lines:
            branch.lines.add(**line)
        if placed_at is not None:
            branch.placed_at.FromMilliseconds(placed_at)
        encoded.append(message.SerializeToString())
    return descriptor_set, cls, encoded


def _batches(total: int, distinct: int, size: int) -> list[tuple[int, int]]:
    """``(start, size)`` of each batch over the ``distinct`` payloads, ``total`` in all
    (a batch never wraps around the end of the payloads)."""
    out = []
    done = 0
    while done < total:
        start = done % distinct
        take = min(size, total - done, distinct - start)
        out.append((start, take))
        done += take
    return out


FORMATS = ("avro", "avro-columnar", "json", "protobuf", "protobuf-columnar")


def main() -> None:
    chosen = set(sys.argv[1:]) or set(FORMATS)
    if not chosen <= set(FORMATS):
        raise SystemExit(f"usage: deser.py [{' | '.join(FORMATS)}]...")
    total = env_int("SPATE_BENCH_RECORDS", 1_000_000)
    schema_text = storefront_schema_text()
    parsed = fastavro.parse_schema(json.loads(schema_text))
    avro, as_json, events = payloads(min(total, DISTINCT))
    workdir = Path(tempfile.mkdtemp(prefix="spate-bench-deser-"))
    descriptor_set, event_class, proto = protobuf_side(events, workdir)
    proto_views = [memoryview(p) for p in proto]
    distinct = len(avro)
    # The deserializer stage is handed views the source made (the source's work, as a
    # consumer's msg.value() is the hand-written loop's); the baseline gets the bytes.
    avro_views = [memoryview(p) for p in avro]
    json_views = [memoryview(p) for p in as_json]
    batches = _batches(total, distinct, BATCH)
    columnar_size = env_int("SPATE_BENCH_COLUMNAR_BATCH", flagship_consume_batch())
    columnar_batches = _batches(total, distinct, columnar_size)
    print(
        f"{total:,} storefront events ({distinct:,} distinct); "
        f"Avro {sum(map(len, avro)) / distinct:.1f} B/record, "
        f"JSON {sum(map(len, as_json)) / distinct:.1f} B/record, "
        f"Protobuf {sum(map(len, proto)) / distinct:.1f} B/record"
    )

    avro_config = decode(AvroConfig, {"mode": "raw", "schema": {"inline": schema_text}}, "avro")
    avro_deser = AvroDeserializerFactory.build(avro_config, _context())
    json_deser = JsonDeserializerFactory.build(decode(JsonConfig, {}, "json"), _context())
    json_deserialize = json_deser.deserialize  # type: ignore[attr-defined]
    proto_config = decode(
        ProtobufConfig,
        {
            "mode": "raw",
            "descriptor_set": str(descriptor_set),
            "message": "spate.datagen.StorefrontEvent",
        },
        "protobuf",
    )
    proto_deser = ProtobufDeserializerFactory.build(proto_config, _context())
    to_dict = json_format.MessageToDict

    for i in range(min(distinct, 100)):  # both sides must produce the same values
        expected = fastavro.schemaless_reader(io.BytesIO(avro[i]), parsed, None, True)
        same_avro = avro_deser.deserialize(avro_views[i]) == expected
        same_json = json_deserialize(json_views[i]) == orjson.loads(as_json[i])
        ours: Any = proto_deser.deserialize(proto_views[i])
        theirs = to_dict(event_class.FromString(proto[i]), preserving_proto_field_name=True)
        kind = _ONEOF[events[i].kind]
        same_proto = (
            set(theirs) == {kind} and int(theirs[kind]["order_id"]) == (ours[kind]["order_id"])
        )
        if not (same_avro and same_json and same_proto):
            raise SystemExit(f"the two sides decode record {i} differently")

    def avro_framework() -> int:
        deserialize = avro_deser.deserialize
        for start, size in batches:
            held = [deserialize(v) for v in avro_views[start : start + size]]
            del held
        return total

    def fastavro_loop(sized: list[tuple[int, int]]) -> Callable[[], int]:
        def baseline() -> int:
            read = fastavro.schemaless_reader
            bytes_io = io.BytesIO
            for start, size in sized:
                held = [read(bytes_io(p), parsed, None, True) for p in avro[start : start + size]]
                del held
            return total

        return baseline

    avro_baseline = fastavro_loop(batches)

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

    def proto_framework() -> int:
        deserialize = proto_deser.deserialize
        for start, size in batches:
            held = [deserialize(v) for v in proto_views[start : start + size]]
            del held
        return total

    def proto_baseline() -> int:
        parse = event_class.FromString
        for start, size in batches:
            held = [to_dict(parse(p)) for p in proto[start : start + size]]
            del held
        return total

    if "avro" in chosen:
        compare(
            "avro: spate-avro raw union vs fastavro.schemaless_reader",
            avro_framework,
            avro_baseline,
        )
    columnar = chosen & {"avro", "avro-columnar"}
    if columnar and getattr(avro_deser, "columnar", None) is not None:
        deserialize_batch = avro_deser.deserialize_batch  # type: ignore[attr-defined]

        def avro_columnar() -> int:
            for start, size in columnar_batches:
                held = deserialize_batch(avro_views[start : start + size])
                if held[1]:
                    raise SystemExit(f"columnar decoding refused {len(held[1])} records")
                del held
            return total

        compare(
            f"avro columnar: deserialize_batch (polars frames) vs fastavro.schemaless_reader, "
            f"batches of {columnar_size:,}",
            avro_columnar,
            fastavro_loop(columnar_batches),
        )
    if "json" in chosen:
        compare("json: spate-json single vs orjson.loads", json_framework, json_baseline)
    if "json" in chosen and getattr(json_deser, "columnar", None) is not None:
        json_batch = json_deser.deserialize_batch  # type: ignore[attr-defined]

        def json_columnar() -> int:
            for start, size in batches:
                held = json_batch(json_views[start : start + size])
                if held[1] or len(held[0]) != 1:
                    raise SystemExit("columnar JSON decoding left the fast path")
                del held
            return total

        compare(
            "json columnar: deserialize_batch (polars frame) vs orjson.loads",
            json_columnar,
            json_baseline,
        )
        import polars as pl

        def json_into_columns() -> int:
            loads = orjson.loads
            for start, size in batches:
                held = pl.from_dicts(
                    [loads(p) for p in as_json[start : start + size]], infer_schema_length=None
                )
                del held
            return total

        compare(
            "json columnar into columns: deserialize_batch vs orjson.loads + polars.from_dicts",
            json_columnar,
            json_into_columns,
        )
    if "protobuf" in chosen:
        compare(
            "protobuf: spate-protobuf raw vs Message.FromString + MessageToDict",
            proto_framework,
            proto_baseline,
        )
    proto_columnar = chosen & {"protobuf", "protobuf-columnar"}
    if proto_columnar and getattr(proto_deser, "columnar", None) is not None:
        proto_batch = proto_deser.deserialize_batch  # type: ignore[attr-defined]
        proto_row = proto_deser.deserialize

        def protobuf_columnar() -> int:
            for start, size in columnar_batches:
                held = proto_batch(proto[start : start + size])
                if held[1] or len(held[0]) != 1:
                    raise SystemExit("columnar Protobuf decoding refused records")
                del held
            return total

        def protobuf_rows() -> int:
            for start, size in columnar_batches:
                held = [proto_row(p) for p in proto[start : start + size]]
                del held
            return total

        compare(
            f"protobuf columnar: deserialize_batch (polars frame) vs the row path's "
            f"deserialize, batches of {columnar_size:,}",
            protobuf_columnar,
            protobuf_rows,
            runs=max(5, env_int("SPATE_BENCH_RUNS", 5)),
        )


if __name__ == "__main__":
    main()
