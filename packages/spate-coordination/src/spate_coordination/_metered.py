"""The coordinator's metrics: :class:`CoordinatorMetrics` (its series) and
:class:`MeteredStore`, a store wrapper that times each operation into the store-op
histogram."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import TypeVar

from spate.metrics import CounterSeries, GaugeSeries, HistogramSeries, Meter, names

from spate_coordination._store import (
    CoordinationStore,
    Entry,
    Keyspace,
    WatchEvent,
)

T = TypeVar("T")


COMPONENT_TYPE = "coordination"


class MeteredStore:
    """Wraps a store to time each operation into the store-op histogram."""

    def __init__(self, inner: CoordinationStore, series: Callable[[str], HistogramSeries]):
        self._inner = inner
        self._series = {
            op: series(op) for op in ("create", "cas", "delete", "get", "list", "open", "close")
        }

    @property
    def ttl(self) -> float:
        return self._inner.ttl

    @property
    def endpoint(self) -> str:
        return self._inner.endpoint

    async def _timed(self, op: str, call: Awaitable[T]) -> T:
        start = time.perf_counter()
        try:
            return await call
        finally:
            self._series[op].observe(time.perf_counter() - start)

    async def open(self) -> None:
        await self._timed("open", self._inner.open())

    async def close(self) -> None:
        await self._timed("close", self._inner.close())

    async def create(self, space: Keyspace, key: str, value: bytes) -> int | None:
        return await self._timed("create", self._inner.create(space, key, value))

    async def compare_and_set(
        self, space: Keyspace, key: str, value: bytes, revision: int
    ) -> int | None:
        return await self._timed("cas", self._inner.compare_and_set(space, key, value, revision))

    async def delete(self, space: Keyspace, key: str, revision: int) -> bool:
        return await self._timed("delete", self._inner.delete(space, key, revision))

    async def get(self, space: Keyspace, key: str) -> Entry | None:
        return await self._timed("get", self._inner.get(space, key))

    async def list(self, space: Keyspace, prefix: str) -> list[Entry]:
        return await self._timed("list", self._inner.list(space, prefix))

    def watch(self, space: Keyspace, prefix: str) -> AsyncIterator[WatchEvent]:
        return self._inner.watch(space, prefix)


@dataclass(slots=True)
class CoordinatorMetrics:
    owned: GaugeSeries
    completed: CounterSeries
    quarantined: CounterSeries
    in_quarantine: GaugeSeries
    live_workers: GaugeSeries
    leader: GaugeSeries
    acquisitions: CounterSeries
    losses: CounterSeries
    store_op: Callable[[str], HistogramSeries] = field(repr=False)

    @classmethod
    def create(cls, meter: Meter, component: str) -> CoordinatorMetrics:
        labels = {"component": component, "component_type": COMPONENT_TYPE}
        return cls(
            owned=meter.gauge(names.COORD_OWNED, **labels),
            completed=meter.counter(names.COORD_COMPLETED, **labels),
            quarantined=meter.counter(names.COORD_QUARANTINED, **labels),
            in_quarantine=meter.gauge(names.COORD_IN_QUARANTINE, **labels),
            live_workers=meter.gauge(names.COORD_LIVE_WORKERS, **labels),
            leader=meter.gauge(names.COORD_LEADER, **labels),
            acquisitions=meter.counter(names.COORD_ACQUISITIONS, **labels),
            losses=meter.counter(names.COORD_LOSSES, **labels),
            store_op=lambda op: meter.histogram(names.COORD_STORE_SECONDS, op=op, **labels),
        )


__all__ = ["COMPONENT_TYPE", "CoordinatorMetrics", "MeteredStore"]
