"""Helpers for the ClickHouse sink's integration tests: build a sink, drive rows through it.

``build_sink(body, name)`` decodes a ``clickhouse:`` body and builds the sink as the
runtime would (through the entry-point factory, with its own meter, a real clock and byte
budget; ``sinks`` are the other sinks' sections by name, for ``late_data.to``).
:class:`Driver` plays the pipeline thread: it offers rows with one ack per source
batch, waits and offers again while the sink refuses (counting how often: that is the
source being backpressured), releases the chain's hold on each ack, and flushes.
"""

from __future__ import annotations

import datetime as dt
import itertools
import random
import threading
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from spate._clock import SystemClock
from spate.checkpoint._ack import AckStatus, AckToken
from spate.config import decode
from spate.flow._budget import InflightBudget
from spate.metrics._meter import Meter
from spate.plugins import BuildContext
from spate.records import Lane
from spate.sink import Offer, RecordPosition
from spate_clickhouse import ClickHouseSinkConfig, ClickHouseSinkFactory

_names = itertools.count()


@dataclass
class BuiltSink:
    sink: Any
    meter: Meter
    component: str
    pipeline: str
    budget: InflightBudget

    def metric(self, name: str, **labels: str) -> float:
        """The current value of one series of this sink (0 when it has no sample yet)."""
        full = {"pipeline": self.pipeline, "component": self.component, "component_type": "sink"}
        full.update(labels)
        value = self.meter.registry.get_sample_value(name, full)
        return 0.0 if value is None else float(value)


def build_sink(
    body: dict[str, Any],
    name: str = "events",
    *,
    io_threads: int = 2,
    pipeline: str | None = None,
    meter: Meter | None = None,
    budget: InflightBudget | None = None,
    sinks: dict[str, dict[str, Any]] | None = None,
    replay_blocks: int | None = None,
) -> BuiltSink:
    """The sink of ``body``; under ``effectively_once`` when ``replay_blocks`` is given
    (the blocks B123 counts before a replay)."""
    config = decode(ClickHouseSinkConfig, body, f"sinks.{name}.clickhouse")
    pipeline = pipeline if pipeline is not None else f"chtest{next(_names)}"
    meter = meter if meter is not None else Meter(pipeline)
    budget = budget if budget is not None else InflightBudget(1 << 34)
    context = BuildContext(
        pipeline=pipeline,
        component=name,
        meter=meter,
        clock=SystemClock(),
        run_nonce=f"nonce{time.monotonic_ns()}",
        budget=budget,
        io_threads=io_threads,
        delivery="effectively_once" if replay_blocks is not None else "at_least_once",
        position=RecordPosition() if replay_blocks is not None else None,
        replay_blocks=replay_blocks or 0,
        sinks={
            other: decode(ClickHouseSinkConfig, section, f"sinks.{other}.clickhouse")
            for other, section in {name: body, **(sinks or {})}.items()
        },
    )
    sink = ClickHouseSinkFactory.build(config, context)
    return BuiltSink(sink, meter, name, pipeline, budget)


@dataclass
class Driver:
    """Offers rows like the pipeline thread does, one ack per ``batch_rows`` rows."""

    sink: Any
    batch_rows: int = 1000
    rejections: int = 0
    statuses: list[AckStatus] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _seq: int = 0

    def _resolved(self, token: AckToken) -> None:
        with self._lock:
            self.statuses.append(token.status)

    def offer_all(
        self,
        rows: Sequence[object],
        keys: Sequence[bytes | None] | None = None,
        *,
        partition: int = 0,
        timeout: float = 120.0,
    ) -> None:
        """Offer every row (waiting while refused); raises after ``timeout`` of refusals."""
        lane = Lane("test", partition)
        deadline = time.monotonic() + timeout
        for start in range(0, len(rows), self.batch_rows):
            chunk = rows[start : start + self.batch_rows]
            self._seq += 1
            ack = AckToken(lane, 0, self._seq, start + len(chunk), len(chunk), self._resolved)
            for i, row in enumerate(chunk):
                key = keys[start + i] if keys is not None else None
                while self.sink.offer(row, key, lane, ack) is Offer.REJECTED:
                    self.rejections += 1
                    if time.monotonic() > deadline:
                        ack.release(False)
                        raise TimeoutError(f"the sink refused rows for {timeout}s")
                    time.sleep(0.005)
            ack.release(True)

    def finish(self, timeout: float = 120.0) -> bool:
        """Flush everything; True when all was written."""
        return bool(self.sink.flush(time.monotonic() + timeout))

    @property
    def all_delivered(self) -> bool:
        return bool(self.statuses) and all(s is AckStatus.DELIVERED for s in self.statuses)


def rows_of(client: Any, sql: str) -> list[tuple[Any, ...]]:
    return [tuple(r) for r in client.query(sql).result_rows]


def ids_on(clients: Iterable[Any], table: str, column: str = "id") -> list[int]:
    """Every value of ``column`` on these replicas (with repeats)."""
    found: list[int] = []
    for client in clients:
        found.extend(int(r[0]) for r in client.query(f"SELECT {column} FROM {table}").result_rows)
    return found


class GaugeWatcher:
    """Samples one series in the background and remembers the largest value seen."""

    def __init__(self, built: BuiltSink, name: str, **labels: str) -> None:
        self.peak = 0.0
        self._built, self._name, self._labels = built, name, labels
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            self.peak = max(self.peak, self._built.metric(self._name, **self._labels))
            self._stop.wait(0.02)

    def stop(self) -> float:
        self._stop.set()
        self._thread.join(5)
        return self.peak


STRAGGLERS_NOW = dt.datetime(2026, 6, 30, 12, 0, tzinfo=dt.UTC)
"""The newest event time of :func:`straggling_rows` (data, not a clock)."""


def straggling_rows(
    count: int, now: dt.datetime = STRAGGLERS_NOW, seed: int = 34
) -> list[tuple[int, dt.datetime]]:
    """``(id, ts)`` rows: a tenth spread over the two years before ``now``, the rest in
    its last hour, the last row at ``now`` (B240, B242)."""
    rng = random.Random(seed)
    rows = []
    for i in range(count):
        if i % 10 == 3:
            ts = now - dt.timedelta(seconds=rng.randrange(0, 2 * 365 * 86_400))
        else:
            ts = now - dt.timedelta(seconds=rng.randrange(0, 3600))
        rows.append((i, ts))
    rows[-1] = (count - 1, now)
    return rows
