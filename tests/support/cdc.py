"""Change-data-capture test harness: PostgreSQL -> Debezium (Kafka Connect) -> the real broker.

Owns:
- starting ``postgres`` and ``connect`` (``scripts/services.sh up kafka postgres connect``)
  only for the tests that ask for them, once per module (the ``cdc_services`` fixture);
- SQL on the local PostgreSQL through ``psql`` (no Python driver needed): databases, source
  tables (``REPLICA IDENTITY`` chosen per table), multi-statement transactions, reading a
  table back ordered by its key for comparison;
- Debezium's PostgreSQL connector over Connect's REST API: one connector per test, one topic
  per table (``<topic.prefix>.<schema>.<table>``), ``plugin.name=pgoutput``, its own slot
  and publication, the snapshot mode and converter the test names; waiting until the
  snapshot is done and streaming has begun (the slot is held by a walsender), and removing
  the connector with its slot;
- a seeded random workload (inserts, updates, primary-key changes, deletes, a truncate, a
  column added mid-stream, transactions of several statements) whose statements and the
  change events they must produce are known in advance;
- reading a topic's records and applying Debezium change events to a dict keyed by primary
  key (the reference any sink's result is compared with).

Invariants: every name a test creates (database, slot, publication, connector, topic prefix)
carries a fresh suffix, so tests never see each other's events; a connector is always
deleted and its slot dropped when its test ends, or PostgreSQL would keep WAL for it.

Does not own: the ``debezium`` envelope in spate (that is the deserializer's), or the
services' processes (``scripts/services.sh``).
"""

from __future__ import annotations

import base64
import json
import logging
import random
import subprocess
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import pytest

from tests.support.services import (
    KAFKA,
    Service,
    ServiceUnavailableError,
    service_address,
    start_services,
)

logger = logging.getLogger(__name__)

POSTGRES = Service("postgres", "SPATE_POSTGRES_DSN")
CONNECT = Service("connect", "SPATE_CONNECT_URL")

POSTGRES_CONNECTOR = "io.debezium.connector.postgresql.PostgresConnector"
JSON_CONVERTER = "org.apache.kafka.connect.json.JsonConverter"
UNAVAILABLE = "__debezium_unavailable_value"
"""Debezium's placeholder for a TOASTed column an UPDATE did not touch (REPLICA IDENTITY
DEFAULT: PostgreSQL does not log the old value, so the new image lacks it)."""

APICURIO_AVRO_CONVERTER = "io.apicurio.registry.utils.converter.AvroConverter"
Converter = Literal["json", "json-plain", "avro"]
"""``json``: JsonConverter with schemas; ``json-plain``: without; ``avro``: Apicurio's Avro
converter in the Confluent wire format (magic byte, 4-byte schema id) through a registry
(the registry test server will do: ``registry_url``)."""
SnapshotMode = Literal["initial", "no_data", "always", "initial_only"]

_HTTP_TIMEOUT = 10.0
# No psqlrc, quiet, unaligned tuples only, stop at the first error.
_PSQL_FLAGS = ("-X", "-q", "-A", "-t", "-v", "ON_ERROR_STOP=1")


def _psql_binary() -> str:
    versions = sorted(
        Path("/usr/lib/postgresql").glob("*/bin/psql"),
        key=lambda path: int(path.parent.parent.name) if path.parent.parent.name.isdigit() else 0,
    )
    return str(versions[-1]) if versions else "psql"


# ---------------------------------------------------------------- PostgreSQL


