"""Random bytes into every Avro decoder: only ``DeserError`` comes out, never a crash (B28)."""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from typing import Any

import pytest
from hypothesis import strategies as st
from spate_avro import single_object_fingerprint
from spate_avro._schema import parse_schema_text

from tests.support.deser_fuzz import closing_all, random_batches_test, random_bytes_test
from tests.support.schema_registry import SchemaRegistryServer

LOGICAL = {
    "type": "record",
    "name": "L",
    "fields": [
        {"name": "ts", "type": {"type": "long", "logicalType": "timestamp-micros"}},
        {"name": "d", "type": {"type": "int", "logicalType": "date"}},
        {"name": "t", "type": {"type": "int", "logicalType": "time-millis"}},
        {
            "name": "dec",
            "type": {"type": "bytes", "logicalType": "decimal", "precision": 9, "scale": 2},
        },
        {"name": "u", "type": {"type": "string", "logicalType": "uuid"}},
        {"name": "e", "type": {"type": "enum", "name": "E", "symbols": ["A", "B"]}},
        {"name": "m", "type": {"type": "map", "values": ["null", "double", "boolean"]}},
        {"name": "f", "type": {"type": "fixed", "name": "F", "size": 3}},
    ],
}


@pytest.fixture(scope="module")
def decoders(kit: Any) -> Iterator[Mapping[str, Any]]:
    with SchemaRegistryServer() as registry:
        union_id = registry.register("events-value", kit.union)
        registry.register("logical-value", LOGICAL)
        built = {
            "raw-union": kit.build({"mode": "raw", "schema": kit.inline(kit.union)}),
            "raw-logical": kit.build({"mode": "raw", "schema": kit.inline(LOGICAL)}),
            "single-object": kit.build({"mode": "single_object", "schema": kit.inline(LOGICAL)}),
            "confluent": kit.build(
                {
                    "mode": "confluent",
                    "registry": {"url": registry.url},
                    "prewarm_subjects": ["events-value", "logical-value"],
                    "fetch_wait": "0s",
                }
            ),
        }
        assert union_id == 1
        with closing_all(built) as decoders:
            yield decoders


def _fingerprint() -> bytes:
    return single_object_fingerprint(parse_schema_text(json.dumps(LOGICAL)))


prefixes = st.sampled_from(
    [b"", b"\x00\x00\x00\x00\x01", b"\x00\x00\x00\x00\x02", b"\xc3\x01" + _fingerprint()]
)

test_random_bytes_give_only_counted_record_errors_b28 = random_bytes_test(prefixes)
test_random_batches_through_the_stage_are_all_counted_b28 = random_batches_test("raw-union")
