"""Building the sink against the Hub test server, offering rows, reading commits back."""

from __future__ import annotations

import io
import time
from collections.abc import Mapping, Sequence
from typing import Any

import pyarrow.parquet as pq
from spate._clock import Clock
from spate.checkpoint._ack import AckToken
from spate.config import decode
from spate.records import Lane
from spate.sink import Offer
from spate.sink.writebehind import CommitGates
from spate.testing.conformance import conformance_context
from spate_huggingface import HuggingFaceSink, HuggingFaceSinkConfig, build_sink

from tests.support.hub import HubServer

REPO = "spate/readings"
TOKEN = "hf_test_token_0123456789"
LANE = Lane("readings", 0)


def body(hub: HubServer, **overrides: object) -> dict[str, object]:
    """A config body for the test server's repository, with quick retries."""
    base: dict[str, object] = {
        "repo": REPO,
        "endpoint": hub.endpoint,
        "token": TOKEN,
        "window": "1h",
        "retry": {"initial": "10ms", "max": "50ms", "max_attempts": 4},
        "request_timeout": "5s",
    }
    base.update(overrides)
    return base


def make_sink(
    config: Mapping[str, Any],
    clock: Clock | None = None,
    name: str = "hub",
    start: bool = True,
    io_threads: int = 1,
    commit_gates: CommitGates | None = None,
) -> HuggingFaceSink:
    """``io_threads=0``: commits happen inline, on the caller's thread. ``commit_gates``:
    the registry of gate locks (pipelines of one process that share it, B231)."""
    decoded = decode(HuggingFaceSinkConfig, dict(config), f"sinks.{name}.huggingface")
    context = conformance_context(
        name, clock=clock, io_threads=io_threads, commit_gates=commit_gates
    )
    sink = build_sink(decoded, context)
    if start:
        sink.start()
    return sink


class Feeder:
    """Offers rows as source batches and keeps their tokens."""

    def __init__(self, sink: HuggingFaceSink) -> None:
        self.sink = sink
        self.tokens: list[AckToken] = []
        self._offset = 0

    def batch(self, rows: Sequence[object]) -> AckToken:
        self._offset += len(rows)
        token = AckToken(LANE, 1, len(self.tokens), self._offset, len(rows), lambda t: None)
        for row in rows:
            deadline = time.monotonic() + 60
            while self.sink.offer(row, None, LANE, token) is Offer.REJECTED:
                assert time.monotonic() < deadline, "the sink refused rows for 60s"
                self.sink.tick()
                time.sleep(0.005)
        token.release(True)
        self.tokens.append(token)
        return token


def parquet_rows(files: Mapping[str, bytes]) -> list[dict[str, Any]]:
    """Every row of the committed Parquet files."""
    rows: list[dict[str, Any]] = []
    for path in sorted(files):
        if path.endswith(".parquet"):
            rows.extend(pq.read_table(io.BytesIO(files[path])).to_pylist())
    return rows
