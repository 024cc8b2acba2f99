"""The six store primitives behave alike on every store: in-memory and NATS JetStream KV.

Compare-and-set and guarded delete are what fencing stands on (B24); TTL entries expire
and show in neither ``get`` nor ``list`` afterwards (whether or not a watch saw it).
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Awaitable, Callable

import pytest
from spate_coordination import CoordinationStore, Keyspace, MemoryStore, NatsStoreConfig
from spate_coordination._nats import NatsStore

TTL = 1.0
StoreMaker = Callable[..., Awaitable[CoordinationStore]]


@pytest.fixture(params=["memory", pytest.param("nats", marks=pytest.mark.integration)])
def make_store(request: pytest.FixtureRequest) -> StoreMaker:
    if request.param == "memory":

        async def memory(ttl: float = TTL) -> CoordinationStore:
            return MemoryStore(ttl)

        return memory
    url = request.getfixturevalue("nats_url")
    job = f"contract-{uuid.uuid4().hex[:10]}"

    async def nats(ttl: float = TTL) -> CoordinationStore:
        store = NatsStore(NatsStoreConfig(servers=[url]), job, ttl)
        await store.open()
        return store

    return nats


def test_b24_create_if_absent_and_compare_and_set(make_store: StoreMaker) -> None:
    async def scenario() -> None:
        store = await make_store()
        try:
            for space in Keyspace:
                r1 = await store.create(space, "a.b", b"one")
                assert r1 is not None
                assert await store.create(space, "a.b", b"again") is None
                r2 = await store.compare_and_set(space, "a.b", b"two", r1)
                assert r2 is not None and r2 > r1
                # A stale revision is refused and changes nothing.
                assert await store.compare_and_set(space, "a.b", b"stale", r1) is None
                entry = await store.get(space, "a.b")
                assert entry is not None and (entry.value, entry.revision) == (b"two", r2)
                # CAS on a key that does not exist is refused.
                assert await store.compare_and_set(space, "a.none", b"x", r2) is None
        finally:
            await store.close()

    asyncio.run(scenario())


def test_b24_guarded_delete_and_recreate(make_store: StoreMaker) -> None:
    async def scenario() -> None:
        store = await make_store()
        try:
            space = Keyspace.DURABLE
            r1 = await store.create(space, "k", b"1")
            assert r1 is not None
            r2 = await store.compare_and_set(space, "k", b"2", r1)
            assert r2 is not None
            assert not await store.delete(space, "k", r1)
            assert (await store.get(space, "k")) is not None
            assert await store.delete(space, "k", r2)
            assert await store.get(space, "k") is None
            assert await store.list(space, "") == []
            r3 = await store.create(space, "k", b"3")
            assert r3 is not None and r3 > r2
        finally:
            await store.close()

    asyncio.run(scenario())


def test_list_by_prefix_is_sorted_and_only_under_the_prefix(make_store: StoreMaker) -> None:
    async def scenario() -> None:
        store = await make_store()
        try:
            space = Keyspace.DURABLE
            for key in ("assign.s2", "assign.s1", "assignx.s3", "state.s1", "plan"):
                assert await store.create(space, key, key.encode()) is not None
            listed = await store.list(space, "assign.")
            assert [e.key for e in listed] == ["assign.s1", "assign.s2"]
            assert [e.value for e in listed] == [b"assign.s1", b"assign.s2"]
            everything = await store.list(space, "")
            assert len(everything) == 5
            with pytest.raises(ValueError, match="prefix"):
                await store.list(space, "assign")
            with pytest.raises(ValueError, match="key"):
                await store.create(space, "bad key", b"")
        finally:
            await store.close()

    asyncio.run(scenario())


def test_watch_reports_writes_and_deletes_under_its_prefix(make_store: StoreMaker) -> None:
    async def scenario() -> None:
        store = await make_store()
        try:
            space = Keyspace.DURABLE
            await store.create(space, "w.before", b"0")
            events = store.watch(space, "w.")
            first = asyncio.ensure_future(anext(events))
            await asyncio.sleep(0.2)  # let the watch subscribe
            r = await store.create(space, "other.x", b"ignored")
            r = await store.create(space, "w.a", b"1")
            assert r is not None
            event = await asyncio.wait_for(first, 5)
            assert (event.key, event.value) == ("w.a", b"1")
            assert await store.delete(space, "w.a", r)
            event = await asyncio.wait_for(anext(events), 5)
            assert (event.key, event.value) == ("w.a", None)
            await events.aclose()  # type: ignore[attr-defined]
        finally:
            await store.close()

    asyncio.run(scenario())


def test_b24_ttl_entries_expire_after_their_last_write(make_store: StoreMaker) -> None:
    """An entry renewed within its TTL stays; one left alone expires. Renewals come every
    tenth of the TTL until the other entry is gone, so a loaded machine that delays a
    renewal by less than most of a TTL changes nothing."""
    ttl = 2.0

    async def scenario() -> None:
        store = await make_store(ttl=ttl)
        try:
            space = Keyspace.TTL
            r = await store.create(space, "member.a", b"hb")
            assert r is not None
            assert await store.create(space, "member.b", b"hb") is not None
            # Renew a until b, left alone, has expired.
            deadline = time.monotonic() + ttl * 10
            while await store.get(space, "member.b") is not None:
                assert time.monotonic() < deadline, "TTL entry never expired"
                await asyncio.sleep(ttl / 10)
                r = await store.compare_and_set(space, "member.a", b"hb", r)
                assert r is not None, "an entry renewed within its TTL expired"
            keys = [e.key for e in await store.list(space, "member.")]
            assert keys == ["member.a"]
            # Gone after a TTL without writes, and free to be created again.
            deadline = time.monotonic() + ttl * 10
            while await store.get(space, "member.a") is not None:
                assert time.monotonic() < deadline, "TTL entry never expired"
                await asyncio.sleep(0.1)
            assert await store.list(space, "member.") == []
            assert await store.compare_and_set(space, "member.a", b"hb", r) is None
            assert await store.create(space, "member.a", b"new") is not None
        finally:
            await store.close()

    asyncio.run(scenario())


def test_b24_list_sees_every_key_while_the_keys_are_being_rewritten(
    make_store: StoreMaker,
) -> None:
    """Heartbeats are rewritten all the time; a listing that missed one would make the
    leader think a live worker dead and move its splits without a drain. The entries live
    a minute: what is tested is the listing, not the expiry, and a loaded machine can leave
    the rewriting task unscheduled for longer than the one-second TTL of the other tests."""

    async def scenario() -> None:
        reader, writer = await make_store(ttl=60.0), await make_store(ttl=60.0)
        if isinstance(reader, MemoryStore):
            writer = reader  # one process-local store
        try:
            space = Keyspace.TTL
            revisions = {}
            for i in range(3):
                revision = await writer.create(space, f"member.m{i}", b"hb")
                assert revision is not None
                revisions[i] = revision
            stop = asyncio.Event()

            async def rewrite() -> None:
                while not stop.is_set():
                    for i in range(3):
                        revision = await writer.compare_and_set(
                            space, f"member.m{i}", b"hb", revisions[i]
                        )
                        assert revision is not None
                        revisions[i] = revision
                    await asyncio.sleep(0)

            task = asyncio.create_task(rewrite())
            try:
                for _ in range(100):
                    keys = [e.key for e in await reader.list(space, "member.")]
                    assert keys == ["member.m0", "member.m1", "member.m2"]
            finally:
                stop.set()
                await task
        finally:
            await reader.close()
            if writer is not reader:
                await writer.close()

    asyncio.run(scenario())
