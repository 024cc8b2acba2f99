"""The partition tracker: which source batches of each lane are pending, delivered or failed.

The tracker owns one :class:`_LaneState` per owned lane. Registering a polled batch
creates its :class:`~spate.checkpoint.AckToken` (holding the chain's first hold) and
appends it to the lane's queue in poll order. Tokens resolve on whatever thread releases
their last hold (usually a sink worker); the resolver only counts, under one lock, so it
stays cheap. The pipeline thread later asks for :meth:`PartitionTracker.watermarks`,
which pops the contiguous delivered prefix of each lane and returns ``next_offset`` of
its last batch: the only position that may ever be committed (B1).

Ownership epochs (B15): every assignment of a lane starts a new epoch; tokens carry the
epoch they were created in, and a resolution from an older epoch (a revoked lane whose
rows were written late) is ignored. A failed batch at the head of a lane stops the
watermark there for good; :meth:`PartitionTracker.stalled_lanes` reports how long it has
blocked so the runtime can fail the pipeline after ``stalled_fail_after`` (B5).

Upholds B1, B2, B5, B6 (pending counts), B15.
"""

from __future__ import annotations

import logging
import threading
from collections import deque
from collections.abc import Collection, Iterable
from dataclasses import dataclass

from spate._clock import Clock
from spate.checkpoint._ack import AckStatus, AckToken
from spate.records import Lane, PayloadBatch

logger = logging.getLogger(__name__)

_PASSED_LIMIT = 100_000
"""Delivered batches remembered for written → committed until a commit takes them; a
source whose commits keep failing does not grow the list past this."""


def _oldest(batch: PayloadBatch) -> float | None:
    """The batch's oldest record timestamp in wall-clock seconds (B220); None when it is
    unknown (0) or the batch is empty. Builds no list the batch does not hold (B97)."""
    oldest = batch.oldest_timestamp()
    return oldest / 1000.0 if oldest > 0 else None


class _LaneState:
    """Mutable per-lane bookkeeping; guarded by the tracker's lock."""

    __slots__ = (
        "advanced_at",
        "base",
        "epoch",
        "failed_since",
        "last_resolved_at",
        "queue",
        "seq",
        "unresolved",
        "watermark",
    )

    def __init__(self, epoch: int, now: float) -> None:
        self.epoch = epoch
        self.queue: deque[AckToken] = deque()
        self.seq = 0
        self.unresolved = 0
        self.base: int | None = None
        """Position before the first batch registered in this epoch (``first_offset``)."""
        self.watermark: int | None = None
        """``next_offset`` of the contiguous delivered prefix; ``None`` before any batch."""
        self.failed_since: float | None = None
        self.advanced_at = now
        self.last_resolved_at = now


@dataclass(frozen=True, slots=True)
class LaneSnapshot:
    """A read-only view of one lane, for health checks, metrics and exit reports."""

    lane: Lane
    epoch: int
    pending: int
    """Batches registered and not yet resolved."""
    queued: int
    """Batches not yet behind the watermark (resolved or not)."""
    watermark: int | None
    failed_head: bool
    seconds_since_advance: float


