"""Leases in the TTL keyspace: an instance's heartbeat and the list of live members.

Owns :class:`Lease` (create-if-absent, renew by compare-and-set, lapse detection by the
local monotonic clock) and :class:`Membership` (this instance's heartbeat
``member.<instance>`` and the live set read by polling). The leader lease in
:mod:`spate_coordination._leader` is the same :class:`Lease` on another key.

Lapse is judged locally and conservatively: a lease counts as held only until
``ttl`` after the moment its last successful write was *sent*; the store expires it no
earlier than that. So an instance that cannot renew for a whole lease (a network
partition, a SIGSTOP, a store outage) stops believing it holds the lease before anyone
else can take it over (B24). Expiry sends no watch event on NATS 2.9, which is why the
live set is polled with ``list``.
"""

from __future__ import annotations

import logging

from spate import Clock

from spate_coordination._records import MEMBER_PREFIX, LeaseRecord, key_tail
from spate_coordination._store import (
    CoordinationStore,
    DuplicateInstanceError,
    Keyspace,
)

logger = logging.getLogger(__name__)


class Lease:
    """One key in the TTL keyspace held by this session, renewed by compare-and-set."""

    def __init__(
        self, store: CoordinationStore, key: str, record: LeaseRecord, clock: Clock
    ) -> None:
        self._store = store
        self._key = key
        self._record = record
        self._value = record.encode()
        self._clock = clock
        self._revision: int | None = None
        self._sent_at = 0.0

    @property
    def key(self) -> str:
        return self._key

    @property
    def revision(self) -> int | None:
        return self._revision

    def held(self) -> bool:
        """Whether the lease is held right now by the local clock (cheap, any thread)."""
        return (
            self._revision is not None and self._clock.monotonic() - self._sent_at < self._store.ttl
        )

    def expires_in(self) -> float:
        """Seconds until the lease lapses locally (<= 0 when not held)."""
        if self._revision is None:
            return 0.0
        return self._sent_at + self._store.ttl - self._clock.monotonic()

    def drop(self) -> None:
        """Forget the lease locally (after a lapse); the store expires it on its own."""
        self._revision = None

    async def acquire(self) -> LeaseRecord | None:
        """Try to take the lease; ``None`` on success, else the record of who holds it.

        A lease still in the store under this session (a lapse we noticed before the
        store did) is taken back by compare-and-set. Raises ``StoreUnavailableError``.
        """
        sent = self._clock.monotonic()
        revision = await self._store.create(Keyspace.TTL, self._key, self._value)
        if revision is not None:
            self._revision, self._sent_at = revision, sent
            return None
        entry = await self._store.get(Keyspace.TTL, self._key)
        if entry is None:
            return LeaseRecord("", "")  # expired in between: try again next time
        holder = LeaseRecord.decode(entry.value)
        if holder.session != self._record.session:
            return holder
        sent = self._clock.monotonic()
        revision = await self._store.compare_and_set(
            Keyspace.TTL, self._key, self._value, entry.revision
        )
        if revision is None:
            return LeaseRecord("", "")
        self._revision, self._sent_at = revision, sent
        return None

    async def renew(self) -> bool:
        """Extend a held lease; False (and dropped) if it lapsed or was taken over.

        Raises ``StoreUnavailableError`` and keeps the lease (it lapses by the clock).
        """
        if not self.held():
            self._revision = None
            return False
        assert self._revision is not None
        sent = self._clock.monotonic()
        revision = await self._store.compare_and_set(
            Keyspace.TTL, self._key, self._value, self._revision
        )
        if revision is None:
            # Either someone else holds it now, or an earlier renewal of ours landed but
            # its answer was lost (a timeout across a reconnect). Only the latter is
            # still ours: renew again from the revision we find.
            entry = await self._store.get(Keyspace.TTL, self._key)
            if entry is not None and LeaseRecord.decode(entry.value).session == (
                self._record.session
            ):
                sent = self._clock.monotonic()
                revision = await self._store.compare_and_set(
                    Keyspace.TTL, self._key, self._value, entry.revision
                )
            if revision is None or not self.held():
                self._revision = None
                return False
        self._revision, self._sent_at = revision, sent
        return True

    async def release(self) -> None:
        """Delete the lease if still held (graceful leave), so others need not wait."""
        revision, self._revision = self._revision, None
        if revision is not None:
            await self._store.delete(Keyspace.TTL, self._key, revision)


class Membership:
    """This instance's heartbeat and the set of live members (B24)."""

    def __init__(
        self, store: CoordinationStore, instance_id: str, session: str, clock: Clock
    ) -> None:
        self.instance_id = instance_id
        self.session = session
        self._lease = Lease(
            store, MEMBER_PREFIX + instance_id, LeaseRecord(instance_id, session), clock
        )
        self._store = store

    @property
    def lease(self) -> Lease:
        return self._lease

    def alive(self) -> bool:
        """Whether this instance's heartbeat is held by the local clock."""
        return self._lease.held()

    async def join(self) -> None:
        """Start heartbeating; raise :class:`DuplicateInstanceError` if the id is taken."""
        holder = await self._lease.acquire()
        if holder is not None:
            if holder.session:
                raise DuplicateInstanceError(
                    f"instance_id {self.instance_id!r} is already used by a live instance of "
                    f"this job (store {self._store.endpoint}); give each instance its own "
                    f"instance_id, or wait lease_duration ({self._store.ttl:g}s) for a "
                    "dead one to expire"
                )
            # The old heartbeat expired between create and get: one more try.
            holder = await self._lease.acquire()
            if holder is not None:
                raise DuplicateInstanceError(
                    f"instance_id {self.instance_id!r} could not join at {self._store.endpoint}"
                )
        logger.info("instance %s joined (session %s)", self.instance_id, self.session)

    async def renew(self) -> bool:
        """Renew the heartbeat; False when it lapsed (the caller must drop its splits)."""
        return await self._lease.renew()

    async def leave(self) -> None:
        await self._lease.release()

    async def live_members(self) -> dict[str, LeaseRecord]:
        """Instance id → heartbeat record of every live member, read from the store."""
        out: dict[str, LeaseRecord] = {}
        for entry in await self._store.list(Keyspace.TTL, MEMBER_PREFIX):
            try:
                out[key_tail(entry.key, MEMBER_PREFIX)] = LeaseRecord.decode(entry.value)
            except ValueError:
                logger.warning("ignoring a corrupt heartbeat record at %s", entry.key)
        return out
