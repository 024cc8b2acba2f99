"""``SourceConformance``: the promises every source connector keeps (B1, B7, B17).

Driven the way the runtime drives a source (``start`` with events, ``poll``, ``commit``,
``pause`` / ``resume``, ``close``), against the connector's real input:

* a bounded source hands out every record exactly once per lane, in offset order, as
  ``memoryview`` payloads with keys and timestamps alongside, at most one batch per lane
  per poll, then calls ``events.drained()`` exactly once;
* a batch's ``next_offset`` never passes a record the source has not handed out yet —
  the runtime commits ``next_offset``, so passing one would lose it on a restart (B1);
* a source commits only what the runtime passes to ``commit()``: a source closed
  without a commit hands everything out again (no auto-commit, B1);
* a reopened source resumes exactly at its last synchronous commit, lane by lane (B1,
  B14) — skipped for sources whose commits do not outlive them
  (:attr:`SourceConformance.resumes_from_commits`);
* ``pause`` holds a lane back while ``poll`` keeps being called, ``resume`` brings it
  back, and nothing is lost or repeated across the pause (B7, B8).

The hooks are ``produce`` (make data) and ``open_source`` (a source over it).
"""

from __future__ import annotations

import time
from collections.abc import Collection
from dataclasses import dataclass, field
from typing import ClassVar

from spate.records import Lane, PayloadBatch
from spate.source._contract import Source
from spate.testing.conformance._base import (
    ConfigConformance,
    ConformanceFailure,
    Promise,
    check,
    skip,
)

SOURCE_HANDS_OUT = Promise(
    "B1",
    "a bounded source hands out every record once per lane, in offset order, as memoryviews, "
    "one batch per lane per poll, then reports drained() exactly once",
)
SOURCE_POSITION = Promise(
    "B1", "a batch's next_offset never passes a record the source has not handed out yet"
)
SOURCE_OWN_COMMITS = Promise("B1", "a source commits only what the runtime passes to commit()")
SOURCE_RESUME = Promise("B1", "a reopened source resumes exactly at its last synchronous commit")
SOURCE_PAUSE = Promise(
    "B7", "pause() holds a lane back while poll() keeps being called; resume() brings it back"
)

Handed = dict[int, list[tuple[int, bytes]]]


@dataclass
class RecordingEvents:
    """``SourceEvents`` that record what the source reported (no runtime involved)."""

    assigned_lanes: list[list[Lane]] = field(default_factory=list)
    revoked_lanes: list[list[Lane]] = field(default_factory=list)
    lost_lanes: list[list[Lane]] = field(default_factory=list)
    drained_calls: int = 0
    undrained_calls: int = 0

    def assigned(self, lanes: Collection[Lane]) -> None:
        self.assigned_lanes.append(sorted(lanes))

    def revoked(self, lanes: Collection[Lane]) -> None:
        self.revoked_lanes.append(sorted(lanes))

    def lost(self, lanes: Collection[Lane]) -> None:
        self.lost_lanes.append(sorted(lanes))

    def drained(self) -> None:
        self.drained_calls += 1

    def undrained(self) -> None:
        self.undrained_calls += 1


