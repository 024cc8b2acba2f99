"""A ``Replicated*`` target with a local state table is refused at start (B122).

chDB has no Keeper, so the ``system.tables`` answer is given by a client double; the
check itself is the connector's own.
"""

from __future__ import annotations

from typing import Any

import pytest
from spate import SinkError
from spate_clickhouse._intents import check_state_table


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
