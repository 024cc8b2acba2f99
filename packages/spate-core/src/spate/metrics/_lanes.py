"""Per-lane gauges that fall to 0 when a lane is no longer owned (B23).

Lag (and any other per-lane gauge) must not keep reporting the last value of a partition
another process now owns: dashboards would sum a phantom backlog. A source or runtime
keeps one :class:`LaneGauges` per family, sets values for the lanes it owns, and calls
:meth:`LaneGauges.disown` from its revoke path; :meth:`LaneGauges.retain_only` fits
sources that learn ownership from periodic statistics (librdkafka's).
"""

from __future__ import annotations

import threading
from collections.abc import Iterable

from spate.metrics._meter import GaugeSeries, Meter
from spate.metrics.names import MetricFamily


class LaneGauges:
    """Gauge series of ``family`` keyed by lane (the ``lane`` label). Thread-safe."""

    def __init__(
        self, meter: Meter, family: MetricFamily, *, component: str, component_type: str
    ) -> None:
        if family.kind != "gauge" or family.labels != ("lane",):
            raise ValueError(f"{family.name} is not a gauge labelled by lane only")
        self._meter = meter
        self._family = family
        self._component = component
        self._component_type = component_type
        self._lock = threading.Lock()
        self._series: dict[str, GaugeSeries] = {}
        self._owned: set[str] = set()

    def _get(self, lane: str) -> GaugeSeries:
        series = self._series.get(lane)
        if series is None:
            series = self._meter.gauge(
                self._family,
                component=self._component,
                component_type=self._component_type,
                lane=lane,
            )
            self._series[lane] = series
        return series

    def set(self, lane: object, value: float) -> None:
        """Record ``value`` for ``lane`` (anything whose ``str`` is the lane label)."""
        label = str(lane)
        with self._lock:
            self._get(label).set(value)
            self._owned.add(label)

    def disown(self, lanes: Iterable[object]) -> None:
        """The lanes are no longer owned: their gauges read 0 from now on."""
        with self._lock:
            for lane in lanes:
                label = str(lane)
                if label in self._series:
                    self._series[label].set(0)
                self._owned.discard(label)

    def retain_only(self, lanes: Iterable[object]) -> None:
        """Zero every lane not in ``lanes`` (the full set currently owned)."""
        keep = {str(lane) for lane in lanes}
        with self._lock:
            owned = set(self._owned)
        self.disown(owned - keep)

    def owned(self) -> frozenset[str]:
        """Labels of the lanes holding a value now."""
        with self._lock:
            return frozenset(self._owned)
