"""The chain of tests/kafka/test_effectively_once_kill.py's split pipeline (B121): every
decoded record goes to each of the three sinks ``a``, ``b`` and ``c``.

``spate run --chain tests.kafka._eo_split_chain:chains``.
"""

from __future__ import annotations

from typing import Any

SINKS = ("a", "b", "c")


def chains(ctx: Any) -> Any:
    targets = [ctx.sink(name) for name in SINKS]

    def route(record: Any, out: Any) -> None:
        for target in targets:
            out.emit(target, record)

    return ctx.chain().split().route(route)
