"""Effectively-once into ClickHouse: the block-intent state table and the start checks.

Under ``pipeline.delivery: effectively_once`` each replica's probe creates the state table
(``state_table``, in the sink's database, unless it exists) and checks that the target
table can deduplicate a replayed block (B90): a ``MergeTree``-family table (never
``Distributed``: that engine cuts blocks again on its way to the shards) whose
deduplication window — ``non_replicated_deduplication_window``, or
``replicated_deduplication_window`` for a ``Replicated*`` engine — is at least
``table_options.dedup_window``, on a profile that may change settings (``readonly`` 0).
A start that cannot give the guarantee fails with one line naming the table, the setting,
its value, what is needed and the ``ALTER TABLE`` that fixes it.

The window counts parts, not inserts: one per partition an insert writes. With ``blocks``
the blocks one partition seals before a replay (B123), a block may take at most
``max(1, window // blocks)`` entries; a block of several parts that would write more into
a partitioned target is refused before any of it is written, with the ``ALTER TABLE``
that makes room (:class:`DedupWindow`, B345); a block of one part never is (B346). The
``late_data`` table's window is checked the same way against a block's late parts (B347).

The writer records one intent row per block before inserting it and reads a lane's
intents when the lane is assigned (:class:`~spate.sink._intents.IntentWriter`, B88, B89).
The table is a ``ReplacingMergeTree`` keyed by the block's start, read with ``FINAL``;
intents the committed offsets have passed are deleted lazily, with a ``TTL`` as a
backstop.

Each intent row carries its owner's epoch (part of the key, so a late intent never
replaces another owner's). A lane's owner claims it with a *fence* row — the same table,
``first_offset`` -1 and ``last_offset`` the largest Int64, so that reading and deleting
intents by offset never see it — before reading the intents, and checks the lane's
greatest epoch after recording each intent (B125).

On a ``ReplicatedReplacingMergeTree`` state table (B122) a row acknowledged by one replica
may not have reached the one the next read goes to. Every state-table row (intent, fence)
is therefore inserted with ``insert_quorum='auto'`` (a majority of replicas) and
``insert_quorum_parallel=0``, and every read of it — a lane's intents, a lane's greatest
epoch, whether for a claim or for an owner's check — with
``select_sequential_consistency=1``: a replica that lacks a quorum-written row refuses
the read (a retriable error) instead of answering without it (B200). A local state table
ignores these settings.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from spate.errors import ErrorClass, SinkError
from spate.records import Lane
from spate.sink import Intent

if TYPE_CHECKING:
    from clickhouse_connect.driver.client import Client

INTENT_COLUMNS = (
    ("pipeline", "String"),
    ("sink", "String"),
    ("shard", "UInt32"),
    ("topic", "String"),
    ("partition", "Int64"),
    ("first_offset", "Int64"),
    ("first_index", "UInt32"),
    ("last_offset", "Int64"),
    ("last_index", "UInt32"),
    ("epoch", "UInt64"),
)
_NAMES = [name for name, _ in INTENT_COLUMNS]

STATE_INSERT_SETTINGS: dict[str, Any] = {
    "insert_deduplicate": 0,
    "async_insert": 0,
    "insert_quorum": "auto",
    "insert_quorum_parallel": 0,
}
"""Settings of every state-table insert: no token (each row is its own), synchronous, on
a majority of replicas before it is acknowledged (B200)."""

STATE_READ_SETTINGS: dict[str, Any] = {"select_sequential_consistency": 1}
"""Settings of every state-table read: only from a replica holding every quorum-written
row (B122, B200)."""
_TYPES = [ctype for _, ctype in INTENT_COLUMNS]

STATE_TTL_DAYS = 7
"""Intents older than this are dropped by the table's TTL (committed ones go earlier)."""


def qualified(database: str, table: str) -> str:
    return f"`{database}`.`{table}`" if database else f"`{table}`"


def state_table_sql(database: str, table: str) -> str:
    """``CREATE TABLE IF NOT EXISTS`` of the state table."""
    columns = ", ".join(f"`{name}` {ctype}" for name, ctype in INTENT_COLUMNS)
    return (
        f"CREATE TABLE IF NOT EXISTS {qualified(database, table)} ({columns}, "
        "`written_at` DateTime DEFAULT now()) "
        "ENGINE = ReplacingMergeTree "
        "ORDER BY (pipeline, sink, shard, topic, partition, first_offset, first_index, epoch) "
        f"TTL written_at + INTERVAL {STATE_TTL_DAYS} DAY"
    )


