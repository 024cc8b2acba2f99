"""``mode: confluent`` against the registry test server: caching, outages, auth (B21, B28, B29).

The server stands in for a Confluent Schema Registry (none can run here); it implements
the documented REST subset with its status codes and error bodies.
"""

from __future__ import annotations

import json
import time
from typing import Any

import pytest
from spate import ConfigError, DeserError, DeserErrorKind, FatalError, ManualClock
from spate_avro import ConfluentAvroDeserializer, NamedRecord, SchemaRegistryClient

from tests.support.schema_registry import SchemaRegistryServer

USER = {
    "type": "record",
    "name": "User",
    "namespace": "t",
    "fields": [{"name": "id", "type": "long"}, {"name": "name", "type": "string"}],
}


def _config(url: str, **extra: Any) -> dict[str, Any]:
    return {"mode": "confluent", "registry": {"url": url, "retry_backoff": "1s"}, **extra}


def _decode_eventually(deser: Any, payload: bytes, deadline: float = 5.0) -> object:
    """Ask again while the record is not ready, as the runtime does after a stall."""
    end = time.monotonic() + deadline
    while True:
        try:
            return deser.deserialize(memoryview(payload))
        except DeserError as exc:
            if exc.kind is not DeserErrorKind.NOT_READY or time.monotonic() > end:
                raise
            time.sleep(0.01)


def test_confluent_round_trip_fetches_each_schema_id_once(
    kit: Any, schema_registry: SchemaRegistryServer
) -> None:
    user_id = schema_registry.register("users-value", USER)
    union_id = schema_registry.register("events-value", kit.union)
    deser = kit.build(_config(schema_registry.url))
    try:
        assert isinstance(deser, ConfluentAvroDeserializer)
        for i in range(20):
            payload = kit.confluent(user_id, kit.encode(USER, {"id": i, "name": f"u{i}"}))
            assert _decode_eventually(deser, payload) == {"id": i, "name": f"u{i}"}
            event = ("spate.datagen.PaymentCaptured", {"order_id": i, "amount_cents": 3})
            value = _decode_eventually(deser, kit.confluent(union_id, kit.encode(kit.union, event)))
            assert isinstance(value, NamedRecord) and value == event
        assert schema_registry.requests[f"GET /schemas/ids/{user_id}"] == 1
        assert schema_registry.requests[f"GET /schemas/ids/{union_id}"] == 1
    finally:
        deser.close()


def test_prewarmed_subjects_decode_without_a_fetch(
    kit: Any, schema_registry: SchemaRegistryServer
) -> None:
    user_id = schema_registry.register("users-value", USER)
    deser = kit.build(
        _config(schema_registry.url, prewarm_subjects=["users-value"], fetch_wait="0s")
    )
    try:
        payload = kit.confluent(user_id, kit.encode(USER, {"id": 1, "name": "a"}))
        assert deser.deserialize(memoryview(payload)) == {"id": 1, "name": "a"}
        assert schema_registry.requests[f"GET /schemas/ids/{user_id}"] == 0
        assert schema_registry.requests["GET /subjects/users-value/versions/latest"] == 1
    finally:
        deser.close()


def test_registry_down_then_up_record_is_not_ready_never_dropped_b21(
    kit: Any, schema_registry: SchemaRegistryServer
) -> None:
    user_id = schema_registry.register("users-value", USER)
    clock = ManualClock()
    deser = kit.build(_config(schema_registry.url, fetch_wait="2s"), clock=clock)
    payload = kit.confluent(user_id, kit.encode(USER, {"id": 5, "name": "e"}))
    try:
        schema_registry.stop()  # connection refused
        for _ in range(3):
            with pytest.raises(DeserError, match="unreachable") as info:
                deser.deserialize(memoryview(payload))
            assert info.value.kind is DeserErrorKind.NOT_READY
        # within retry_backoff no new request is made: one failed fetch so far
        schema_registry.start()
        with pytest.raises(DeserError) as info:
            deser.deserialize(memoryview(payload))
        assert info.value.kind is DeserErrorKind.NOT_READY
        assert schema_registry.requests[f"GET /schemas/ids/{user_id}"] == 0
        clock.advance(1.0)
        assert deser.deserialize(memoryview(payload)) == {"id": 5, "name": "e"}
    finally:
        deser.close()


def test_registry_5xx_outage_is_not_ready_then_recovers_b21(
    kit: Any, schema_registry: SchemaRegistryServer
) -> None:
    user_id = schema_registry.register("users-value", USER)
    clock = ManualClock()
    deser = kit.build(_config(schema_registry.url, fetch_wait="2s"), clock=clock)
    payload = kit.confluent(user_id, kit.encode(USER, {"id": 6, "name": "f"}))
    try:
        schema_registry.fail_with(503)
        with pytest.raises(DeserError, match="HTTP 503") as info:
            deser.deserialize(memoryview(payload))
        assert info.value.kind is DeserErrorKind.NOT_READY
        schema_registry.fail_with(None)
        clock.advance(1.0)
        assert deser.deserialize(memoryview(payload)) == {"id": 6, "name": "f"}
    finally:
        deser.close()


