"""Protobuf records on the real broker whose schema id the registry does not know yet (B30).

The same rules as for Avro (``test_kafka_avro_registry.py``), through spate-protobuf: a
``spate run`` process (Kafka source → Confluent Protobuf deserializer → fsynced file
sink) waits for an id the registry test server hides (a lagging follower) and loads
every record once it is served, committing nothing past a record while its id is
missing; an id that never appears fails the run after ``unknown_schema_timeout`` with
one line naming it and the record's position (B1, B21).
"""

from __future__ import annotations

import base64
import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from google.protobuf import descriptor_pb2

from tests.kafka._pipeline import start_pipeline, write_config
from tests.support.scale import scaled
from tests.support.schema_registry import SchemaRegistryServer
from tests.support.services import (
    committed_offsets,
    create_topic,
    end_offsets,
    produce_keyed,
    unique_name,
)

pytestmark = pytest.mark.integration

PARTITIONS = 3


@pytest.fixture
def registry() -> Iterator[SchemaRegistryServer]:
    """The registry test server, for this module's pipelines to fetch schemas from."""
    with SchemaRegistryServer() as server:
        yield server


def _serialized(*fields: str) -> str:
    """``format=serialized`` of ``message U { int64 id = 1; string note = 2; ... }``."""
    proto = descriptor_pb2.FileDescriptorProto(name="u.proto", package="t.v1", syntax="proto3")
    message = proto.message_type.add(name="U")
    kinds = {"id": descriptor_pb2.FieldDescriptorProto.TYPE_INT64}
    for number, name in enumerate(fields, 1):
        message.field.add(
            name=name,
            number=number,
            type=kinds.get(name, descriptor_pb2.FieldDescriptorProto.TYPE_STRING),
            label=descriptor_pb2.FieldDescriptorProto.LABEL_OPTIONAL,
        )
    return base64.b64encode(proto.SerializeToString()).decode("ascii")


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        byte, n = n & 0x7F, n >> 7
        out.append(byte | (0x80 if n else 0))
        if not n:
            return bytes(out)


def _confluent(schema_id: int, i: int, note: str | None = None) -> bytes:
    """Magic byte, schema id, message index [0], then ``U{id: i, note: note}``."""
    body = b"\x08" + _varint(i)
    if note is not None:
        body += b"\x12" + _varint(len(note)) + note.encode()
    return b"\x00" + schema_id.to_bytes(4, "big") + b"\x00" + body


def _written_keys(path: Path) -> list[bytes]:
    """The keys (``k<id>``) of the rows the file sink holds; a torn last line is skipped."""
    if not path.exists():
        return []
    lines = path.read_bytes().split(b"\n")[:-1]
    return [b"k%d" % json.loads(line)["id"] for line in lines if line]


def _protobuf(registry: str, **extra: Any) -> dict[str, Any]:
    """The pipeline's ``deserializer:`` section: Confluent Protobuf with fast retries."""
    return {
        "protobuf": {
            "registry": {"url": registry, "retry_backoff": "100ms", "retry_backoff_max": "500ms"},
            "fetch_wait": "50ms",
            **extra,
        }
    }


@pytest.mark.timeout(600)
def test_protobuf_schema_id_missing_from_a_lagging_registry_is_waited_for_b30(
    kafka_bootstrap: str, tmp_path: Path, registry: SchemaRegistryServer
) -> None:
    topic, group = unique_name("proto-lag"), unique_name("g")
    old_id = registry.register("users-value", _serialized("id"), "PROTOBUF")
    new_id = registry.register("users-value", _serialized("id", "note"), "PROTOBUF")
    registry.hide(new_id)  # until the pipeline has asked for it a few times
    count = scaled(20_000, minimum=900)
    half = count // 2

    def value(i: int) -> bytes:
        return _confluent(old_id, i) if i < half else _confluent(new_id, i, "n")

    create_topic(kafka_bootstrap, topic, PARTITIONS)
    positions = produce_keyed(kafka_bootstrap, topic, count, value=value)
    first_new: dict[int, int] = {}
    for key, (partition, offset) in positions.items():
        if int(key[1:]) >= half:
            first_new[partition] = min(offset, first_new.get(partition, offset))
    assert len(first_new) == PARTITIONS

    out = tmp_path / "out.jsonl"
    config = write_config(
        tmp_path / "c.json",
        bootstrap=kafka_bootstrap,
        topic=topic,
        group=group,
        out=out,
        bounded=True,
        deserializer=_protobuf(registry.url),
    )
    log = tmp_path / "run.log"
    proc = start_pipeline(config, log)
    path = f"GET /schemas/ids/{new_id}"
    while_missing: list[dict[int, int]] = []
    try:
        deadline = time.monotonic() + 240
        while registry.requests[path] < 4:
            if proc.poll() is not None:
                raise AssertionError(
                    f"the run ended (exit {proc.returncode}) while schema id {new_id} was "
                    f"missing:\n{log.read_text()[-3000:]}"
                )
            assert time.monotonic() < deadline, "the pipeline never asked for the schema"
            while_missing.append(committed_offsets(kafka_bootstrap, group, topic, timeout=10))
            time.sleep(0.2)
        while_missing.append(committed_offsets(kafka_bootstrap, group, topic, timeout=10))
        registry.reveal(new_id)
        assert proc.wait(300) == 0, log.read_text()[-3000:]
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(30)
    assert set(_written_keys(out)) == set(positions)
    assert committed_offsets(kafka_bootstrap, group, topic) == end_offsets(kafka_bootstrap, topic)
    for committed in while_missing:
        for partition, offset in committed.items():
            assert offset <= first_new[partition], (partition, committed, first_new)


@pytest.mark.timeout(600)
def test_protobuf_schema_id_never_served_fails_the_run_in_one_line_b30(
    kafka_bootstrap: str, tmp_path: Path, registry: SchemaRegistryServer
) -> None:
    topic, group = unique_name("proto-unknown"), unique_name("g")
    known_id = registry.register("users-value", _serialized("id"), "PROTOBUF")
    missing_id = 4242
    count = 200

    def value(i: int) -> bytes:
        return _confluent(missing_id if i == count // 2 else known_id, i)

    create_topic(kafka_bootstrap, topic, 1)
    positions = produce_keyed(kafka_bootstrap, topic, count, value=value, partition=0)
    _, missing_offset = positions[b"k%d" % (count // 2)]
    out = tmp_path / "out.jsonl"
    config = write_config(
        tmp_path / "c.json",
        bootstrap=kafka_bootstrap,
        topic=topic,
        group=group,
        out=out,
        bounded=True,
        deserializer=_protobuf(registry.url, unknown_schema_timeout="2s"),
    )
    log = tmp_path / "run.log"
    proc = start_pipeline(config, log)
    try:
        assert proc.wait(300) == 1, log.read_text()[-3000:]
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(30)
    text = log.read_text()
    assert "Traceback" not in text, text[-3000:]
    (failing,) = [line for line in text.splitlines() if "failing:" in line]
    for part in (f"schema id {missing_id}", f"{topic}[0] offset {missing_offset}"):
        assert part in failing, failing
    committed = committed_offsets(kafka_bootstrap, group, topic).get(0, 0)
    assert committed <= missing_offset
    assert set(_written_keys(out)) >= {b"k%d" % i for i in range(committed)}
    assert registry.requests[f"GET /schemas/ids/{missing_id}"] >= 2