def record_intent(
    client: Client, database: str, table: str, pipeline: str, sink: str, intent: Intent
) -> None:
    row = [
        pipeline,
        sink,
        intent.shard,
        intent.lane.stream,
        intent.lane.partition,
        intent.first[0],
        intent.first[1],
        intent.last[0],
        intent.last[1],
        intent.epoch,
    ]
    _insert_row(client, database, table, row)


def _insert_row(client: Client, database: str, table: str, row: list[Any]) -> None:
    client.insert(
        table,
        [row],
        column_names=_NAMES,
        database=database or None,
        column_type_names=_TYPES,
        settings=STATE_INSERT_SETTINGS,
    )


def _where(pipeline: str, sink: str, lane: Lane) -> tuple[str, dict[str, Any]]:
    return (
        "pipeline = %(p)s AND sink = %(s)s AND topic = %(t)s AND partition = %(n)s",
        {"p": pipeline, "s": sink, "t": lane.stream, "n": lane.partition},
    )


def load_intents(
    client: Client,
    database: str,
    table: str,
    pipeline: str,
    sink: str,
    shard: int,
    lane: Lane,
    since: int,
) -> list[Intent]:
    where, params = _where(pipeline, sink, lane)
    result = client.query(
        "SELECT first_offset, first_index, last_offset, last_index, epoch "
        f"FROM {qualified(database, table)} FINAL "
        f"WHERE {where} AND shard = %(h)s AND last_offset >= %(since)s "
        "AND first_offset >= 0 "
        "ORDER BY first_offset, first_index",
        parameters={**params, "h": shard, "since": since},
        # A replicated state table answers with every intent a quorum acknowledged.
        settings=STATE_READ_SETTINGS,
    )
    return [
        Intent(shard, lane, (int(r[0]), int(r[1])), (int(r[2]), int(r[3])), int(r[4]))
        for r in result.result_rows
    ]


_FENCE_LAST = 2**63 - 1
"""``last_offset`` of a fence row: past every offset, so no deletion by offset takes it."""


def lane_epoch(
    client: Client, database: str, table: str, pipeline: str, sink: str, shard: int, lane: Lane
) -> int:
    """The greatest epoch recorded for ``lane`` on this shard (0: none)."""
    where, params = _where(pipeline, sink, lane)
    found = client.query(
        f"SELECT max(epoch) FROM {qualified(database, table)} WHERE {where} AND shard = %(h)s",
        parameters={**params, "h": shard},
        # A later owner's fence on another replica must not be missed (B200).
        settings=STATE_READ_SETTINGS,
    ).result_rows
    return int(found[0][0]) if found and found[0][0] is not None else 0


def claim_lane(
    client: Client, database: str, table: str, pipeline: str, sink: str, shard: int, lane: Lane
) -> int:
    """Record a fence row for a new owner of ``lane`` and return its epoch: greater than
    every epoch recorded for the lane, and than the microseconds since the epoch, so a
    claim after the ``TTL`` dropped older rows still outranks them."""
    epoch = max(
        lane_epoch(client, database, table, pipeline, sink, shard, lane) + 1,
        time.time_ns() // 1000,
    )
    row = [pipeline, sink, shard, lane.stream, lane.partition, -1, 0, _FENCE_LAST, 0, epoch]
    _insert_row(client, database, table, row)
    return epoch


def forget_intents(
    client: Client, database: str, table: str, pipeline: str, sink: str, lane: Lane, below: int
) -> None:
    where, params = _where(pipeline, sink, lane)
    client.command(
        f"DELETE FROM {qualified(database, table)} WHERE {where} AND last_offset < %(b)s",
        parameters={**params, "b": below},
    )


_WINDOW = re.compile(
    r"\b(non_replicated_deduplication_window|replicated_deduplication_window)\s*=\s*(\d+)"
)


