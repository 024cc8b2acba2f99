"""The asynchronous coordinator: one instance's membership, leadership and owned splits.

:class:`CoordinatorCore` runs every store call on one event loop; the thread-safe
facade that runs it, :class:`~spate_coordination.Coordinator`, is in
:mod:`spate_coordination._coordinator`; the events it emits are in
:mod:`spate_coordination._events` and its metrics in :mod:`spate_coordination._metered`.

What a source (the S3 backfill source, or any source that splits work) gets:

* :meth:`Coordinator.publish_plan` — publish the job's splits (ids, weights, metadata);
  idempotent for an unchanged plan, refused for a different one;
* :meth:`Coordinator.owned` — the splits this instance owns now, each with its *epoch*;
* notifications — :meth:`Coordinator.take_events` (poll from the pipeline thread) or
  :meth:`Coordinator.add_listener` (called on the loop thread, must not block):
  ``ASSIGNED`` (start working, with the epoch), ``REVOKE_REQUESTED`` (drain, commit, then
  :meth:`Coordinator.release` before the deadline), ``FORCED`` (stop at once: the split
  was taken away, fenced, or this instance's lease lapsed) and ``JOB_COMPLETE``;
* :meth:`Coordinator.commit_progress` / :meth:`Coordinator.read_progress` — fenced
  progress (bytes or a JSON object); :meth:`Coordinator.mark_completed`;
  :attr:`Coordinator.job_complete` once every planned split is completed;
* :meth:`Coordinator.quarantine` — set a split aside that cannot be read (fenced like
  progress; it keeps its progress, is not completed and is not handed out again),
  :meth:`Coordinator.split_states` — every split's :class:`SplitState`, and
  :meth:`Coordinator.retry_quarantined` — hand quarantined splits out again (also done
  at start with ``retry_quarantined: true``).

Fencing (B24): ``state.<split>`` holds the epoch and the progress in one value. Taking
a split bumps the epoch by compare-and-set; every progress write is a compare-and-set
that requires the writer's epoch, so once a successor took over, the old owner's writes
are refused (``ProgressWrite.FENCED``). Before any write the coordinator also checks its
own heartbeat by the local clock: an instance that could not renew for a whole lease
drops every split (``FORCED``) and writes nothing, then joins again as a fresh member.

Loops: heartbeats (membership and leader lease) every ``heartbeat_interval``; the
worker/leader tick every ``poll_interval`` or sooner when a watch reports a change.
Watches are only hints — on NATS 2.9 a lease expiring sends no event — so the tick
always polls. Store errors are logged and retried on the next round; an outage longer
than the lease makes the instance drop its splits, as above.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import uuid
from collections.abc import Iterable
from dataclasses import dataclass, replace

from spate import Clock, SystemClock
from spate.metrics import Meter

from spate_coordination._events import (
    Listener,
    OwnedSplit,
    ProgressWrite,
    SplitEvent,
    SplitEventKind,
)
from spate_coordination._leader import Leader, LeaderReport
from spate_coordination._membership import Membership
from spate_coordination._metered import CoordinatorMetrics, MeteredStore
from spate_coordination._records import (
    ASSIGN_PREFIX,
    DONE_KEY,
    MEMBER_PREFIX,
    PLAN_KEY,
    SPLIT_PREFIX,
    STATE_PREFIX,
    AssignRecord,
    PlanRecord,
    Progress,
    SplitSpec,
    StateRecord,
    key_tail,
    plan_digest,
)
from spate_coordination._states import SplitState, SplitStatus, read_split_states
from spate_coordination._states import retry_quarantined as _retry_quarantined
from spate_coordination._store import (
    CoordinationError,
    CoordinationStore,
    Keyspace,
    PlanConflictError,
    StoreUnavailableError,
    check_token,
)
from spate_coordination.config import CoordinationConfig

logger = logging.getLogger(__name__)


@dataclass(slots=True)
class _Owned:
    split: OwnedSplit
    revision: int  # revision of state.<split> after our last write


class CoordinatorCore:
    """The asynchronous coordinator; all methods run on one event loop.

    Tests drive it step by step (:meth:`step`) with a ``ManualClock``; production code
    uses :class:`Coordinator`, which runs :meth:`run` on a background loop.
    """

    def __init__(
        self,
        config: CoordinationConfig,
        store: CoordinationStore,
        *,
        clock: Clock | None = None,
        meter: Meter | None = None,
        component: str = "coordination",
        session: str | None = None,
    ) -> None:
        self.config = config
        self.instance_id = config.instance_id
        self.session = session or uuid.uuid4().hex[:16]
        self._clock: Clock = clock if clock is not None else SystemClock()
        meter = meter if meter is not None else Meter(config.job)
        self._metrics = CoordinatorMetrics.create(meter, component)
        self._store: CoordinationStore = MeteredStore(store, self._metrics.store_op)
        self._membership = Membership(self._store, self.instance_id, self.session, self._clock)
        self._leader = Leader(
            self._store,
            self.instance_id,
            self.session,
            self._clock,
            drain_deadline=config.drain_deadline,
            poll_interval=config.poll_interval,
        )
        self._lock = threading.Lock()  # guards _owned, _events, _job_complete for readers
        self._owned: dict[str, _Owned] = {}
        self._events: list[SplitEvent] = []
        self._listeners: list[Listener] = []
        self._job_complete = False
        self._joined = False
        self._wake = asyncio.Event()
        self.last_leader_report: LeaderReport | None = None

    # -- read side (any thread)

    @property
    def store(self) -> CoordinationStore:
        return self._store

    def owned(self) -> dict[str, OwnedSplit]:
        """Snapshot of the splits owned now (by the local view)."""
        with self._lock:
            return {s: o.split for s, o in self._owned.items()}

    def take_events(self) -> list[SplitEvent]:
        """Events since the last call, oldest first."""
        with self._lock:
            events, self._events = self._events, []
        return events

    def add_listener(self, listener: Listener) -> None:
        """Call ``listener`` on the loop thread for every event; it must not block."""
        self._listeners.append(listener)

    @property
    def job_complete(self) -> bool:
        return self._job_complete

    def is_leader(self) -> bool:
        return self._leader.is_leader()

    def alive(self) -> bool:
        """Whether this instance's heartbeat lease is held by the local clock."""
        return self._membership.alive()

    # -- lifecycle

    async def start(self) -> None:
        """Open the store and join; raises ``DuplicateInstanceError`` or
        ``StoreUnavailableError`` naming the endpoint (B24, B29)."""
        await self._store.open()
        try:
            await self._membership.join()
        except BaseException:
            await self._store.close()
            raise
        self._joined = True
        if self.config.retry_quarantined:
            retried = await self.retry_quarantined()
            logger.info(
                "job %s: %d quarantined split(s) handed out again%s",
                self.config.job,
                len(retried),
                f": {', '.join(retried)}" if retried else "",
            )
        try:
            await self._campaign()
        except StoreUnavailableError as exc:
            logger.warning("leader election failed, retrying: %s", exc)

    async def close(self, *, release: bool = True) -> None:
        """Leave the job: release owned splits (unless ``release`` is False), resign, close."""
        try:
            if release and self._membership.alive():
                # One failure (the store is away) ends the attempt: the leases expire
                # on their own and successors take over after lease_duration.
                for split in list(self._owned):
                    owned = self._owned.get(split)
                    if owned is not None:
                        await self.release(split, owned.split.epoch)
                await self._leader.resign()
                await self._membership.leave()
        except CoordinationError as exc:
            logger.warning("leaving job %s cleanly failed: %s", self.config.job, exc)
        finally:
            self._metrics.leader.set(0)
            await self._store.close()

    async def step(self) -> None:
        """One heartbeat and one tick, errors propagating (for tests)."""
        await self.heartbeat()
        await self.tick()

    async def run(self, stop: asyncio.Event) -> None:
        """Heartbeat, watch and tick until ``stop`` is set. Never raises store errors."""
        tasks = [
            asyncio.create_task(self._heartbeat_loop(stop), name="coord-heartbeat"),
            asyncio.create_task(self._lapse_loop(stop), name="coord-lapse"),
            asyncio.create_task(self._tick_loop(stop), name="coord-tick"),
            asyncio.create_task(self._watch(Keyspace.DURABLE, ASSIGN_PREFIX), name="coord-w1"),
            asyncio.create_task(self._watch(Keyspace.DURABLE, STATE_PREFIX), name="coord-w2"),
            asyncio.create_task(self._watch(Keyspace.TTL, MEMBER_PREFIX), name="coord-w3"),
        ]
        try:
            await stop.wait()
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

    async def _heartbeat_loop(self, stop: asyncio.Event) -> None:
        interval = self.config.renew_interval
        # After a failed renewal, try again soon: a request that timed out has already
        # used up part of the lease, and the store may be back (a restart, a failover).
        retry = max(0.05, interval / 5)
        while not stop.is_set():
            delay = interval
            try:
                await self.heartbeat()
            except (CoordinationError, ValueError) as exc:
                logger.warning("heartbeat of %s failed: %s", self.instance_id, exc)
                delay = retry
            except Exception:
                logger.exception("heartbeat of %s failed unexpectedly", self.instance_id)
                delay = retry
            await self._sleep(stop, delay)

    async def _lapse_loop(self, stop: asyncio.Event) -> None:
        """Drop the owned splits the moment the heartbeat lease lapses by the local clock.

        The heartbeat and tick loops notice a lapse only between store calls, and a call
        cut off from the store (a partition) waits out its request timeout first: the
        splits would still count as worked here after a successor may have taken them
        (B24). This loop waits on the clock alone.
        """
        lease = self._membership.lease
        while not stop.is_set():
            if lease.revision is not None and self._owned and not lease.held():
                self._lapse("heartbeat lease lapsed")
            wait = self.config.poll_interval
            if lease.revision is not None:
                wait = min(wait, max(0.01, lease.expires_in()))
            await self._sleep(stop, wait)

    async def _tick_loop(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            self._wake.clear()
            try:
                await self.tick()
            except (CoordinationError, ValueError) as exc:
                logger.warning("coordination tick of %s failed: %s", self.instance_id, exc)
            except Exception:
                logger.exception("coordination tick of %s failed unexpectedly", self.instance_id)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), self.config.poll_interval)
            # Let a burst of changes settle into one tick.
            await asyncio.sleep(min(0.05, self.config.poll_interval / 10))

    async def _watch(self, space: Keyspace, prefix: str) -> None:
        while True:
            try:
                async for _event in self._store.watch(space, prefix):
                    self._wake.set()
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                logger.debug("watch %s %s ended (%r); restarting", space.value, prefix, exc)
            await asyncio.sleep(self.config.poll_interval)

    @staticmethod
    async def _sleep(stop: asyncio.Event, seconds: float) -> None:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), seconds)

    # -- heartbeat

    async def heartbeat(self) -> None:
        """Renew membership (handling a lapse) and the leader lease."""
        if self._membership.lease.revision is not None and not await self._membership.renew():
            self._lapse("heartbeat lease lapsed")
        if self._membership.lease.revision is None:
            # Not a member (after a lapse): join again as a fresh member.
            await self._membership.join()
            logger.info("instance %s joined again after its lease lapsed", self.instance_id)
        await self._campaign()

    async def _campaign(self) -> None:
        if not self._membership.alive():
            leading = False
            if self._leader.is_leader():
                self._leader.lease.drop()
        else:
            leading = await self._leader.campaign()
        self._metrics.leader.set(1 if leading else 0)

    def _lapse(self, reason: str) -> None:
        if self._owned:
            logger.warning(
                "instance %s: %s; dropping %d splits", self.instance_id, reason, len(self._owned)
            )
        for split in sorted(self._owned):
            self._drop(split, SplitEventKind.FORCED, reason)
        self._membership.lease.drop()
        self._leader.lease.drop()

    # -- tick

    async def tick(self) -> None:
        """One worker round (and one leader round when leading)."""
        if not self._membership.alive():
            if self._membership.lease.revision is not None or self._owned:
                self._lapse("heartbeat lease lapsed")
            return
        members = await self._membership.live_members()
        self._metrics.live_workers.set(len(members))
        if self._leader.is_leader():
            self.last_leader_report = await self._leader.tick(set(members))
        await self._worker_tick()

    async def _worker_tick(self) -> None:
        store = self._store
        if not self._job_complete and await store.get(Keyspace.DURABLE, DONE_KEY) is not None:
            self._job_complete = True
            logger.info("job %s is complete", self.config.job)
            self._emit(SplitEvent(SplitEventKind.JOB_COMPLETE, ""))
        records: dict[str, AssignRecord] = {}
        for entry in await store.list(Keyspace.DURABLE, ASSIGN_PREFIX):
            record = AssignRecord.decode(entry.value)
            if record.owner == self.instance_id:
                records[key_tail(entry.key, ASSIGN_PREFIX)] = record
        now = self._clock.monotonic()
        # Splits taken away, revoked, or overdue.
        for split in sorted(self._owned):
            owned = self._owned[split]
            mine = records.get(split)
            if mine is None:
                self._drop(split, SplitEventKind.FORCED, "assignment moved away")
            elif mine.revoke_to is not None and not owned.split.revoke_requested:
                deadline = now + self.config.drain_deadline
                owned.split = replace(owned.split, revoke_requested=True, deadline=deadline)
                logger.info("split %s: revoke requested (for %s)", split, mine.revoke_to)
                self._emit(
                    SplitEvent(SplitEventKind.REVOKE_REQUESTED, split, owned.split.epoch, deadline)
                )
            elif owned.split.deadline is not None and now >= owned.split.deadline:
                self._drop(split, SplitEventKind.FORCED, "drain deadline passed")
        # New assignments.
        for split in sorted(records):
            if split in self._owned or records[split].revoke_to is not None:
                continue
            if not self._membership.alive():
                return
            await self._acquire(split)

    async def _acquire(self, split: str) -> None:
        store = self._store
        key = STATE_PREFIX + split
        entry = await store.get(Keyspace.DURABLE, key)
        state = StateRecord.decode(entry.value) if entry is not None else StateRecord()
        if state.completed or state.quarantined is not None:
            return
        spec_entry = await store.get(Keyspace.DURABLE, SPLIT_PREFIX + split)
        if spec_entry is None:
            logger.warning("split %s is assigned but not planned; holding it", split)
            return
        spec = SplitSpec.decode(split, spec_entry.value)
        epoch = state.epoch + 1
        value = StateRecord(epoch, self.instance_id, False, state.progress).encode()
        if entry is None:
            revision = await store.create(Keyspace.DURABLE, key, value)
        else:
            revision = await store.compare_and_set(Keyspace.DURABLE, key, value, entry.revision)
        if revision is None:
            return  # changed under us: look again next tick
        if not self._membership.alive():
            return  # lapsed while acquiring: the bumped epoch fences nobody we care about
        owned = OwnedSplit(split, epoch, spec)
        with self._lock:
            self._owned[split] = _Owned(owned, revision)
            self._metrics.owned.set(len(self._owned))
        self._metrics.acquisitions.inc()
        logger.info("split %s acquired at epoch %d", split, epoch)
        self._emit(SplitEvent(SplitEventKind.ASSIGNED, split, epoch))

    def _drop(self, split: str, kind: SplitEventKind | None, reason: str) -> None:
        with self._lock:
            owned = self._owned.pop(split, None)
            self._metrics.owned.set(len(self._owned))
        if owned is None:
            return
        if kind is not None:
            self._metrics.losses.inc()
            logger.info("split %s (epoch %d) dropped: %s", split, owned.split.epoch, reason)
            self._emit(SplitEvent(kind, split, owned.split.epoch, reason=reason))

    def _emit(self, event: SplitEvent) -> None:
        with self._lock:
            self._events.append(event)
        for listener in self._listeners:
            try:
                listener(event)
            except Exception:
                logger.exception("a coordination listener failed on %s", event)

    # -- fenced writes

    def _fenced_owner(self, split: str, epoch: int) -> _Owned | None:
        owned = self._owned.get(split)
        if owned is None or owned.split.epoch != epoch:
            return None
        if not self._membership.alive():
            self._lapse("heartbeat lease lapsed")
            return None
        return owned

    async def _write_state(self, split: str, epoch: int, record: StateRecord) -> ProgressWrite:
        owned = self._fenced_owner(split, epoch)
        if owned is None:
            return ProgressWrite.FENCED
        key = STATE_PREFIX + split
        value = record.encode()
        revision = await self._store.compare_and_set(Keyspace.DURABLE, key, value, owned.revision)
        if revision is None:
            # Someone else wrote: fenced unless it is still our epoch (our own race).
            entry = await self._store.get(Keyspace.DURABLE, key)
            current = StateRecord.decode(entry.value) if entry is not None else None
            if (
                entry is None
                or current is None
                or current.epoch != epoch
                or current.owner != self.instance_id
                or self._fenced_owner(split, epoch) is None
            ):
                self._drop(split, SplitEventKind.FORCED, "fenced: a successor took over")
                return ProgressWrite.FENCED
            revision = await self._store.compare_and_set(
                Keyspace.DURABLE, key, value, entry.revision
            )
            if revision is None:
                self._drop(split, SplitEventKind.FORCED, "fenced: a successor took over")
                return ProgressWrite.FENCED
        owned.revision = revision
        return ProgressWrite.ACCEPTED

    async def commit_progress(self, split: str, epoch: int, progress: Progress) -> ProgressWrite:
        """Store ``progress`` for ``split`` if this instance owns it at ``epoch`` (B24)."""
        if not isinstance(progress, (bytes, bytearray, memoryview, dict)):
            raise TypeError(f"progress must be bytes or a dict, got {type(progress).__name__}")
        if isinstance(progress, (bytearray, memoryview)):
            progress = bytes(progress)
        return await self._write_state(
            split, epoch, StateRecord(epoch, self.instance_id, False, progress)
        )

    async def read_progress(self, split: str) -> Progress | None:
        """The last committed progress of ``split`` (by any owner), or ``None``."""
        entry = await self._store.get(Keyspace.DURABLE, STATE_PREFIX + split)
        return None if entry is None else StateRecord.decode(entry.value).progress

    async def mark_completed(self, split: str, epoch: int) -> ProgressWrite:
        """Mark ``split`` completed (fenced like progress); it is then never assigned again."""
        owned = self._owned.get(split)
        progress = None
        if owned is not None:
            entry = await self._store.get(Keyspace.DURABLE, STATE_PREFIX + split)
            if entry is not None:
                progress = StateRecord.decode(entry.value).progress
        result = await self._write_state(
            split, epoch, StateRecord(epoch, self.instance_id, True, progress)
        )
        if result is ProgressWrite.ACCEPTED:
            self._drop(split, None, "completed")
            self._metrics.completed.inc()
            logger.info("split %s completed at epoch %d", split, epoch)
        return result

    async def quarantine(self, split: str, epoch: int, reason: str) -> ProgressWrite:
        """Set ``split`` aside: it cannot be read (``reason`` says why).

        Fenced like progress (B24). The split keeps its committed progress, is not
        completed, and is not handed out again until it is retried
        (:meth:`retry_quarantined`); the job cannot complete while it is quarantined.
        """
        if not reason:
            raise ValueError("a quarantine needs a reason")
        progress = None
        if split in self._owned:
            entry = await self._store.get(Keyspace.DURABLE, STATE_PREFIX + split)
            if entry is not None:
                progress = StateRecord.decode(entry.value).progress
        result = await self._write_state(
            split, epoch, StateRecord(epoch, None, False, progress, reason)
        )
        if result is ProgressWrite.ACCEPTED:
            self._drop(split, None, "quarantined")
            self._metrics.quarantined.inc()
            logger.warning("split %s quarantined at epoch %d: %s", split, epoch, reason)
            self._wake.set()
        return result

    async def split_states(self) -> dict[str, SplitState]:
        """Every split of the job with its status, progress and quarantine reason."""
        states = await read_split_states(self._store)
        self._metrics.in_quarantine.set(
            sum(1 for s in states.values() if s.status is SplitStatus.QUARANTINED)
        )
        return states

    async def retry_quarantined(self, splits: Iterable[str] | None = None) -> list[str]:
        """Hand quarantined splits (``splits``, or all) out again from their progress."""
        cleared = await _retry_quarantined(self._store, None if splits is None else set(splits))
        if cleared:
            self._wake.set()
        return cleared

    async def release(self, split: str, epoch: int) -> bool:
        """Give ``split`` up after draining (answer to ``REVOKE_REQUESTED``).

        Stops owning it first, then records the release so the leader can hand it over
        at once. Returns False if it was not owned at ``epoch`` any more.
        """
        owned = self._owned.get(split)
        if owned is None or owned.split.epoch != epoch:
            return False
        self._drop(split, None, "released")
        self._metrics.losses.inc()
        key = STATE_PREFIX + split
        for _ in range(3):
            entry = await self._store.get(Keyspace.DURABLE, key)
            if entry is None:
                return False
            state = StateRecord.decode(entry.value)
            if state.epoch != epoch or state.owner != self.instance_id:
                return False
            released = replace(state, owner=None)
            if await self._store.compare_and_set(
                Keyspace.DURABLE, key, released.encode(), entry.revision
            ):
                logger.info("split %s released at epoch %d", split, epoch)
                self._wake.set()
                return True
        return False

    # -- plan

    async def publish_plan(self, specs: Iterable[SplitSpec]) -> bool:
        """Publish the job's splits; True if written now, False if already published.

        Idempotent for the same plan (B25: replanning an unchanged input is a no-op);
        raises :class:`PlanConflictError` when a different plan is published. Any
        instance may call it; the first complete plan wins.
        """
        plan = list(specs)
        if not plan:
            raise ValueError("a plan needs at least one split")
        seen: set[str] = set()
        for spec in plan:
            check_token("split id", spec.split_id)
            if spec.split_id in seen:
                raise ValueError(f"split id {spec.split_id!r} appears twice in the plan")
            seen.add(spec.split_id)
            if not spec.weight > 0:
                raise ValueError(f"split {spec.split_id!r} has weight {spec.weight}; must be > 0")
        record = PlanRecord(len(plan), plan_digest(plan))
        existing = await self._store.get(Keyspace.DURABLE, PLAN_KEY)
        if existing is not None:
            return self._same_plan(PlanRecord.decode(existing.value), record)
        for spec in plan:
            key = SPLIT_PREFIX + spec.split_id
            value = spec.encode()
            if await self._store.create(Keyspace.DURABLE, key, value) is None:
                entry = await self._store.get(Keyspace.DURABLE, key)
                if entry is not None and entry.value != value:
                    raise PlanConflictError(
                        f"split {spec.split_id!r} of job {self.config.job!r} is already "
                        "published with other weight or metadata"
                    )
        if await self._store.create(Keyspace.DURABLE, PLAN_KEY, record.encode()) is None:
            existing = await self._store.get(Keyspace.DURABLE, PLAN_KEY)
            if existing is not None:
                return self._same_plan(PlanRecord.decode(existing.value), record)
        logger.info("published a plan of %d splits for job %s", len(plan), self.config.job)
        self._wake.set()
        return True

    def _same_plan(self, existing: PlanRecord, record: PlanRecord) -> bool:
        if existing != record:
            raise PlanConflictError(
                f"job {self.config.job!r} already has a different plan "
                f"({existing.splits} splits, digest {existing.digest[:12]}); "
                "use a new job name for a new plan"
            )
        return False

    async def read_plan(self) -> list[SplitSpec] | None:
        """The published plan (sorted by split id), or ``None`` until it is complete."""
        existing = await self._store.get(Keyspace.DURABLE, PLAN_KEY)
        if existing is None:
            return None
        entries = await self._store.list(Keyspace.DURABLE, SPLIT_PREFIX)
        return [SplitSpec.decode(key_tail(e.key, SPLIT_PREFIX), e.value) for e in entries]


__all__ = ["CoordinatorCore"]