class PartitionTracker:
    """Per-lane pending batches, ownership epochs and committable watermarks.

    ``register`` and ``watermarks`` are called from the pipeline thread; token
    resolution may come from any thread. ``on_resolve`` (optional) is called after
    every resolution that counts, outside the lock, so the runtime can wake up.
    """

    def __init__(self, clock: Clock) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        self._lanes: dict[Lane, _LaneState] = {}
        self._epochs: dict[Lane, int] = {}
        self._wake: list[threading.Event] = []
        self._passed: list[tuple[dict[tuple[str, str], float], int]] = []
        self._delivered_records = 0
        self._failed_records = 0
        self.ignored_resolutions = 0
        """Resolutions of tokens from an ended ownership epoch (B15)."""
        self.fault: str | None = None
        """The first misuse of a token (a holder released twice): the run must fail."""

    # -- ownership ------------------------------------------------------------------

    def assign(self, lanes: Iterable[Lane]) -> None:
        """Start a new ownership epoch for each lane (pipeline thread)."""
        now = self._clock.monotonic()
        with self._lock:
            for lane in lanes:
                epoch = self._epochs.get(lane, 0) + 1
                self._epochs[lane] = epoch
                self._lanes[lane] = _LaneState(epoch, now)

    def revoke(self, lanes: Iterable[Lane]) -> dict[Lane, int]:
        """End ownership of ``lanes``; return their final watermarks (to commit).

        Later resolutions of their tokens are ignored. The caller commits the returned
        positions before it lets the source hand the lanes over (B15).
        """
        final: dict[Lane, int] = {}
        with self._lock:
            for lane in lanes:
                state = self._lanes.pop(lane, None)
                if state is None:
                    continue
                self._advance(state, self._clock.monotonic())
                if state.watermark is not None:
                    final[lane] = state.watermark
                # Bump the epoch so that nothing of the old ownership can count again.
                self._epochs[lane] = state.epoch + 1
        return final

    def owned(self) -> list[Lane]:
        with self._lock:
            return list(self._lanes)

    def owns(self, lane: Lane) -> bool:
        with self._lock:
            return lane in self._lanes

    # -- batches --------------------------------------------------------------------

    def register(self, batch: PayloadBatch) -> AckToken:
        """Create the ack token of a polled batch, holding the chain's hold.

        A lane the source never announced is assigned implicitly (sources without
        assignment events). Batches must arrive in offset order per lane.
        """
        lane = batch.lane
        with self._lock:
            state = self._lanes.get(lane)
            if state is None:
                logger.debug("lane %s registered without assignment; assigning it", lane)
                epoch = self._epochs.get(lane, 0) + 1
                self._epochs[lane] = epoch
                state = _LaneState(epoch, self._clock.monotonic())
                self._lanes[lane] = state
            if state.base is None:
                state.base = batch.first_offset
                state.watermark = batch.first_offset
            state.seq += 1
            token = AckToken(
                lane,
                state.epoch,
                state.seq,
                batch.next_offset,
                len(batch),
                self._resolved,
                self._faulted,
            )
            token.event_time = _oldest(batch)
            state.queue.append(token)
            state.unresolved += 1
        return token

    def _resolved(self, token: AckToken) -> None:
        """Resolver of every token; runs on the thread that released the last hold."""
        with self._lock:
            state = self._lanes.get(token.lane)
            if state is None or state.epoch != token.epoch:
                self.ignored_resolutions += 1
                return
            state.unresolved -= 1
            state.last_resolved_at = self._clock.monotonic()
            if token.status is AckStatus.DELIVERED:
                self._delivered_records += token.records
            else:
                self._failed_records += token.records
            waiters = list(self._wake)
        for event in waiters:
            event.set()

    def _faulted(self, token: AckToken, reason: str) -> None:
        """Fault handler of every token: a holder released twice (any thread, B2)."""
        with self._lock:
            if self.fault is None:
                self.fault = reason
            waiters = list(self._wake)
        logger.error("%s", reason)
        for event in waiters:
            event.set()

    def add_waker(self, event: threading.Event) -> None:
        """Set ``event`` after every counted resolution (the runtime's idle wait)."""
        with self._lock:
            self._wake.append(event)

    def pending(self, lane: Lane) -> int:
        """Unresolved batches of ``lane`` in its current epoch (B6)."""
        with self._lock:
            state = self._lanes.get(lane)
            return 0 if state is None else state.unresolved

    def pending_by_lane(self) -> dict[Lane, int]:
        with self._lock:
            return {lane: state.unresolved for lane, state in self._lanes.items()}

    def total_pending(self) -> int:
        with self._lock:
            return sum(state.unresolved for state in self._lanes.values())

    # -- watermarks -----------------------------------------------------------------

    def _advance(self, state: _LaneState, now: float) -> None:
        queue = state.queue
        moved = False
        while queue:
            head = queue[0]
            status = head.status
            if status is AckStatus.DELIVERED:
                queue.popleft()
                state.watermark = head.next_offset
                moved = True
                if head.written and len(self._passed) < _PASSED_LIMIT:
                    self._passed.append((head.written, head.records))
                continue
            if status is AckStatus.FAILED and state.failed_since is None:
                state.failed_since = now
                logger.warning(
                    "batch %d of lane %s failed; the lane's watermark stops at %s",
                    head.seq,
                    head.lane,
                    state.watermark,
                )
            break
        if moved or not queue:
            state.advanced_at = now

    def watermarks(self, lanes: Collection[Lane] | None = None) -> dict[Lane, int]:
        """Pop delivered prefixes; return ``next_offset`` of each lane's prefix (B1).

        Lanes that never registered a batch are left out. Called from the pipeline thread.
        """
        now = self._clock.monotonic()
        out: dict[Lane, int] = {}
        with self._lock:
            for lane, state in self._lanes.items():
                if lanes is not None and lane not in lanes:
                    continue
                self._advance(state, now)
                if state.watermark is not None:
                    out[lane] = state.watermark
        return out

    def take_passed(self) -> list[tuple[dict[tuple[str, str], float], int]]:
        """What the watermarks passed since the last call: each delivered batch's write
        times by (sink, table) and its record count. The committer measures written →
        committed from them once a commit succeeds (B221). Any thread."""
        with self._lock:
            passed, self._passed = self._passed, []
        return passed

    def stalled_lanes(self) -> dict[Lane, float]:
        """Lanes whose head batch failed, with seconds since it was first seen (B5)."""
        now = self._clock.monotonic()
        out: dict[Lane, float] = {}
        with self._lock:
            for lane, state in self._lanes.items():
                self._advance(state, now)
                if state.failed_since is not None:
                    out[lane] = now - state.failed_since
        return out

    def snapshot(self) -> list[LaneSnapshot]:
        """Every owned lane's state (any thread; does not move watermarks)."""
        now = self._clock.monotonic()
        with self._lock:
            return [
                LaneSnapshot(
                    lane=lane,
                    epoch=state.epoch,
                    pending=state.unresolved,
                    queued=len(state.queue),
                    watermark=state.watermark,
                    failed_head=state.failed_since is not None,
                    seconds_since_advance=(now - state.advanced_at) if state.queue else 0.0,
                )
                for lane, state in self._lanes.items()
            ]

    def record_counts(self) -> tuple[int, int]:
        """Records of delivered and of failed batches so far (counted epochs only)."""
        with self._lock:
            return self._delivered_records, self._failed_records

    def seconds_since_resolution(self) -> float:
        """Seconds since any owned lane last resolved a batch while work is pending."""
        now = self._clock.monotonic()
        with self._lock:
            busy = [s.last_resolved_at for s in self._lanes.values() if s.unresolved]
        return now - max(busy) if busy else 0.0

    def all_resolved_delivered(self) -> bool:
        """True when every registered batch of every owned lane is delivered."""
        now = self._clock.monotonic()
        with self._lock:
            for state in self._lanes.values():
                self._advance(state, now)
                if state.queue:
                    return False
        return True