class SourceConformance(ConfigConformance):
    """Subclass as ``Test<Name>SourceConformance`` and fill in the hooks.

    Required: :meth:`produce` and :meth:`open_source`. Optional: :attr:`factory`,
    :attr:`tag`, :meth:`config` and :meth:`invalid_configs` for the config tests.
    Sources whose lanes are bigger than one batch exercise the pause test best: keep
    the source's batch size below :attr:`records`.
    """

    section: ClassVar[str] = "source"
    partitions: ClassVar[int] = 2
    records: ClassVar[int] = 30
    """Records :meth:`produce` is asked for per lane."""
    poll_timeout: ClassVar[float] = 0.2
    """Seconds per ``poll`` call; real brokers may need longer."""
    patience: ClassVar[float] = 30.0
    """Seconds a test waits for data before it fails."""
    resumes_from_commits: ClassVar[bool] = True
    """False for sources that start from the beginning whatever was committed."""

    # -- hooks ----------------------------------------------------------------------

    def produce(self, partitions: int, records: int) -> dict[int, list[bytes]]:
        """Make ``records`` payloads available on each of ``partitions`` lanes; return them.

        Called once per test, before any :meth:`open_source`.
        """
        raise NotImplementedError

    def open_source(self) -> Source:
        """A new bounded source over what :meth:`produce` made, resuming from its commits."""
        raise NotImplementedError

    def lane_index(self, lane: Lane) -> int:
        """The key of ``lane`` in what :meth:`produce` returns (its partition by default).

        Override for sources whose lanes are not numbered partitions (S3 splits).
        """
        return lane.partition

    # -- helpers --------------------------------------------------------------------

    def collect(
        self,
        source: Source,
        events: RecordingEvents,
        *,
        until: int | None = None,
        watch: dict[Lane, int] | None = None,
    ) -> list[PayloadBatch]:
        """Poll until drained (or ``until`` records), checking each poll's shape."""
        batches: list[PayloadBatch] = []
        positions = watch if watch is not None else {}
        deadline = time.monotonic() + self.patience
        while time.monotonic() < deadline:
            polled = list(source.poll(self.poll_timeout))
            self._check_poll(polled, positions)
            batches.extend(polled)
            if events.drained_calls:
                break
            if until is not None and sum(len(b) for b in batches) >= until:
                break
        return batches

    @staticmethod
    def _check_poll(polled: list[PayloadBatch], positions: dict[Lane, int]) -> None:
        lanes = [b.lane for b in polled]
        check(
            len(lanes) == len(set(lanes)),
            SOURCE_HANDS_OUT,
            f"one poll returned two batches for one lane: {[str(lane) for lane in lanes]}",
        )
        for batch in polled:
            n = len(batch.payloads)
            check(
                len(batch.offsets) == len(batch.keys) == len(batch.timestamps) == n,
                SOURCE_HANDS_OUT,
                f"{batch.lane}: offsets, payloads, keys and timestamps differ in length",
            )
            check(
                all(type(p) is memoryview for p in batch.payloads),
                SOURCE_HANDS_OUT,
                f"{batch.lane}: payloads must be memoryview objects (borrowed views)",
            )
            check(
                batch.offsets == sorted(set(batch.offsets)),
                SOURCE_HANDS_OUT,
                f"{batch.lane}: offsets not strictly increasing: {batch.offsets[:10]}",
            )
            if n:
                check(
                    batch.next_offset > batch.offsets[-1],
                    SOURCE_POSITION,
                    f"{batch.lane}: next_offset {batch.next_offset} is not past the last "
                    f"offset {batch.offsets[-1]}",
                )
            previous = positions.get(batch.lane)
            if previous is not None and n:
                check(
                    batch.offsets[0] >= previous,
                    SOURCE_POSITION,
                    f"{batch.lane}: a batch starts at offset {batch.offsets[0]} although "
                    f"the previous batch's next_offset was {previous}; committing that "
                    "position would skip a record handed out later",
                )
            positions[batch.lane] = batch.next_offset

    def by_lane(self, batches: list[PayloadBatch]) -> Handed:
        """Per lane index, ``(offset, payload bytes)`` in the order handed out."""
        out: Handed = {}
        for batch in batches:
            rows = out.setdefault(self.lane_index(batch.lane), [])
            for offset, payload in zip(batch.offsets, batch.payloads, strict=True):
                rows.append((offset, bytes(payload)))
        return out

    def _run(self, until: int | None = None) -> tuple[list[PayloadBatch], RecordingEvents]:
        source = self.open_source()
        events = RecordingEvents()
        source.start(events)
        try:
            return self.collect(source, events, until=until), events
        finally:
            source.close()

    def _check_everything(self, produced: dict[int, list[bytes]], handed: Handed, how: str) -> None:
        for partition in sorted(set(produced) | set(handed)):
            want = produced.get(partition, [])
            got = [payload for _, payload in handed.get(partition, [])]
            if got == want:
                continue
            lost = len([p for p in want if p not in got])
            extra = len(got) - len(want) + lost
            raise ConformanceFailure(
                SOURCE_HANDS_OUT,
                f"{how}: lane {partition} handed out {len(got)} records, expected "
                f"{len(want)} ({lost} missing, {extra} repeated or unexpected, or out of order)",
            )

    # -- the promises ---------------------------------------------------------------

    def test_b1_bounded_source_hands_out_everything_once_then_drains(self) -> None:
        produced = self.produce(self.partitions, self.records)
        source = self.open_source()
        events = RecordingEvents()
        source.start(events)
        try:
            batches = self.collect(source, events)
            check(
                events.drained_calls == 1,
                SOURCE_HANDS_OUT,
                f"drained() was called {events.drained_calls} times within {self.patience}s",
            )
            for _ in range(3):
                extra = list(source.poll(0.01))
                check(
                    not extra,
                    SOURCE_HANDS_OUT,
                    f"poll() returned {len(extra)} batches after drained()",
                )
            check(events.drained_calls == 1, SOURCE_HANDS_OUT, "drained() was called again")
        finally:
            source.close()
        self._check_everything(produced, self.by_lane(batches), "one bounded run")

    def test_b1_source_commits_nothing_by_itself(self) -> None:
        produced = self.produce(self.partitions, self.records)
        first, _ = self._run()
        self._check_everything(produced, self.by_lane(first), "first run")
        again, _ = self._run()
        handed = self.by_lane(again)
        short = {p: len(want) - len(handed.get(p, [])) for p, want in produced.items()}
        check(
            not any(short.values()),
            SOURCE_OWN_COMMITS,
            f"a source closed without any commit() skipped records when reopened "
            f"(missing per lane: {short}); never commit on your own (auto-commit off)",
        )
        self._check_everything(produced, handed, "reopened without commits")

    def test_b1_reopened_source_resumes_exactly_at_the_commit(self) -> None:
        if not self.resumes_from_commits:
            raise skip(f"{type(self).__name__}: the source does not keep commits")
        produced = self.produce(self.partitions, self.records)
        source = self.open_source()
        events = RecordingEvents()
        source.start(events)
        try:
            batches = self.collect(source, events, until=1)
            check(batches, SOURCE_HANDS_OUT, f"nothing was handed out in {self.patience}s")
            first = next(b for b in batches if len(b))
            lane, position, taken = first.lane, first.next_offset, len(first)
            source.commit({lane: position}, sync=True)
        finally:
            source.close()
        again, _ = self._run()
        handed = self.by_lane(again)
        key = self.lane_index(lane)
        resumed = handed.get(key, [])
        want = produced[key][taken:]
        check(
            not resumed or resumed[0][0] == position,
            SOURCE_RESUME,
            f"{lane}: committed {position}, but the reopened source started at "
            f"offset {resumed[0][0] if resumed else None}",
        )
        check(
            [p for _, p in resumed] == want,
            SOURCE_RESUME,
            f"{lane}: after a commit at {position} the reopened source handed out "
            f"{len(resumed)} records, expected the {len(want)} after the commit",
        )
        others = {p: rows for p, rows in handed.items() if p != key}
        expected = {p: rows for p, rows in produced.items() if p != key}
        self._check_everything(expected, others, "lanes without a commit after reopening")

    def test_b7_pause_holds_a_lane_until_resume(self) -> None:
        produced = self.produce(self.partitions, self.records)
        source = self.open_source()
        events = RecordingEvents()
        source.start(events)
        positions: dict[Lane, int] = {}
        try:
            batches = self.collect(source, events, until=1, watch=positions)
            handed = self.by_lane(batches)
            lanes = {b.lane for b in batches} | {
                lane for group in events.assigned_lanes for lane in group
            }
            left = sorted(
                lane
                for lane in lanes
                if len(handed.get(self.lane_index(lane), []))
                < len(produced.get(self.lane_index(lane), []))
            )
            if not left:
                raise ConformanceFailure(
                    SOURCE_PAUSE,
                    "the first polls handed out every record, so no lane is left to pause; "
                    "make the source's batches smaller than `records` in the test",
                )
            held = left[0]
            source.pause([held])
            # A batch fetched before the pause may still arrive once.
            grace = list(source.poll(self.poll_timeout))
            self._check_poll(grace, positions)
            batches.extend(grace)
            for _ in range(3):
                polled = list(source.poll(self.poll_timeout))
                self._check_poll(polled, positions)
                batches.extend(polled)
                check(
                    held not in {b.lane for b in polled},
                    SOURCE_PAUSE,
                    f"{held} was handed out while paused",
                )
            source.resume([held])
            if not events.drained_calls:
                batches.extend(self.collect(source, events, watch=positions))
        finally:
            source.close()
        handed = self.by_lane(batches)
        key = self.lane_index(held)
        check(
            len(handed.get(key, [])) == len(produced[key]),
            SOURCE_PAUSE,
            f"{held} handed out {len(handed.get(key, []))} of {len(produced[key])} "
            "records after resume()",
        )
        self._check_everything(produced, handed, "across pause and resume")