def test_unknown_schema_id_is_negatively_cached_for_its_ttl_b28(
    kit: Any, schema_registry: SchemaRegistryServer
) -> None:
    clock = ManualClock()
    deser = kit.build(
        _config(schema_registry.url, negative_cache_ttl="1m", fetch_wait="2s"), clock=clock
    )
    payload = kit.confluent(77, kit.encode(USER, {"id": 1, "name": "x"}))
    try:
        for _ in range(3):
            with pytest.raises(DeserError, match="Schema not found") as info:
                deser.deserialize(memoryview(payload))
            assert info.value.kind is DeserErrorKind.SCHEMA_UNAVAILABLE
        assert schema_registry.requests["GET /schemas/ids/77"] == 1
        clock.advance(61)
        with pytest.raises(DeserError, match="Schema not found"):
            deser.deserialize(memoryview(payload))
        assert schema_registry.requests["GET /schemas/ids/77"] == 2
    finally:
        deser.close()


def test_unparseable_registry_schema_is_a_permanent_record_error(
    kit: Any, schema_registry: SchemaRegistryServer
) -> None:
    unknown_type = {"type": "record", "name": "B", "fields": [{"name": "a", "type": "no.Such"}]}
    bad_id = schema_registry.register("bad-value", unknown_type)
    proto_id = schema_registry.register("proto-value", '"syntax = proto3"', kind="PROTOBUF")
    deser = kit.build(_config(schema_registry.url, fetch_wait="2s"))
    try:
        with pytest.raises(DeserError, match="invalid Avro schema") as info:
            deser.deserialize(memoryview(kit.confluent(bad_id, b"\x02")))
        assert info.value.kind is DeserErrorKind.SCHEMA_UNAVAILABLE
        with pytest.raises(DeserError, match="PROTOBUF schema") as info:
            deser.deserialize(memoryview(kit.confluent(proto_id, b"\x02")))
        assert info.value.kind is DeserErrorKind.SCHEMA_UNAVAILABLE
    finally:
        deser.close()


def test_wrong_magic_byte_and_short_payloads_are_malformed_b28(
    kit: Any, schema_registry: SchemaRegistryServer
) -> None:
    deser = kit.build(_config(schema_registry.url))
    try:
        for payload, reason in [
            (b"\x01\x00\x00\x00\x01\x02", "wrong magic byte 0x01"),
            (b"\x00\x00\x00", "only 3 bytes"),
            (b"", "empty payload"),
            (b'{"id": 1}', "wrong magic byte 0x7b"),
        ]:
            with pytest.raises(DeserError, match=reason) as info:
                deser.deserialize(memoryview(payload))
            assert info.value.kind is DeserErrorKind.MALFORMED
        assert sum(schema_registry.requests.values()) == 1  # only the start-up probe
    finally:
        deser.close()


def test_truncated_confluent_payload_is_malformed_b28(
    kit: Any, schema_registry: SchemaRegistryServer
) -> None:
    user_id = schema_registry.register("users-value", USER)
    deser = kit.build(_config(schema_registry.url, prewarm_subjects=["users-value"]))
    try:
        payload = kit.confluent(user_id, kit.encode(USER, {"id": 1, "name": "long name"}))
        with pytest.raises(DeserError) as info:
            deser.deserialize(memoryview(payload[:-3]))
        assert info.value.kind is DeserErrorKind.MALFORMED
    finally:
        deser.close()


def test_basic_auth_is_sent_and_wrong_credentials_fail_start_up_b29(kit: Any) -> None:
    with SchemaRegistryServer(username="etl", password="s3cret") as server:
        user_id = server.register("users-value", USER)
        config = _config(server.url, prewarm_subjects=["users-value"])
        config["registry"].update(username="etl", password="s3cret")
        deser = kit.build(config)
        payload = kit.confluent(user_id, kit.encode(USER, {"id": 1, "name": "a"}))
        assert deser.deserialize(memoryview(payload)) == {"id": 1, "name": "a"}
        deser.close()
        config["registry"]["password"] = "wrong"
        with pytest.raises(FatalError, match=rf"{server.url}/subjects: HTTP 401: Unauthorized"):
            kit.build(config)


def test_registry_that_forbids_listing_subjects_still_starts(
    kit: Any, schema_registry: SchemaRegistryServer
) -> None:
    user_id = schema_registry.register("users-value", USER)
    schema_registry.allow_listing = False
    deser = kit.build(_config(schema_registry.url, prewarm_subjects=["users-value"]))
    try:
        payload = kit.confluent(user_id, kit.encode(USER, {"id": 3, "name": "c"}))
        assert deser.deserialize(memoryview(payload)) == {"id": 3, "name": "c"}
        assert schema_registry.requests["GET /subjects"] == 1
    finally:
        deser.close()


def test_unreachable_registry_fails_start_up_naming_the_endpoint_b29(kit: Any) -> None:
    server = SchemaRegistryServer().start()
    url = server.url
    server.stop()
    with pytest.raises(FatalError, match=rf"deserializer: schema registry {url}/subjects: unreach"):
        kit.build(_config(url))


def test_prewarm_of_a_missing_subject_names_the_key_b29(
    kit: Any, schema_registry: SchemaRegistryServer
) -> None:
    with pytest.raises(ConfigError, match=r"prewarm_subjects\[0\]: subject 'nope' not found"):
        kit.build(_config(schema_registry.url, prewarm_subjects=["nope"]))


def test_client_registers_and_reads_back(schema_registry: SchemaRegistryServer) -> None:
    from spate_avro import RegistryConfig

    client = SchemaRegistryClient(
        RegistryConfig(url=schema_registry.url), clock=ManualClock(), negative_cache_ttl=60
    )
    text = json.dumps(USER)
    first = client.register("users-value", text)
    assert client.register("users-value", text) == first
    schema_id, parsed = client.latest("users-value")
    assert schema_id == first and parsed["name"] == "t.User"
    assert client.fetch(first)["name"] == "t.User"
    client.close()
