"""A ``Replicated*`` target with a local state table is refused at start (B122); every
state-table read is sequentially consistent and every row quorum-written (B200).

chDB has no Keeper, so the ``system.tables`` answer is given by a client double; the
check itself is the connector's own.
"""

from __future__ import annotations

from typing import Any

import pytest
from spate import SinkError
from spate.records import Lane
from spate.sink import Intent
from spate_clickhouse._intents import (
    check_state_table,
    claim_lane,
    lane_epoch,
    load_intents,
    record_intent,
)


class _Tables:
    def __init__(self, engines: dict[str, str]) -> None:
        self.engines = engines

    def query(self, sql: str, parameters: dict[str, Any]) -> Any:
        assert "system.tables" in sql
        wanted = {parameters["t"], parameters["s"]}
        rows = [(name, engine) for name, engine in self.engines.items() if name in wanted]
        return type("Result", (), {"result_rows": rows})()


def test_b122_a_replicated_target_with_a_local_state_table_is_refused() -> None:
    client = _Tables({"events": "ReplicatedMergeTree", "spate_block_intents": "ReplacingMergeTree"})
    with pytest.raises(SinkError) as raised:
        check_state_table(client, "db", "events", "spate_block_intents", "sink events on h")  # type: ignore[arg-type]
    message = str(raised.value)
    assert "`db`.`events` is ReplicatedMergeTree" in message
    assert "ReplicatedReplacingMergeTree" in message and "\n" not in message


@pytest.mark.parametrize(
    "engines",
    [
        {"events": "ReplicatedMergeTree", "spate_block_intents": "ReplicatedReplacingMergeTree"},
        {"events": "MergeTree", "spate_block_intents": "ReplacingMergeTree"},
    ],
)
def test_b122_a_replicated_state_table_or_a_local_target_is_accepted(
    engines: dict[str, str],
) -> None:
    check_state_table(_Tables(engines), "db", "events", "spate_block_intents", "sink events")  # type: ignore[arg-type]


class _Recording:
    """A client double that records each call's settings and answers reads with nothing."""

    def __init__(self) -> None:
        self.reads: list[tuple[str, dict[str, Any]]] = []
        self.inserts: list[dict[str, Any]] = []

    def query(
        self, sql: str, parameters: dict[str, Any], settings: dict[str, Any] | None = None
    ) -> Any:
        self.reads.append((sql, settings or {}))
        return type("Result", (), {"result_rows": []})()

    def insert(self, table: str, rows: list[Any], **kwargs: Any) -> None:
        self.inserts.append(kwargs["settings"])


def test_b200_every_state_table_read_is_sequentially_consistent_and_every_row_quorum_written() -> (
    None
):
    """B200 (B122, B125): on a replicated state table a read answered by a replica that
    lacks another member's fence or intent would let an old owner insert a block the new
    owner cut again. The claim's and the owner check's epoch reads and the intents read
    all ask for sequential consistency; fences and intents are written on a quorum."""
    client = _Recording()
    lane = Lane("events", 3)
    args = ("db", "spate_block_intents", "pipe", "sink")
    epoch = claim_lane(client, *args, 0, lane)  # type: ignore[arg-type]
    record_intent(client, *args, Intent(0, lane, (5, 0), (9, 0), epoch))  # type: ignore[arg-type]
    lane_epoch(client, *args, 0, lane)  # type: ignore[arg-type]
    load_intents(client, *args, 0, lane, 0)  # type: ignore[arg-type]
    assert len(client.reads) == 3 and len(client.inserts) == 2
    for sql, settings in client.reads:
        assert settings.get("select_sequential_consistency") == 1, sql
    for settings in client.inserts:
        assert settings["insert_quorum"] == "auto", settings
        assert settings["insert_quorum_parallel"] == 0, settings