@dataclass(frozen=True, slots=True)
class Postgres:
    """The local PostgreSQL server: ``dsn`` names its ``postgres`` database."""

    dsn: str

    @property
    def host(self) -> str:
        return self.dsn.split("@", 1)[1].split(":", 1)[0]

    @property
    def port(self) -> int:
        return int(self.dsn.rsplit(":", 1)[1].split("/", 1)[0])

    @property
    def user(self) -> str:
        return self.dsn.split("://", 1)[1].split("@", 1)[0]

    def url(self, database: str) -> str:
        return f"postgresql://{self.user}@{self.host}:{self.port}/{database}"

    def sql(self, script: str, database: str = "postgres") -> str:
        """Run ``script`` (statements separated by ``;``; ``BEGIN``/``COMMIT`` make one
        transaction of several) and return what it printed, unaligned, tuples only."""
        proc = subprocess.run(
            [_psql_binary(), *_PSQL_FLAGS, "-d", self.url(database), "-f", "-"],
            input=script,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        if proc.returncode != 0:
            raise RuntimeError(f"psql exited {proc.returncode}: {proc.stderr.strip()}\n{script}")
        return proc.stdout

    def create_database(self, name: str) -> None:
        self.sql(f'CREATE DATABASE "{name}"')

    def drop_database(self, name: str) -> None:
        self.sql(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')

    def rows(self, database: str, table: str, key: str = "id") -> list[dict[str, Any]]:
        """Every row of ``table`` as a dict, ordered by ``key``."""
        out = self.sql(
            f"SELECT coalesce(json_agg(t ORDER BY t.{key}), '[]') FROM {table} t", database
        )
        rows: list[dict[str, Any]] = json.loads(out)
        return rows

    def current_lsn(self, database: str = "postgres") -> int:
        return lsn_to_int(self.sql("SELECT pg_current_wal_lsn()", database).strip())

    def slot_active(self, slot: str) -> bool:
        out = self.sql(f"SELECT active FROM pg_replication_slots WHERE slot_name = '{slot}'")
        return out.strip() == "t"

    def slot_consistent(self, slot: str) -> bool:
        """The slot exists and reached its consistent point (``confirmed_flush_lsn`` is set
        only then): every transaction committed from now on is decoded, not snapshotted."""
        out = self.sql(
            "SELECT count(*) FROM pg_replication_slots "
            f"WHERE slot_name = '{slot}' AND confirmed_flush_lsn IS NOT NULL"
        )
        return out.strip() == "1"

    def drop_slot(self, slot: str) -> None:
        self.sql(
            "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots "
            f"WHERE slot_name = '{slot}' AND NOT active"
        )


def lsn_to_int(text: str) -> int:
    """``'0/16B3748'`` (PostgreSQL's notation) as the 64-bit number Debezium reports."""
    high, _, low = text.partition("/")
    return (int(high, 16) << 32) | int(low, 16)


# ---------------------------------------------------------------- Kafka Connect


@dataclass(frozen=True, slots=True)
class Connect:
    """Kafka Connect's REST API at ``url``."""

    url: str

    def _request(self, method: str, path: str, body: object | None = None) -> Any:
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(
            self.url + path,
            data=data,
            method=method,
            headers={"Content-Type": "application/json", "Accept": "application/json"},
        )
        try:
            with urllib.request.urlopen(request, timeout=_HTTP_TIMEOUT) as response:
                payload = response.read()
        except urllib.error.HTTPError as exc:
            detail = exc.read().decode(errors="replace")
            raise RuntimeError(f"Connect {method} {path}: {exc.code} {detail}") from exc
        return json.loads(payload) if payload else None

    def put_connector(self, name: str, config: Mapping[str, str]) -> None:
        self._request("PUT", f"/connectors/{name}/config", dict(config))

    def delete_connector(self, name: str) -> None:
        try:
            self._request("DELETE", f"/connectors/{name}")
        except RuntimeError as exc:
            if " 404 " not in str(exc):
                raise

    def status(self, name: str) -> dict[str, Any]:
        status: dict[str, Any] = self._request("GET", f"/connectors/{name}/status")
        return status


def wait_until(
    condition: Callable[[], bool], what: str, timeout: float = 120.0, interval: float = 0.2
) -> None:
    """Poll ``condition`` until it holds; TimeoutError naming ``what`` otherwise."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what}: not reached within {timeout:.0f}s")
        time.sleep(interval)


# ---------------------------------------------------------------- connectors


@dataclass(frozen=True, slots=True)
class CdcServices:
    """The endpoints of one CDC chain: PostgreSQL, Connect and the broker it writes to."""

    postgres: Postgres
    connect: Connect
    bootstrap: str


@dataclass(slots=True)
class Capture:
    """One registered Debezium connector on one database; ``topic(table)`` names its topics."""

    services: CdcServices
    name: str
    database: str
    topic_prefix: str
    slot: str
    tables: tuple[str, ...]

    def topic(self, table: str) -> str:
        schema, _, name = table.rpartition(".")
        return f"{self.topic_prefix}.{schema or 'public'}.{name}"

    def wait_streaming(self, timeout: float = 120.0) -> None:
        """Until the task runs and its slot is held: the snapshot is done, streaming began."""

        def ready() -> bool:
            status = self.services.connect.status(self.name)
            tasks = status.get("tasks", [])
            for task in tasks:
                if task.get("state") == "FAILED":
                    raise RuntimeError(f"connector {self.name} failed: {task.get('trace', '')}")
            running = bool(tasks) and all(task.get("state") == "RUNNING" for task in tasks)
            return running and self.services.postgres.slot_active(self.slot)

        wait_until(ready, f"connector {self.name} streaming", timeout)

    def close(self) -> None:
        """Delete the connector, then drop its slot once the walsender let go of it."""
        self.services.connect.delete_connector(self.name)
        postgres = self.services.postgres
        wait_until(lambda: not postgres.slot_active(self.slot), f"slot {self.slot} released", 60)
        postgres.drop_slot(self.slot)


def connector_config(
    services: CdcServices,
    *,
    database: str,
    tables: Sequence[str],
    topic_prefix: str,
    slot: str,
    snapshot_mode: SnapshotMode = "initial",
    converter: Converter = "json",
    registry_url: str | None = None,
    extra: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """Debezium's PostgreSQL connector: pgoutput, one topic per table, truncates kept."""
    postgres = services.postgres
    config = {
        "connector.class": POSTGRES_CONNECTOR,
        "tasks.max": "1",
        "database.hostname": postgres.host,
        "database.port": str(postgres.port),
        "database.user": postgres.user,
        "database.password": "",
        "database.dbname": database,
        "topic.prefix": topic_prefix,
        "plugin.name": "pgoutput",
        "slot.name": slot,
        "publication.name": f"{slot}_pub",
        "publication.autocreate.mode": "filtered",
        "table.include.list": ",".join(tables),
        "snapshot.mode": snapshot_mode,
        # Debezium skips truncates unless told otherwise.
        "skipped.operations": "none",
        "tombstones.on.delete": "true",
    }
    for side in ("key", "value"):
        config.update(_converter_config(f"{side}.converter", converter, registry_url))
    config.update(extra or {})
    return config


def _converter_config(
    prefix: str, converter: Converter, registry_url: str | None
) -> dict[str, str]:
    if converter != "avro":
        return {
            prefix: JSON_CONVERTER,
            f"{prefix}.schemas.enable": str(converter == "json").lower(),
        }
    if registry_url is None:
        raise ValueError("the avro converter needs a registry_url")
    return {
        prefix: APICURIO_AVRO_CONVERTER,
        # Apicurio's client speaks its own v2 API: the test server answers the one call.
        f"{prefix}.apicurio.registry.url": f"{registry_url}/apis/registry/v2",
        f"{prefix}.apicurio.registry.auto-register": "true",
        f"{prefix}.apicurio.registry.find-latest": "true",
        # The Confluent frame (magic byte 0, 4-byte id), ids as the Confluent API knows them.
        f"{prefix}.apicurio.registry.as-confluent": "true",
        f"{prefix}.apicurio.registry.use-id": "contentId",
        f"{prefix}.apicurio.registry.headers.enabled": "false",
    }


def register(
    services: CdcServices,
    database: str,
    tables: Sequence[str],
    *,
    snapshot_mode: SnapshotMode = "initial",
    converter: Converter = "json",
    registry_url: str | None = None,
    extra: Mapping[str, str] | None = None,
    wait: bool = True,
    prefix: str | None = None,
) -> Capture:
    """Register a Debezium connector for ``tables`` of ``database`` (fresh names, or
    ``prefix`` for the topic prefix and slot); by default returns once its snapshot is done
    and it streams. The connector's name is always fresh: Connect keeps a connector's
    source offsets under its name, and a new capture must not resume an old one."""
    suffix = uuid.uuid4().hex[:10]
    base = prefix or f"cdc_{suffix}"
    capture = Capture(
        services=services,
        name=f"{base}-{suffix}",
        database=database,
        topic_prefix=base,
        slot=base,
        tables=tuple(tables),
    )
    config = connector_config(
        services,
        database=database,
        tables=tables,
        topic_prefix=capture.topic_prefix,
        slot=capture.slot,
        snapshot_mode=snapshot_mode,
        converter=converter,
        registry_url=registry_url,
        extra=extra,
    )
    services.connect.put_connector(capture.name, config)
    if wait:
        capture.wait_streaming()
    return capture


# ---------------------------------------------------------------- topics


def delete_topics(bootstrap: str, topics: Sequence[str], timeout: float = 30.0) -> None:
    """Delete ``topics`` where they exist, and wait until the broker no longer lists them."""
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 0})
    existing = set(admin.list_topics(timeout=timeout).topics)
    doomed = [topic for topic in topics if topic in existing]
    if not doomed:
        return
    for future in admin.delete_topics(doomed, operation_timeout=timeout).values():
        future.result()
    wait_until(
        lambda: not set(doomed) & set(admin.list_topics(timeout=timeout).topics),
        f"topics {doomed} deleted",
        timeout,
    )


