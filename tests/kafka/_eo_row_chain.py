"""A row chain that passes every decoded record to the single sink, so the pipeline of
tests/kafka/test_effectively_once_kill.py runs on the row path (B89).

``spate run --chain tests.kafka._eo_row_chain:chains``.
"""

from __future__ import annotations

from typing import Any


def chains(ctx: Any) -> Any:
    return ctx.chain()
