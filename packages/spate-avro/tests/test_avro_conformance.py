"""spate-avro passes spate's deserializer conformance suite in ``raw`` and ``single_object``.

Whole and sliced payload views decode alike, decoded records never borrow the view,
malformed and truncated payloads raise ``DeserError`` (B28), config keys are strict
(B17). The ``confluent`` mode's registry paths are covered by its own tests.
"""

from __future__ import annotations

import io
import json
from collections.abc import Mapping, Sequence
from typing import Any

import fastavro
from spate.testing.conformance import DeserializerConformance
from spate_avro import AvroDeserializerFactory, single_object_fingerprint
from spate_avro._schema import parse_schema_text

SCHEMA: dict[str, Any] = {
    "type": "record",
    "name": "Reading",
    "namespace": "spate.conformance",
    "fields": [
        {"name": "id", "type": "long"},
        {"name": "sensor", "type": "string"},
        {"name": "raw", "type": "bytes"},
        {"name": "values", "type": {"type": "array", "items": "double"}},
        {"name": "labels", "type": {"type": "map", "values": "string"}},
        {"name": "note", "type": ["null", "string"], "default": None},
    ],
}
SCHEMA_TEXT = json.dumps(SCHEMA)
RECORDS: list[dict[str, Any]] = [
    {
        "id": 1,
        "sensor": "t-ü",
        "raw": b"\x00\x01\xff",
        "values": [1.5, -2.0],
        "labels": {"site": "a"},
        "note": None,
    },
    {"id": 2**40, "sensor": "", "raw": b"", "values": [], "labels": {}, "note": "late"},
]


def _raw(record: dict[str, Any]) -> bytes:
    out = io.BytesIO()
    fastavro.schemaless_writer(out, fastavro.parse_schema(SCHEMA), record)
    return out.getvalue()


class TestRawAvroConformance(DeserializerConformance):
    factory = AvroDeserializerFactory
    tag = "avro"

    def config(self) -> Mapping[str, object]:
        return {"mode": "raw", "schema": {"inline": SCHEMA_TEXT}}

    def invalid_configs(self) -> Sequence[tuple[Mapping[str, object], str]]:
        return [
            ({"mode": "raw"}, "schema"),
            ({"mode": "protobuf", "schema": {"inline": SCHEMA_TEXT}}, "mode"),
            ({"mode": "raw", "schema": {"inline": SCHEMA_TEXT}, "fetch_wait": "x"}, "fetch_wait"),
        ]

    def samples(self) -> Sequence[tuple[bytes, list[object]]]:
        return [(_raw(r), [r]) for r in RECORDS]

    def malformed(self) -> Sequence[bytes]:
        # A string length running past the payload, a negative array count without a
        # block size, a union branch that does not exist.
        return [
            b"\x02\x7f",
            b"\x02\x00\x00\x03\xff\xff\xff\xff\x0f",
            _raw(RECORDS[0])[:-1] + b"\x09",
        ]


class TestSingleObjectAvroConformance(DeserializerConformance):
    factory = AvroDeserializerFactory
    tag = "avro"

    def config(self) -> Mapping[str, object]:
        return {"mode": "single_object", "schema": {"inline": SCHEMA_TEXT}}

    def samples(self) -> Sequence[tuple[bytes, list[object]]]:
        header = b"\xc3\x01" + single_object_fingerprint(parse_schema_text(SCHEMA_TEXT))
        return [(header + _raw(r), [r]) for r in RECORDS]

    def malformed(self) -> Sequence[bytes]:
        good = self.samples()[0][0]
        return [b"", b"\xc3", b"\x00\x01" + good[2:], b"\xc3\x01" + b"\x00" * 8 + good[10:]]
