"""Inserts that follow the table's health: parts pressure, TOO_MANY_PARTS, an insert rate.

ClickHouse refuses an insert into a MergeTree partition that already has
``parts_to_throw_insert`` active parts (code 252 ``TOO_MANY_PARTS``) and slows inserts
past ``parts_to_delay_insert``. Every insert makes at least one part; merges take them
down. A sink that inserts small blocks faster than the server merges walks into the
limit; retrying the same block at the same pace keeps it there.

:class:`TableHealth` (one per ClickHouse sink, shared by its replica writers) reads the
active parts of the table's busiest partition and the two thresholds, and turns them
into a *pressure* between 0 and 1: 0 below half of ``parts_to_delay_insert``, 1 one
margin short of ``parts_to_throw_insert`` (or for ``check_interval`` after a 252).
From the pressure it:

* grows the pool's batch limits (``max_rows``, ``max_bytes``, ``linger``) by up to
  ``max_scale`` (:meth:`SinkPool.resize`), and returns them when the pressure falls;
* spaces the inserts: ``1/rate`` seconds apart for ``max_inserts_per_second`` shared by
  ``members``, times the growth factor; without a rate, ``pressure · check_interval``;
* holds an insert while the table is at the margin (re-reading every
  ``check_interval``, at most ``max_hold``), since sending it would only be refused.

The writer calls :meth:`TableHealth.before_insert` on its worker thread before each
insert (it may block there, as a network wait would) and :meth:`too_many_parts` when the
server answers 252; the block itself is retried as before (B12). Nothing here changes a
block's rows or token, so effectively-once replays are unaffected. Upholds B224-B227
(docs/adr/0019).
"""

from __future__ import annotations

import logging
import re
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING

from spate import Clock
from spate.metrics import CounterSeries, GaugeSeries, Meter, names
from spate.sink import BatchConfig

if TYPE_CHECKING:
    from clickhouse_connect.driver.client import Client

    from spate_clickhouse.config import TableHealthConfig

logger = logging.getLogger(__name__)

_SETTING = re.compile(r"\b(parts_to_delay_insert|parts_to_throw_insert)\s*=\s*(\d+)")
_DEFAULTS = {"parts_to_delay_insert": 1000, "parts_to_throw_insert": 3000}
"""ClickHouse's defaults, used when the server names neither."""

Resize = Callable[..., None]


