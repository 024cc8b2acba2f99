"""Runs the tee pipeline of ``test_tee_no_loss.py``: ``python _tee_runner.py CONFIG``.

Each Kafka payload (``b"e-<n>"``) becomes the row ``(id, payload)``: a ClickHouse row for
the table's two columns and a ``(key, value)`` message for the Kafka sink.
"""

from __future__ import annotations

import faulthandler
import logging
import signal
import sys
from typing import Any

from spate import Pipeline, load_config


def to_row(payload: bytes) -> tuple[str, str]:
    text = payload.decode()
    return text, text


def main() -> int:
    faulthandler.register(signal.SIGUSR1, all_threads=True)  # stacks on demand, when stuck
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    logging.getLogger("urllib3").setLevel(logging.ERROR)
    pipeline = Pipeline.from_config(load_config(sys.argv[1]))

    def chains(ctx: Any) -> Any:
        return ctx.chain().map(to_row)

    return pipeline.chains(chains).run().exit_code


if __name__ == "__main__":
    raise SystemExit(main())