@dataclass(frozen=True, slots=True)
class Record:
    """One record of a Debezium topic, bytes as the broker holds them."""

    offset: int
    key: bytes | None
    value: bytes | None

    def value_json(self) -> dict[str, Any] | None:
        """The value parsed (``None`` for a tombstone); the envelope when schemas are on."""
        if self.value is None:
            return None
        parsed: dict[str, Any] = json.loads(self.value)
        return parsed


def read_topic(
    bootstrap: str,
    topic: str,
    until: Callable[[list[Record]], bool],
    timeout: float = 120.0,
) -> list[Record]:
    """The records of ``topic`` (one partition) from its start until ``until`` holds."""
    from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, TopicPartition

    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"cdc-reader-{uuid.uuid4().hex[:8]}",
            "enable.auto.commit": False,
            "log_level": 0,
        }
    )
    records: list[Record] = []
    try:
        consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
        deadline = time.monotonic() + timeout
        while not until(records):
            if time.monotonic() > deadline:
                raise TimeoutError(
                    f"{topic}: condition not met within {timeout:.0f}s ({len(records)} records)"
                )
            message = consumer.poll(0.5)
            if message is None:
                continue
            error = message.error()
            if error is not None:
                if error.code() in (KafkaError._PARTITION_EOF, KafkaError.UNKNOWN_TOPIC_OR_PART):
                    continue
                raise RuntimeError(f"{topic}: {error}")
            offset = message.offset()
            records.append(Record(offset or 0, message.key(), message.value()))
    finally:
        consumer.close()
    return records


