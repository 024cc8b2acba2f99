"""The real change-data-capture chain the CDC tests are proven with (B360-B362, B364, B367).

PostgreSQL (``scripts/services.sh up postgres``) -> Debezium's PostgreSQL connector in one
standalone Kafka Connect worker (``up connect``) -> the real broker. PostgreSQL and Connect
start once for this module, only when one of these tests runs. Volumes follow
``SPATE_TEST_SCALE``.
"""

from __future__ import annotations

import json
import urllib.request
from typing import Any

import pytest

from tests.support.cdc import (
    UNAVAILABLE,
    CdcServices,
    Record,
    Workload,
    apply_events,
    as_json,
    create_table,
    envelope,
    event_ops,
    prefilled,
    read_topic,
    register,
    registry_schema,
    wait_until,
)
from tests.support.scale import scaled
from tests.support.schema_registry import SchemaRegistryServer

pytestmark = pytest.mark.integration

TABLE = "public.items"


def _events(records: list[Record]) -> list[dict[str, object]]:
    events = []
    for record in records:
        value = record.value_json()
        if value is not None:
            events.append(dict(envelope(value)))
    return events


def _until_sentinel(records: list[Record]) -> bool:
    """The workload's last transaction inserts id 0, the topic's last event: it arrived."""
    if not records:
        return False
    value = records[-1].value_json()
    if value is None:
        return False
    event = envelope(value)
    after = event.get("after")
    return bool(event["op"] == "c" and after is not None and after["id"] == 0)


def _assert_same_rows(table: dict[Any, dict[str, Any]], rows: list[dict[str, Any]]) -> None:
    """The applied events equal the source rows; a column added after a row's last event
    is absent from its image and null in PostgreSQL, as a sink would store it."""
    assert len(table) == len(rows)
    assert [dict.fromkeys(row) | table[row["id"]] for row in rows] == rows


def test_b360_snapshot_then_streaming_match_the_workload(
    cdc_services: CdcServices, cdc_database: str
) -> None:
    """B360: a pre-filled table is snapshotted (one ``r`` per row, then the streamed changes
    of a seeded random workload arrive in commit order with exactly the ops each statement
    makes, LSNs never decreasing and one transaction id per multi-statement transaction);
    applying the events reproduces the PostgreSQL table row for row."""
    postgres = cdc_services.postgres
    prefill = scaled(200, minimum=20)
    create_table(postgres, cdc_database, TABLE)
    postgres.sql(
        f"INSERT INTO {TABLE} SELECT i, 'name ' || i, i * 10, i % 2 = 0 "
        f"FROM generate_series(1, {prefill}) AS i",
        cdc_database,
    )
    capture = register(cdc_services, cdc_database, [TABLE], snapshot_mode="initial")
    try:
        workload = Workload.generate(
            TABLE, seed=360, operations=scaled(400, minimum=40), existing=range(1, prefill + 1)
        )
        workload.run(postgres, cdc_database)
        postgres.sql(f"INSERT INTO {TABLE} (id, name) VALUES (0, 'sentinel')", cdc_database)
        records = read_topic(cdc_services.bootstrap, capture.topic(TABLE), _until_sentinel)
    finally:
        capture.close()

    ops = event_ops(records)
    assert ops[:prefill] == ["r"] * prefill
    assert ops[prefill:] == [*workload.expected_ops, "c"]

    events = _events(records)
    snapshot = [event for event in events if event["op"] == "r"]
    assert {event["after"]["id"] for event in snapshot} == set(range(1, prefill + 1))  # type: ignore[index]
    assert snapshot[-1]["source"]["snapshot"] == "last"  # type: ignore[index]

    streamed = [event for event in events if event["op"] != "r"]
    lsns = [event["source"]["lsn"] for event in streamed]  # type: ignore[index]
    assert lsns == sorted(lsns)
    # One transaction id per transaction that changed rows (DDL makes no event), the
    # events of each together: the ids in topic order form runs, none seen twice.
    tx_ids = [event["source"]["txId"] for event in streamed]  # type: ignore[index]
    runs = [tx for i, tx in enumerate(tx_ids) if i == 0 or tx != tx_ids[i - 1]]
    assert len(runs) == len(set(runs)) == workload.changing_transactions + 1  # + the sentinel

    _assert_same_rows(apply_events(records), postgres.rows(cdc_database, TABLE))


def test_b361_column_added_mid_stream_reaches_the_events(
    cdc_services: CdcServices, cdc_database: str
) -> None:
    """B361: a column added with ``ALTER TABLE ADD COLUMN`` while the connector streams is in
    the schema and the after image of the next change, with the value written; rows
    before it have no such field."""
    postgres = cdc_services.postgres
    create_table(postgres, cdc_database, TABLE)
    capture = register(cdc_services, cdc_database, [TABLE], snapshot_mode="no_data")
    try:
        postgres.sql(f"INSERT INTO {TABLE} (id, name) VALUES (1, 'before')", cdc_database)
        postgres.sql(f"ALTER TABLE {TABLE} ADD COLUMN note text", cdc_database)
        postgres.sql(
            f"INSERT INTO {TABLE} (id, name, note) VALUES (2, 'after', 'added')", cdc_database
        )
        records = read_topic(
            cdc_services.bootstrap, capture.topic(TABLE), lambda got: len(got) >= 2
        )
    finally:
        capture.close()
    first, second = (record.value_json() for record in records)
    assert first is not None and second is not None
    assert "note" not in first["payload"]["after"]
    assert second["payload"]["after"]["note"] == "added"
    after_schema = next(f for f in second["schema"]["fields"] if f["field"] == "after")
    assert "note" in {f["field"] for f in after_schema["fields"]}