def check_deduplication(
    client: Client, database: str, table: str, required: int, where: str, blocks: int = 0
) -> DedupWindow:
    """Refuse (one line, ``SinkError`` FATAL) a table or profile that cannot drop a
    replayed block by its token (B90); the table's window otherwise."""
    name = qualified(database, table)
    rows = client.query(
        "SELECT engine, create_table_query FROM system.tables "
        "WHERE database = if(%(d)s = '', currentDatabase(), %(d)s) AND name = %(t)s",
        parameters={"d": database, "t": table},
    ).result_rows
    if not rows:
        raise SinkError(f"{where}: effectively_once: table {name} not found", ErrorClass.FATAL)
    engine, create = str(rows[0][0]), str(rows[0][1])
    if engine == "Distributed":
        raise SinkError(
            f"{where}: effectively_once cannot write {name} (Distributed): deduplication "
            "happens on the shards' local tables, with blocks cut again by the Distributed "
            "engine; write the local tables (router: key)",
            ErrorClass.FATAL,
        )
    if not engine.endswith("MergeTree"):
        raise SinkError(
            f"{where}: effectively_once needs a MergeTree-family table; {name} is {engine}",
            ErrorClass.FATAL,
        )
    setting = (
        "replicated_deduplication_window"
        if engine.startswith("Replicated")
        else "non_replicated_deduplication_window"
    )
    window = _table_setting(create, setting)
    if window is None:
        found = client.query(
            "SELECT value FROM system.merge_tree_settings WHERE name = %(n)s",
            parameters={"n": setting},
        ).result_rows
        window = int(found[0][0]) if found else 0
    if window < required:
        raise SinkError(
            f"{where}: effectively_once needs {setting} >= {required} on {name} (it is "
            f"{window}): ALTER TABLE {name} MODIFY SETTING {setting} = {required}",
            ErrorClass.FATAL,
        )
    readonly = client.query("SELECT getSetting('readonly')").result_rows
    if readonly and str(readonly[0][0]) not in ("0", ""):
        raise SinkError(
            f"{where}: effectively_once sets insert_deduplicate and its token on every "
            "insert; this user's profile is readonly and cannot",
            ErrorClass.FATAL,
        )
    return DedupWindow(name, setting, window, blocks or required)


@dataclass(frozen=True, slots=True)
class DedupWindow:
    """A target's deduplication window, against the ``dedup_window`` blocks B123 sized.

    ClickHouse keeps one hash per *part*: an insert spanning ``k`` partitions takes ``k``
    entries of the window, and a block cut into pieces (B240) takes one per partition of
    every piece. ``blocks`` are those one partition seals between a block and its replay
    (B123), so a block may take at most ``window // blocks`` entries for them all to fit
    (B345) — but never fewer than one: a block of one part is what B123 sized the window
    for, and B123's start-up check is the rule for it (B346).
    """

    table: str
    setting: str
    window: int
    blocks: int

    @property
    def parts_per_block(self) -> int:
        """A block's share of the window: ``max(1, window // blocks)`` (B345, B346)."""
        return max(1, self.window // max(self.blocks, 1))

    def check(self, parts: int, where: str) -> None:
        """Refuse (``SinkError`` FATAL, before anything of the block is written) a block
        of several parts that would write more of them than its share of the window
        (B345); a block of one part is never refused here (B346)."""
        share = self.parts_per_block
        if parts <= 1 or parts <= share:
            return
        needed = parts * self.blocks
        raise SinkError(
            f"{where}: effectively_once: a block writes {parts} parts (one per partition) "
            f"into {self.table}, whose {self.setting} = {self.window} holds {share} per "
            f"block for the {self.blocks} blocks a partition writes before a replay "
            f"after a kill -9 (B123), which could write them twice: ALTER TABLE "
            f"{self.table} MODIFY SETTING {self.setting} = {needed}",
            ErrorClass.FATAL,
        )


def _table_setting(create: str, setting: str) -> int | None:
    for match in _WINDOW.finditer(create):
        if match.group(1) == setting:
            return int(match.group(2))
    return None


def check_state_table(client: Client, database: str, table: str, state: str, where: str) -> None:
    """Refuse a ``Replicated*`` target whose state table is local to each server: after a
    failover to another replica, the intents would be read from that replica's own, empty
    table and the replay cut afresh (duplicates). ``SinkError`` FATAL, one line (B122)."""
    rows = client.query(
        "SELECT name, engine FROM system.tables "
        "WHERE database = if(%(d)s = '', currentDatabase(), %(d)s) AND name IN (%(t)s, %(s)s)",
        parameters={"d": database, "t": table, "s": state},
    ).result_rows
    engines = {str(name): str(engine) for name, engine in rows}
    target, kept = engines.get(table, ""), engines.get(state, "")
    if target.startswith("Replicated") and not kept.startswith("Replicated"):
        raise SinkError(
            f"{where}: effectively_once: {qualified(database, table)} is {target} but the "
            f"state table {qualified(database, state)} is {kept or 'missing'}, local to "
            "each server: a failover would read another replica's intents (none); create "
            "it as a ReplicatedReplacingMergeTree with the same columns beforehand "
            "(spate schema ddl prints them) or set state_table to one",
            ErrorClass.FATAL,
        )
