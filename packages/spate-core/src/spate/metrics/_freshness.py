"""End-to-end freshness: how old rows are when written, and how long until committed (B220-B223).

Two histograms measure it (docs/guides/monitoring.md):

* ``spate_sink_event_to_written_seconds{table}`` — per sink and destination table, the
  time from a row's event time (its source batch's oldest record timestamp — the Kafka
  message timestamp — or the sink's configured event-time column) to the completion of
  the insert that wrote it. One observation per written batch, counted once per row
  (a *weighted* observation), so ``_count`` is the rows written.
* ``spate_checkpoint_written_to_committed_seconds{table}`` — per sink and table, the time
  from that sink's write of a source batch to the commit of a position past it, counted
  once per record of the batch.

Prometheus-client's histogram takes one observation at a time; a batch of 10,000 rows
would cost 10,000 calls. :class:`WeightedHistogram` is a collector of the same
exposition that takes ``observe(value, count)``. The buckets (:data:`FRESHNESS_BUCKETS`)
are exponential, a factor of √2 apart from 10 ms to about 3 hours, so a quantile read
from them (``histogram_quantile``) is within about 20 % of the true one at any scale —
fine enough for p50 and p99 (classic buckets: prometheus-client does not expose native
histograms).

:class:`Freshness` also keeps the recent bucket counts of each series in time slots, so
the status line and ``/readyz`` can read p50/p99 of the last minute without a
Prometheus server (:meth:`Freshness.quantiles`). It never reads a clock itself: callers
pass the wall time of their pipeline's ``Clock``.
"""

from __future__ import annotations

import bisect
import math
import threading
from collections.abc import Iterator, Sequence

from prometheus_client import CollectorRegistry
from prometheus_client.core import HistogramMetricFamily, Metric
from prometheus_client.registry import Collector

FRESHNESS_BUCKETS: tuple[float, ...] = tuple(round(0.01 * math.sqrt(2) ** i, 6) for i in range(41))
"""Upper bounds (seconds): 0.01 · √2ⁱ for i in 0..40, from 10 ms to about 2.9 hours."""

_SLOT_SECONDS = 10.0
"""Width of one slot of recent counts; quantiles cover whole slots."""
_SLOTS = 61
"""Slots kept: the longest readable window is ten minutes."""


class WeightedHistogramSeries:
    """One labelled series of a :class:`WeightedHistogram`. Thread-safe."""

    __slots__ = ("_bounds", "_counts", "_lock", "_sum")

    def __init__(self, bounds: Sequence[float]) -> None:
        self._bounds = bounds
        self._counts = [0.0] * (len(bounds) + 1)  # the last one is +Inf
        self._sum = 0.0
        self._lock = threading.Lock()

    def observe(self, amount: float, count: float = 1) -> None:
        """Record ``count`` observations of ``amount`` (count ≤ 0 records nothing)."""
        if count <= 0:
            return
        index = bisect.bisect_left(self._bounds, amount)
        with self._lock:
            self._counts[index] += count
            self._sum += amount * count

    def snapshot(self) -> tuple[list[float], float]:
        """Per-bucket (not cumulative) counts, +Inf last, and the sum."""
        with self._lock:
            return list(self._counts), self._sum


class WeightedHistogram(Collector):
    """A Prometheus histogram whose observations carry a count (a batch of rows)."""

    def __init__(
        self,
        name: str,
        documentation: str,
        labelnames: Sequence[str],
        *,
        registry: CollectorRegistry | None,
        buckets: Sequence[float],
    ) -> None:
        self._name = name
        self._doc = documentation
        self._labelnames = tuple(labelnames)
        self._bounds = tuple(sorted(buckets))
        self._series: dict[tuple[str, ...], WeightedHistogramSeries] = {}
        self._lock = threading.Lock()
        if registry is not None:
            registry.register(self)

    def labels(self, **labels: str) -> WeightedHistogramSeries:
        key = tuple(labels[name] for name in self._labelnames)
        with self._lock:
            series = self._series.get(key)
            if series is None:
                series = self._series[key] = WeightedHistogramSeries(self._bounds)
            return series

    def describe(self) -> Iterator[Metric]:
        yield HistogramMetricFamily(self._name, self._doc, labels=self._labelnames)

    def collect(self) -> Iterator[Metric]:
        family = HistogramMetricFamily(self._name, self._doc, labels=self._labelnames)
        with self._lock:
            items = list(self._series.items())
        for key, series in items:
            counts, total = series.snapshot()
            cumulative = 0.0
            buckets: list[tuple[str, float]] = []
            for bound, count in zip((*self._bounds, math.inf), counts, strict=True):
                cumulative += count
                buckets.append((_le(bound), cumulative))
            family.add_metric(list(key), buckets, total)
        yield family


