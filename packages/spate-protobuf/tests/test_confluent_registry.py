"""Confluent-framed Protobuf with schemas from the registry (B21, B28, B29, B30, B31).

The payloads are written by confluent-kafka's own ``ProtobufSerializer`` (a client this
project did not write) against the registry test server, so the framing (magic byte,
schema id, message-index array), the registered ``format=serialized`` descriptors and
the schema references are the real client's.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka.schema_registry import SchemaRegistryClient as ConfluentRegistry
from confluent_kafka.schema_registry.protobuf import ProtobufSerializer
from confluent_kafka.serialization import MessageField, SerializationContext
from spate import ConfigError, DeserError, DeserErrorKind, ErrorPolicy, FatalError, ManualClock
from spate.config import decode
from spate_avro import AvroConfig, AvroDeserializerFactory
from spate_protobuf import ConfluentProtobufDeserializer, RawProtobufDeserializer

from tests.support.schema_registry import SchemaRegistryServer

Serialize = Callable[[Any, str], bytes]


@pytest.fixture
def serialize(schema_registry: SchemaRegistryServer) -> Iterator[Serialize]:
    """confluent-kafka's ``ProtobufSerializer``, one per message type, into ``topic``."""
    client = ConfluentRegistry({"url": schema_registry.url})
    serializers: dict[type, ProtobufSerializer] = {}

    def run(message: Any, topic: str = "orders") -> bytes:
        cls = type(message)
        if cls not in serializers:
            serializers[cls] = ProtobufSerializer(cls, client, {"auto.register.schemas": True})
        wire = serializers[cls](message, SerializationContext(topic, MessageField.VALUE))
        assert wire is not None
        return wire

    yield run
    client.close()


def _confluent(kit: Any, registry: SchemaRegistryServer, **extra: Any) -> Any:
    deser = kit.build({"mode": "confluent", "registry": {"url": registry.url}, **extra})
    assert isinstance(deser, ConfluentProtobufDeserializer)
    return deser


def test_decodes_what_confluent_kafkas_serializer_wrote(
    kit: Any, order_classes: Any, schema_registry: SchemaRegistryServer, serialize: Serialize
) -> None:
    """Top-level (index [1]) and nested (index [1, 0]) types, WKT, oneof, maps, enums."""
    Order, Audit = order_classes["shop.v1.Order"], order_classes["shop.v1.Order.Audit"]
    order = Order(order_id=42, region="eu", status=1, card="visa", note="n")
    order.placed_at.seconds = 1_700_000_000
    order.prep.seconds, order.prep.nanos = 90, 500_000_000
    order.by_sku["a"].qty = 3
    order.extra.update({"k": "v"})
    order.big = 2**64 - 1
    wire = serialize(order)
    audit_wire = serialize(Audit(by="ops"), "audits")
    deser = _confluent(kit, schema_registry, fetch_wait="5s")
    try:
        got = deser.deserialize(memoryview(wire))
        assert got["order_id"] == 42 and got["status"] == "PLACED"
        assert got["placed_at"] == datetime(2023, 11, 14, 22, 13, 20, tzinfo=UTC)
        assert got["prep"].total_seconds() == 90.5
        assert (got["card"], got["voucher"], got["note"]) == ("visa", None, "n")
        assert got["by_sku"] == {"a": {"sku": "", "qty": 3}}
        assert got["extra"] == {"k": "v"} and got["big"] == 2**64 - 1
        assert got["discount"] is None and got["audit"] is None
        assert deser.deserialize(memoryview(audit_wire)) == {"by": "ops", "parent": None}
    finally:
        deser.close()


def test_enums_as_numbers_by_setting(
    kit: Any, order_classes: Any, schema_registry: SchemaRegistryServer, serialize: Serialize
) -> None:
    Order = order_classes["shop.v1.Order"]
    wire = serialize(Order(status=2, history=[1, 9]))
    deser = _confluent(kit, schema_registry, fetch_wait="5s", enums="numbers")
    try:
        got = deser.deserialize(memoryview(wire))
        assert (got["status"], got["history"]) == (2, [1, 9])
    finally:
        deser.close()


