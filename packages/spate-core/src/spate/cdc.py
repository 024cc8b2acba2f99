"""Debezium change events as rows for ClickHouse's replacing and collapsing engines.

Owns the ``debezium`` envelope: :func:`parse_change` reads one decoded change event value
(a mapping, whatever the wire format: JSON with schemas — ``{"schema", "payload"}`` —
or without, or Avro decoded through the schema registry) into a :class:`Change`, and
:class:`DebeziumRows` turns each change into the rows one target engine needs. The
envelope is a row operator (``ctx.chain().flat_map(DebeziumRows(...))``), so it runs on
the row path of every deserializer; the columnar path refuses row operators at build.

Invariants:

- ``op`` is one of ``c`` (create), ``u`` (update), ``d`` (delete), ``r`` (snapshot read)
  and ``t`` (truncate); anything else, a ``before``/``after``/``source`` of the wrong
  type, or a version out of range is a :class:`ChangeEventError` naming the field (B370).
- A tombstone (a null value, sent after a delete for log compaction) is no row (B371).
- The version is the change's source position, one ``UInt64`` that grows with the
  source's log: PostgreSQL's ``source.lsn``; MySQL's binlog ``file`` sequence, ``pos`` and
  ``row`` packed as ``seq << 44 | pos << 14 | row`` (B372).
- ``replacing``: an insert, snapshot read or update is its ``after`` image with the
  version and ``is_deleted = 0``; a delete is its ``before`` image (at least the primary
  key) with ``is_deleted = 1`` (B373). A primary-key change arrives from Debezium as a
  delete of the old key and a create of the new one, and is written as such.
- ``collapsing``: a create or read is a state row (sign +1); an update is a cancel row
  of its ``before`` image (sign -1) followed by a state row of its ``after`` image; a
  delete is a cancel row. Without a ``before`` image (the source table's ``REPLICA
  IDENTITY`` is not ``FULL``) an update or delete is a ChangeEventError (B374).
- ``versioned_collapsing``: as ``collapsing``, each row also carrying a version equal to
  a hash of its image, so a cancel row (the previous image) pairs with the state row
  written from that same image earlier (B375).
- Debezium's unchanged-TOAST placeholder ``__debezium_unavailable_value`` in ``after``
  takes the column's value from ``before`` when ``before`` holds it; otherwise the
  change is a ChangeEventError: writing the placeholder would replace the real value
  (B376).
- A truncate is a ChangeEventError: rows cannot express "every row is gone" without the
  keys of every row; the operator stops the pipeline (or skips it under a skipping
  policy) with that reason (B377). With ``truncate="skip"`` it is no row, logged as a
  warning with its version.
"""

from __future__ import annotations

import hashlib
import logging
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

__all__ = [
    "TOAST_PLACEHOLDER",
    "Change",
    "ChangeEventError",
    "DebeziumRows",
    "Engine",
    "Op",
    "image_version",
    "parse_change",
    "source_version",
]

Op = Literal["c", "u", "d", "r", "t"]
Engine = Literal["replacing", "collapsing", "versioned_collapsing"]

TOAST_PLACEHOLDER = "__debezium_unavailable_value"
"""What Debezium writes for a TOASTed column an update did not change (PostgreSQL)."""

logger = logging.getLogger(__name__)

_OPS: frozenset[str] = frozenset(("c", "u", "d", "r", "t"))
_U64 = 1 << 64
_BINLOG_SEQ = re.compile(r"(\d+)$")
_SEQ_BITS, _POS_BITS, _ROW_BITS = 20, 30, 14


class ChangeEventError(ValueError):
    """A change event spate cannot turn into rows; the message says which field and why."""


@dataclass(frozen=True, slots=True)
class Change:
    """One row change read from a Debezium envelope."""

    op: Op
    before: Mapping[str, object] | None
    after: Mapping[str, object] | None
    version: int
    """The source position as one ordered UInt64 (see :func:`source_version`)."""
    ts_ms: int | None
    """When the connector processed the change (the envelope's ``ts_ms``)."""
    tx_id: object
    """The source transaction (``source.txId`` for PostgreSQL, ``source.gtid`` for MySQL)."""


def _image(payload: Mapping[str, object], name: str) -> Mapping[str, object] | None:
    value = payload.get(name)
    if value is None or isinstance(value, Mapping):
        return value
    raise ChangeEventError(f"{name}: expected an object or null, got {type(value).__name__}")