def _le(bound: float) -> str:
    return "+Inf" if math.isinf(bound) else repr(float(bound))


def quantile(bounds: Sequence[float], counts: Sequence[float], q: float) -> float | None:
    """The ``q`` quantile of per-bucket ``counts`` (+Inf last), as ``histogram_quantile``
    computes it: linear within the bucket it falls in. None when there are no counts; the
    highest finite bound when it falls in +Inf."""
    total = sum(counts)
    if total <= 0:
        return None
    rank = q * total
    seen = 0.0
    lower = 0.0
    for bound, count in zip(bounds, counts, strict=False):
        if count and seen + count >= rank:
            return lower + (bound - lower) * ((rank - seen) / count)
        seen += count
        lower = bound
    return float(bounds[-1])


class _Recent:
    """Bucket counts of one series in time slots of ``_SLOT_SECONDS`` (lock held by owner)."""

    __slots__ = ("slots",)

    def __init__(self) -> None:
        self.slots: dict[int, list[float]] = {}

    def add(self, slot: int, index: int, count: float, width: int) -> None:
        counts = self.slots.get(slot)
        if counts is None:
            counts = self.slots[slot] = [0.0] * width
            for old in [s for s in self.slots if s <= slot - _SLOTS]:
                del self.slots[old]
        counts[index] += count

    def window(self, first_slot: int, width: int) -> list[float]:
        out = [0.0] * width
        for slot, counts in self.slots.items():
            if slot >= first_slot:
                for i, c in enumerate(counts):
                    out[i] += c
        return out


class FreshnessSeries:
    """What a sink (or the committer) records into: one histogram series and its recent
    counts. Thread-safe; ``now`` is the wall time of the pipeline's clock."""

    __slots__ = ("_bounds", "_lock", "_recent", "_series")

    def __init__(self, series: WeightedHistogramSeries, bounds: Sequence[float]) -> None:
        self._series = series
        self._bounds = bounds
        self._recent = _Recent()
        self._lock = threading.Lock()

    def observe(self, age: float, count: float, now: float) -> None:
        """``count`` rows (or records) were ``age`` seconds old at ``now``."""
        if count <= 0:
            return
        age = max(age, 0.0)
        self._series.observe(age, count)
        index = bisect.bisect_left(self._bounds, age)
        with self._lock:
            self._recent.add(int(now // _SLOT_SECONDS), index, count, len(self._bounds) + 1)

    def recent(self, now: float, window: float) -> list[float]:
        """Per-bucket counts of the observations of the last ``window`` seconds (whole
        slots: up to one slot more)."""
        first = int((now - window) // _SLOT_SECONDS) + 1
        with self._lock:
            return self._recent.window(first, len(self._bounds) + 1)


class Freshness:
    """The freshness series of one pipeline, by (family, component, table).

    Owned by the pipeline's :class:`~spate.metrics.Meter` (``meter.freshness``); sinks
    record as they write, the committer as it commits, and the status line and the
    readiness probe read :meth:`quantiles`.
    """

    def __init__(self, histograms: dict[str, WeightedHistogram], pipeline: str) -> None:
        self._histograms = histograms
        self._pipeline = pipeline
        self._lock = threading.Lock()
        self._series: dict[tuple[str, str, str], FreshnessSeries] = {}

    def series(
        self, family: str, *, component: str, component_type: str, table: str
    ) -> FreshnessSeries:
        """The series of ``family`` (a name in :data:`FRESHNESS_FAMILIES`) for one sink
        and table; the same object on every call."""
        key = (family, component, table)
        with self._lock:
            found = self._series.get(key)
            if found is None:
                histogram = self._histograms[family]
                found = self._series[key] = FreshnessSeries(
                    histogram.labels(
                        pipeline=self._pipeline,
                        component=component,
                        component_type=component_type,
                        table=table,
                    ),
                    FRESHNESS_BUCKETS,
                )
            return found

    def quantiles(
        self, family: str, now: float, window: float, qs: Sequence[float] = (0.5, 0.99)
    ) -> dict[str, tuple[float | None, ...]]:
        """``{"<sink>/<table>": (q1, q2, …)}`` over the last ``window`` seconds for every
        series of ``family`` that has observations in it."""
        with self._lock:
            items = [(k, s) for k, s in self._series.items() if k[0] == family]
        out: dict[str, tuple[float | None, ...]] = {}
        for (_, component, table), series in items:
            counts = series.recent(now, window)
            if sum(counts) > 0:
                out[f"{component}/{table}"] = tuple(
                    quantile(FRESHNESS_BUCKETS, counts, q) for q in qs
                )
        return out
