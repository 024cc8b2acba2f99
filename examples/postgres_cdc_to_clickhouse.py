"""The chain of ``postgres_cdc_to_clickhouse.yaml``: each Debezium change event becomes
the rows of a ``ReplacingMergeTree`` table and of a ``CollapsingMergeTree`` table.

    spate run examples/postgres_cdc_to_clickhouse.yaml \\
        --chain examples.postgres_cdc_to_clickhouse:chains
"""

from __future__ import annotations

from typing import Any

from spate.cdc import DebeziumRows, parse_change

_REPLACING = DebeziumRows(engine="replacing")
_COLLAPSING = DebeziumRows(engine="collapsing")


def chains(ctx: Any) -> Any:
    items, signed = ctx.sink("items"), ctx.sink("items_signed")

    def route(value: object, out: Any) -> None:
        change = parse_change(value)
        if change is None:  # a tombstone
            return
        for row in _REPLACING.rows(change):
            out.emit(items, row)
        for row in _COLLAPSING.rows(change):
            out.emit(signed, row)

    return ctx.chain().split(unrouted="skip").route(route)
