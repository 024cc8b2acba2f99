"""Captures real Debezium change events as test fixtures (``tests/data/debezium/postgres``).

Owns: one scripted workload on two PostgreSQL tables, run through the real chain
(PostgreSQL -> Debezium's PostgreSQL connector in Kafka Connect -> the broker) once per
converter, and the fixture files it writes: per converter and table, one JSON line per
record with the case it shows, the offset and the key and value exactly as the broker held
them (text, or ``null`` for a tombstone's value).

Invariants: the cases are labelled by position (the workload's events arrive in commit
order on one partition) and the labelling is checked against each record's ``op`` before
anything is written, so a fixture never claims a shape it does not show.

Run (the services are started if needed):
``python -m tests.support.capture_debezium [OUTPUT_DIR]``.
"""

from __future__ import annotations

import base64
import json
import logging
import sys
import urllib.request
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from tests.support.cdc import (
    CdcServices,
    Converter,
    Record,
    as_json,
    cdc_endpoints,
    delete_topics,
    event_ops,
    read_topic,
    register,
    registry_schema,
)
from tests.support.schema_registry import SchemaRegistryServer
from tests.support.services import start_services

logger = logging.getLogger(__name__)

DEFAULT_OUTPUT = Path(__file__).resolve().parents[1] / "data" / "debezium" / "postgres"

# A TEXT value PostgreSQL stores out of line (TOAST): over 2 kB and poorly compressible.
_BIG_NOTES = "(SELECT string_agg(md5(i::text), '') FROM generate_series(1, 400) AS i)"

SETUP = f"""
CREATE TABLE customers (
    id int PRIMARY KEY,
    name text NOT NULL,
    balance numeric(12, 2),
    notes text,
    active boolean DEFAULT true
);
CREATE TABLE orders (
    id int PRIMARY KEY,
    customer_id int NOT NULL,
    amount bigint NOT NULL,
    status text NOT NULL
);
ALTER TABLE orders REPLICA IDENTITY FULL;
INSERT INTO customers (id, name, balance, notes) VALUES (1, 'Ada', 10.50, {_BIG_NOTES});
INSERT INTO customers (id, name, balance, notes) VALUES (2, 'Brian', 20.00, 'short');
INSERT INTO orders (id, customer_id, amount, status) VALUES (1, 1, 1500, 'new');
"""

# (case, SQL, expected ops on customers, expected ops on orders), in commit order.
STEPS: list[tuple[str, str, list[str], list[str]]] = [
    (
        "insert",
        "INSERT INTO customers (id, name, balance, notes) VALUES (3, 'Chen', 0.00, 'hello')",
        ["c"],
        [],
    ),
    ("update", "UPDATE customers SET balance = 5.25, notes = 'hi' WHERE id = 3", ["u"], []),
    # REPLICA IDENTITY DEFAULT and the TOASTed notes untouched: the placeholder in `after`.
    ("toast_unchanged", "UPDATE customers SET balance = 99.99 WHERE id = 1", ["u"], []),
    ("delete", "DELETE FROM customers WHERE id = 2", ["d", "tombstone"], []),
    ("pk_change", "UPDATE customers SET id = 30 WHERE id = 3", ["d", "tombstone", "c"], []),
    (
        "transaction",
        "BEGIN;\n"
        "INSERT INTO orders (id, customer_id, amount, status) VALUES (2, 30, 700, 'new');\n"
        "UPDATE orders SET status = 'paid' WHERE id = 1;\n"
        "UPDATE customers SET active = false WHERE id = 1;\n"
        "DELETE FROM orders WHERE id = 2;\n"
        "COMMIT",
        ["u"],
        ["c", "u", "d", "tombstone"],
    ),
    (
        "column_added",
        "ALTER TABLE customers ADD COLUMN email text;\n"
        "INSERT INTO customers (id, name, balance, email) "
        "VALUES (4, 'Dana', 1.00, 'd@example.org')",
        ["c"],
        [],
    ),
    ("truncate", "TRUNCATE customers", ["t"], []),
]

# Topic prefix (and slot and connector name) per converter: topics are PREFIX.public.TABLE.
PREFIXES: dict[Converter, str] = {
    "json": "shop_schemas",
    "json-plain": "shop_plain",
    "avro": "shop_avro",
}
DIRECTORIES: dict[Converter, str] = {
    "json": "json-schemas",
    "json-plain": "json-plain",
    "avro": "avro",
}

