"""An in-process source for tests and examples: lanes of payloads held in memory.

``memory_source(...)`` returns ``(source, handle)``. The source implements the
:class:`~spate.source.Source` contract like a real one: it announces its lanes through
``events.assigned`` at start, hands out at most one batch per lane per poll, honours
``pause``/``resume``, records commits, and for a bounded input calls
``events.drained()`` once everything was handed out. Payloads are ``memoryview`` slices
of one shared ``bytes`` buffer per loaded chunk (:attr:`MemorySourceHandle.buffers`), so
tests can check that nothing copies them (docs/concepts/architecture.md).

The handle lets a test add data, end the input, script a rebalance (revoked lanes rewind
to their last commit when assigned again, as Kafka does) and read
:meth:`MemorySourceHandle.last_committed`.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Collection, Mapping, Sequence

from spate.errors import SourceError
from spate.records import Lane, PayloadBatch
from spate.source._contract import SourceEvents

logger = logging.getLogger(__name__)


class _LaneData:
    __slots__ = ("keys", "position", "timestamps", "views")

    def __init__(self) -> None:
        self.views: list[memoryview] = []
        self.keys: list[bytes | None] = []
        self.timestamps: list[int] = []
        self.position = 0


class MemorySourceHandle:
    """The test's side of a memory source: feed it, rebalance it, read its commits."""

    def __init__(self, source: MemorySource) -> None:
        self._source = source

    @property
    def stream(self) -> str:
        return self._source.stream

    def lane(self, partition: int) -> Lane:
        return Lane(self._source.stream, partition)

    def append(
        self,
        partition: int,
        payloads: Sequence[bytes],
        keys: Sequence[bytes | None] | None = None,
        timestamps: Sequence[int] | None = None,
    ) -> None:
        """Add records to a lane; they share one new buffer."""
        self._source._load({partition: payloads}, {partition: keys} if keys else None, timestamps)

    def end_input(self) -> None:
        """No more data will be appended: the source drains once everything is polled."""
        with self._source._lock:
            self._source._bounded = True

    def rebalance(self, *, revoke: Collection[int] = (), assign: Collection[int] = ()) -> None:
        """At the next poll: revoke these partitions (barrier), then assign those."""
        with self._source._lock:
            self._source._rebalances.append(
                ([self.lane(p) for p in revoke], [self.lane(p) for p in assign])
            )

    def fail_next_poll(self, error: SourceError) -> None:
        """Raise ``error`` from the next poll."""
        with self._source._lock:
            self._source._poll_error = error

    @property
    def buffers(self) -> list[bytes]:
        """The buffers the payload views point into, in load order."""
        return list(self._source._buffers)

    @property
    def committed(self) -> dict[Lane, int]:
        with self._source._lock:
            return dict(self._source._committed)

    def last_committed(self, partition: int) -> int | None:
        """The last position committed for ``partition`` (sync or not), or None."""
        with self._source._lock:
            return self._source._committed.get(self.lane(partition))

    @property
    def commits(self) -> list[tuple[dict[Lane, int], bool]]:
        """Every ``commit`` call: offsets and whether it was synchronous."""
        with self._source._lock:
            return list(self._source._commit_log)

    @property
    def paused(self) -> frozenset[Lane]:
        with self._source._lock:
            return frozenset(self._source._paused)

    @property
    def pause_calls(self) -> int:
        return self._source.pause_calls

    @property
    def position(self) -> dict[Lane, int]:
        """Next offset to hand out per owned lane."""
        with self._source._lock:
            return {lane: self._source._lanes[lane].position for lane in self._source._owned}

    @property
    def closed(self) -> bool:
        return self._source.closed

    @property
    def polls(self) -> int:
        """How many times ``poll`` was called (it keeps being called while paused, B7)."""
        return self._source.polls


