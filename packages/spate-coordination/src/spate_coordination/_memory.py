"""The in-memory coordination store: one process, for tests and single-instance jobs.

Owns a thread-safe implementation of :class:`~spate_coordination._store.CoordinationStore`
that several coordinators in one process may share (each on its own event loop): hand
the same :class:`MemoryStore` object to each. TTL entries expire by the injected
:class:`~spate.Clock`, so tests drive leases with a ``ManualClock``. Like NATS 2.9, an
expiry sends watchers no event; the coordination layer polls for it (B24).

Does not own persistence: everything is gone when the process exits.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import AsyncIterator
from dataclasses import dataclass

from spate import Clock, SystemClock

from spate_coordination._store import Entry, Keyspace, WatchEvent, check_key, check_prefix

logger = logging.getLogger(__name__)


@dataclass(slots=True)
class _Slot:
    value: bytes
    revision: int
    written_at: float


@dataclass(slots=True)
class _Watcher:
    space: Keyspace
    prefix: str
    loop: asyncio.AbstractEventLoop
    queue: asyncio.Queue[WatchEvent]


class MemoryStore:
    """A process-local store with revisions and a TTL keyspace (thread-safe)."""

    def __init__(self, ttl: float = 10.0, *, clock: Clock | None = None) -> None:
        if ttl <= 0:
            raise ValueError(f"ttl must be positive, got {ttl}")
        self._ttl = ttl
        self._clock: Clock = clock if clock is not None else SystemClock()
        self._lock = threading.Lock()
        self._data: dict[Keyspace, dict[str, _Slot]] = {space: {} for space in Keyspace}
        self._revision = 0
        self._watchers: list[_Watcher] = []
        self._closed = False

    @property
    def ttl(self) -> float:
        return self._ttl

    @property
    def endpoint(self) -> str:
        return f"memory:{id(self):x}"

    async def open(self) -> None:
        """Nothing to connect; kept for the protocol."""

    async def close(self) -> None:
        """Close this handle's view; the data stays for other users of the same object."""

    # -- primitives (the lock makes each one atomic across threads)

    async def create(self, space: Keyspace, key: str, value: bytes) -> int | None:
        check_key(key)
        with self._lock:
            if self._live(space, key) is not None:
                return None
            return self._write(space, key, value)

    async def compare_and_set(
        self, space: Keyspace, key: str, value: bytes, revision: int
    ) -> int | None:
        check_key(key)
        with self._lock:
            slot = self._live(space, key)
            if slot is None or slot.revision != revision:
                return None
            return self._write(space, key, value)

    async def delete(self, space: Keyspace, key: str, revision: int) -> bool:
        check_key(key)
        with self._lock:
            slot = self._live(space, key)
            if slot is None or slot.revision != revision:
                return False
            del self._data[space][key]
            self._revision += 1
            self._notify(space, WatchEvent(key, None, self._revision))
            return True

    async def get(self, space: Keyspace, key: str) -> Entry | None:
        check_key(key)
        with self._lock:
            slot = self._live(space, key)
            return None if slot is None else Entry(key, slot.value, slot.revision)

    async def list(self, space: Keyspace, prefix: str) -> list[Entry]:
        check_prefix(prefix)
        with self._lock:
            keys = sorted(k for k in self._data[space] if k.startswith(prefix))
            out: list[Entry] = []
            for key in keys:
                slot = self._live(space, key)
                if slot is not None:
                    out.append(Entry(key, slot.value, slot.revision))
            return out

    async def watch(self, space: Keyspace, prefix: str) -> AsyncIterator[WatchEvent]:
        check_prefix(prefix)
        watcher = _Watcher(space, prefix, asyncio.get_running_loop(), asyncio.Queue())
        with self._lock:
            self._watchers.append(watcher)
        try:
            while True:
                yield await watcher.queue.get()
        finally:
            with self._lock:
                self._watchers.remove(watcher)

    # -- helpers (called with the lock held)

    def _live(self, space: Keyspace, key: str) -> _Slot | None:
        slot = self._data[space].get(key)
        if slot is None:
            return None
        if space is Keyspace.TTL and self._clock.monotonic() - slot.written_at >= self._ttl:
            # Expired: gone without an event, as on NATS 2.9.
            del self._data[space][key]
            return None
        return slot

    def _write(self, space: Keyspace, key: str, value: bytes) -> int:
        self._revision += 1
        self._data[space][key] = _Slot(bytes(value), self._revision, self._clock.monotonic())
        self._notify(space, WatchEvent(key, bytes(value), self._revision))
        return self._revision

    def _notify(self, space: Keyspace, event: WatchEvent) -> None:
        for watcher in self._watchers:
            if watcher.space is space and event.key.startswith(watcher.prefix):
                try:
                    watcher.loop.call_soon_threadsafe(watcher.queue.put_nowait, event)
                except RuntimeError:
                    # That watcher's loop is closed; its generator will never run again.
                    logger.debug("dropping a watch event for a closed event loop")
