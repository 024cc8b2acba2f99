"""One admin endpoint for several pipelines or worker processes (B64, B92).

:func:`merge_families` folds metric families from several registries into one family
per name, as the exposition format requires, adding labels to each source's samples
(``worker`` for a worker process); the ``pipeline`` label the meter puts on every
series already tells pipelines apart. :class:`AllHealth` is ready when every member
is, and alive while every member is.

Does not own: the HTTP server (``spate.admin._server``), what a member is (a pipeline,
a supervised run, the parent of worker processes).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence

from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector

from spate.admin._probes import HealthView


def merge_families(sources: Iterable[tuple[Iterable[Metric], Mapping[str, str]]]) -> list[Metric]:
    """The families of every source, merged by name; each source's samples get its labels."""
    merged: dict[str, Metric] = {}
    for families, labels in sources:
        for family in families:
            target = merged.get(family.name)
            if target is None:
                target = Metric(family.name, family.documentation, family.type, family.unit)
                merged[family.name] = target
            for sample in family.samples:
                target.add_sample(
                    sample.name, {**sample.labels, **labels}, sample.value, sample.timestamp
                )
    return list(merged.values())


class MergedCollector(Collector):
    """``/metrics`` of a shared endpoint: the families of every member, merged."""

    def __init__(self, members: Sequence[Collector]) -> None:
        self._members = members

    def collect(self) -> Iterator[Metric]:
        yield from merge_families((member.collect(), {}) for member in self._members)


class AllHealth:
    """Readiness and liveness of several named members, for one admin endpoint."""

    def __init__(self, members: Sequence[tuple[str, HealthView]]) -> None:
        self._members = members

    def readiness(self) -> tuple[bool, str]:
        for name, health in self._members:
            ready, why = health.readiness()
            if not ready:
                return False, f"pipeline {name}: {why}"
        return True, "every pipeline ready"

    def liveness(self, stall_after: float) -> tuple[bool, str]:
        for name, health in self._members:
            alive, why = health.liveness(stall_after)
            if not alive:
                return False, f"pipeline {name}: {why}"
        return True, "every pipeline alive"
