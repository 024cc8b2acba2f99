"""Contract suites that every source connector runs against its own implementation.

Subclass :class:`SourceContract` in a connector's tests (name the subclass ``Test…`` so
pytest collects it) and implement :meth:`SourceContract.produce` and
:meth:`SourceContract.open_source`. The suite checks what the runtime relies on:

* ``start`` announces lanes through ``events.assigned`` (or hands out data for sources
  without assignment);
* ``poll`` returns at most one batch per lane, records in offset order, payloads as
  ``memoryview`` objects with the bytes that were produced, ``next_offset`` past the last
  record;
* a bounded source calls ``events.drained()`` exactly once, after everything;
* ``pause`` stops a lane from being handed out while ``poll`` keeps being called, and
  ``resume`` brings it back;
* after ``commit(..., sync=True)`` a reopened source resumes exactly at the committed
  position (B1, B14).
"""

from __future__ import annotations

import time
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field

from spate.records import Lane, PayloadBatch
from spate.source._contract import Source


@dataclass
class RecordingEvents:
    """``SourceEvents`` that record what the source reported."""

    assigned_lanes: list[list[Lane]] = field(default_factory=list)
    revoked_lanes: list[list[Lane]] = field(default_factory=list)
    drained_calls: int = 0

    def assigned(self, lanes: Collection[Lane]) -> None:
        self.assigned_lanes.append(sorted(lanes))

    def revoked(self, lanes: Collection[Lane]) -> None:
        self.revoked_lanes.append(sorted(lanes))

    def drained(self) -> None:
        self.drained_calls += 1


class SourceContract:
    """Base of a connector's source contract tests (not collected by itself)."""

    partitions: int = 2
    records: int = 30
    poll_timeout: float = 0.5
    """Seconds per poll; real brokers may need longer."""
    patience: float = 30.0
    """Seconds a test waits for data before failing."""

    def produce(self, partitions: int, records: int) -> dict[int, list[bytes]]:
        """Make ``records`` payloads available on each of ``partitions`` lanes; return them."""
        raise NotImplementedError

    def open_source(self) -> Source:
        """A new bounded source over what :meth:`produce` made, resuming from commits."""
        raise NotImplementedError

    # -- helpers --------------------------------------------------------------------

    def _collect(
        self, source: Source, events: RecordingEvents, until: int | None = None
    ) -> list[PayloadBatch]:
        batches: list[PayloadBatch] = []
        deadline = time.monotonic() + self.patience
        while time.monotonic() < deadline:
            polled = list(source.poll(self.poll_timeout))
            lanes = [b.lane for b in polled]
            assert len(lanes) == len(set(lanes)), f"two batches for one lane in a poll: {lanes}"
            batches.extend(polled)
            if events.drained_calls:
                break
            if until is not None and sum(len(b) for b in batches) >= until:
                break
        return batches

    @staticmethod
    def _by_lane(batches: list[PayloadBatch]) -> dict[int, list[tuple[int, bytes]]]:
        out: dict[int, list[tuple[int, bytes]]] = {}
        for batch in batches:
            for offset, payload in zip(batch.offsets, batch.payloads, strict=True):
                out.setdefault(batch.lane.partition, []).append((offset, bytes(payload)))
        return out

    # -- the contract ---------------------------------------------------------------

    def test_contract_hands_out_views_in_offset_order_then_drains_once(self) -> None:
        produced = self.produce(self.partitions, self.records)
        source = self.open_source()
        events = RecordingEvents()
        source.start(events)
        try:
            batches = self._collect(source, events)
            assert events.drained_calls == 1, "a bounded source must report drained"
            for _ in range(3):
                assert list(source.poll(0.01)) == []
            assert events.drained_calls == 1
        finally:
            source.close()
        for batch in batches:
            assert all(type(p) is memoryview for p in batch.payloads)
            assert batch.offsets == sorted(batch.offsets)
            assert batch.next_offset > batch.offsets[-1]
            assert len(batch.keys) == len(batch.timestamps) == len(batch.payloads)
        got = self._by_lane(batches)
        assert {p: [payload for _, payload in rows] for p, rows in got.items()} == produced
        for rows in got.values():
            offsets = [o for o, _ in rows]
            assert offsets == sorted(set(offsets))

    def test_contract_pause_holds_a_lane_back_until_resume(self) -> None:
        produced = self.produce(self.partitions, self.records)
        source = self.open_source()
        events = RecordingEvents()
        source.start(events)
        try:
            lanes = {b.lane for b in self._collect(source, events, until=1)}
            held = sorted(lanes)[0] if lanes else None
            if held is None:
                raise AssertionError("the source handed out nothing")
            source.pause([held])
            source.poll(self.poll_timeout)  # a batch fetched before the pause may still come
            for _ in range(3):
                assert held not in {b.lane for b in source.poll(self.poll_timeout)}
            source.resume([held])
            rest = self._collect(source, events)
            assert held in {b.lane for b in rest} or not produced[held.partition]
        finally:
            source.close()

    def test_contract_reopened_source_resumes_at_the_commit(self) -> None:
        self.produce(self.partitions, self.records)
        first = self.open_source()
        events = RecordingEvents()
        first.start(events)
        try:
            batches = self._collect(first, events, until=1)
            lane = batches[0].lane
            position = batches[0].next_offset
            first.commit({lane: position}, sync=True)
        finally:
            first.close()
        second = self.open_source()
        events = RecordingEvents()
        second.start(events)
        try:
            again = [b for b in self._collect(second, events) if b.lane == lane]
        finally:
            second.close()
        if again:
            assert again[0].first_offset == position

    # Helper for subclasses: the lanes a source announced.
    @staticmethod
    def announced(events: RecordingEvents) -> Mapping[int, Lane]:
        return {lane.partition: lane for lanes in events.assigned_lanes for lane in lanes}
