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


def test_b43_with_no_lanes_the_status_line_says_what_it_waits_for_and_how_long(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """No partitions assigned: no ``lag 0`` (nothing is measured), but the wait named."""
    meter = Meter("status-waiting")
    line = StatusLine("status-waiting", interval=10.0, meter=meter, now=0.0)
    with caplog.at_level(logging.INFO, logger="spate.pipeline.status"):
        line.maybe_report(5.0, records_in=0, records_out=0, paused=0, lanes=0)
        line.maybe_report(
            41.0,
            records_in=0,
            records_out=0,
            paused=0,
            lanes=0,
            waiting=lambda: "consumer group 'g' (session.timeout.ms, 45s after it died)",
        )
    last = caplog.records[-1].getMessage()
    assert "lag 0" not in last and "lag unknown" in last
    assert "no lanes assigned for 41s" in last
    # What the source waits for, and for how long, in its own words.
    assert "waiting for consumer group 'g' (session.timeout.ms, 45s after it died)" in last
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="spate.pipeline.status"):
        line.maybe_report(52.0, records_in=10, records_out=10, paused=0, lanes=2)
    assert "lag 0" in caplog.text and "no lanes" not in caplog.text


def test_b43_status_line_reports_position_and_committed_lag_and_unknown_until_measured(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A lane whose lag is not measured yet (NaN) makes the lag "unknown", never 0; once
    measured the line gives both the position lag and the committed lag."""
    meter = Meter("status-lag")
    labels = {"component": "source", "component_type": "kafka"}
    a = meter.gauge(names.SOURCE_LAG, lane="t[0]", **labels)
    b = meter.gauge(names.SOURCE_LAG, lane="t[1]", **labels)
    ca = meter.gauge(names.SOURCE_COMMITTED_LAG, lane="t[0]", **labels)
    cb = meter.gauge(names.SOURCE_COMMITTED_LAG, lane="t[1]", **labels)
    a.set(100.0)
    ca.set(100.0)
    b.set(float("nan"))
    cb.set(float("nan"))
    line = StatusLine("status-lag", interval=1.0, meter=meter, now=0.0)
    with caplog.at_level(logging.INFO, logger="spate.pipeline.status"):
        line.maybe_report(2.0, records_in=0, records_out=0, paused=0, lanes=2)
    assert "lag unknown" in caplog.text
    caplog.clear()
    b.set(20.0)
    cb.set(900.0)
    with caplog.at_level(logging.INFO, logger="spate.pipeline.status"):
        line.maybe_report(4.0, records_in=0, records_out=0, paused=0, lanes=2)
    assert "lag 120 (committed 1000)" in caplog.text