SNAPSHOT = {"customers": ["r", "r"], "orders": ["r"]}


def expected(table: str) -> list[tuple[str, str]]:
    """(case, op) per record of ``table``'s topic, in order."""
    cases = [("snapshot", op) for op in SNAPSHOT[table]]
    for case, _sql, customers, orders in STEPS:
        cases.extend((case, op) for op in (customers if table == "customers" else orders))
    return cases


def _text(data: bytes | None) -> str | None:
    return None if data is None else data.decode()


def _base64(data: bytes | None) -> str | None:
    return None if data is None else base64.b64encode(data).decode()


def write_fixture(
    path: Path,
    table: str,
    records: Sequence[Record],
    registry: SchemaRegistryServer | None = None,
) -> None:
    """JSON records as text; Avro records (``registry`` given) as base64 of their bytes."""
    labels = expected(table)
    readable = records if registry is None else as_json(records, registry_schema(registry.url))
    ops = event_ops(readable)
    if ops != [op for _case, op in labels]:
        raise RuntimeError(f"{table}: ops {ops} differ from the workload's {labels}")
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w") as out:
        for (case, _op), record in zip(labels, records, strict=True):
            line = {
                "case": case,
                "offset": record.offset,
                "key": _text(record.key) if registry is None else _base64(record.key),
                "value": _text(record.value) if registry is None else _base64(record.value),
            }
            out.write(json.dumps(line, sort_keys=False) + "\n")
    logger.info("wrote %s (%d records)", path, len(records))


def write_schemas(path: Path, registry: SchemaRegistryServer) -> None:
    """Every schema the converter registered: id -> subject, version and schema (parsed)."""
    schemas: dict[str, dict[str, Any]] = {}
    for subject in _get(registry, "/subjects"):
        latest = _get(registry, f"/subjects/{subject}/versions/latest")
        for version in range(1, int(latest["version"]) + 1):
            answer = _get(registry, f"/subjects/{subject}/versions/{version}")
            schemas[str(answer["id"])] = {
                "subject": subject,
                "version": version,
                "schema": json.loads(answer["schema"]),
            }
    ordered = dict(sorted(schemas.items(), key=lambda item: int(item[0])))
    path.write_text(json.dumps(ordered, indent=1) + "\n")


def _get(registry: SchemaRegistryServer, path: str) -> Any:
    with urllib.request.urlopen(registry.url + path, timeout=10) as response:
        return json.load(response)


def capture(services: CdcServices, output: Path, registry: SchemaRegistryServer) -> None:
    postgres = services.postgres
    # Fixed names, so a new capture differs from the old one only where Debezium does.
    database = "shop"
    postgres.drop_database(database)
    postgres.create_database(database)
    captures = {}
    try:
        postgres.sql(SETUP, database)
        tables = ("public.customers", "public.orders")
        converters: tuple[Converter, ...] = ("json", "json-plain", "avro")
        delete_topics(
            services.bootstrap,
            [f"{PREFIXES[c]}.public.{table}" for c in converters for table in SNAPSHOT],
        )
        for converter in converters:
            captures[converter] = register(
                services,
                database,
                tables,
                converter=converter,
                prefix=PREFIXES[converter],
                registry_url=registry.url,
            )
        for _case, sql, _customers, _orders in STEPS:
            postgres.sql(sql, database)
        for converter, cap in captures.items():
            for table in ("customers", "orders"):
                count = len(expected(table))
                records = read_topic(
                    services.bootstrap,
                    cap.topic(f"public.{table}"),
                    lambda got, count=count: len(got) >= count,
                )
                write_fixture(
                    output / DIRECTORIES[converter] / f"{table}.jsonl",
                    table,
                    records,
                    registry if converter == "avro" else None,
                )
        write_schemas(output / DIRECTORIES["avro"] / "schemas.json", registry)
    finally:
        for cap in captures.values():
            cap.close()
        postgres.drop_database(database)


def main(argv: Sequence[str]) -> int:
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(message)s")
    output = Path(argv[0]) if argv else DEFAULT_OUTPUT
    start_services("kafka", "postgres", "connect")
    with SchemaRegistryServer() as registry:
        capture(cdc_endpoints(), output, registry)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
