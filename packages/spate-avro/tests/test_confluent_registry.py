"""``mode: confluent`` against the registry test server: caching, outages, auth (B21, B28, B29).

The server stands in for a Confluent Schema Registry (none can run here); it implements
the documented REST subset with its status codes and error bodies.
"""

from __future__ import annotations

import json
import time
from typing import Any

import pytest
from spate import (
    ConfigError,
    DeserError,
    DeserErrorKind,
    ErrorPolicy,
    FatalError,
    ManualClock,
)
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


def _requests_while_missing(
    deser: Any, payload: bytes, clock: ManualClock, registry: SchemaRegistryServer, path: str
) -> list[int]:
    """Ask for ``payload`` once per second for 12 s; the request count after each ask."""
    counts = []
    for second in range(12):
        if second:
            clock.advance(1.0)
        with pytest.raises(DeserError, match="Schema not found") as info:
            deser.deserialize(memoryview(payload))
        assert info.value.kind is DeserErrorKind.NOT_READY  # never a record error (B21)
        counts.append(registry.requests[path])
    return counts


def test_schema_id_a_lagging_registry_does_not_know_yet_is_retried_not_dropped_b21_b30(
    kit: Any, schema_registry: SchemaRegistryServer
) -> None:
    """B21, B30: a 404 for a schema id (a follower that has not caught up) is not final: the
    record is not ready, the id is asked again with capped exponential backoff (1, 2, 4,
    then every 4 s), and the record decodes once the registry serves it."""
    user_id = schema_registry.register("users-value", USER)
    schema_registry.hide(user_id)
    clock = ManualClock()
    config = _config(schema_registry.url, fetch_wait="2s")
    config["registry"]["retry_backoff_max"] = "4s"
    deser = kit.build(config, clock=clock)
    payload = kit.confluent(user_id, kit.encode(USER, {"id": 1, "name": "x"}))
    path = f"GET /schemas/ids/{user_id}"
    try:
        counts = _requests_while_missing(deser, payload, clock, schema_registry, path)
        # asked at t = 0, 1, 3, 7, 11
        assert counts == [1, 2, 2, 3, 3, 3, 3, 4, 4, 4, 4, 5]
        schema_registry.reveal(user_id)
        clock.advance(3.9)
        with pytest.raises(DeserError) as info:
            deser.deserialize(memoryview(payload))
        assert info.value.kind is DeserErrorKind.NOT_READY
        clock.advance(0.1)
        assert deser.deserialize(memoryview(payload)) == {"id": 1, "name": "x"}
        assert schema_registry.requests[path] == 6
    finally:
        deser.close()


def test_negative_cache_ttl_only_shortens_the_retries_of_a_missing_id_b30(
    kit: Any, schema_registry: SchemaRegistryServer
) -> None:
    """B30: ``negative_cache_ttl`` caps the wait before a 404 is asked again (1, 2, then
    every 2 s here); it never turns the miss into a skipped record."""
    clock = ManualClock()
    deser = kit.build(
        _config(schema_registry.url, negative_cache_ttl="2s", fetch_wait="2s"), clock=clock
    )
    payload = kit.confluent(77, kit.encode(USER, {"id": 1, "name": "x"}))
    try:
        counts = _requests_while_missing(
            deser, payload, clock, schema_registry, "GET /schemas/ids/77"
        )
        # asked at t = 0, 1, 3, 5, 7, 9, 11
        assert counts == [1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6, 7]
    finally:
        deser.close()


