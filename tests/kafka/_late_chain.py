"""The chains of tests/kafka/test_clickhouse_late_data_kill.py (B331): every decoded
record goes to the sink ``events``, whose ``late_data`` sends the stragglers to the sink
``late``; ``chains`` on the row path, ``frames`` on the columnar path.

``spate run --chain tests.kafka._late_chain:chains`` (or ``:frames``).
"""

from __future__ import annotations

from typing import Any


def chains(ctx: Any) -> Any:
    return ctx.chain().sink("events")


def frames(ctx: Any) -> Any:
    return ctx.frames().sink("events")
