"""Runs the flagship example under ``delivery: effectively_once`` (B88 to B90).

``python _eo_runner.py CONFIG split|single|columnar``: ``split`` is the flagship's own chain
(one table per event kind); ``single`` sends every event to one ``events`` table as
``(kind, order_id)``; ``columnar`` is the columnar flagship's frame chain (the same three
tables, as columns; B145). The configuration file is written by the test.
"""

from __future__ import annotations

import faulthandler
import importlib.util
import signal
import sys
from pathlib import Path
from typing import Any

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def single(ctx: Any) -> Any:
    events = ctx.sink("events")

    def route(event: Any, out: Any) -> None:
        out.emit(events, (event.kind, event.record["order_id"]))

    return ctx.chain().split().route(route)


def load(name: str) -> Any:
    spec = importlib.util.spec_from_file_location(name, EXAMPLES / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def main() -> int:
    faulthandler.register(signal.SIGUSR1, all_threads=True)  # stacks on demand, when stuck
    config, mode = sys.argv[1], sys.argv[2]
    flagship = load("kafka_avro_to_clickhouse")
    chains = flagship.chains
    if mode == "single":
        chains = single
    elif mode == "columnar":
        chains = load("kafka_avro_to_clickhouse_columnar").chains
    code: int = flagship.main(["--config", config, "--no-create-tables"], chains=chains)
    return code


if __name__ == "__main__":
    raise SystemExit(main())