def test_b362_toast_placeholder_and_truncate(cdc_services: CdcServices, cdc_database: str) -> None:
    """B362: with ``REPLICA IDENTITY DEFAULT`` an UPDATE that leaves a TOASTed TEXT column
    alone carries ``__debezium_unavailable_value`` for it; with ``REPLICA IDENTITY FULL`` the
    same update carries the value and a full before image; a TRUNCATE is an ``op: t``
    event (``skipped.operations=none``)."""
    postgres = cdc_services.postgres
    tables = ("public.plain", "public.full_identity")
    for table in tables:
        postgres.sql(f"CREATE TABLE {table} (id int PRIMARY KEY, n int, big text)", cdc_database)
    postgres.sql("ALTER TABLE public.full_identity REPLICA IDENTITY FULL", cdc_database)
    capture = register(cdc_services, cdc_database, tables, snapshot_mode="no_data")
    big = "(SELECT string_agg(md5(i::text), '') FROM generate_series(1, 400) AS i)"
    try:
        for table in tables:
            postgres.sql(
                f"INSERT INTO {table} VALUES (1, 0, {big});\n"
                f"UPDATE {table} SET n = 1 WHERE id = 1;\n"
                f"TRUNCATE {table}",
                cdc_database,
            )
        got = {
            table: read_topic(
                cdc_services.bootstrap, capture.topic(table), lambda records: len(records) >= 3
            )
            for table in tables
        }
    finally:
        capture.close()
    for table in tables:
        assert event_ops(got[table]) == ["c", "u", "t"]
    plain = _events(got["public.plain"])[1]
    assert plain["after"]["big"] == UNAVAILABLE  # type: ignore[index]
    assert plain["before"] is None
    full = _events(got["public.full_identity"])[1]
    assert full["after"]["big"] == full["before"]["big"] != UNAVAILABLE  # type: ignore[index]
    assert len(full["after"]["big"]) == 400 * 32  # type: ignore[index]


def test_b364_avro_in_the_confluent_frame_through_the_registry(
    cdc_services: CdcServices, cdc_database: str, schema_registry: SchemaRegistryServer
) -> None:
    """B364: Debezium with Apicurio's Avro converter (``as-confluent``) writes keys and values
    in the Confluent frame whose ids the registry's Confluent API resolves; decoded, they
    are the ops and rows of the workload, and a column added registers a new version."""
    postgres = cdc_services.postgres
    create_table(postgres, cdc_database, TABLE)
    capture = register(
        cdc_services,
        cdc_database,
        [TABLE],
        snapshot_mode="no_data",
        converter="avro",
        registry_url=schema_registry.url,
    )
    try:
        workload = Workload.generate(TABLE, seed=364, operations=scaled(100, minimum=30))
        workload.run(postgres, cdc_database)
        count = len(workload.expected_ops)
        raw = read_topic(
            cdc_services.bootstrap, capture.topic(TABLE), lambda got: len(got) >= count
        )
    finally:
        capture.close()
    assert all(r.value is None or r.value[:1] == b"\0" for r in raw)
    records = as_json(raw, registry_schema(schema_registry.url))
    assert event_ops(records) == workload.expected_ops
    _assert_same_rows(apply_events(records), postgres.rows(cdc_database, TABLE))
    value_subject = f"{capture.topic(TABLE)}-value"
    assert schema_registry.requests["GET /subjects"] == 0
    versions = _registry_get(schema_registry, f"/subjects/{value_subject}/versions/latest")
    assert versions["version"] == 2  # the column added


def _registry_get(registry: SchemaRegistryServer, path: str) -> dict[str, Any]:
    with urllib.request.urlopen(registry.url + path, timeout=10) as response:
        answer: dict[str, Any] = json.load(response)
    return answer


def test_b367_changes_during_the_snapshot_are_neither_lost_nor_doubled(
    cdc_services: CdcServices, cdc_database: str
) -> None:
    """B367: the snapshot and the stream meet without loss or duplication. A workload starts
    with the connector: what it commits before the slot is consistent is in the snapshot,
    all it commits afterwards (while the pre-filled table is read) is streamed, event for
    event; each row is read (``r``) at most once and applying the events reproduces the
    PostgreSQL table row for row."""
    postgres = cdc_services.postgres
    workload = prefilled(
        postgres,
        cdc_database,
        TABLE,
        scaled(20000, minimum=2000),
        seed=367,
        operations=scaled(400, minimum=100),
    )
    half = len(workload.transactions) // 2
    capture = register(cdc_services, cdc_database, [TABLE], snapshot_mode="initial", wait=False)
    try:
        workload.run(postgres, cdc_database, 0, half)
        wait_until(lambda: postgres.slot_consistent(capture.slot), "slot consistent")
        workload.run(postgres, cdc_database, half)
        capture.wait_streaming()
        postgres.sql(f"INSERT INTO {TABLE} (id, name) VALUES (0, 'sentinel')", cdc_database)
        records = read_topic(cdc_services.bootstrap, capture.topic(TABLE), _until_sentinel)
    finally:
        capture.close()
    events = _events(records)
    read_keys = [event["after"]["id"] for event in events if event["op"] == "r"]  # type: ignore[index]
    assert len(read_keys) == len(set(read_keys))
    # Everything after the slot's creation is streamed (some of the first half may be too).
    streamed = [op for op in event_ops(records) if op != "r"]
    after_slot = [op for ops in workload.ops[half:] for op in ops] + ["c"]
    assert streamed[len(streamed) - len(after_slot) :] == after_slot
    _assert_same_rows(apply_events(records), postgres.rows(cdc_database, TABLE))
