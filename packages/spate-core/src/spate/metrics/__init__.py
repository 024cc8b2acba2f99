"""Metrics: family names in one place, a per-pipeline :class:`Meter` on prometheus-client."""

from spate.metrics import names
from spate.metrics._meter import CounterSeries, GaugeSeries, HistogramSeries, Meter
from spate.metrics.names import ALL_FAMILIES, MetricFamily

__all__ = [
    "ALL_FAMILIES",
    "CounterSeries",
    "GaugeSeries",
    "HistogramSeries",
    "Meter",
    "MetricFamily",
    "names",
]
