"""The per-pipeline meter: creates labelled prometheus-client series on its own registry.

There is no module-level registry: each pipeline gets a :class:`Meter` with a fresh
``CollectorRegistry`` (or one it is handed), so several pipelines can share a process
and tests never reset global state. Every series carries ``pipeline``, ``component`` and
``component_type`` labels plus the family's own labels (docs/guides/monitoring.md, B23).
"""

from __future__ import annotations

import threading
from collections.abc import Iterable
from typing import Protocol, cast

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from spate.metrics._freshness import Freshness, WeightedHistogram
from spate.metrics.names import (
    BASE_LABELS,
    FRESHNESS_FAMILIES,
    PIPELINE_FAMILIES,
    MetricFamily,
)


class CounterSeries(Protocol):
    def inc(self, amount: float = 1) -> None: ...


class GaugeSeries(Protocol):
    def set(self, value: float) -> None: ...
    def inc(self, amount: float = 1) -> None: ...
    def dec(self, amount: float = 1) -> None: ...


class HistogramSeries(Protocol):
    def observe(self, amount: float) -> None: ...


class Meter:
    """Hands out metric series for one pipeline. Thread-safe."""

    def __init__(
        self,
        pipeline: str,
        registry: CollectorRegistry | None = None,
        *,
        declare: Iterable[MetricFamily] | None = PIPELINE_FAMILIES,
    ) -> None:
        """A meter for ``pipeline`` on ``registry`` (a fresh one by default).

        Every family in ``declare`` is registered at once, so a scrape lists each
        documented family from the start, even before a component records into it
        (B23). The default is every family a pipeline has; the coordination families
        are added for coordinated pipelines (pass ``ALL_FAMILIES``), so a Kafka pipeline
        does not export families that cannot apply. Other families register when first
        used; ``declare=None`` registers everything lazily.
        """
        self.pipeline = pipeline
        self.registry = registry if registry is not None else CollectorRegistry(auto_describe=True)
        self._lock = threading.Lock()
        self._collectors: dict[str, Counter | Gauge | Histogram] = {}
        self._weighted: dict[str, WeightedHistogram] = {}
        for family in declare or ():
            if family.weighted:
                self._weighted_histogram(family)
            else:
                self._collector(family)
        self._freshness: Freshness | None = None

    def _weighted_histogram(self, family: MetricFamily) -> WeightedHistogram:
        with self._lock:
            existing = self._weighted.get(family.name)
            if existing is None:
                existing = self._weighted[family.name] = WeightedHistogram(
                    family.name,
                    family.help,
                    (*BASE_LABELS, *family.labels),
                    registry=self.registry,
                    buckets=family.buckets or Histogram.DEFAULT_BUCKETS,
                )
            return existing

    @property
    def freshness(self) -> Freshness:
        """The pipeline's freshness series (B220): sinks and the committer record into it,
        the status line and ``/readyz`` read it."""
        with self._lock:
            found = self._freshness
        if found is None:
            histograms = {f.name: self._weighted_histogram(f) for f in FRESHNESS_FAMILIES}
            with self._lock:
                if self._freshness is None:
                    self._freshness = Freshness(histograms, self.pipeline)
                found = self._freshness
        return found

    def label_names(self, family: MetricFamily) -> tuple[str, ...]:
        """All label names of ``family``'s series: the base labels, then its own."""
        return (*BASE_LABELS, *family.labels)

    def _collector(self, family: MetricFamily) -> Counter | Gauge | Histogram:
        if family.weighted:
            raise ValueError(f"{family.name} is recorded through meter.freshness")
        with self._lock:
            existing = self._collectors.get(family.name)
            if existing is not None:
                return existing
            labels = (*BASE_LABELS, *family.labels)
            collector: Counter | Gauge | Histogram
            if family.kind == "counter":
                collector = Counter(family.name, family.help, labels, registry=self.registry)
            elif family.kind == "gauge":
                collector = Gauge(family.name, family.help, labels, registry=self.registry)
            else:
                collector = Histogram(
                    family.name,
                    family.help,
                    labels,
                    registry=self.registry,
                    buckets=family.buckets or Histogram.DEFAULT_BUCKETS,
                )
            self._collectors[family.name] = collector
            return collector

    def _labels(
        self, family: MetricFamily, component: str, component_type: str, labels: dict[str, str]
    ) -> dict[str, str]:
        if set(labels) != set(family.labels):
            raise ValueError(
                f"{family.name} takes labels {sorted(family.labels)}, got {sorted(labels)}"
            )
        return {
            "pipeline": self.pipeline,
            "component": component,
            "component_type": component_type,
            **labels,
        }

    def counter(
        self, family: MetricFamily, *, component: str, component_type: str, **labels: str
    ) -> CounterSeries:
        if family.kind != "counter":
            raise ValueError(f"{family.name} is a {family.kind}, not a counter")
        collector = self._collector(family)
        return cast(Counter, collector).labels(
            **self._labels(family, component, component_type, labels)
        )

    def gauge(
        self, family: MetricFamily, *, component: str, component_type: str, **labels: str
    ) -> GaugeSeries:
        if family.kind != "gauge":
            raise ValueError(f"{family.name} is a {family.kind}, not a gauge")
        collector = self._collector(family)
        return cast(Gauge, collector).labels(
            **self._labels(family, component, component_type, labels)
        )

    def histogram(
        self, family: MetricFamily, *, component: str, component_type: str, **labels: str
    ) -> HistogramSeries:
        if family.kind != "histogram":
            raise ValueError(f"{family.name} is a {family.kind}, not a histogram")
        collector = self._collector(family)
        return cast(Histogram, collector).labels(
            **self._labels(family, component, component_type, labels)
        )

    def totals(self, family: MetricFamily, by: str) -> dict[str, float]:
        """The current value of ``family``'s samples of this pipeline, summed by label ``by``.

        For reports (the exit summary, the status line), not the hot path: it walks the
        collector's samples. Counters and gauges only; values of zero are left out.
        """
        if by not in family.labels:
            raise ValueError(f"{family.name} has no label {by!r}")
        with self._lock:
            collector = self._collectors.get(family.name)
        if collector is None:
            return {}
        sums: dict[str, float] = {}
        for metric in collector.collect():
            for sample in metric.samples:
                if sample.name != family.name:
                    continue
                if sample.labels.get("pipeline") != self.pipeline or not sample.value:
                    continue
                key = sample.labels.get(by, "")
                sums[key] = sums.get(key, 0.0) + sample.value
        return sums
