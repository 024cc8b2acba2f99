"""Debezium change events of a random workload on one table, with the table they leave.

``workload(seed, steps)`` plays inserts, updates, primary-key changes (a delete of the old
key and a create of the new one, as Debezium emits them) and deletes on a table
``(id Int64, name Nullable(String), n Int64)`` and returns the change events in the shape
of Debezium's PostgreSQL connector (REPLICA IDENTITY FULL: every update and delete
carries the whole previous image), each with a growing LSN, a tombstone after each
delete, and about a third of them wrapped as Kafka Connect's JsonConverter writes them
with ``schemas.enable`` (``{"schema", "payload"}``). ``table`` is the source table at
the end, by id.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any

COLUMNS = ("id", "name", "n")

_SCHEMA = {"type": "struct", "name": "dbserver1.public.items.Envelope", "optional": False}


def event(
    op: str,
    before: dict[str, Any] | None,
    after: dict[str, Any] | None,
    lsn: int,
    *,
    tx_id: int = 1,
    wrapped: bool = False,
) -> dict[str, Any]:
    """One PostgreSQL change event value, as the JSON converter writes it."""
    payload = {
        "before": before,
        "after": after,
        "source": {
            "version": "3.6.1.Final",
            "connector": "postgresql",
            "name": "dbserver1",
            "ts_ms": 1_700_000_000_000 + lsn,
            "snapshot": "false",
            "db": "shop",
            "schema": "public",
            "table": "items",
            "txId": tx_id,
            "lsn": lsn,
            "xmin": None,
        },
        "op": op,
        "ts_ms": 1_700_000_000_100 + lsn,
        "transaction": None,
    }
    return {"schema": _SCHEMA, "payload": payload} if wrapped else payload


@dataclass
class Workload:
    events: list[dict[str, Any] | None] = field(default_factory=list)
    table: dict[int, dict[str, Any]] = field(default_factory=dict)


def workload(seed: int, steps: int) -> Workload:
    rng = random.Random(seed)
    out = Workload()
    lsn = 1_000
    next_id = 1

    def emit(op: str, before: dict[str, Any] | None, after: dict[str, Any] | None) -> None:
        nonlocal lsn
        lsn += rng.randint(1, 50)
        out.events.append(event(op, before, after, lsn, tx_id=lsn // 7, wrapped=rng.random() < 0.3))
        if op == "d":
            out.events.append(None)  # the tombstone

    for _ in range(steps):
        roll = rng.random()
        keys = sorted(out.table)
        if roll < 0.4 or not keys:
            row = {
                "id": next_id,
                "name": rng.choice([None, f"n{next_id}"]),
                "n": rng.randint(-5, 5),
            }
            next_id += 1
            out.table[row["id"]] = row
            emit("c", None, dict(row))
            continue
        key = rng.choice(keys)
        old = out.table[key]
        if roll < 0.75:
            new = {**old, "n": old["n"] + rng.randint(1, 3), "name": rng.choice([None, "x", "y"])}
            out.table[key] = new
            emit("u", dict(old), dict(new))
        elif roll < 0.85:
            new = {**old, "id": next_id}
            next_id += 1
            del out.table[key]
            out.table[new["id"]] = new
            emit("d", dict(old), None)
            emit("c", None, dict(new))
        else:
            del out.table[key]
            emit("d", dict(old), None)
    return out