def decode_confluent_avro(data: bytes, schema_text: Callable[[int], str]) -> Any:
    """An Avro record in the Confluent frame (``0``, 4-byte big-endian id, body), its
    writer schema found by id through ``schema_text`` (a registry's ``/schemas/ids/{id}``)."""
    import io

    import fastavro

    if len(data) < 5 or data[0] != 0:
        raise ValueError(f"not a Confluent-framed record: {data[:5]!r}")
    schema = fastavro.parse_schema(json.loads(schema_text(int.from_bytes(data[1:5], "big"))))
    return fastavro.schemaless_reader(io.BytesIO(data[5:]), schema, None)


def registry_schema(registry_url: str) -> Callable[[int], str]:
    """The schema text of an id, from the registry's Confluent API at ``registry_url``."""

    def fetch(schema_id: int) -> str:
        with urllib.request.urlopen(
            f"{registry_url}/schemas/ids/{schema_id}", timeout=_HTTP_TIMEOUT
        ) as response:
            return str(json.load(response)["schema"])

    return fetch


def as_json(records: Sequence[Record], schema_text: Callable[[int], str]) -> list[Record]:
    """Confluent-framed Avro records decoded and re-encoded as JSON, so
    :func:`event_ops` and :func:`apply_events` read them like the JSON converter's."""

    def convert(data: bytes | None) -> bytes | None:
        if data is None:
            return None
        decoded = decode_confluent_avro(data, schema_text)
        return json.dumps(decoded, default=_json_default).encode()

    return [Record(r.offset, convert(r.key), convert(r.value)) for r in records]


