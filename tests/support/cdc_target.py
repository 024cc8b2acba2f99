"""The two sides of the CDC example compared: the PostgreSQL table and its ClickHouse tables.

Owns what "equal to the source" means for ``examples/postgres_cdc_to_clickhouse.yaml``
(the CDC proof and ``make demo-cdc`` both use it):

- the source is the workload's table (``tests.support.cdc.Workload``) read back ordered
  by key, as ``(id, name, qty, flag, note)`` tuples (``note`` null where it was never
  written, as a sink stores a column added after a row's last change);
- ``items`` (``ReplacingMergeTree(_version, _is_deleted)``) is equal when its ``FINAL``
  rows are; ``items_signed`` (``CollapsingMergeTree(_sign)``) when the images whose signs
  sum to more than 0 are, and every key's raw ``sum(_sign)`` is 0 or 1;
- a checksum of rows is the SHA-256 of their ``repr``, in key order, so the same rows
  read from either side give the same checksum.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from tests.support.cdc import Postgres

COLUMNS = "id, name, qty, flag, note"
Row = tuple[Any, ...]


def source_rows(postgres: Postgres, database: str, table: str) -> list[Row]:
    """The PostgreSQL table, ordered by key, as ``(id, name, qty, flag, note)``."""
    return [
        (r["id"], r["name"], r["qty"], r["flag"], r.get("note"))
        for r in postgres.rows(database, table)
    ]


def checksum(rows: Sequence[Row]) -> str:
    """The first 16 hex digits of the SHA-256 of the rows' ``repr``, in order."""
    digest = hashlib.sha256()
    for row in rows:
        digest.update(repr(tuple(row)).encode())
        digest.update(b"\n")
    return digest.hexdigest()[:16]


@dataclass(frozen=True)
class Target:
    """The example's ClickHouse tables in ``database``, read through ``client()``."""

    client: Any
    """A callable returning a ``clickhouse_connect`` client."""
    database: str = "default"

    def _query(self, sql: str) -> list[Row]:
        return [tuple(row) for row in self.client().query(sql).result_rows]

    def replacing(self) -> list[Row]:
        """``items`` after ``FINAL``: each key's newest version, deleted keys gone."""
        return self._query(f"SELECT {COLUMNS} FROM {self.database}.items FINAL ORDER BY id")

    def collapsed(self) -> list[Row]:
        """``items_signed`` collapsed by the sign: the images whose signs sum above 0."""
        return self._query(
            f"SELECT {COLUMNS} FROM {self.database}.items_signed GROUP BY {COLUMNS} "
            "HAVING sum(_sign) > 0 ORDER BY id"
        )

    def sign_range(self) -> tuple[int, int]:
        """The least and greatest raw ``sum(_sign)`` of any key (``(0, 0)`` when empty)."""
        rows = self._query(
            "SELECT min(s), max(s) FROM (SELECT sum(_sign) AS s "
            f"FROM {self.database}.items_signed GROUP BY id)"
        )
        low, high = rows[0] if rows else (0, 0)
        return int(low or 0), int(high or 0)

    def written(self) -> int:
        """Raw rows in ``items``; 0 while it does not exist or ClickHouse is down."""
        try:
            return int(self.client().command(f"SELECT count() FROM {self.database}.items"))
        except Exception:
            return 0

    def equal_to(self, expected: Sequence[Row]) -> bool:
        """Both tables hold ``expected`` and no key's sign sum is outside 0..1."""
        low, high = self.sign_range()
        return (
            self.replacing() == list(expected)
            and self.collapsed() == list(expected)
            and low >= 0
            and high <= 1
        )
