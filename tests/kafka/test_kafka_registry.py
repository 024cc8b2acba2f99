"""Avro and Protobuf records on the real broker whose schema id the registry does not
know yet (B30), one scenario for both formats.

A registry follower that has not caught up with its leader answers 404 for an id
registered a moment ago. Here the registry test server hides the id of the second half
of the topic until the pipeline (a ``spate run`` process: Kafka source → Confluent Avro
or Protobuf deserializer → fsynced file sink) has asked for it several times, then
serves it. Every record must arrive, the run must exit 0, and no committed offset may
pass a record that was not written — in particular, none while the id was missing. An id
that never appears fails the run after ``unknown_schema_timeout`` with one line naming
it and the record's position, and nothing is committed past that record (B1, B21).
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from tests.kafka._pipeline import start_pipeline, write_config
from tests.kafka._registry import FORMATS, Fields, Format, written_keys
from tests.support.delivery import DeliverySampler
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
OLD: Fields = (("id", "long"),)
NEW: Fields = (*OLD, ("note", "string="))
formats = pytest.mark.parametrize("fmt", FORMATS, ids=lambda f: f.name)


@formats
@pytest.mark.timeout(600)
def test_schema_id_missing_from_a_lagging_registry_is_waited_for_on_the_real_broker_b30(
    kafka_bootstrap: str, tmp_path: Path, schema_registry: SchemaRegistryServer, fmt: Format
) -> None:
    topic, group = unique_name(f"{fmt.name}-lag"), unique_name("g")
    old_id = fmt.register(schema_registry, "users-value", OLD)
    new_id = fmt.register(schema_registry, "users-value", NEW)
    schema_registry.hide(new_id)  # until the pipeline has asked for it a few times
    count = scaled(20_000, minimum=900)
    half = count // 2

    def value(i: int) -> bytes:
        if i < half:
            return fmt.encode(old_id, OLD, {"id": i})
        return fmt.encode(new_id, NEW, {"id": i, "note": "n"})

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
        deserializer=fmt.section(schema_registry.url),
    )
    sampler = DeliverySampler(kafka_bootstrap, group, topic, positions, lambda: written_keys(out))
    sampler.start(every=0.3)
    log = tmp_path / "run.log"
    proc = start_pipeline(config, log)
    path = f"GET /schemas/ids/{new_id}"
    while_missing: list[dict[int, int]] = []
    try:
        deadline = time.monotonic() + 240
        while schema_registry.requests[path] < 4:
            if proc.poll() is not None:
                raise AssertionError(
                    f"the run ended (exit {proc.returncode}) while schema id {new_id} was "
                    f"missing:\n{log.read_text()[-3000:]}"
                )
            assert time.monotonic() < deadline, "the pipeline never asked for the schema"
            while_missing.append(committed_offsets(kafka_bootstrap, group, topic, timeout=10))
            time.sleep(0.2)
        while_missing.append(committed_offsets(kafka_bootstrap, group, topic, timeout=10))
        schema_registry.reveal(new_id)
        assert proc.wait(300) == 0, log.read_text()[-3000:]
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(30)
        sampler.stop()
    assert set(written_keys(out)) == set(positions)
    assert committed_offsets(kafka_bootstrap, group, topic) == end_offsets(kafka_bootstrap, topic)
    for committed in while_missing:
        for partition, offset in committed.items():
            assert offset <= first_new[partition], (partition, committed, first_new)
    sampler.sample()
    assert not sampler.violations(), sampler.violations()[:3]


@formats
@pytest.mark.timeout(600)
def test_schema_id_never_served_fails_the_run_in_one_line_on_the_real_broker_b30(
    kafka_bootstrap: str, tmp_path: Path, schema_registry: SchemaRegistryServer, fmt: Format
) -> None:
    topic, group = unique_name(f"{fmt.name}-unknown"), unique_name("g")
    known_id = fmt.register(schema_registry, "users-value", OLD)
    missing_id = 4242
    count = 200

    def value(i: int) -> bytes:
        return fmt.encode(missing_id if i == count // 2 else known_id, OLD, {"id": i})

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
        deserializer=fmt.section(schema_registry.url, unknown_schema_timeout="2s"),
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
    assert set(written_keys(out)) >= {b"k%d" % i for i in range(committed)}
    assert schema_registry.requests[f"GET /schemas/ids/{missing_id}"] >= 2
