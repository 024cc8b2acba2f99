"""Rate-limited warnings for records a pipeline skips (B3, B42).

Skipping a bad record is counted in a metric, but a bounded run can end before anything
scrapes it, so each skip is also reported in the log: the first skip of a stage and
reason at once, with its location; later ones at most once per interval, as a count
with one example. The count is logged once its interval has passed even when no later
skip comes: the processor that owns the log reports it on the runtime's periodic turn
(:class:`~spate.ops._contract.ReportsSkips`, which calls :meth:`SkipLog.report_due`). The log never
carries more than one line per stage and reason per interval, whatever the error rate.
The totals by reason are in the exit summary (:meth:`spate.pipeline.ExitReport.summary`),
which also covers skips of the last interval.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

logger = logging.getLogger("spate.ops.skipped")

REPORT_INTERVAL = 10.0
"""Seconds between two warnings about the same stage and reason."""


@dataclass(slots=True)
class _Pending:
    next_at: float
    count: int = 0
    example: str = ""


class SkipLog:
    """Reports skipped records per (stage, reason), rate-limited (pipeline thread only)."""

    def __init__(
        self,
        pipeline: str,
        *,
        interval: float = REPORT_INTERVAL,
        now: Callable[[], float] = time.monotonic,
        action: str = "skipped",
    ) -> None:
        """``action`` is the verb of the log lines (``dead-lettered`` for dead letters)."""
        self.pipeline = pipeline
        self.action = action
        self.interval = interval
        self._now = now
        self._pending: dict[tuple[str, str], _Pending] = {}

    def skipped(self, stage: str, reason: str, where: str, detail: str) -> None:
        """One record skipped by ``stage`` for ``reason`` at ``where`` (lane and offset)."""
        now = self._now()
        key = (stage, reason)
        example = f"{where}: {detail}" if detail else where
        pending = self._pending.get(key)
        if pending is None:
            self._pending[key] = _Pending(next_at=now + self.interval)
            logger.warning(
                "pipeline %s: %s %s a record (%s) at %s; further ones are "
                "counted and reported at most every %gs",
                self.pipeline,
                stage,
                self.action,
                reason,
                example,
                self.interval,
            )
            return
        pending.count += 1
        if not pending.example:
            pending.example = example
        if now >= pending.next_at:
            self._report(key, pending, now)

    def report_due(self) -> None:
        """Log the counts whose interval has passed (pipeline thread)."""
        now = self._now()
        for key, pending in self._pending.items():
            if pending.count and now >= pending.next_at:
                self._report(key, pending, now)

    def _report(self, key: tuple[str, str], pending: _Pending, now: float) -> None:
        stage, reason = key
        logger.warning(
            "pipeline %s: %s %s %d more record(s) (%s), e.g. at %s",
            self.pipeline,
            stage,
            self.action,
            pending.count,
            reason,
            pending.example,
        )
        pending.count = 0
        pending.example = ""
        pending.next_at = now + self.interval
