"""Skipped records are logged within about an interval even when no later skip comes
(B42): the count of the skips after the first is reported by the runtime's own turn,
through the processor that owns the skip log (``ReportsSkips``), with no registry of
live logs."""

from __future__ import annotations

import logging
from typing import Any

import pytest
from spate.ops import ReportsSkips
from spate.ops._skiplog import SkipLog
from spate.sink import Sink
from spate.testing import CopyToSinkProcessor, ManualClock, capture_sink, memory_source


class SkippingProcessor(CopyToSinkProcessor):
    """Copies payloads to the sink and owns a skip log the runtime reports (B42)."""

    def __init__(self, sink: Sink, log: SkipLog) -> None:
        super().__init__(sink)
        self.skips = log

    def report_skips_due(self) -> None:
        self.skips.report_due()


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


def _runtime(runtime_factory: object, log: SkipLog) -> Any:
    """A started runtime on a manual clock whose processor owns ``log``, and its clock."""
    clock = ManualClock()
    source, _ = memory_source({0: [b"a", b"b"]}, batch_size=1, bounded=False)
    sink, _ = capture_sink("out", max_rows=10, clock=clock)
    processor = SkippingProcessor(sink, log)
    assert isinstance(processor, ReportsSkips)
    runtime, _ = runtime_factory(  # type: ignore[operator]
        source, {"out": sink}, processor, clock
    )
    runtime.start()
    return runtime, clock


def test_b42_the_runtime_turn_reports_due_skip_counts(
    runtime_factory: object, caplog: pytest.LogCaptureFixture
) -> None:
    now = [0.0]
    log = SkipLog("skiplog-turn", interval=10.0, now=lambda: now[0])
    runtime, clock = _runtime(runtime_factory, log)
    with caplog.at_level(logging.WARNING, logger="spate.ops.skipped"):
        log.skipped("operators", "map_error", "memory[0]@0", "boom")
        log.skipped("operators", "map_error", "memory[0]@1", "boom")
        now[0] = 11.0
        clock.advance(2.0)  # past the runtime's periodic turn
        runtime.step()
    assert "operators skipped 1 more record(s) (map_error)" in caplog.text


def test_b174_a_runtime_turn_reports_only_its_own_processors_skip_logs(
    runtime_factory: object, caplog: pytest.LogCaptureFixture
) -> None:
    """No process-wide registry: a skip log of another chain (another pipeline of the same
    name in this process, a restarted run's old chain) is not reported by this runtime."""
    now = [0.0]
    own = SkipLog("same-name", interval=10.0, now=lambda: now[0])
    runtime, clock = _runtime(runtime_factory, own)
    other = SkipLog(runtime.name, interval=10.0, now=lambda: now[0], action="dropped")
    with caplog.at_level(logging.WARNING, logger="spate.ops.skipped"):
        for log in (own, other):
            log.skipped("operators", "map_error", "memory[0]@0", "boom")
            log.skipped("operators", "map_error", "memory[0]@1", "boom")
        now[0] = 11.0
        clock.advance(2.0)  # past the runtime's periodic turn
        runtime.step()
    assert "operators skipped 1 more record(s) (map_error)" in caplog.text
    assert "dropped 1 more" not in caplog.text
