"""The periodic status line of a running pipeline (B43).

Every ``pipeline.status_interval`` (30 s by default, ``0`` turns it off) the runtime logs
one INFO line: records per second polled and delivered since the last line, the summed
position lag of the owned lanes (with their committed lag where the source reports it;
"unknown" until every lane is measured), seconds since the last successful commit, the
paused lanes and the records dropped so far. It reads counters the runtime keeps anyway
and the meter's series, never anything per record. While no lane is assigned there is no
lag to sum: the line says so, for how long, and what the source waits for (a Kafka
consumer joining its group; a member killed without leaving holds its partitions until
its session expires).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable

from spate.metrics import names
from spate.metrics._meter import Meter

logger = logging.getLogger("spate.pipeline.status")

_WAITING = "the source to assign some"


class StatusLine:
    """Logs the status line on its interval (pipeline thread only)."""

    def __init__(
        self,
        pipeline: str,
        *,
        interval: float,
        meter: Meter,
        now: float,
        freshness_window: float = 60.0,
        wall: Callable[[], float] | None = None,
    ) -> None:
        self.pipeline = pipeline
        self._freshness_window = freshness_window
        self._wall = wall
        self.interval = interval
        self._meter = meter
        self._due = now + interval
        self._last_at = now
        self._last_in = 0
        self._last_out = 0
        self._commits = 0.0
        self._commit_at: float | None = None
        self._unassigned_since: float | None = now

    @property
    def enabled(self) -> bool:
        return self.interval > 0

    def maybe_report(
        self,
        now: float,
        *,
        records_in: int,
        records_out: int,
        paused: int,
        lanes: int,
        waiting: Callable[[], str | None] | None = None,
    ) -> None:
        """Log the line when it is due; ``records_out`` counts records resolved delivered;
        ``waiting`` names what the source waits for while no lane is assigned."""
        commits = self._meter.totals(names.CKPT_COMMITS, "outcome").get("ok", 0.0)
        if commits != self._commits:
            self._commits, self._commit_at = commits, now
        if lanes > 0:
            self._unassigned_since = None
        elif self._unassigned_since is None:
            self._unassigned_since = now
        if not self.enabled or now < self._due:
            return
        elapsed = max(now - self._last_at, 1e-9)
        rate_in = (records_in - self._last_in) / elapsed
        rate_out = (records_out - self._last_out) / elapsed
        lag = _lag_text(self._meter, lanes)
        dropped = sum(
            sum(self._meter.totals(family, "reason").values()) for family in names.DROPPED_FAMILIES
        )
        commit = "none yet" if self._commit_at is None else f"{now - self._commit_at:.0f}s ago"
        if self._unassigned_since is not None:
            what = waiting() if waiting is not None else None
            logger.info(
                "pipeline %s: no lanes assigned for %.0fs, waiting for %s, lag unknown, "
                "last commit %s, dropped %d",
                self.pipeline,
                now - self._unassigned_since,
                what or _WAITING,
                commit,
                dropped,
            )
        else:
            logger.info(
                "pipeline %s: in %.0f rec/s, out %.0f rec/s, lag %s, last commit %s, "
                "paused %d of %d lane(s), dropped %d%s",
                self.pipeline,
                rate_in,
                rate_out,
                lag,
                commit,
                paused,
                lanes,
                dropped,
                self._freshness_text(),
            )
        self._due = now + self.interval
        self._last_at = now
        self._last_in = records_in
        self._last_out = records_out

    def _freshness_text(self) -> str:
        """``, freshness p50 1.2s p99 4.5s`` — event time → written over the recent
        window, the worst sink's p99 (and its p50); empty before any row is written
        within it (B223)."""
        if self._wall is None:
            return ""
        recent = self._meter.freshness.quantiles(
            names.SINK_EVENT_TO_WRITTEN.name, self._wall(), self._freshness_window
        )
        worst: tuple[float, float] | None = None
        for p50, p99 in recent.values():
            if p50 is not None and p99 is not None and (worst is None or p99 > worst[1]):
                worst = (p50, p99)
        if worst is None:
            return ""
        return f", freshness p50 {_seconds(worst[0])} p99 {_seconds(worst[1])}"


def _seconds(value: float) -> str:
    return f"{value * 1000:.0f}ms" if value < 1 else f"{value:.1f}s"


def _lag_text(meter: Meter, lanes: int) -> str:
    """The lag part of the line: records behind the consumer's position, and behind the
    committed position where the source reports it; "unknown" until every lane is measured."""
    position = meter.totals(names.SOURCE_LAG, "lane").values()
    committed = meter.totals(names.SOURCE_COMMITTED_LAG, "lane").values()
    if any(math.isnan(v) for v in position) or not lanes:
        return "unknown"
    text = f"{sum(position):.0f}"
    if committed and not any(math.isnan(v) for v in committed):
        text += f" (committed {sum(committed):.0f})"
    return text
