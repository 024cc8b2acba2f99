"""Leadership and the leader's rebalancing tick.

Owns :class:`Leader`: the leader lease (the TTL key ``leader``, taken by
create-if-absent, renewed by compare-and-set) and, while it is held, the tick that
turns the live members, the plan and the split states into assignment records:

* a split with no record, or whose owner is dead, is assigned at once;
* a split that should move from a live owner is first *revoked cooperatively*
  (``revoke_to`` is set; the owner drains, commits and releases), and handed to the new
  owner when the release shows in ``state.<id>`` — or *by force* once ``drain_deadline``
  (plus two poll intervals, the time a live owner needs to notice) has passed;
* completed and quarantined splits lose their record (a quarantined one gets a new
  record once it is retried); when every planned split is completed the ``done`` key is
  written — never while a split is quarantined, so such a job does not complete.

Targets come from the pure :func:`~spate_coordination._assign.assign`. Every write is a
compare-and-set on the record's revision, and the lease is re-checked before each one,
so a leader that lapsed (paused, partitioned) stops writing (B24). Does not own the
workers' side (acquiring, progress, fencing): see :mod:`spate_coordination._core`.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from spate import Clock

from spate_coordination._assign import assign
from spate_coordination._membership import Lease
from spate_coordination._records import (
    ASSIGN_PREFIX,
    DONE_KEY,
    LEADER_KEY,
    PLAN_KEY,
    SPLIT_PREFIX,
    STATE_PREFIX,
    AssignRecord,
    LeaseRecord,
    PlanRecord,
    SplitSpec,
    StateRecord,
    key_tail,
)
from spate_coordination._store import CoordinationStore, Entry, Keyspace

logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class LeaderReport:
    """What one leader tick saw and did (for metrics, logs and tests)."""

    live_workers: int
    planned: int
    completed: int
    assigned: int = 0
    revoked: int = 0
    forced: int = 0
    quarantined: int = 0


class Leader:
    """Campaigns for the leader lease and, while leader, keeps assignments current."""

    def __init__(
        self,
        store: CoordinationStore,
        instance_id: str,
        session: str,
        clock: Clock,
        *,
        drain_deadline: float,
        poll_interval: float,
    ) -> None:
        self._store = store
        self._instance = instance_id
        self._clock = clock
        self._drain_deadline = drain_deadline
        self._poll_interval = poll_interval
        self._lease = Lease(store, LEADER_KEY, LeaseRecord(instance_id, session), clock)
        # split -> (assignment revision, monotonic time the revoke was first seen)
        self._revokes: dict[str, tuple[int, float]] = {}
        self._was_leader = False
        self._last_live: frozenset[str] | None = None
        self._live_changed_at = 0.0
        self._rebalance_due = False
        self._settle = 2 * poll_interval

    @property
    def lease(self) -> Lease:
        return self._lease

    def is_leader(self) -> bool:
        return self._lease.held()

    async def campaign(self) -> bool:
        """Renew the lease if held, else try to take it. Returns whether we lead now."""
        if self._lease.held():
            await self._lease.renew()
        else:
            self._lease.drop()
            await self._lease.acquire()
        leading = self._lease.held()
        if leading != self._was_leader:
            if leading:
                logger.info("instance %s became the leader", self._instance)
            else:
                logger.warning("instance %s is no longer the leader", self._instance)
                self._revokes.clear()
            self._was_leader = leading
        return leading

    async def resign(self) -> None:
        """Give the lease up (graceful stop) so another instance leads at once."""
        if self._lease.held():
            await self._lease.release()
        self._was_leader = False

    async def tick(self, live: set[str]) -> LeaderReport | None:
        """One rebalancing round over ``live`` workers; ``None`` when not leader or no plan."""
        if not self._lease.held():
            return None
        store = self._store
        plan_entry = await store.get(Keyspace.DURABLE, PLAN_KEY)
        if plan_entry is None:
            return LeaderReport(len(live), 0, 0)
        plan = PlanRecord.decode(plan_entry.value)
        specs = _decode_all(await store.list(Keyspace.DURABLE, SPLIT_PREFIX), SPLIT_PREFIX)
        if len(specs) < plan.splits:
            logger.debug("plan lists %d splits, %d written so far", plan.splits, len(specs))
            return LeaderReport(len(live), plan.splits, 0)
        weights = {
            split: SplitSpec.decode(split, entry.value).weight for split, entry in specs.items()
        }
        states = {
            split: StateRecord.decode(entry.value)
            for split, entry in _decode_all(
                await store.list(Keyspace.DURABLE, STATE_PREFIX), STATE_PREFIX
            ).items()
        }
        assigns = _decode_all(await store.list(Keyspace.DURABLE, ASSIGN_PREFIX), ASSIGN_PREFIX)
        records = {split: AssignRecord.decode(e.value) for split, e in assigns.items()}
        completed = {s for s, st in states.items() if st.completed and s in weights}
        quarantined = {
            s
            for s, st in states.items()
            if st.quarantined is not None and s in weights and s not in completed
        }
        settled = completed | quarantined

        # Finished and quarantined splits need no owner.
        for split in settled & set(records):
            if not self._lease.held():
                return None
            await store.delete(Keyspace.DURABLE, ASSIGN_PREFIX + split, assigns[split].revision)
            self._revokes.pop(split, None)
        if len(completed) == len(weights):
            if await store.get(Keyspace.DURABLE, DONE_KEY) is None and self._lease.held():
                await store.create(
                    Keyspace.DURABLE, DONE_KEY, PlanRecord(len(weights), plan.digest).encode()
                )
                logger.info("every one of the %d splits is completed", len(weights))
            return LeaderReport(len(live), len(weights), len(completed))
        if len(settled) == len(weights):
            return LeaderReport(
                len(live), len(weights), len(completed), quarantined=len(quarantined)
            )

        pending = {s: w for s, w in weights.items() if s not in settled}
        current: dict[str, str] = {}
        for split in pending:
            record = records.get(split)
            if record is None:
                continue
            if record.revoke_to is not None and record.revoke_to in live:
                current[split] = record.revoke_to
            elif record.owner in live:
                current[split] = record.owner
        target = self._targets(pending, live, current)

        now = self._clock.monotonic()
        assigned = revoked = forced = 0
        force_after = self._drain_deadline + 2 * self._poll_interval
        for split in sorted(pending):
            want = target.get(split)
            record = records.get(split)
            entry = assigns.get(split)
            if want is None:
                continue  # no live worker: hold
            if not self._lease.held():
                return None
            key = ASSIGN_PREFIX + split
            if record is None or entry is None:
                if await store.create(Keyspace.DURABLE, key, AssignRecord(want).encode()):
                    assigned += 1
                continue
            if record.owner not in live:
                # Dead owner: its lease expired, it has stopped; no drain to wait for.
                if await store.compare_and_set(
                    Keyspace.DURABLE, key, AssignRecord(want).encode(), entry.revision
                ):
                    assigned += 1
                self._revokes.pop(split, None)
                continue
            if record.owner == want:
                if record.revoke_to is not None:
                    # The move is no longer wanted: cancel the revoke.
                    await store.compare_and_set(
                        Keyspace.DURABLE, key, AssignRecord(want).encode(), entry.revision
                    )
                    self._revokes.pop(split, None)
                continue
            # Live owner, another target: revoke cooperatively, then hand over.
            state = states.get(split)
            released = state is None or state.owner != record.owner
            if record.revoke_to != want and not released:
                if await store.compare_and_set(
                    Keyspace.DURABLE,
                    key,
                    AssignRecord(record.owner, want).encode(),
                    entry.revision,
                ):
                    revoked += 1
                    logger.info("revoking split %s from %s for %s", split, record.owner, want)
                self._revokes.pop(split, None)
                continue
            seen = self._revokes.get(split)
            if seen is None or seen[0] != entry.revision:
                seen = (entry.revision, now)
                self._revokes[split] = seen
            overdue = now - seen[1] >= force_after
            if released or overdue:
                if await store.compare_and_set(
                    Keyspace.DURABLE, key, AssignRecord(want).encode(), entry.revision
                ):
                    assigned += 1
                    if not released:
                        forced += 1
                        logger.warning(
                            "split %s: %s did not release it within %.1fs; moving it to %s",
                            split,
                            record.owner,
                            force_after,
                            want,
                        )
                self._revokes.pop(split, None)
        return LeaderReport(
            len(live),
            len(weights),
            len(completed),
            assigned,
            revoked,
            forced,
            len(quarantined),
        )

    def _targets(
        self, pending: dict[str, float], live: set[str], current: dict[str, str]
    ) -> dict[str, str]:
        """Where each pending split should be; moves only when they are worth a drain.

        Completing splits shifts the loads all the time; rebalancing on every such
        shift would revoke (and drain) splits over and over near the end of a job. So
        the full :func:`assign` runs only when the live set changed (once it has been
        stable for two poll intervals), when a split has no live owner, or when a worker
        sits idle while another still has two or more splits waiting; otherwise the
        current owners stay.
        """
        live_now = frozenset(live)
        now = self._clock.monotonic()
        if live_now != self._last_live:
            self._last_live = live_now
            self._live_changed_at = now
            self._rebalance_due = True
        if now - self._live_changed_at < self._settle:
            # Members are joining or leaving (a fleet starting up, a leader just
            # elected): wait for the set to settle instead of assigning everything to
            # the first arrivals and revoking it again a moment later.
            return dict(current)
        orphans = any(split not in current for split in pending)
        counts = dict.fromkeys(live, 0)
        for owner in current.values():
            counts[owner] += 1
        idle = bool(counts) and min(counts.values()) == 0 and max(counts.values()) >= 2
        if self._rebalance_due or orphans or idle:
            self._rebalance_due = False
            return assign(pending, live, current)
        return dict(current)


def _decode_all(entries: list[Entry], prefix: str) -> dict[str, Entry]:
    return {key_tail(e.key, prefix): e for e in entries}