def test_schema_references_are_fetched_and_compiled(
    kit: Any, tmp_path: Path, schema_registry: SchemaRegistryServer, serialize: Serialize
) -> None:
    """The serializer registers the imported file under its own subject; spate follows it."""
    classes = kit.classes(kit.compile_protos(tmp_path, "shop/v1/envelope.proto"))
    Envelope = classes["shop.v1.Envelope"]
    envelope = Envelope(source="web")
    envelope.order.order_id = 7
    wire = serialize(envelope, "envelopes")
    reference = "GET /subjects/shop%2Fv1%2Forder.proto/versions/1"
    assert schema_registry.requests[reference] == 0
    deser = _confluent(kit, schema_registry, fetch_wait="5s")
    try:
        got = deser.deserialize(memoryview(wire))
        assert got["source"] == "web" and got["order"]["order_id"] == 7
        assert schema_registry.requests[reference] == 1
    finally:
        deser.close()


def test_registry_outage_makes_records_not_ready_until_it_answers_b21(
    kit: Any, order_classes: Any, schema_registry: SchemaRegistryServer, serialize: Serialize
) -> None:
    Order = order_classes["shop.v1.Order"]
    wire = serialize(Order(order_id=1))
    clock = ManualClock()
    deser = kit.build(
        {"mode": "confluent", "registry": {"url": schema_registry.url}, "fetch_wait": "5s"}, clock
    )
    try:
        schema_registry.fail_with(503)
        with pytest.raises(DeserError) as caught:
            deser.deserialize(memoryview(wire))
        assert caught.value.kind is DeserErrorKind.NOT_READY
        schema_registry.fail_with(None)
        with pytest.raises(DeserError) as caught:  # within retry_backoff: not asked again
            deser.deserialize(memoryview(wire))
        assert caught.value.kind is DeserErrorKind.NOT_READY
        clock.advance(1.0)  # registry.retry_backoff
        assert deser.deserialize(memoryview(wire))["order_id"] == 1
    finally:
        deser.close()


def test_unknown_schema_id_follows_the_avro_registry_rules_b21_b28_b30(
    kit: Any, schema_registry: SchemaRegistryServer
) -> None:
    """Both formats share one registry client, so an unknown id ends the same way."""
    avro = AvroDeserializerFactory.build(
        decode(
            AvroConfig,
            {"mode": "confluent", "registry": {"url": schema_registry.url}, "fetch_wait": "5s"},
            "deserializer.avro",
        ),
        kit.make_context(),
    )
    proto = _confluent(kit, schema_registry, fetch_wait="5s")
    kinds = []
    try:
        for deser, payload in (
            (avro, b"\x00\x00\x00\x00\x63\x00"),
            (proto, b"\x00\x00\x00\x00\x63\x00"),
        ):
            with pytest.raises(DeserError) as caught:
                deser.deserialize(memoryview(payload))
            kinds.append(caught.value.kind)
    finally:
        avro.close()
        proto.close()
    assert kinds[0] is kinds[1] and kinds[0] is not DeserErrorKind.MALFORMED


def test_schema_id_a_lagging_registry_does_not_know_yet_waits_then_decodes_b30(
    kit: Any, order_classes: Any, schema_registry: SchemaRegistryServer, serialize: Serialize
) -> None:
    """B30: a 404 for a Protobuf schema id is not final: the record is not ready, the id
    is asked again with capped exponential backoff, and it decodes once served."""
    wire = serialize(order_classes["shop.v1.Order"](order_id=7))
    schema_id = int.from_bytes(wire[1:5], "big")
    schema_registry.hide(schema_id)
    clock = ManualClock()
    deser = kit.build(
        {
            "mode": "confluent",
            "registry": {"url": schema_registry.url, "retry_backoff_max": "4s"},
            "fetch_wait": "5s",
        },
        clock,
    )
    path = f"GET /schemas/ids/{schema_id}"
    try:
        counts = []
        for second in range(8):
            if second:
                clock.advance(1.0)
            with pytest.raises(DeserError, match="Schema not found") as caught:
                deser.deserialize(memoryview(wire))
            assert caught.value.kind is DeserErrorKind.NOT_READY  # never dropped (B21)
            counts.append(schema_registry.requests[path])
        assert counts == [1, 2, 2, 3, 3, 3, 3, 4]  # asked at t = 0, 1, 3, 7
        schema_registry.reveal(schema_id)
        clock.advance(4.0)
        assert deser.deserialize(memoryview(wire))["order_id"] == 7
    finally:
        deser.close()


