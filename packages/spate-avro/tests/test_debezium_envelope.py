"""``avro: {envelope: debezium}``: the table is described by the change events' ``after``
record, and a writer schema that adds a column is announced with it before its first
record decodes (B380), on real Debezium events (``tests/data/debezium/postgres/avro``)."""

from __future__ import annotations

import base64
import dataclasses
import json
import time
from pathlib import Path
from typing import Any

from spate import DeserError, DeserErrorKind
from spate.config import decode
from spate.schema import Field, SchemaChanges
from spate_avro import AvroConfig, AvroDeserializerFactory

from tests.support.schema_registry import SchemaRegistryServer

DATA = Path(__file__).resolve().parents[3] / "tests" / "data" / "debezium" / "postgres" / "avro"
SUBJECT = "shop_avro.public.customers-value"


def _registered(registry: SchemaRegistryServer) -> None:
    schemas = json.loads((DATA / "schemas.json").read_text())
    for schema_id in sorted(schemas, key=int):
        entry = schemas[schema_id]
        assert registry.register(entry["subject"], entry["schema"]) == int(schema_id)


def _payloads() -> dict[str, bytes]:
    out: dict[str, bytes] = {}
    for line in (DATA / "customers.jsonl").read_text().splitlines():
        record = json.loads(line)
        if record["value"] is not None:
            out.setdefault(record["case"], base64.b64decode(record["value"]))
    return out


def _build(kit: Any, url: str, changes: SchemaChanges | None = None, **extra: Any) -> Any:
    body = {
        "mode": "confluent",
        "registry": {"url": url, "retry_backoff": "1s"},
        "envelope": "debezium",
        **extra,
    }
    config = decode(AvroConfig, body, "deserializer.avro")
    context = dataclasses.replace(kit.make_context(), schema_changes=changes)
    return AvroDeserializerFactory.build(config, context)


def _decode(deser: Any, payload: bytes) -> Any:
    deadline = time.monotonic() + 10
    while True:
        try:
            return deser.deserialize(memoryview(payload))
        except DeserError as exc:
            assert exc.kind is DeserErrorKind.NOT_READY and time.monotonic() < deadline
            time.sleep(0.01)


def test_b380_the_table_is_described_by_the_after_record(
    kit: Any, schema_registry: SchemaRegistryServer
) -> None:
    _registered(schema_registry)
    deser = _build(kit, schema_registry.url, prewarm_subjects=[SUBJECT])
    try:
        fields = deser.record_fields()
        assert [f.name for f in fields] == ["id", "name", "balance", "notes", "active", "email"]
        assert deser.columnar is None or not deser.columnar  # the row path only
    finally:
        deser.close()


def test_b380_a_column_added_in_the_source_is_announced_before_its_first_change(
    kit: Any, schema_registry: SchemaRegistryServer
) -> None:
    _registered(schema_registry)
    changes = SchemaChanges()
    heard: list[tuple[str, ...]] = []

    def listener(schema: str, fields: tuple[Field, ...]) -> None:
        heard.append(tuple(f.name for f in fields))

    changes.subscribe(listener)
    deser = _build(kit, schema_registry.url, changes)
    payloads = _payloads()
    try:
        snapshot = _decode(deser, payloads["snapshot"])
        assert snapshot["op"] == "r" and snapshot["after"]["id"] == 1  # the envelope itself
        assert heard == [("id", "name", "balance", "notes", "active")]
        added = _decode(deser, payloads["column_added"])
        assert heard[-1] == ("id", "name", "balance", "notes", "active", "email")
        assert added["after"]["email"] == "d@example.org"
    finally:
        deser.close()
