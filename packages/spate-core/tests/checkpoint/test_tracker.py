"""PartitionTracker and its ack tokens: contiguous delivered prefixes, worst status,
epochs, holders that release twice (B1, B2, B5, B15, B39)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule
from spate.checkpoint import AckStatus, AckToken, PartitionTracker
from spate.errors import AckError
from spate.records import Lane, PayloadBatch
from spate.testing import ManualClock

LANE = Lane("t", 0)


def batch(lane: Lane, first: int, count: int) -> PayloadBatch:
    views = [memoryview(b"x")] * count
    return PayloadBatch(
        lane=lane,
        offsets=list(range(first, first + count)),
        payloads=views,
        keys=[None] * count,
        timestamps=[0] * count,
        next_offset=first + count,
    )


def test_b1_out_of_order_resolution_commits_only_the_contiguous_prefix() -> None:
    tracker = PartitionTracker(ManualClock())
    tracker.assign([LANE])
    a, b, c = (tracker.register(batch(LANE, 10 * i, 10)) for i in range(3))
    c.release()
    b.release()
    assert tracker.watermarks() == {LANE: 0}
    a.release()
    assert tracker.watermarks() == {LANE: 30}


def test_b2_batch_stays_pending_until_every_holder_releases_and_worst_status_wins() -> None:
    tracker = PartitionTracker(ManualClock())
    token = tracker.register(batch(LANE, 0, 5))
    token.retain("buffer 1")
    token.retain("buffer 2")  # a split branch
    token.release()  # the chain finished
    token.release(holder="buffer 1")  # written
    assert token.status is AckStatus.PENDING
    assert tracker.watermarks() == {LANE: 0}
    assert tracker.pending(LANE) == 1
    other = tracker.register(batch(LANE, 5, 5))
    other.retain("buffer 1")
    other.release(False, holder="buffer 1")  # one buffer abandoned ...
    other.release(True)  # ... the chain finished: still failed
    assert other.status is AckStatus.FAILED
    token.release(holder="buffer 2")
    assert token.status is AckStatus.DELIVERED
    assert tracker.watermarks() == {LANE: 5}


def test_b39_a_holder_releasing_twice_does_not_resolve_the_batch_early() -> None:
    """Sink A releases twice while sink B still writes: with a count of holders the second
    release took B's place and the batch resolved delivered (a commit ahead of B's rows)."""
    tracker = PartitionTracker(ManualClock())
    token = tracker.register(batch(LANE, 0, 5))
    token.retain("sink A")
    token.retain("sink B")
    token.release()  # the chain
    token.release(holder="sink A")
    with pytest.raises(AckError, match="released by 'sink A', which does not hold it"):
        token.release(holder="sink A")
    assert token.status is AckStatus.PENDING
    assert tracker.watermarks() == {LANE: 0}
    assert tracker.fault is not None and "sink A" in tracker.fault
    token.release(holder="sink B")  # B's rows are written: the batch is failed all the same
    assert token.status is AckStatus.FAILED
    assert tracker.watermarks() == {LANE: 0}


def test_b39_a_release_after_resolution_or_without_a_hold_is_a_fault() -> None:
    faults: list[str] = []
    token = AckToken(LANE, 1, 1, 1, 1, lambda t: None, lambda t, reason: faults.append(reason))
    with pytest.raises(AckError):
        token.release(holder="never retained")
    token.release()
    assert token.status is AckStatus.FAILED  # the misuse failed the batch
    with pytest.raises(AckError, match="after it resolved failed"):
        token.release()  # the chain again
    assert len(faults) == 2 and token.fault == faults[0]


def test_b39_a_holder_retaining_twice_is_a_fault() -> None:
    faults: list[str] = []
    token = AckToken(LANE, 1, 1, 1, 1, lambda t: None, lambda t, reason: faults.append(reason))
    token.retain("buffer")
    with pytest.raises(AckError, match="retained twice by 'buffer'"):
        token.retain("buffer")
    assert token.holders == 2 and faults
    token.release(holder="buffer")
    token.release()
    assert token.status is AckStatus.FAILED


def test_b2_holders_may_release_in_any_order_and_the_last_resolves_once() -> None:
    resolved: list[AckStatus] = []
    token = AckToken(LANE, 1, 1, 1, 1, lambda t: resolved.append(t.status))
    holders = [object() for _ in range(5)]
    for holder in holders:
        token.retain(holder)
    for holder in reversed(holders):
        token.release(holder=holder)
    assert resolved == []
    token.release()
    assert resolved == [AckStatus.DELIVERED] and token.fault is None


def test_b5_failed_head_batch_stalls_the_lane_and_reports_how_long() -> None:
    clock = ManualClock()
    tracker = PartitionTracker(clock)
    first = tracker.register(batch(LANE, 0, 5))
    second = tracker.register(batch(LANE, 5, 5))
    second.release()
    first.release(False)
    assert tracker.watermarks() == {LANE: 0}
    clock.advance(7)
    assert tracker.stalled_lanes() == {LANE: 7}
    third = tracker.register(batch(LANE, 10, 5))
    third.release()
    assert tracker.watermarks() == {LANE: 0}


def test_b5_slow_batches_are_not_stalled() -> None:
    clock = ManualClock()
    tracker = PartitionTracker(clock)
    tracker.register(batch(LANE, 0, 5))
    clock.advance(3600)
    assert tracker.stalled_lanes() == {}


def test_b15_resolutions_from_an_older_epoch_are_ignored() -> None:
    tracker = PartitionTracker(ManualClock())
    tracker.assign([LANE])
    old = tracker.register(batch(LANE, 0, 5))
    old.retain("buffer")
    old.release()
    assert tracker.revoke([LANE]) == {LANE: 0}
    tracker.assign([LANE])
    new = tracker.register(batch(LANE, 0, 5))
    old.release(holder="buffer")  # the old ownership's write lands late
    assert tracker.ignored_resolutions == 1
    assert tracker.pending(LANE) == 1
    assert tracker.watermarks() == {LANE: 0}
    new.release()
    assert tracker.watermarks() == {LANE: 5}


def test_lanes_without_assignment_are_tracked_from_their_first_batch() -> None:
    tracker = PartitionTracker(ManualClock())
    token = tracker.register(batch(LANE, 42, 3))
    assert tracker.owns(LANE)
    assert tracker.watermarks() == {LANE: 42}
    token.release()
    assert tracker.watermarks() == {LANE: 45}


class TrackerMachine(RuleBasedStateMachine):
    """B1/B15 property: the watermark never passes an unresolved or failed batch of the
    current epoch, under random out-of-order resolution, failures and revocations."""

    def __init__(self) -> None:
        super().__init__()
        self.tracker = PartitionTracker(ManualClock())
        self.lanes = [Lane("p", 0), Lane("p", 1)]
        self.tracker.assign(self.lanes)
        self.next_offset = {lane: 0 for lane in self.lanes}
        self.tokens: dict[Lane, list[tuple[int, AckToken]]] = {lane: [] for lane in self.lanes}
        self.stale: list[AckToken] = []
        self.committed: dict[Lane, int] = {}

    @rule(lane=st.sampled_from([0, 1]), size=st.integers(1, 4), gap=st.integers(0, 2))
    def poll(self, lane: int, size: int, gap: int) -> None:
        ln = self.lanes[lane]
        first = self.next_offset[ln] + gap
        token = self.tracker.register(batch(ln, first, size))
        self.next_offset[ln] = first + size
        self.tokens[ln].append((first, token))

    @rule(lane=st.sampled_from([0, 1]), pick=st.integers(0, 50), ok=st.booleans())
    def resolve(self, lane: int, pick: int, ok: bool) -> None:
        pending = [t for _, t in self.tokens[self.lanes[lane]] if t.status is AckStatus.PENDING]
        if pending:
            pending[pick % len(pending)].release(ok)

    @rule(pick=st.integers(0, 50), ok=st.booleans())
    def resolve_stale(self, pick: int, ok: bool) -> None:
        stale = [t for t in self.stale if t.status is AckStatus.PENDING]
        if stale:
            stale[pick % len(stale)].release(ok)

    @rule(lane=st.sampled_from([0, 1]))
    def rebalance(self, lane: int) -> None:
        ln = self.lanes[lane]
        final = self.tracker.revoke([ln])
        if ln in final:
            self.committed[ln] = final[ln]
        self.stale.extend(t for _, t in self.tokens[ln])
        self.tokens[ln] = []
        self.tracker.assign([ln])
        # The next owner resumes at the committed position.
        self.next_offset[ln] = self.committed.get(ln, 0)

    @rule()
    def checkpoint(self) -> None:
        self.committed.update(self.tracker.watermarks())

    @invariant()
    def never_past_an_undelivered_batch(self) -> None:
        marks = self.tracker.watermarks()
        for lane, tokens in self.tokens.items():
            mark = marks.get(lane)
            if mark is None:
                continue
            for first, token in tokens:
                if token.status is not AckStatus.DELIVERED:
                    assert mark <= first, (lane, mark, first, token)
                    break
            else:
                if tokens:
                    assert mark == tokens[-1][1].next_offset


TestTrackerMachine = TrackerMachine.TestCase
TestTrackerMachine.settings = settings(max_examples=60, stateful_step_count=40, deadline=None)


@settings(max_examples=80, deadline=None)
@given(order=st.permutations(list(range(8))), fail=st.sets(st.integers(0, 7), max_size=2))
def test_b1_any_resolution_order_yields_prefix_up_to_first_failure(
    order: list[int], fail: set[int]
) -> None:
    tracker = PartitionTracker(ManualClock())
    tokens = [tracker.register(batch(LANE, 3 * i, 3)) for i in range(8)]
    seen = []
    for i in order:
        tokens[i].release(i not in fail)
        seen.append(i)
        done = set(seen) - fail
        prefix = 0
        while prefix < 8 and prefix in done:
            prefix += 1
        assert tracker.watermarks()[LANE] == 3 * prefix
