"""Lag per partition from librdkafka's statistics (B23, B32).

librdkafka reports, every ``statistics_interval``, each partition's high watermark, last
stable offset, the application's position, the committed offset and the next fetch
offset. :class:`PartitionLag` turns them into the two gauges per lane (position lag and
committed lag) and into the records not fetched yet that ``/healthz`` reads (B32).
"""

from __future__ import annotations

import json
import logging
import math
import threading
from collections.abc import Collection, Mapping
from typing import Any

from spate.metrics import GaugeSeries, Meter
from spate.metrics import names as metric_names
from spate.records import Lane

logger = logging.getLogger(__name__)


def _offset(info: Mapping[str, Any], field: str) -> int | None:
    value = info.get(field, -1)
    return value if isinstance(value, int) and value >= 0 else None


def _partition_lags(info: Mapping[str, Any], from_start: bool) -> tuple[int, int] | None:
    """``(position lag, committed lag)`` of a partition from librdkafka's statistics.

    Both count records up to the partition's end: the last stable offset when librdkafka
    reports one (``read_committed``), else the high watermark. The position lag counts
    from the consumer's position — the next record the pipeline takes — and says how far
    behind the pipeline reads; the committed lag counts from the group's committed offset
    and says how much a crash now would replay. Before the first record is taken the
    position is where the consumer resumes: the committed offset, or without one the
    start (``auto.offset.reset: earliest``, the low watermark) or the end of the partition.
    None while librdkafka knows no end yet.
    """
    end = _offset(info, "ls_offset")
    if end is None:
        end = _offset(info, "hi_offset")
    if end is None:
        return None
    committed = _offset(info, "committed_offset")
    if committed is None:
        low = _offset(info, "lo_offset")
        committed = (low if low is not None else 0) if from_start else end
    position = _offset(info, "app_offset")
    if position is None:
        position = committed
    return max(0, end - position), max(0, end - committed)


def _fetch_lag(info: Mapping[str, Any], end: int | None) -> int | None:
    """Records of a partition the consumer has not fetched yet (B32).

    From librdkafka's next fetch offset (which a pause rewinds to the application's
    position, and which steps over transaction markers) or the application's position,
    to the last stable offset (the high watermark without one), capped at the bounded
    run's end offset. None while librdkafka knows neither end.
    """
    known = [
        value
        for value in (info.get("next_offset"), info.get("app_offset"))
        if isinstance(value, int) and value >= 0
    ]
    position = max(known) if known else info.get("committed_offset", -1)
    high = info.get("ls_offset", -1)
    if not isinstance(high, int) or high < 0:
        high = info.get("hi_offset", -1)
    if not isinstance(high, int) or not isinstance(position, int) or high < 0 or position < 0:
        return None
    if end is not None:
        high = min(high, end)
    return max(0, high - position)


class PartitionLag:
    """The lag gauges of one topic's partitions and the records each has not fetched.

    :meth:`on_stats` runs on librdkafka's statistics callback (the pipeline thread,
    inside ``consume``); :meth:`unfetched` may be read from any thread.
    """

    def __init__(self, topic: str, meter: Meter | None, component: str, from_start: bool) -> None:
        self._topic = topic
        self._meter = meter
        self._component = component
        self._from_start = from_start
        self._lock = threading.Lock()
        self._gauges: dict[int, tuple[GaugeSeries, GaugeSeries]] = {}
        self._unfetched: dict[int, int] = {}

    def on_stats(
        self, raw: str, owned: Collection[int], end_offsets: Mapping[int, int] | None
    ) -> None:
        """Read one statistics document: set the gauges of the ``owned`` partitions."""
        try:
            stats = json.loads(raw)
            partitions = stats["topics"][self._topic]["partitions"]
        except (ValueError, KeyError, TypeError):
            return
        for key, info in partitions.items():
            try:
                partition = int(key)
            except ValueError:
                continue
            if partition < 0 or partition not in owned:
                continue
            lags = _partition_lags(info, self._from_start)
            if lags is not None:
                self.set(partition, *lags)
            end = end_offsets.get(partition) if end_offsets is not None else None
            unfetched = _fetch_lag(info, end)
            if unfetched is not None:
                with self._lock:
                    self._unfetched[partition] = unfetched

    def unknown(self, partitions: Collection[int]) -> None:
        """Newly assigned partitions: unknown until librdkafka's next statistics (B23)."""
        for p in partitions:
            self.set(p, math.nan)

    def released(self, partitions: Collection[int]) -> None:
        """Partitions no longer owned: their lag is 0 and nothing is unfetched (B23)."""
        for p in partitions:
            self.set(p, 0)
        with self._lock:
            for p in partitions:
                self._unfetched.pop(p, None)

    def release_all(self) -> None:
        """The consumer closed: every lag gauge goes to 0."""
        with self._lock:
            partitions = list(self._gauges)
        for p in partitions:
            self.set(p, 0)

    def unfetched(self) -> dict[int, int]:
        """Records not fetched yet per partition, as last reported (any thread)."""
        with self._lock:
            return dict(self._unfetched)

    def set(self, partition: int, value: float, committed: float | None = None) -> None:
        """Set a partition's position lag and committed lag (``committed`` defaults to
        ``value``); NaN says "not measured yet" (B23)."""
        meter = self._meter
        if meter is None:
            return
        with self._lock:
            gauges = self._gauges.get(partition)
            if gauges is None:
                lane = str(Lane(self._topic, partition))
                labels = {"component": self._component, "component_type": "kafka", "lane": lane}
                gauges = (
                    meter.gauge(metric_names.SOURCE_LAG, **labels),
                    meter.gauge(metric_names.SOURCE_COMMITTED_LAG, **labels),
                )
                self._gauges[partition] = gauges
        gauges[0].set(value)
        gauges[1].set(value if committed is None else committed)