def _u64(value: object, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ChangeEventError(f"{name}: expected an integer, got {value!r}")
    if not 0 <= value < _U64:
        raise ChangeEventError(f"{name}: {value} is outside 0..2^64-1")
    return value


def source_version(source: Mapping[str, object]) -> int:
    """The change's position in the source's log as one ordered UInt64.

    PostgreSQL: ``lsn``. MySQL: the binlog file's sequence number (the digits ending
    ``file``), ``pos`` and ``row`` packed as ``seq << 44 | pos << 14 | row`` (a binlog file
    is at most 1 GiB, so ``pos`` fits in 30 bits; ``row`` is the row within the event).
    """
    lsn = source.get("lsn")
    if lsn is not None:
        return _u64(lsn, "source.lsn")
    file = source.get("file")
    if file is None:
        raise ChangeEventError("source: neither lsn (PostgreSQL) nor file and pos (MySQL)")
    if not isinstance(file, str) or (match := _BINLOG_SEQ.search(file)) is None:
        raise ChangeEventError(f"source.file: expected a binlog file name, got {file!r}")
    parts = (
        ("source.file", int(match.group(1)), _SEQ_BITS),
        ("source.pos", _u64(source.get("pos"), "source.pos"), _POS_BITS),
        ("source.row", _u64(source.get("row") or 0, "source.row"), _ROW_BITS),
    )
    version = 0
    for name, value, bits in parts:
        if value >= 1 << bits:
            raise ChangeEventError(f"{name}: {value} does not fit the version's {bits} bits")
        version = version << bits | value
    return version


def parse_change(value: object) -> Change | None:
    """The change in a decoded Debezium value; None for a tombstone (B370, B371)."""
    if value is None:
        return None
    if not isinstance(value, Mapping):
        raise ChangeEventError(f"expected a change event object, got {type(value).__name__}")
    if value.keys() == {"schema", "payload"}:  # JsonConverter with schemas.enable
        value = value["payload"]
        if value is None:
            return None
        if not isinstance(value, Mapping):
            raise ChangeEventError(f"payload: expected an object, got {type(value).__name__}")
    op = value.get("op")
    if not isinstance(op, str) or op not in _OPS:
        raise ChangeEventError(f"op: expected one of c, u, d, r, t, got {op!r}")
    source = value.get("source")
    if not isinstance(source, Mapping):
        raise ChangeEventError(f"source: expected an object, got {type(source).__name__}")
    ts_ms = value.get("ts_ms")
    if ts_ms is not None and (isinstance(ts_ms, bool) or not isinstance(ts_ms, int)):
        raise ChangeEventError(f"ts_ms: expected an integer, got {ts_ms!r}")
    tx_id = source.get("txId", source.get("gtid"))
    before, after = _image(value, "before"), _image(value, "after")
    if op in ("c", "r", "u") and after is None:
        raise ChangeEventError(f"after: an op {op!r} event needs the row's new image")
    if op == "d" and before is None:
        raise ChangeEventError("before: a delete needs at least the row's primary key")
    return Change(op, before, after, source_version(source), ts_ms, tx_id)  # type: ignore[arg-type]


def _is_placeholder(value: object) -> bool:
    if isinstance(value, str):
        return value == TOAST_PLACEHOLDER
    if isinstance(value, bytes):
        return value == TOAST_PLACEHOLDER.encode()
    if isinstance(value, list):
        return any(_is_placeholder(item) for item in value)
    return False


def _resolve_toast(change: Change, after: Mapping[str, object]) -> dict[str, object]:
    row = dict(after)
    for column, value in after.items():
        if not _is_placeholder(value):
            continue
        previous = change.before.get(column) if change.before is not None else None
        if change.before is None or column not in change.before or _is_placeholder(previous):
            raise ChangeEventError(
                f"after.{column}: Debezium's unchanged-TOAST placeholder and no previous "
                "value in before; set REPLICA IDENTITY FULL on the source table"
            )
        row[column] = previous
    return row


def image_version(image: Mapping[str, object]) -> int:
    """A stable UInt64 of a row image: the version of ``versioned_collapsing`` rows."""
    text = repr(sorted(image.items(), key=lambda item: item[0]))
    return int.from_bytes(hashlib.blake2b(text.encode(), digest_size=8).digest(), "big")


@dataclass(frozen=True, slots=True, kw_only=True)
class DebeziumRows:
    """The rows of one Debezium change event for a target engine (a ``flat_map``).

    ``DebeziumRows(engine="replacing")`` writes into
    ``ReplacingMergeTree(_version, _is_deleted)``; ``collapsing`` into
    ``CollapsingMergeTree(_sign)``; ``versioned_collapsing`` into
    ``VersionedCollapsingMergeTree(_sign, _version)``. Each row is a dict of the image's
    columns plus those columns.
    """

    engine: Engine = "replacing"
    version_column: str = "_version"
    deleted_column: str = "_is_deleted"
    sign_column: str = "_sign"
    truncate: Literal["refuse", "skip"] = "refuse"
    """``refuse``: a truncate is a :class:`ChangeEventError`; ``skip``: it is no row
    (logged as a warning): the ClickHouse table keeps the truncated rows."""

    def __post_init__(self) -> None:
        if self.engine not in ("replacing", "collapsing", "versioned_collapsing"):
            raise ValueError(
                f"engine: expected replacing, collapsing or versioned_collapsing, "
                f"got {self.engine!r}"
            )
        if self.truncate not in ("refuse", "skip"):
            raise ValueError(f"truncate: expected refuse or skip, got {self.truncate!r}")

    def __call__(self, value: object) -> list[dict[str, object]]:
        change = parse_change(value)
        return [] if change is None else self.rows(change)

    def rows(self, change: Change) -> list[dict[str, object]]:
        """The rows ``change`` becomes, in the order they must be written."""
        if change.op == "t":
            if self.truncate == "skip":
                logger.warning(
                    "a TRUNCATE (version %d) is skipped: the table keeps its rows",
                    change.version,
                )
                return []
            raise ChangeEventError(
                "op 't': a TRUNCATE cannot be written as rows; truncate the ClickHouse "
                "table and resume from after this event"
            )
        after = None if change.after is None else _resolve_toast(change, change.after)
        if self.engine == "replacing":
            if after is not None:
                return [{**after, self.version_column: change.version, self.deleted_column: 0}]
            assert change.before is not None  # parse_change: a delete has before
            return [{**change.before, self.version_column: change.version, self.deleted_column: 1}]
        rows: list[dict[str, object]] = []
        if change.op in ("u", "d"):
            if change.before is None:
                raise ChangeEventError(
                    f"before: a collapsing engine needs the previous image of op "
                    f"{change.op!r}; set REPLICA IDENTITY FULL on the source table"
                )
            rows.append(self._signed(change.before, -1))
        if after is not None:
            rows.append(self._signed(after, 1))
        return rows

    def _signed(self, image: Mapping[str, object], sign: int) -> dict[str, object]:
        row = {**image, self.sign_column: sign}
        if self.engine == "versioned_collapsing":
            row[self.version_column] = image_version(image)
        return row