@pytest.mark.parametrize("policy", [ErrorPolicy.FAIL, ErrorPolicy.SKIP])
def test_schema_id_unknown_past_unknown_schema_timeout_follows_on_unknown_schema_b30(
    kit: Any, schema_registry: SchemaRegistryServer, policy: ErrorPolicy
) -> None:
    """B30: as in spate-avro, an id still unknown ``unknown_schema_timeout`` after its
    first 404 is an ``unknown_schema`` error carrying ``on_unknown_schema`` (default
    fail), whatever ``on_error`` says; before that it is only not ready."""
    clock = ManualClock()
    extra: dict[str, Any] = {"fetch_wait": "5s", "unknown_schema_timeout": "10s"}
    if policy is ErrorPolicy.SKIP:
        extra["on_unknown_schema"] = "skip"
    deser = kit.build(
        {"mode": "confluent", "registry": {"url": schema_registry.url}, **extra}, clock
    )
    payload = kit.confluent(77, [0], b"")
    try:
        for step in (0.0, 9.9):
            clock.advance(step)
            with pytest.raises(DeserError) as caught:
                deser.deserialize(memoryview(payload))
            assert caught.value.kind is DeserErrorKind.NOT_READY
        clock.advance(0.1)
        with pytest.raises(DeserError, match=r"schema id 77 .*not found") as caught:
            deser.deserialize(memoryview(payload))
        assert caught.value.kind is DeserErrorKind.UNKNOWN_SCHEMA
        assert caught.value.policy is policy
        assert "unknown_schema_timeout 10s" in caught.value.reason
    finally:
        deser.close()


def test_close_stops_the_registry_client_b31(
    kit: Any, order_classes: Any, schema_registry: SchemaRegistryServer, serialize: Serialize
) -> None:
    """B31: closing the deserializer stops its registry client's fetch thread."""
    wire = serialize(order_classes["shop.v1.Order"](order_id=3))
    deser = _confluent(kit, schema_registry, fetch_wait="5s")
    assert deser.deserialize(memoryview(wire))["order_id"] == 3
    assert not deser.registry.closed
    deser.close()
    assert deser.registry.closed


def test_an_avro_schema_id_is_schema_unavailable_b28(
    kit: Any, schema_registry: SchemaRegistryServer
) -> None:
    schema_id = schema_registry.register("x-value", {"type": "string"})
    deser = _confluent(kit, schema_registry, fetch_wait="5s")
    try:
        with pytest.raises(DeserError, match="not Protobuf") as caught:
            deser.deserialize(memoryview(kit.confluent(schema_id, [0], b"")))
        assert caught.value.kind is DeserErrorKind.SCHEMA_UNAVAILABLE
    finally:
        deser.close()


def test_prewarm_of_a_missing_subject_names_the_key_b29(
    kit: Any, schema_registry: SchemaRegistryServer
) -> None:
    with pytest.raises(ConfigError, match=r"prewarm_subjects\[0\]"):
        _confluent(kit, schema_registry, prewarm_subjects=["nope-value"])


def test_unreachable_registry_fails_start_up_with_its_url_b29(kit: Any) -> None:
    registry = SchemaRegistryServer().start()
    url = registry.url
    registry.stop()
    with pytest.raises(FatalError, match=url.replace(".", r"\.")):
        kit.build({"mode": "confluent", "registry": {"url": url, "timeout": "2s"}})


def test_raw_mode_decodes_with_a_descriptor_set(
    kit: Any, order_set: Path, order_classes: Any
) -> None:
    deser = kit.build({"mode": "raw", "descriptor_set": str(order_set), "message": "shop.v1.Line"})
    assert isinstance(deser, RawProtobufDeserializer)
    Line = order_classes["shop.v1.Line"]
    wire = Line(sku="s", qty=4).SerializeToString()
    assert deser.deserialize(memoryview(wire)) == {"sku": "s", "qty": 4}


def test_raw_mode_start_up_errors_name_the_key_b29(
    kit: Any, order_set: Path, tmp_path: Path
) -> None:
    with pytest.raises(ConfigError, match=r"protobuf\.descriptor_set.*cannot read"):
        kit.build({"mode": "raw", "descriptor_set": str(tmp_path / "no.pb"), "message": "a.B"})
    with pytest.raises(ConfigError, match=r"protobuf\.message.*shop\.v1\.Order"):
        kit.build({"mode": "raw", "descriptor_set": str(order_set), "message": "shop.v1.Nope"})
    garbage = tmp_path / "garbage.pb"
    garbage.write_bytes(b"\xff\xff")
    with pytest.raises(ConfigError, match=r"protobuf\.descriptor_set"):
        kit.build({"mode": "raw", "descriptor_set": str(garbage), "message": "a.B"})
