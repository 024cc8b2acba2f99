"""A row chain that passes every decoded record to the single sink, so a pipeline of the
real-broker tests (tests/kafka/test_effectively_once_kill.py and others) run with it takes
the row path (B89).

``spate run --chain tests.kafka._eo_row_chain:chains`` (``_pipeline.ROW_CHAIN``).
"""

from __future__ import annotations

from typing import Any


def chains(ctx: Any) -> Any:
    return ctx.chain()
