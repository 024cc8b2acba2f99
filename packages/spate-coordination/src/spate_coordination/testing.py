"""``CoordinationStoreConformance``: the suite every coordination store runs (B24, B29).

It lives here, next to the :class:`~spate_coordination.CoordinationStore` protocol it
checks, because spate-core does not depend on spate-coordination; it follows the same
conventions as :mod:`spate.testing.conformance` (no pytest import, failures that start
with the broken promise, tests that do not apply are skipped).

Subclass it in a store package's tests as ``Test<Name>StoreConformance`` and implement
:meth:`CoordinationStoreConformance.open_store` (a new, empty, opened store whose TTL
keyspace lives :attr:`~CoordinationStoreConformance.ttl` seconds). The checks:

* create-if-absent and compare-and-set: a stale revision or a missing key is refused
  and changes nothing; revisions grow — what fencing stands on (B24);
* guarded delete by revision; a deleted key can be created again with a higher revision;
* ``list`` returns the live entries under a prefix, sorted, and nothing else; keys and
  prefixes outside the key rules are refused with ``ValueError``;
* ``watch`` reports later writes and deletes under its prefix, and nothing else;
* TTL entries stay while renewed and are gone from ``get`` and ``list`` after a TTL
  without writes (B24: a dead worker's lease expires);
* optionally, a store that cannot be reached fails ``open()`` naming its endpoint (B29).
"""

from __future__ import annotations

import asyncio
import time
import unittest
from collections.abc import Awaitable, Callable
from typing import ClassVar

from spate.testing.conformance import Conformance, ConformanceFailure, Promise

from spate_coordination._store import CoordinationStore, Keyspace

__all__ = [
    "CoordinationStoreConformance",
]

STORE_CAS = Promise(
    "B24", "create-if-absent and compare-and-set refuse a present key or a stale revision"
)
STORE_DELETE = Promise("B24", "delete happens only at the current revision")
STORE_LIST = Promise("B24", "list returns the live entries under a prefix, sorted by key")
STORE_KEYS = Promise("B24", "keys and prefixes outside the key rules are refused alike")
STORE_WATCH = Promise("B24", "watch reports later writes and deletes under its prefix")
STORE_TTL = Promise("B24", "a TTL entry lives while renewed and expires after a TTL unwritten")
STORE_ENDPOINT = Promise("B29", "a store that cannot be reached fails open() naming its endpoint")


def _check(ok: object, promise: Promise, detail: str) -> None:
    if not ok:
        raise ConformanceFailure(promise, detail)


