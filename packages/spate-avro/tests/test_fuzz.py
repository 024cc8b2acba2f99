"""Random bytes into every Avro decoder: only ``DeserError`` comes out, never a crash (B28)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from spate import DeserError, DeserErrorKind
from spate_avro import AvroDeserializer, single_object_fingerprint
from spate_avro._schema import parse_schema_text

from tests.support.deser_stage import through_stage
from tests.support.scale import scaled
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

EXAMPLES = scaled(2000, minimum=200)


@pytest.fixture(scope="module")
def decoders(kit: Any) -> Iterator[dict[str, AvroDeserializer]]:
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
        yield built
        for deser in built.values():
            deser.close()


def _fingerprint() -> bytes:
    return single_object_fingerprint(parse_schema_text(json.dumps(LOGICAL)))


prefixes = st.sampled_from(
    [b"", b"\x00\x00\x00\x00\x01", b"\x00\x00\x00\x00\x02", b"\xc3\x01" + _fingerprint()]
)


def _check(name: str, deser: AvroDeserializer, view: memoryview) -> None:
    try:
        deser.deserialize(view)
    except DeserError as exc:
        assert exc.reason
        # Only an id the registry has not answered for yet may be "not ready".
        if exc.kind is DeserErrorKind.NOT_READY:
            assert name == "confluent"


@settings(
    max_examples=EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(prefix=prefixes, body=st.binary(max_size=64), sliced=st.booleans())
def test_random_bytes_give_only_counted_record_errors_b28(
    decoders: dict[str, AvroDeserializer], prefix: bytes, body: bytes, sliced: bool
) -> None:
    data = prefix + body
    buf = b"\xff" + data + b"\xff"
    view = memoryview(buf)[1 : 1 + len(data)] if sliced else memoryview(data)
    for name, deser in decoders.items():
        _check(name, deser, view)


@settings(max_examples=max(20, EXAMPLES // 20), deadline=None)
@given(payloads=st.lists(st.binary(max_size=40), min_size=1, max_size=30))
def test_random_batches_through_the_stage_are_all_counted_b28(
    decoders: dict[str, AvroDeserializer], payloads: list[bytes]
) -> None:
    """Every random payload ends as ``ok`` or ``skipped`` in the stage's counters."""
    counts = through_stage(decoders["raw-union"], payloads)
    assert counts.ok == len(counts.rows)
    assert counts.ok + counts.skipped == len(payloads)
