"""Freshness of what a sink pool writes: event time → written, and the write time each
source batch carries to the commit (B220, B221).

The pool's workers call :meth:`WriteFreshness.written` after each successful write.
The batch's event time is the oldest of its source batches' (the tracker's
``AckToken.event_time``: the record timestamps, Kafka's message timestamp) unless the
connector reads one from its own rows (:class:`EventTimeConnector`, a configured
event-time column); every row of the batch is counted at that age, so the quantiles
err late, never early, by at most the batch's spread of event times. Each ack the batch
holds is stamped with the write time under the sink's (sink, table) key, which the
committer turns into written → committed (spate.checkpoint).

The table label is the connector's :attr:`DestinationConnector.destination` (a
ClickHouse ``db.table``), or the sink's name for connectors that do not name one.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol, runtime_checkable

from spate.metrics import FreshnessSeries, Meter, names
from spate.sink._writer import RowBuffer

if TYPE_CHECKING:
    from spate.sink._batching import PoolBatch


@runtime_checkable
class DestinationConnector(Protocol):
    """A connector that names the table (or topic, path) its rows go to."""

    destination: str


@runtime_checkable
class EventTimeConnector(Protocol):
    """A connector that reads its rows' event time itself (an event-time column)."""

    def event_time(self, buffer: RowBuffer) -> float | None:
        """The oldest event time of ``buffer``'s rows, wall-clock seconds, or None when
        it has none (then the records' timestamps are used). Worker thread, after a
        successful write; must not block."""
        ...


class WriteFreshness:
    """Records event time → written for one sink pool and stamps its acks (any thread)."""

    __slots__ = ("_event_time", "_key", "_series")

    def __init__(self, meter: Meter, name: str, component_type: str, connector: object) -> None:
        table = connector.destination if isinstance(connector, DestinationConnector) else name
        self._key = (name, table)
        self._series: FreshnessSeries = meter.freshness.series(
            names.SINK_EVENT_TO_WRITTEN.name,
            component=name,
            component_type=component_type,
            table=table,
        )
        self._event_time = (
            connector.event_time if isinstance(connector, EventTimeConnector) else None
        )

    def column_time(self, buffer: RowBuffer) -> float | None:
        """The connector's own event time of a written ``buffer`` (None: the acks').
        Worker thread, outside the pool lock (it may scan a column)."""
        return self._event_time(buffer) if self._event_time is not None else None

    def written(self, batch: PoolBatch, now: float, column: float | None = None) -> None:
        """``batch`` was written at wall time ``now``: observe its rows' age (``column``:
        from :meth:`column_time`, else its acks' oldest event time), stamp its acks.
        Called by a worker under the pool lock (the acks do not change meanwhile)."""
        oldest = column
        key = self._key
        for ack in batch.acks:
            if column is None:
                stamp = ack.event_time
                if stamp is not None and (oldest is None or stamp < oldest):
                    oldest = stamp
            written = ack.written
            if written is None:
                ack.written = {key: now}
            else:
                written[key] = now
        if oldest is not None:
            self._series.observe(now - oldest, batch.rows, now)