@pytest.mark.parametrize("policy", [ErrorPolicy.FAIL, ErrorPolicy.SKIP])
def test_schema_id_unknown_past_unknown_schema_timeout_follows_on_unknown_schema_b30(
    kit: Any, schema_registry: SchemaRegistryServer, policy: ErrorPolicy
) -> None:
    """B30: an id still unknown ``unknown_schema_timeout`` after its first 404 is an
    ``unknown_schema`` error carrying ``on_unknown_schema`` (default fail), whatever
    ``on_error`` says; before that it is only not ready (B21)."""
    clock = ManualClock()
    extra: dict[str, Any] = {"fetch_wait": "2s", "unknown_schema_timeout": "10s"}
    if policy is ErrorPolicy.SKIP:
        extra["on_unknown_schema"] = "skip"
    deser = kit.build(_config(schema_registry.url, **extra), clock=clock)
    payload = kit.confluent(77, kit.encode(USER, {"id": 1, "name": "x"}))
    try:
        with pytest.raises(DeserError) as info:
            deser.deserialize(memoryview(payload))
        assert info.value.kind is DeserErrorKind.NOT_READY
        clock.advance(9.9)
        with pytest.raises(DeserError) as info:
            deser.deserialize(memoryview(payload))
        assert info.value.kind is DeserErrorKind.NOT_READY
        clock.advance(0.1)
        with pytest.raises(DeserError, match=r"schema id 77 .*not found") as info:
            deser.deserialize(memoryview(payload))
        assert info.value.kind is DeserErrorKind.UNKNOWN_SCHEMA
        assert info.value.policy is policy
        assert "unknown_schema_timeout 10s" in info.value.reason
    finally:
        deser.close()


def test_unknown_schema_timeout_0_gives_up_at_the_first_404_b30(
    kit: Any, schema_registry: SchemaRegistryServer
) -> None:
    deser = kit.build(
        _config(
            schema_registry.url,
            fetch_wait="2s",
            unknown_schema_timeout="0s",
            on_unknown_schema="skip",
        ),
        clock=ManualClock(),
    )
    try:
        with pytest.raises(DeserError, match="schema id 77") as info:
            deser.deserialize(memoryview(kit.confluent(77, b"\x02")))
        assert info.value.kind is DeserErrorKind.UNKNOWN_SCHEMA
        assert info.value.policy is ErrorPolicy.SKIP
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


def test_b60_each_new_writer_schema_is_announced_once_before_its_first_record_b61(
    kit: Any, schema_registry: SchemaRegistryServer, caplog: pytest.LogCaptureFixture
) -> None:
    """A listener that refuses a schema makes its records not ready with its reason,
    logged once; once it takes the schema, records decode and it is not asked again."""
    import dataclasses

    from spate.config import decode
    from spate.schema import Field, SchemaChanges
    from spate_avro import AvroConfig, AvroDeserializerFactory

    user_id = schema_registry.register("users-value", USER)
    changes = SchemaChanges()
    heard: list[tuple[str, tuple[str, ...]]] = []
    refuse = ["column name is Int64"]

    def listener(schema: str, fields: tuple[Field, ...]) -> None:
        heard.append((schema, tuple(f.name for f in fields)))
        if refuse:
            raise ValueError(refuse[0])

    changes.subscribe(listener)
    config = decode(AvroConfig, _config(schema_registry.url), "deserializer.avro")
    context = dataclasses.replace(kit.make_context(), schema_changes=changes)
    deser = AvroDeserializerFactory.build(config, context)
    payload = kit.confluent(user_id, kit.encode(USER, {"id": 1, "name": "a"}))
    try:
        deadline = time.monotonic() + 10
        while not heard:  # the first fetch may not be back yet
            assert time.monotonic() < deadline
            with pytest.raises(DeserError):
                deser.deserialize(memoryview(payload))
        for _ in range(2):
            with pytest.raises(DeserError) as err:
                deser.deserialize(memoryview(payload))
            assert err.value.kind is DeserErrorKind.NOT_READY
            assert str(err.value) == f"schema id {user_id}: column name is Int64"
        waits = [r for r in caplog.records if "wait" in r.getMessage()]
        assert [r.getMessage() for r in waits] == [
            f"records of schema id {user_id} wait: column name is Int64"
        ]
        refuse.clear()
        assert deser.deserialize(memoryview(payload)) == {"id": 1, "name": "a"}
        assert deser.deserialize(memoryview(payload)) == {"id": 1, "name": "a"}
        assert (
            heard == [(f"schema id {user_id}", ("id", "name"))] * 4
        )  # three refusals, then taken once
    finally:
        deser.close()
