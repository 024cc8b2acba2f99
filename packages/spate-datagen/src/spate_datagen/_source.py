"""``source: {datagen: ...}`` — storefront or wide events as a bounded, partitioned source.

Events are spread over ``partitions`` lanes by order id (so an order's events stay in
order within one lane), each lane numbering its offsets from 0. The source is bounded:
after ``count`` events it reports ``drained`` and the pipeline drains and exits. It
keeps the offsets the runtime commits (``committed``) but does not persist them: a
restarted datagen source starts again from the first event.
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Collection, Iterator, Mapping, Sequence
from dataclasses import dataclass

from spate.records import Lane, PayloadBatch
from spate.source import SourceEvents

from spate_datagen._codec import Format, encoder
from spate_datagen._events import StorefrontEvent
from spate_datagen._wide import EventSet, events_of

logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True, kw_only=True)
class DatagenSourceConfig:
    """``source: {datagen: ...}``."""

    count: int = 100_000
    """Events to generate before the source reports it is drained."""
    seed: int = 1
    """Random seed: the same seed and count always give the same events."""
    events: EventSet = "storefront"
    """Which events: ``storefront`` (orders, payments, refunds, about 100 bytes each) or
    ``wide`` (one ``spate.datagen.WideEvent`` record of about 1.6 KB each: nested
    objects, UUIDs, strings of varying length, integers, a timestamp, arrays)."""
    format: Format = "avro"
    """Payload encoding: raw Avro (of the storefront union, or the wide record), Avro in
    the Confluent wire format (``confluent``: magic byte, ``schema_id``, raw Avro), or
    JSON objects."""
    schema_id: int = 1
    """Schema id that ``format: confluent`` frames carry."""
    partitions: int = 4
    """Lanes to spread orders over (by order id)."""
    batch_size: int = 1000
    """Events handed out per poll, at most."""
    stream: str = "storefront"
    """Stream name of the lanes (``storefront[0]`` …)."""

    def config_errors(self) -> Iterator[tuple[str, str]]:
        if self.count < 0:
            yield "count", "must not be negative"
        if self.partitions < 1:
            yield "partitions", "must be at least 1"
        if self.batch_size < 1:
            yield "batch_size", "must be at least 1"
        if not 0 <= self.schema_id < 2**31:
            yield "schema_id", "must be between 0 and 2**31 - 1"


class DatagenSource:
    """A :class:`spate.source.Source` generating storefront events."""

    def __init__(self, config: DatagenSourceConfig) -> None:
        self._config = config
        self._encode = encoder(config.format, schema_id=config.schema_id)
        self._events: Iterator[StorefrontEvent] = iter(())
        self._sink_events: SourceEvents | None = None
        self._lanes = [Lane(config.stream, p) for p in range(config.partitions)]
        self._backlog: list[deque[StorefrontEvent]] = [deque() for _ in self._lanes]
        self._next_offset = [0] * config.partitions
        self._paused: set[int] = set()
        self._exhausted = False
        self._drained_sent = False
        self.committed: dict[Lane, int] = {}
        self.generated = 0

    def start(self, events: SourceEvents) -> None:
        self._sink_events = events
        self._events = events_of(self._config.events, self._config.count, seed=self._config.seed)
        events.assigned(self._lanes)
        logger.info(
            "datagen source started events=%s count=%d partitions=%d format=%s",
            self._config.events,
            self._config.count,
            self._config.partitions,
            self._config.format,
        )

    def poll(self, timeout: float) -> Sequence[PayloadBatch]:
        budget = self._config.batch_size
        partitions = self._config.partitions
        backlog_limit = 4 * self._config.batch_size
        handed: dict[int, PayloadBatch] = {}
        # Hand out what waits in unpaused backlogs first, then generate more.
        while budget > 0:
            lane_index = self._next_ready_lane()
            if lane_index is None:
                if self._exhausted or any(
                    len(self._backlog[p]) >= backlog_limit for p in self._paused
                ):
                    break
                event = next(self._events, None)
                if event is None:
                    self._exhausted = True
                    continue
                self.generated += 1
                self._backlog[event.order_id % partitions].append(event)
                continue
            event = self._backlog[lane_index].popleft()
            self._append(handed, lane_index, event)
            budget -= 1
        if (
            self._exhausted
            and not self._drained_sent
            and not handed
            and not any(self._backlog)
            and self._sink_events is not None
        ):
            self._drained_sent = True
            self._sink_events.drained()
        return list(handed.values())

    def _next_ready_lane(self) -> int | None:
        for index, queue in enumerate(self._backlog):
            if queue and index not in self._paused:
                return index
        return None

    def _append(self, handed: dict[int, PayloadBatch], index: int, event: StorefrontEvent) -> None:
        offset = self._next_offset[index]
        self._next_offset[index] = offset + 1
        batch = handed.get(index)
        if batch is None:
            batch = PayloadBatch(
                lane=self._lanes[index],
                offsets=[],
                payloads=[],
                keys=[],
                timestamps=[],
                next_offset=offset + 1,
            )
            handed[index] = batch
        batch.offsets.append(offset)
        batch.payloads.append(memoryview(self._encode(event)))
        batch.keys.append(event.key)
        at = event.record.get("placed_at", event.record.get("occurred_at"))
        batch.timestamps.append(at if isinstance(at, int) else 0)
        batch.next_offset = offset + 1

    def commit(self, offsets: Mapping[Lane, int], *, sync: bool) -> None:
        for lane, offset in offsets.items():
            previous = self.committed.get(lane, 0)
            if offset < previous:
                raise ValueError(f"commit for {lane} moved backwards: {offset} < {previous}")
            self.committed[lane] = offset

    def pause(self, lanes: Collection[Lane]) -> None:
        self._paused.update(lane.partition for lane in lanes if lane in self._lanes)

    def resume(self, lanes: Collection[Lane]) -> None:
        self._paused.difference_update(lane.partition for lane in lanes)

    def close(self) -> None:
        self._events = iter(())