class MemorySource:
    """Implements ``Source`` over in-memory lanes; build it with :func:`memory_source`."""

    def __init__(self, stream: str, partitions: int, *, bounded: bool, batch_size: int) -> None:
        if batch_size < 1:
            raise ValueError("batch_size must be at least 1")
        self.stream = stream
        self._lock = threading.Lock()
        self._lanes: dict[Lane, _LaneData] = {
            Lane(stream, p): _LaneData() for p in range(partitions)
        }
        self._owned: list[Lane] = []
        self._bounded = bounded
        self._batch_size = batch_size
        self._buffers: list[bytes] = []
        self._committed: dict[Lane, int] = {}
        self._commit_log: list[tuple[dict[Lane, int], bool]] = []
        self._paused: set[Lane] = set()
        self._rebalances: list[tuple[list[Lane], list[Lane]]] = []
        self._poll_error: SourceError | None = None
        self._events: SourceEvents | None = None
        self._drained_sent = False
        self.pause_calls = 0
        self.polls = 0
        self.closed = False

    def _load(
        self,
        data: Mapping[int, Sequence[bytes]],
        keys: Mapping[int, Sequence[bytes | None] | None] | None,
        timestamps: Sequence[int] | None,
    ) -> None:
        buffer = b"".join(b"".join(payloads) for payloads in data.values())
        view = memoryview(buffer)
        start = 0
        with self._lock:
            self._buffers.append(buffer)
            for partition, payloads in data.items():
                lane = Lane(self.stream, partition)
                lane_data = self._lanes.setdefault(lane, _LaneData())
                lane_keys = keys.get(partition) if keys else None
                for i, payload in enumerate(payloads):
                    end = start + len(payload)
                    lane_data.views.append(view[start:end])
                    lane_data.keys.append(lane_keys[i] if lane_keys else None)
                    lane_data.timestamps.append(timestamps[i] if timestamps else 0)
                    start = end

    # -- Source ---------------------------------------------------------------------

    def start(self, events: SourceEvents) -> None:
        self._events = events
        with self._lock:
            self._owned = list(self._lanes)
            for lane in self._owned:
                self._lanes[lane].position = self._committed.get(lane, 0)
        events.assigned(list(self._owned))

    def poll(self, timeout: float) -> Sequence[PayloadBatch]:
        events = self._events
        if events is None:
            raise RuntimeError("poll before start")
        with self._lock:
            self.polls += 1
            error, self._poll_error = self._poll_error, None
            rebalances, self._rebalances = self._rebalances, []
        if error is not None:
            raise error
        for revoke, assign in rebalances:
            if revoke:
                events.revoked(revoke)  # the barrier: commits happen inside
                with self._lock:
                    self._owned = [lane for lane in self._owned if lane not in revoke]
                    self._paused.difference_update(revoke)
            if assign:
                with self._lock:
                    for lane in assign:
                        data = self._lanes.setdefault(lane, _LaneData())
                        data.position = self._committed.get(lane, 0)
                        if lane not in self._owned:
                            self._owned.append(lane)
                events.assigned(assign)
        batches: list[PayloadBatch] = []
        with self._lock:
            exhausted = True
            for lane in self._owned:
                data = self._lanes[lane]
                start = data.position
                if start < len(data.views):
                    exhausted = False
                if lane in self._paused or start >= len(data.views):
                    continue
                end = min(start + self._batch_size, len(data.views))
                data.position = end
                batches.append(
                    PayloadBatch(
                        lane=lane,
                        offsets=list(range(start, end)),
                        payloads=data.views[start:end],
                        keys=data.keys[start:end],
                        timestamps=data.timestamps[start:end],
                        next_offset=end,
                    )
                )
            send_drained = self._bounded and exhausted and not batches and not self._drained_sent
            if send_drained:
                self._drained_sent = True
        if send_drained:
            events.drained()
        return batches

    def commit(self, offsets: Mapping[Lane, int], *, sync: bool) -> None:
        with self._lock:
            for lane, offset in offsets.items():
                previous = self._committed.get(lane)
                if previous is not None and offset < previous:
                    logger.warning("commit of %s moves back from %d to %d", lane, previous, offset)
                self._committed[lane] = offset
            self._commit_log.append((dict(offsets), sync))

    def pause(self, lanes: Collection[Lane]) -> None:
        with self._lock:
            self.pause_calls += 1
            self._paused.update(lanes)

    def resume(self, lanes: Collection[Lane]) -> None:
        with self._lock:
            self._paused.difference_update(lanes)

    def close(self) -> None:
        self.closed = True

    def remaining(self) -> int | None:
        """Records of the owned lanes not handed out yet (``BoundedSource``); None before
        ``start`` and when unbounded, since more data may be added."""
        if not self._bounded or self._events is None:
            return None
        with self._lock:
            return sum(
                len(self._lanes[lane].views) - self._lanes[lane].position for lane in self._owned
            )


def memory_source(
    data: Mapping[int, Sequence[bytes]] | None = None,
    *,
    partitions: int | None = None,
    stream: str = "memory",
    bounded: bool = True,
    batch_size: int = 100,
    keys: Mapping[int, Sequence[bytes | None]] | None = None,
    committed: Mapping[int, int] | None = None,
) -> tuple[MemorySource, MemorySourceHandle]:
    """A memory source and its handle.

    ``data`` maps partition → payloads (all loaded into one shared buffer);
    ``partitions`` adds empty lanes up to that count. ``bounded=True`` drains once all
    data is handed out; an unbounded source waits for ``handle.append`` until
    ``handle.end_input()``. ``committed`` (partition → offset) starts as if an earlier
    run had committed there, as a restarted consumer would.
    """
    count = max(partitions or 0, (max(data) + 1) if data else 0, 1)
    source = MemorySource(stream, count, bounded=bounded, batch_size=batch_size)
    if data:
        source._load(data, dict(keys) if keys else None, None)
    for partition, offset in (committed or {}).items():
        source._committed[Lane(stream, partition)] = offset
    return source, MemorySourceHandle(source)