class Thresholds:
    """The table's ``parts_to_delay_insert`` and ``parts_to_throw_insert``."""

    __slots__ = ("delay", "throw")

    def __init__(self, delay: int, throw: int) -> None:
        self.throw = max(throw, 2)
        self.delay = min(max(delay, 1), self.throw)

    @property
    def start(self) -> float:
        """Parts at which pressure starts: half the delay threshold."""
        return self.delay / 2

    @property
    def hold_at(self) -> int:
        """Parts at which an insert is held: a margin short of the throw threshold (a
        tenth of it, at least two, so concurrent writers do not reach it together)."""
        return max(self.throw - max(2, self.throw // 10), 1)

    def pressure(self, parts: int) -> float:
        span = self.hold_at - self.start
        if span <= 0:
            return 1.0 if parts >= self.hold_at else 0.0
        return min(max((parts - self.start) / span, 0.0), 1.0)


def read_thresholds(client: Client, database: str, table: str) -> Thresholds:
    """The thresholds in force for ``database.table``: its own ``SETTINGS`` first."""
    found: dict[str, int] = {}
    rows = client.query(
        "SELECT name, value FROM system.merge_tree_settings "
        "WHERE name IN ('parts_to_delay_insert', 'parts_to_throw_insert')"
    ).result_rows
    for name, value in rows:
        found[str(name)] = int(value)
    engine = client.query(
        "SELECT engine_full FROM system.tables WHERE database = "
        + (_literal(database) if database else "currentDatabase()")
        + f" AND name = {_literal(table)}"
    ).result_rows
    if engine:
        for name, value in _SETTING.findall(str(engine[0][0])):
            found[name] = int(value)
    merged = {**_DEFAULTS, **found}
    return Thresholds(merged["parts_to_delay_insert"], merged["parts_to_throw_insert"])


def read_parts(client: Client, database: str, table: str) -> int:
    """Active parts of the table's busiest partition (0 for an empty table)."""
    rows = client.query(
        "SELECT max(c) FROM (SELECT count() AS c FROM system.parts WHERE active AND "
        "database = "
        + (_literal(database) if database else "currentDatabase()")
        + f" AND table = {_literal(table)} GROUP BY partition_id)"
    ).result_rows
    return int(rows[0][0] or 0) if rows else 0


def _literal(text: str) -> str:
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


class TableHealth:
    """The health of one sink's table and what the sink does about it (any thread)."""

    def __init__(
        self,
        config: TableHealthConfig,
        *,
        database: str,
        table: str,
        batch: BatchConfig,
        clock: Clock,
        members: int = 1,
    ) -> None:
        self.config = config
        self.database = database
        self.table = table
        self._batch = batch
        self._clock = clock
        self._members = max(config.members or members, 1)
        self._lock = threading.Lock()
        self._thresholds: Thresholds | None = None
        self._parts = 0
        self._pressure = 0.0
        self._checked_at: float | None = None
        self._refused_until = 0.0
        self._next_slot = 0.0
        self._scale = 1.0
        self._broken = False
        self._resize: Resize | None = None
        self._m: tuple[GaugeSeries, GaugeSeries, GaugeSeries] | None = None
        self._m_wait: dict[str, CounterSeries] = {}

    @property
    def enabled(self) -> bool:
        return self.config.follow_parts or self.config.max_inserts_per_second > 0

    def bind(self, resize: Resize, meter: Meter, component: str, component_type: str) -> None:
        """Wire the pool's :meth:`~spate.sink.SinkPool.resize` and the metrics."""
        self._resize = resize
        labels = {"component": component, "component_type": component_type, "table": self.name}
        self._m = (
            meter.gauge(names.SINK_TABLE_PARTS, **labels),
            meter.gauge(names.SINK_TABLE_PRESSURE, **labels),
            meter.gauge(names.SINK_BATCH_MAX_ROWS, **labels),
        )
        self._m[2].set(self._batch.max_rows)
        self._m_wait = {
            cause: meter.counter(names.SINK_INSERT_WAIT, cause=cause, **labels)
            for cause in ("pressure", "rate")
        }

    @property
    def name(self) -> str:
        return f"{self.database}.{self.table}" if self.database else self.table

    @property
    def pressure(self) -> float:
        with self._lock:
            return self._pressure

    @property
    def scale(self) -> float:
        with self._lock:
            return self._scale

    # -- the writer's calls (worker threads) -----------------------------------------------

    def before_insert(self, client: Client) -> None:
        """Read the parts when due, hold while the table is at its limit, then wait for
        this insert's slot. May block (worker thread)."""
        if not self.enabled:
            return
        held = 0.0
        if self.config.follow_parts:
            self._check(client, force=False)
            limit = self.config.max_hold
            while held < limit and self._at_limit():
                step = min(self.config.check_interval, limit - held)
                self._clock.sleep(step)
                held += step
                self._waited("pressure", step)
                self._check(client, force=True)
        wait = self._slot()
        if wait > 0:
            self._clock.sleep(wait)
            self._waited("rate", wait)

    def too_many_parts(self) -> None:
        """The server answered ``TOO_MANY_PARTS`` (252): full pressure for a while."""
        now = self._clock.monotonic()
        with self._lock:
            self._refused_until = now + self.config.check_interval
            self._checked_at = None  # read the parts again before the next insert
        logger.warning(
            "sink table %s: TOO_MANY_PARTS; growing blocks and spacing inserts", self.name
        )
        self._apply(1.0, None)

    # -- internals ---------------------------------------------------------------------------

    def _at_limit(self) -> bool:
        with self._lock:
            thresholds = self._thresholds
            refused = self._clock.monotonic() < self._refused_until
            return refused or (thresholds is not None and self._parts >= thresholds.hold_at)

    def _check(self, client: Client, *, force: bool) -> None:
        now = self._clock.monotonic()
        with self._lock:
            if self._broken:
                return
            due = (
                force
                or self._checked_at is None
                or self._pressure > 0
                or now - self._checked_at >= self.config.check_interval
            )
            if not due:
                return
            self._checked_at = now
            thresholds = self._thresholds
        try:
            if thresholds is None:
                thresholds = read_thresholds(client, self.database, self.table)
            parts = read_parts(client, self.database, self.table)
        except Exception as exc:
            with self._lock:
                self._broken = True
            logger.warning(
                "sink table %s: cannot read its parts (%s); inserts no longer follow them",
                self.name,
                exc,
            )
            return
        pressure = thresholds.pressure(parts)
        with self._lock:
            self._thresholds = thresholds
            self._parts = parts
            if now < self._refused_until:
                pressure = 1.0
        self._apply(pressure, parts)

    def _apply(self, pressure: float, parts: int | None) -> None:
        """Set the pressure; resize the pool when the growth factor moved."""
        scale = 1.0 + (self.config.max_scale - 1.0) * pressure
        with self._lock:
            before = self._pressure
            self._pressure = pressure
            moved = abs(scale - self._scale) >= 0.05 * self._scale or (
                scale == 1.0 and self._scale != 1.0
            )
            if moved:
                self._scale = scale
        if self._m is not None:
            if parts is not None:
                self._m[0].set(parts)
            self._m[1].set(pressure)
        if (before == 0) != (pressure == 0):
            logger.info(
                "sink table %s: %s (parts %s)",
                self.name,
                "under pressure; blocks grow" if pressure else "healthy; configured sizes",
                parts if parts is not None else "unknown",
            )
        if moved:
            batch = self._batch
            max_rows = int(batch.max_rows * scale)
            if self._resize is not None:
                self._resize(
                    max_rows=max_rows,
                    max_bytes=int(batch.max_bytes * scale),
                    linger=batch.linger * scale,
                )
            if self._m is not None:
                self._m[2].set(max_rows)

    def _slot(self) -> float:
        """Seconds until this insert's slot; books the next one."""
        rate = self.config.max_inserts_per_second
        now = self._clock.monotonic()
        with self._lock:
            if rate > 0:
                interval = self._members / rate * self._scale
            else:
                interval = self._pressure * self.config.check_interval
            if interval <= 0:
                return 0.0
            slot = max(now, self._next_slot)
            self._next_slot = slot + interval
        return slot - now

    def _waited(self, cause: str, seconds: float) -> None:
        series = self._m_wait.get(cause)
        if series is not None:
            series.inc(seconds)
