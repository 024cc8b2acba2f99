"""The status line counts every stage's drops, the source's included (B42, B43)."""

from __future__ import annotations

import logging

import pytest
from spate.metrics import names
from spate.metrics._meter import Meter
from spate.pipeline._status import StatusLine


def test_b43_status_line_counts_drops_of_the_source_the_deserializer_and_the_operators(
    caplog: pytest.LogCaptureFixture,
) -> None:
    meter = Meter("status-drops")
    for family, component, kind, n in (
        (names.SOURCE_DROPPED, "source", "source", 3),
        (names.DESER_DROPPED, "deserializer", "deserializer", 2),
        (names.OPS_DROPPED, "operators", "operators", 1),
    ):
        meter.counter(family, component=component, component_type=kind, reason="x").inc(n)
    line = StatusLine("status-drops", interval=1.0, meter=meter, now=0.0)
    with caplog.at_level(logging.INFO, logger="spate.pipeline.status"):
        line.maybe_report(2.0, records_in=0, records_out=0, paused=0, lanes=1)
    assert "dropped 6" in caplog.text
