"""Runs the flagship example under ``delivery: effectively_once`` (B88 to B90).

``python _eo_runner.py CONFIG split|single``: ``split`` is the flagship's own chain (one
table per event kind); ``single`` sends every event to one ``events`` table as
``(kind, order_id)``. The configuration file is written by the test.
"""

from __future__ import annotations

import faulthandler
import importlib.util
import signal
import sys
from pathlib import Path
from typing import Any

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "kafka_avro_to_clickhouse.py"


def single(ctx: Any) -> Any:
    events = ctx.sink("events")

    def route(event: Any, out: Any) -> None:
        out.emit(events, (event.kind, event.record["order_id"]))

    return ctx.chain().split().route(route)


def main() -> int:
    faulthandler.register(signal.SIGUSR1, all_threads=True)  # stacks on demand, when stuck
    config, mode = sys.argv[1], sys.argv[2]
    spec = importlib.util.spec_from_file_location("flagship", EXAMPLE)
    assert spec is not None and spec.loader is not None
    flagship = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(flagship)
    chains = flagship.chains if mode == "split" else single
    code: int = flagship.main(["--config", config, "--no-create-tables"], chains=chains)
    return code


if __name__ == "__main__":
    raise SystemExit(main())