class CoordinationStoreConformance(Conformance):
    """Base of a store's conformance tests (not collected by itself)."""

    ttl: ClassVar[float] = 1.0
    """Seconds a TTL-keyspace entry lives; the TTL test takes a few times this long."""
    patience: ClassVar[float] = 5.0
    """Seconds a watch may take to report a change."""

    async def open_store(self) -> CoordinationStore:
        """A new, empty store, already opened, with :attr:`ttl` as its TTL."""
        raise NotImplementedError

    async def unreachable_store(self) -> tuple[CoordinationStore, str] | None:
        """A store pointing at an endpoint that does not answer, not yet opened, and the
        text naming that endpoint; ``None`` if the store has no endpoint."""
        return None

    def run(self, scenario: Callable[[CoordinationStore], Awaitable[None]]) -> None:
        """Open a store, run ``scenario`` on it and close the store, on a new event loop."""

        async def main() -> None:
            store = await self.open_store()
            try:
                await scenario(store)
            finally:
                await store.close()

        asyncio.run(main())

    def test_b24_create_if_absent_and_compare_and_set(self) -> None:
        async def scenario(store: CoordinationStore) -> None:
            for space in Keyspace:
                r1 = await store.create(space, "a.b", b"one")
                _check(r1 is not None, STORE_CAS, f"{space.name}: create of a new key failed")
                assert r1 is not None
                again = await store.create(space, "a.b", b"again")
                _check(again is None, STORE_CAS, f"{space.name}: create of a present key won")
                r2 = await store.compare_and_set(space, "a.b", b"two", r1)
                _check(
                    r2 is not None and r2 > r1,
                    STORE_CAS,
                    f"{space.name}: compare-and-set at the current revision gave {r2!r}",
                )
                stale = await store.compare_and_set(space, "a.b", b"stale", r1)
                _check(stale is None, STORE_CAS, f"{space.name}: a stale revision was accepted")
                entry = await store.get(space, "a.b")
                _check(
                    entry is not None and (entry.value, entry.revision) == (b"two", r2),
                    STORE_CAS,
                    f"{space.name}: after a refused write the entry reads {entry!r}",
                )
                missing = await store.compare_and_set(space, "a.none", b"x", r1)
                _check(missing is None, STORE_CAS, f"{space.name}: CAS created a missing key")

        self.run(scenario)

    def test_b24_guarded_delete_and_create_again(self) -> None:
        async def scenario(store: CoordinationStore) -> None:
            space = Keyspace.DURABLE
            r1 = await store.create(space, "k", b"1")
            assert r1 is not None
            r2 = await store.compare_and_set(space, "k", b"2", r1)
            assert r2 is not None
            _check(
                not await store.delete(space, "k", r1),
                STORE_DELETE,
                "a delete at a stale revision succeeded",
            )
            _check(await store.get(space, "k") is not None, STORE_DELETE, "the key is gone")
            _check(await store.delete(space, "k", r2), STORE_DELETE, "delete at current failed")
            _check(await store.get(space, "k") is None, STORE_DELETE, "a deleted key reads back")
            _check(await store.list(space, "") == [], STORE_DELETE, "a deleted key is listed")
            r3 = await store.create(space, "k", b"3")
            _check(
                r3 is not None and r3 > r2,
                STORE_DELETE,
                f"creating a deleted key again gave revision {r3!r} (after {r2})",
            )

        self.run(scenario)

    def test_b24_list_by_prefix_is_sorted_and_keys_are_checked(self) -> None:
        async def scenario(store: CoordinationStore) -> None:
            space = Keyspace.DURABLE
            for key in ("assign.s2", "assign.s1", "assignx.s3", "state.s1", "plan"):
                await store.create(space, key, key.encode())
            listed = await store.list(space, "assign.")
            _check(
                [(e.key, e.value) for e in listed]
                == [("assign.s1", b"assign.s1"), ("assign.s2", b"assign.s2")],
                STORE_LIST,
                f"list('assign.') gave {[e.key for e in listed]}",
            )
            everything = await store.list(space, "")
            _check(len(everything) == 5, STORE_LIST, f"list('') gave {len(everything)} entries")
            for bad_prefix in ("assign", "a..b."):
                try:
                    await store.list(space, bad_prefix)
                except ValueError:
                    continue
                raise ConformanceFailure(STORE_KEYS, f"the prefix {bad_prefix!r} was accepted")
            for bad_key in ("bad key", "a.", ".a", "a/b"):
                try:
                    await store.create(space, bad_key, b"")
                except ValueError:
                    continue
                raise ConformanceFailure(STORE_KEYS, f"the key {bad_key!r} was accepted")

        self.run(scenario)

    def test_b24_watch_reports_writes_and_deletes_under_its_prefix(self) -> None:
        async def scenario(store: CoordinationStore) -> None:
            space = Keyspace.DURABLE
            events = store.watch(space, "w.")
            first = asyncio.ensure_future(anext(events))
            await asyncio.sleep(0.2)  # let the watch subscribe
            await store.create(space, "other.x", b"ignored")
            revision = await store.create(space, "w.a", b"1")
            assert revision is not None
            try:
                event = await asyncio.wait_for(first, self.patience)
                _check(
                    (event.key, event.value) == ("w.a", b"1"),
                    STORE_WATCH,
                    f"the first event is {event!r}, expected w.a = b'1'",
                )
                await store.delete(space, "w.a", revision)
                event = await asyncio.wait_for(anext(events), self.patience)
                _check(
                    (event.key, event.value) == ("w.a", None),
                    STORE_WATCH,
                    f"a delete was reported as {event!r}",
                )
            except TimeoutError as exc:
                raise ConformanceFailure(STORE_WATCH, f"no event within {self.patience}s") from exc
            finally:
                close = getattr(events, "aclose", None)
                if close is not None:
                    await close()

        self.run(scenario)

    def test_b24_ttl_entries_live_while_renewed_then_expire(self) -> None:
        ttl = self.ttl

        async def scenario(store: CoordinationStore) -> None:
            space = Keyspace.TTL
            revision = await store.create(space, "member.a", b"hb")
            assert revision is not None
            await store.create(space, "member.b", b"hb")
            for _ in range(2):
                await asyncio.sleep(ttl * 0.6)
                renewed = await store.compare_and_set(space, "member.a", b"hb", revision)
                _check(renewed is not None, STORE_TTL, "renewing a live entry failed")
                assert renewed is not None
                revision = renewed
            keys = [e.key for e in await store.list(space, "member.")]
            _check(keys == ["member.a"], STORE_TTL, f"after 1.2 TTLs the live keys are {keys}")
            deadline = time.monotonic() + ttl * 4
            while await store.get(space, "member.a") is not None:
                if time.monotonic() > deadline:
                    raise ConformanceFailure(STORE_TTL, f"member.a lived {ttl * 4}s unwritten")
                await asyncio.sleep(0.1)
            _check(await store.list(space, "member.") == [], STORE_TTL, "expired keys are listed")
            _check(
                await store.create(space, "member.a", b"new") is not None,
                STORE_TTL,
                "an expired key cannot be created again",
            )

        self.run(scenario)

    def test_b29_unreachable_store_fails_open_naming_it(self) -> None:
        async def scenario() -> None:
            case = await self.unreachable_store()
            if case is None:
                raise unittest.SkipTest(f"{type(self).__name__} gives no unreachable_store()")
            store, name = case
            try:
                await store.open()
            except Exception as exc:
                _check(
                    name in str(exc),
                    STORE_ENDPOINT,
                    f"open() failed with {type(exc).__name__}: {exc}, not naming {name!r}",
                )
            else:
                await store.close()
                raise ConformanceFailure(STORE_ENDPOINT, f"open() succeeded against {name!r}")

        asyncio.run(scenario())