def _json_default(value: object) -> str:
    """Avro's bytes as base64, its decimals as text (JSON has neither)."""
    if isinstance(value, bytes):
        return base64.b64encode(value).decode()
    return str(value)


def envelope(value: Mapping[str, Any]) -> Mapping[str, Any]:
    """The change event itself: the ``payload`` of a JSON-with-schema value, else the value."""
    if "schema" in value and "payload" in value:
        payload: Mapping[str, Any] = value["payload"]
        return payload
    return value


def apply_events(records: Sequence[Record], key: str = "id") -> dict[Any, dict[str, Any]]:
    """The table the change events describe, keyed by ``key``: snapshot reads and creates
    put the after image, updates replace it, deletes and truncates remove rows, tombstones
    change nothing. A TOAST placeholder keeps the value the row had."""
    table: dict[Any, dict[str, Any]] = {}
    for record in records:
        value = record.value_json()
        if value is None:
            continue
        event = envelope(value)
        op = event["op"]
        if op == "t":
            table.clear()
        elif op == "d":
            table.pop(event["before"][key], None)
        elif op in ("c", "r", "u"):
            after = dict(event["after"])
            previous = table.get(after[key], {})
            for column, cell in after.items():
                if cell == UNAVAILABLE:
                    after[column] = previous.get(column)
            table[after[key]] = after
        else:
            raise ValueError(f"unknown Debezium op {op!r}")
    return table


# ---------------------------------------------------------------- workload


@dataclass(slots=True)
class Workload:
    """A seeded random workload on one table ``(id int primary key, name text, qty bigint,
    flag boolean)``: the SQL of each transaction and the ops each must produce, in order.

    One column (``note text``) is added once, mid-stream, and written from then on. Primary
    keys are tracked, so every update and delete names a row that exists.
    """

    table: str
    seed: int
    transactions: list[str] = field(default_factory=list)
    ops: list[list[str]] = field(default_factory=list)
    """Per transaction, the events it makes in topic order: ``c``/``u``/``d``/``t`` and
    ``tombstone`` (none for the DDL)."""

    @property
    def expected_ops(self) -> list[str]:
        """Per event of the whole workload, in topic order."""
        return [op for ops in self.ops for op in ops]

    @classmethod
    def generate(
        cls,
        table: str,
        seed: int,
        operations: int,
        existing: Sequence[int] = (),
        *,
        truncate: bool = True,
    ) -> Workload:
        rng = random.Random(seed)
        workload = cls(table=table, seed=seed)
        keys = list(existing)
        next_key = max(keys, default=0) + 1
        has_note = False
        done = 0
        # The truncate follows the added column, so every row left at the end was written
        # after it and its events carry the column (events before it cannot).
        truncate_at = operations * 2 // 3
        add_column_at = operations // 2
        while done < operations:
            statements: list[str] = []
            ops: list[str] = []
            for _ in range(rng.choice((1, 1, 1, 2, 3, 4))):
                if done >= operations:
                    break
                if done == add_column_at and not has_note:
                    # DDL ends the transaction; Debezium sees the column with the next change.
                    if statements:
                        break
                    workload.transactions.append(f"ALTER TABLE {table} ADD COLUMN note text")
                    workload.ops.append([])
                    has_note = True
                if truncate and done == truncate_at and keys:
                    statements.append(f"TRUNCATE {table}")
                    ops.append("t")
                    keys.clear()
                    done += 1
                    continue
                choice = rng.random()
                note = f", note = 'n{done}'" if has_note else ""
                if not keys or choice < 0.4:
                    key = next_key
                    next_key += 1
                    columns = "id, name, qty, flag" + (", note" if has_note else "")
                    values = f"{key}, 'name {key}', {rng.randrange(10**6)}, {rng.random() < 0.5}"
                    values += f", 'n{done}'" if has_note else ""
                    statements.append(f"INSERT INTO {table} ({columns}) VALUES ({values})")
                    ops.append("c")
                    keys.append(key)
                elif choice < 0.7:
                    key = rng.choice(keys)
                    statements.append(
                        f"UPDATE {table} SET qty = {rng.randrange(10**6)}, "
                        f"name = 'name {key} u{done}'{note} WHERE id = {key}"
                    )
                    ops.append("u")
                elif choice < 0.8:
                    old = keys.pop(rng.randrange(len(keys)))
                    key = next_key
                    next_key += 1
                    statements.append(f"UPDATE {table} SET id = {key} WHERE id = {old}")
                    # Debezium: a delete of the old key, its tombstone, a create of the new.
                    ops.extend(("d", "tombstone", "c"))
                    keys.append(key)
                else:
                    key = keys.pop(rng.randrange(len(keys)))
                    statements.append(f"DELETE FROM {table} WHERE id = {key}")
                    ops.extend(("d", "tombstone"))
                done += 1
            if not statements:
                continue
            if len(statements) == 1:
                workload.transactions.append(statements[0])
            else:
                workload.transactions.append("BEGIN;\n" + ";\n".join(statements) + ";\nCOMMIT")
            workload.ops.append(ops)
        return workload

    @property
    def changing_transactions(self) -> int:
        """The transactions that change rows (each one Debezium transaction id)."""
        return sum(not sql.startswith("ALTER") for sql in self.transactions)

    def run(
        self, postgres: Postgres, database: str, start: int = 0, stop: int | None = None
    ) -> None:
        """The transactions ``[start:stop]`` in order, in one session (autocommit between)."""
        postgres.sql(";\n".join(self.transactions[start:stop]) + ";", database)


