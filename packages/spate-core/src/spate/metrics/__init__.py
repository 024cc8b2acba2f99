"""Metrics: family names in one place, a per-pipeline :class:`Meter` on prometheus-client."""

from spate.metrics import names
from spate.metrics._freshness import FRESHNESS_BUCKETS, Freshness, FreshnessSeries
from spate.metrics._lanes import LaneGauges
from spate.metrics._meter import CounterSeries, GaugeSeries, HistogramSeries, Meter
from spate.metrics.names import ALL_FAMILIES, BASE_LABELS, MetricFamily

__all__ = [
    "ALL_FAMILIES",
    "BASE_LABELS",
    "FRESHNESS_BUCKETS",
    "CounterSeries",
    "Freshness",
    "FreshnessSeries",
    "GaugeSeries",
    "HistogramSeries",
    "LaneGauges",
    "Meter",
    "MetricFamily",
    "names",
]
