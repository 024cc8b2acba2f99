"""Skipped records are logged within about an interval even when no later skip comes
(B42): the count of the skips after the first is reported by the runtime's own turn."""

from __future__ import annotations

import logging

import pytest
from spate.ops._skiplog import SkipLog
from spate.testing import CopyToSinkProcessor, ManualClock, capture_sink, memory_source


def test_b42_skip_counts_are_reported_once_due_without_a_later_skip(
    caplog: pytest.LogCaptureFixture,
) -> None:
    now = [0.0]
    log = SkipLog("skiplog-unit", interval=10.0, now=lambda: now[0])
    with caplog.at_level(logging.WARNING, logger="spate.ops.skipped"):
        log.skipped("deserializer", "malformed", "t[0]@1", "bad")
        for offset in (2, 3, 4):
            now[0] += 1.0
            log.skipped("deserializer", "malformed", f"t[0]@{offset}", "bad")
        log.report_due()  # t=3: not due yet
        assert len(caplog.records) == 1
        now[0] = 10.5
        log.report_due()
        log.report_due()  # nothing new: no second line
    assert len(caplog.records) == 2
    assert "deserializer skipped 3 more record(s) (malformed), e.g. at t[0]@2" in (
        caplog.records[1].getMessage()
    )


def test_b42_the_runtime_turn_reports_due_skip_counts(
    runtime_factory: object, caplog: pytest.LogCaptureFixture
) -> None:
    clock = ManualClock()
    source, _ = memory_source({0: [b"a", b"b"]}, batch_size=1, bounded=False)
    sink, _ = capture_sink("out", max_rows=10, clock=clock)
    runtime, _ = runtime_factory(  # type: ignore[operator]
        source, {"out": sink}, CopyToSinkProcessor(sink), clock
    )
    now = [0.0]
    log = SkipLog(runtime.name, interval=10.0, now=lambda: now[0])
    runtime.start()
    with caplog.at_level(logging.WARNING, logger="spate.ops.skipped"):
        log.skipped("operators", "map_error", "memory[0]@0", "boom")
        log.skipped("operators", "map_error", "memory[0]@1", "boom")
        now[0] = 11.0
        clock.advance(2.0)  # past the runtime's periodic turn
        runtime.step()
    assert "operators skipped 1 more record(s) (map_error)" in caplog.text
