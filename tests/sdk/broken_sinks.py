"""Deliberately broken sink connectors, and the conformance suites that must catch them.

One small JSON-lines connector on spate's sink pool, written honestly and then broken in
three ways a real connector could be:

* ``lies`` — ``write`` returns success without writing anything (breaks B2);
* ``forgets`` — ``write`` writes, then empties the buffer the pool would retry (B9);
* ``no-dedup`` — declares ``dedup_by_token`` but writes a retried batch again (B9).

And one sink that owns its acks instead of using the pool and releases each twice
(:class:`DoubleReleaseSink`, breaks B2).

The suite classes here are not named ``Test…``: pytest collects them only where a test
module (or a run naming this file's wrapper) asks for them.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar, Literal

from spate.errors import AckError
from spate.plugins import BuildContext
from spate.sink import ListRowBuffer, RowBuffer, ShardConfig, SinkConnector, SinkPool, WriteBatch
from spate.testing import BufferedSink, SealedBatch
from spate.testing._buffered import Attempt
from spate.testing.conformance import SinkConformance

Mode = Literal["honest", "lies", "forgets", "no-dedup"]


@dataclass(frozen=True, slots=True, kw_only=True)
class JsonlSinkConfig:
    path: str
    mode: Mode = "honest"


class JsonlWriter:
    def __init__(self, path: str, mode: Mode) -> None:
        self.endpoint = path
        self._mode = mode
        self._tokens: set[str] = set()

    def probe(self) -> None:
        Path(self.endpoint).touch()

    def write(self, batch: WriteBatch) -> None:
        if self._mode == "lies":
            return  # "success" without a single row written
        buffer = batch.buffer
        assert isinstance(buffer, ListRowBuffer)
        if self._mode == "honest" and batch.token in self._tokens:
            return
        with open(self.endpoint, "a") as out:
            for row in buffer.rows:
                out.write(json.dumps(row) + "\n")
        self._tokens.add(batch.token)
        if self._mode == "forgets":
            buffer.rows.clear()

    def close(self) -> None:
        pass


class JsonlConnector:
    def __init__(self, config: JsonlSinkConfig) -> None:
        self._config = config

    def new_buffer(self, shard: int) -> RowBuffer:
        return ListRowBuffer()

    def open_writer(self, shard: int, replica: int, endpoint: str) -> JsonlWriter:
        return JsonlWriter(endpoint, self._config.mode)


class JsonlSinkFactory:
    config_model: ClassVar[type[JsonlSinkConfig]] = JsonlSinkConfig

    @staticmethod
    def build(config: JsonlSinkConfig, context: BuildContext) -> SinkPool:
        return SinkPool.from_context(
            JsonlConnector(config), context, shards=[ShardConfig(replicas=(config.path,))]
        )


class JsonlSuite(SinkConformance):
    """The sink suite over the JSON-lines connector in one ``mode``."""

    factory = JsonlSinkFactory
    tag = "jsonl"
    mode: ClassVar[Mode] = "honest"
    dedup_by_token = True

    @property
    def path(self) -> Path:
        return self.workdir / "out.jsonl"

    def config(self) -> Mapping[str, object]:
        return {"path": str(self.path), "mode": self.mode}

    def rows(self, count: int) -> list[object]:
        return [[i, f"row-{i}"] for i in range(count)]

    def written(self) -> list[object]:
        if not self.path.exists():
            return []
        return [json.loads(line) for line in self.path.read_text().splitlines()]

    def open_connector(self) -> tuple[SinkConnector, str]:
        return JsonlConnector(self.decode_config()), str(self.path)


class HonestSuite(JsonlSuite):
    mode = "honest"


class LyingSuite(JsonlSuite):
    mode = "lies"


class ForgetfulSuite(JsonlSuite):
    mode = "forgets"


class NoDedupSuite(JsonlSuite):
    mode = "no-dedup"


class DoubleReleaseSink(BufferedSink):
    """A sink that owns its acks (no pool) and releases each one twice after a write,
    swallowing the error the second release raises: the bug B2's holder check catches."""

    def __init__(self, path: str) -> None:
        super().__init__("jsonl-twice", max_rows=5)
        self._path = path

    def _attempt(self, batch: SealedBatch) -> Attempt:
        with open(self._path, "a") as out:
            for row in batch.rows:
                out.write(json.dumps(row.row) + "\n")
        return "ok"

    def _resolve(self, batches: list[SealedBatch], *, ok: bool) -> None:
        super()._resolve(batches, ok=ok)
        for batch in batches:
            for ack in batch.acks:
                with contextlib.suppress(AckError):  # "harmless", says the sink's author
                    ack.release(ok, holder=batch.holder)


class DoubleReleaseSinkFactory:
    config_model: ClassVar[type[JsonlSinkConfig]] = JsonlSinkConfig

    @staticmethod
    def build(config: JsonlSinkConfig, context: BuildContext) -> DoubleReleaseSink:
        return DoubleReleaseSink(config.path)


class DoubleReleaseSuite(JsonlSuite):
    factory = DoubleReleaseSinkFactory
    dedup_by_token = False

    def open_connector(self) -> None:  # type: ignore[override]
        return None