def create_table(
    postgres: Postgres, database: str, table: str, *, replica_identity_full: bool = False
) -> None:
    """The workload's table; ``REPLICA IDENTITY FULL`` logs whole old rows (before images)."""
    postgres.sql(
        f"CREATE TABLE {table} (id int PRIMARY KEY, name text NOT NULL, qty bigint, flag boolean)",
        database,
    )
    if replica_identity_full:
        postgres.sql(f"ALTER TABLE {table} REPLICA IDENTITY FULL", database)


def prefilled(
    postgres: Postgres,
    database: str,
    table: str,
    rows: int,
    *,
    seed: int,
    operations: int,
    replica_identity_full: bool = False,
) -> Workload:
    """The workload's table filled with ``rows`` rows (ids 1..rows), and a workload on them
    without a truncate (for a snapshot that the workload changes while it is read)."""
    create_table(postgres, database, table, replica_identity_full=replica_identity_full)
    postgres.sql(
        f"INSERT INTO {table} SELECT i, 'name ' || i, i, i % 2 = 0 "
        f"FROM generate_series(1, {rows}) i",
        database,
    )
    return Workload.generate(
        table, seed=seed, operations=operations, existing=range(1, rows + 1), truncate=False
    )


def event_ops(records: Sequence[Record]) -> list[str]:
    """Per record: its ``op``, or ``tombstone`` for a null value."""
    ops = []
    for record in records:
        value = record.value_json()
        ops.append("tombstone" if value is None else str(envelope(value)["op"]))
    return ops


# ---------------------------------------------------------------- fixtures


def cdc_endpoints() -> CdcServices:
    """The chain's endpoints, from the environment or ``.services/env``."""
    return CdcServices(
        postgres=Postgres(service_address(POSTGRES)),
        connect=Connect(service_address(CONNECT)),
        bootstrap=service_address(KAFKA),
    )


@pytest.fixture(scope="module")
def cdc_services() -> Iterator[CdcServices]:
    """PostgreSQL and Kafka Connect, started for the module that asks (with the broker if it
    is not running); left running afterwards, like the other services, for the next module."""
    started = time.monotonic()
    start_services(KAFKA.name, POSTGRES.name, CONNECT.name)
    logger.info("cdc services up in %.1fs", time.monotonic() - started)
    try:
        services = cdc_endpoints()
    except ServiceUnavailableError as exc:
        pytest.fail(str(exc))
    yield services


@pytest.fixture
def cdc_database(cdc_services: CdcServices) -> Iterator[str]:
    """A fresh database for one test, dropped afterwards."""
    name = f"cdc_{uuid.uuid4().hex[:10]}"
    cdc_services.postgres.create_database(name)
    yield name
    cdc_services.postgres.drop_database(name)
