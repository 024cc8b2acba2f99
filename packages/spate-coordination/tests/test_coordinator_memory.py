"""Coordinator behaviour on the in-memory store, driven step by step with a ManualClock.

Covers membership, leadership, assignment, cooperative and forced revocation, lease
expiry and fencing (B24) without any sleeping: every test moves time by hand.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable

import pytest
from spate import ManualClock
from spate.metrics import Meter
from spate_coordination import (
    CoordinationConfig,
    CoordinatorCore,
    DuplicateInstanceError,
    MemoryStore,
    PlanConflictError,
    ProgressWrite,
    SplitEventKind,
    SplitSpec,
    SplitStatus,
    read_split_states,
)

LEASE = 3.0
POLL = 0.5
DRAIN = 2.0


def make(
    store: MemoryStore,
    clock: ManualClock,
    instance: str,
    *,
    meter: Meter | None = None,
    retry_quarantined: bool = False,
) -> CoordinatorCore:
    config = CoordinationConfig(
        store={"memory": {}},
        job="job1",
        instance_id=instance,
        lease_duration=LEASE,
        poll_interval=POLL,
        drain_deadline=DRAIN,
        retry_quarantined=retry_quarantined,
    )
    meter = meter if meter is not None else Meter(f"test-{instance}")
    return CoordinatorCore(config, store, clock=clock, meter=meter)


def plan(n: int, weight: float = 1.0) -> list[SplitSpec]:
    return [SplitSpec(f"s{i:02d}", weight, {"n": i}) for i in range(n)]


async def rounds(cores: Iterable[CoordinatorCore], clock: ManualClock, n: int = 3) -> None:
    """``n`` rounds of heartbeat + tick for every core, ``POLL`` seconds apart."""
    cores = list(cores)
    for _ in range(n):
        for core in cores:
            await core.step()
        clock.advance(POLL)


async def auto_release(cores: Iterable[CoordinatorCore]) -> None:
    """Answer every pending revoke request at once (a source that drains instantly)."""
    for core in cores:
        for split, owned in core.owned().items():
            if owned.revoke_requested:
                assert await core.release(split, owned.epoch)


def assert_exclusive(cores: Iterable[CoordinatorCore]) -> None:
    seen: dict[str, str] = {}
    for core in cores:
        for split in core.owned():
            assert split not in seen, f"{split} owned by {seen[split]} and {core.instance_id}"
            seen[split] = core.instance_id


def test_b24_three_workers_share_splits_evenly_and_exclusively() -> None:
    async def scenario() -> None:
        clock = ManualClock()
        store = MemoryStore(LEASE, clock=clock)
        cores = [make(store, clock, name) for name in ("a", "b", "c")]
        for core in cores:
            await core.start()
        assert [c.is_leader() for c in cores] == [True, False, False]
        assert await cores[1].publish_plan(plan(60))
        for _ in range(6):
            await rounds(cores, clock, 1)
            await auto_release(cores)
            assert_exclusive(cores)
        assert sorted(len(c.owned()) for c in cores) == [20, 20, 20]

    asyncio.run(scenario())


def test_b24_duplicate_instance_id_is_refused() -> None:
    async def scenario() -> None:
        clock = ManualClock()
        store = MemoryStore(LEASE, clock=clock)
        await make(store, clock, "a").start()
        with pytest.raises(DuplicateInstanceError, match="'a' is already used"):
            await make(store, clock, "a").start()

    asyncio.run(scenario())


def test_b24_dead_workers_splits_move_only_after_its_lease_expires() -> None:
    async def scenario() -> None:
        clock = ManualClock()
        store = MemoryStore(LEASE, clock=clock)
        a, b, c = (make(store, clock, n) for n in ("a", "b", "c"))
        for core in (a, b, c):
            await core.start()
        await a.publish_plan(plan(30))
        for _ in range(6):
            await rounds([a, b, c], clock, 1)
            await auto_release([a, b, c])
        lost = set(c.owned())
        assert len(lost) == 10
        # c dies silently: for just under a lease nobody takes its splits.
        steps = int((LEASE - POLL) / POLL)
        for _ in range(steps):
            await rounds([a, b], clock, 1)
            assert not lost & (set(a.owned()) | set(b.owned()))
        await rounds([a, b], clock, 4)
        assert lost <= set(a.owned()) | set(b.owned())
        assert sorted(len(x.owned()) for x in (a, b)) == [15, 15]
        # The new owners took over at a higher epoch.
        for split in lost:
            owner = a if split in a.owned() else b
            assert owner.owned()[split].epoch == 2

    asyncio.run(scenario())


def test_b24_a_new_worker_gets_splits_through_cooperative_revocation() -> None:
    async def scenario() -> None:
        clock = ManualClock()
        store = MemoryStore(LEASE, clock=clock)
        a = make(store, clock, "a")
        await a.start()
        await a.publish_plan(plan(4))
        await rounds([a], clock, 4)
        assert len(a.owned()) == 4
        a.take_events()
        b = make(store, clock, "b")
        await b.start()
        await rounds([a, b], clock, 4)
        revokes = [e for e in a.take_events() if e.kind is SplitEventKind.REVOKE_REQUESTED]
        assert len(revokes) == 2
        # Until a releases, b holds (absent means hold): nothing is owned twice.
        assert b.owned() == {}
        for event in revokes:
            assert event.deadline == pytest.approx(clock.monotonic() - POLL + DRAIN, abs=POLL)
            assert await a.commit_progress(event.split_id, event.epoch, {"done": 7}) is (
                ProgressWrite.ACCEPTED
            )
            assert await a.release(event.split_id, event.epoch)
        await rounds([a, b], clock, 2)
        assert sorted(b.owned()) == sorted(e.split_id for e in revokes)
        for event in revokes:
            assert await b.read_progress(event.split_id) == {"done": 7}
            assert b.owned()[event.split_id].epoch == event.epoch + 1

    asyncio.run(scenario())


def test_b24_revocation_is_forced_after_the_drain_deadline() -> None:
    async def scenario() -> None:
        clock = ManualClock()
        store = MemoryStore(LEASE, clock=clock)
        a = make(store, clock, "a")
        await a.start()
        await a.publish_plan(plan(2))
        await rounds([a], clock, 4)
        b = make(store, clock, "b")
        await b.start()
        await rounds([a, b], clock, 4)
        (revoke,) = [e for e in a.take_events() if e.kind is SplitEventKind.REVOKE_REQUESTED]
        # a never releases. It stops owning at its deadline; b gets it only afterwards.
        while revoke.split_id in a.owned():
            assert revoke.split_id not in b.owned()
            await rounds([a, b], clock, 1)
        forced = [e for e in a.take_events() if e.kind is SplitEventKind.FORCED]
        assert [e.split_id for e in forced] == [revoke.split_id]
        for _ in range(10):
            await rounds([a, b], clock, 1)
            assert_exclusive([a, b])
        assert revoke.split_id in b.owned()
        # The overdue owner's late commit is refused.
        assert await a.commit_progress(revoke.split_id, revoke.epoch, b"late") is (
            ProgressWrite.FENCED
        )

    asyncio.run(scenario())


def test_b24_zombie_progress_write_is_refused_by_the_epoch_compare_and_set() -> None:
    """The store refuses the write even when the zombie's own clock says its lease is ok."""

    async def scenario() -> None:
        clock = ManualClock()
        zombie_clock = ManualClock()  # a clock that stopped: the zombie's view of time
        store = MemoryStore(LEASE, clock=clock)
        zombie = make(store, zombie_clock, "z")
        await zombie.start()
        await zombie.publish_plan(plan(3))
        await rounds([zombie], zombie_clock, 4)
        owned = zombie.owned()
        assert len(owned) == 3
        # Time passes for everyone but the zombie; its heartbeat expires in the store.
        clock.advance(LEASE + POLL)
        successor = make(store, clock, "y")
        await successor.start()
        await rounds([successor], clock, 5)
        assert set(successor.owned()) == set(owned)
        for split, mine in owned.items():
            result = await zombie.commit_progress(split, mine.epoch, b"zombie")
            assert result is ProgressWrite.FENCED
            assert await successor.read_progress(split) != b"zombie"
        assert zombie.owned() == {}
        assert all(
            e.kind is not SplitEventKind.FORCED or e.reason.startswith("fenced")
            for e in zombie.take_events()
            if e.kind is SplitEventKind.FORCED
        )
        # And the zombie cannot complete a split it lost either.
        split = next(iter(owned))
        assert await zombie.mark_completed(split, owned[split].epoch) is ProgressWrite.FENCED

    asyncio.run(scenario())


def test_b24_an_instance_that_cannot_renew_for_a_lease_stops_working() -> None:
    async def scenario() -> None:
        clock = ManualClock()
        store = MemoryStore(LEASE, clock=clock)
        a = make(store, clock, "a")
        await a.start()
        await a.publish_plan(plan(2))
        await rounds([a], clock, 4)
        owned = a.owned()
        assert len(owned) == 2
        a.take_events()
        # No heartbeat for a whole lease (paused process, store outage).
        clock.advance(LEASE)
        split, mine = next(iter(owned.items()))
        assert await a.commit_progress(split, mine.epoch, b"x") is ProgressWrite.FENCED
        assert a.owned() == {}
        events = a.take_events()
        assert {e.split_id for e in events if e.kind is SplitEventKind.FORCED} == set(owned)
        # It joins again as a fresh member and works at a new epoch.
        await rounds([a], clock, 5)
        assert {s: o.epoch for s, o in a.owned().items()} == {s: 2 for s in owned}

    asyncio.run(scenario())


def test_b24_leader_failover_and_job_completion() -> None:
    async def scenario() -> None:
        clock = ManualClock()
        store = MemoryStore(LEASE, clock=clock)
        a, b = make(store, clock, "a"), make(store, clock, "b")
        await a.start()
        await b.start()
        assert a.is_leader() and not b.is_leader()
        await b.publish_plan(plan(6, weight=2.0))
        for _ in range(5):
            await rounds([a, b], clock, 1)
            await auto_release([a, b])
        # a dies; b becomes leader after the lease and finishes everything.
        for _ in range(12):
            await rounds([b], clock, 1)
        assert b.is_leader()
        assert len(b.owned()) == 6
        for split, mine in b.owned().items():
            assert await b.mark_completed(split, mine.epoch) is ProgressWrite.ACCEPTED
        await rounds([b], clock, 2)
        assert b.job_complete
        assert any(e.kind is SplitEventKind.JOB_COMPLETE for e in b.take_events())
        await b.close()

    asyncio.run(scenario())


def test_b38_a_quarantined_split_is_its_own_state_and_is_handed_out_again_when_retried() -> None:
    async def scenario() -> None:
        clock = ManualClock()
        store = MemoryStore(LEASE, clock=clock)
        meter = Meter("quarantine-test")
        a = make(store, clock, "a", meter=meter)
        await a.start()
        await a.publish_plan(plan(3))
        await rounds([a], clock, 6)
        assert sorted(a.owned()) == ["s00", "s01", "s02"]
        owned = a.owned()
        assert await a.commit_progress("s01", owned["s01"].epoch, {"offset": 7}) is (
            ProgressWrite.ACCEPTED
        )
        assert await a.quarantine("s01", owned["s01"].epoch, "corrupt") is ProgressWrite.ACCEPTED
        for split in ("s00", "s02"):
            await a.mark_completed(split, owned[split].epoch)
        await rounds([a], clock, 4)
        # Neither completed nor handed out again: the job does not complete.
        assert a.owned() == {} and not a.job_complete
        states = await a.split_states()
        assert [s.status for s in states.values()] == [
            SplitStatus.COMPLETED,
            SplitStatus.QUARANTINED,
            SplitStatus.COMPLETED,
        ]
        assert states["s01"].reason == "corrupt" and states["s01"].progress == {"offset": 7}
        assert states["s01"].owner is None and states["s01"].settled
        labels = {
            "pipeline": "quarantine-test",
            "component": "coordination",
            "component_type": "coordination",
        }
        sample = meter.registry.get_sample_value
        assert sample("spate_coordination_quarantined_splits_total", labels) == 1
        assert sample("spate_coordination_splits_in_quarantine", labels) == 1
        assert (await read_split_states(store)) == states  # the same without membership
        # Retried: handed out again at a new epoch, resuming from its progress.
        assert await a.retry_quarantined(["s00", "s01"]) == ["s01"]
        assert await a.retry_quarantined() == []
        await rounds([a], clock, 4)
        retried = a.owned()["s01"]
        assert retried.epoch > owned["s01"].epoch
        assert await a.read_progress("s01") == {"offset": 7}
        await a.mark_completed("s01", retried.epoch)
        await rounds([a], clock, 2)
        assert a.job_complete
        await a.close()

    asyncio.run(scenario())


def test_b38_retry_quarantined_at_start_hands_quarantined_splits_out_again() -> None:
    async def scenario() -> None:
        clock = ManualClock()
        store = MemoryStore(LEASE, clock=clock)
        a = make(store, clock, "a")
        await a.start()
        await a.publish_plan(plan(2))
        await rounds([a], clock, 6)
        for split, mine in a.owned().items():
            await a.quarantine(split, mine.epoch, "gone")
        await a.close()
        # A plain restart leaves them quarantined; one with retry_quarantined reads them.
        b = make(store, clock, "b")
        await b.start()
        await rounds([b], clock, 6)
        assert b.owned() == {}
        await b.close()
        c = make(store, clock, "c", retry_quarantined=True)
        await c.start()
        await rounds([c], clock, 6)
        assert sorted(c.owned()) == ["s00", "s01"]
        await c.close()

    asyncio.run(scenario())


def test_plan_is_idempotent_and_a_different_plan_is_refused() -> None:
    async def scenario() -> None:
        clock = ManualClock()
        store = MemoryStore(LEASE, clock=clock)
        a = make(store, clock, "a")
        await a.start()
        assert await a.publish_plan(plan(5))
        assert not await a.publish_plan(list(reversed(plan(5))))
        with pytest.raises(PlanConflictError, match="different plan"):
            await a.publish_plan(plan(6))
        read = await a.read_plan()
        assert read is not None and [s.split_id for s in read] == [f"s{i:02d}" for i in range(5)]
        assert read[3].meta == {"n": 3}
        with pytest.raises(ValueError, match="split id"):
            await a.publish_plan([SplitSpec("bad.id")])

    asyncio.run(scenario())


def test_graceful_close_hands_splits_over_without_waiting_for_the_lease() -> None:
    async def scenario() -> None:
        clock = ManualClock()
        store = MemoryStore(LEASE, clock=clock)
        a, b = make(store, clock, "a"), make(store, clock, "b")
        await a.start()
        await b.start()
        await a.publish_plan(plan(4))
        for _ in range(5):
            await rounds([a, b], clock, 1)
            await auto_release([a, b])
        assert len(b.owned()) == 2
        await a.close()
        await rounds([b], clock, 3)  # 1.5s: well under one lease
        assert len(b.owned()) == 4 and b.is_leader()

    asyncio.run(scenario())


def test_metrics_follow_ownership_and_leadership() -> None:
    async def scenario() -> None:
        clock = ManualClock()
        store = MemoryStore(LEASE, clock=clock)
        meter = Meter("metrics-test")
        config = CoordinationConfig(
            store={"memory": {}}, job="job1", instance_id="m", lease_duration=LEASE
        )
        core = CoordinatorCore(config, store, clock=clock, meter=meter)
        await core.start()
        await core.publish_plan(plan(3))
        await rounds([core], clock, 6)
        split, mine = next(iter(core.owned().items()))
        await core.mark_completed(split, mine.epoch)

        def value(name: str, **labels: str) -> float | None:
            return meter.registry.get_sample_value(
                name,
                {
                    "pipeline": "metrics-test",
                    "component": "coordination",
                    "component_type": "coordination",
                    **labels,
                },
            )

        assert value("spate_coordination_owned_splits") == 2
        assert value("spate_coordination_leader") == 1
        assert value("spate_coordination_live_workers") == 1
        assert value("spate_coordination_acquisitions_total") == 3
        assert value("spate_coordination_completed_splits_total") == 1
        count = value("spate_coordination_store_op_duration_seconds_count", op="cas")
        assert count is not None and count > 0

    asyncio.run(scenario())


def test_b24_a_fleet_starting_together_is_assigned_without_revocations() -> None:
    """The leader waits for the live set to settle before the first assignment."""

    async def scenario() -> None:
        clock = ManualClock()
        store = MemoryStore(LEASE, clock=clock)
        a = make(store, clock, "a")
        await a.start()
        await a.publish_plan(plan(60))
        await rounds([a], clock, 1)
        others = [make(store, clock, n) for n in ("b", "c")]
        for core in others:
            await core.start()
        cores = [a, *others]
        await rounds(cores, clock, 6)
        assert sorted(len(c.owned()) for c in cores) == [20, 20, 20]
        kinds = {e.kind for c in cores for e in c.take_events()}
        assert kinds == {SplitEventKind.ASSIGNED}

    asyncio.run(scenario())


def test_coordinator_runs_in_its_own_thread_with_a_blocking_api() -> None:
    """The pipeline-thread API: real clock, background loop, two instances (B24)."""
    import time

    from spate_coordination import Coordinator

    store = MemoryStore(1.0)
    configs = [
        CoordinationConfig(
            store={"memory": {}},
            job="threaded",
            instance_id=name,
            lease_duration=1.0,
            poll_interval=0.05,
            drain_deadline=0.5,
        )
        for name in ("t1", "t2")
    ]
    coordinators = [Coordinator(c, store, meter=Meter(c.instance_id)) for c in configs]
    for coordinator in coordinators:
        coordinator.start()
    try:
        assert coordinators[0].publish_plan(plan(6))
        deadline = time.monotonic() + 10
        while sorted(len(c.owned()) for c in coordinators) != [3, 3]:
            assert time.monotonic() < deadline, [c.owned() for c in coordinators]
            for c in coordinators:
                for event in c.take_events():
                    if event.kind is SplitEventKind.REVOKE_REQUESTED:
                        c.release(event.split_id, event.epoch)
            time.sleep(0.02)
        with pytest.raises(DuplicateInstanceError):
            Coordinator(configs[0], store).start()
        for c in coordinators:
            for split, owned in c.owned().items():
                assert c.commit_progress(split, owned.epoch, b"\x00\x01") is (
                    ProgressWrite.ACCEPTED
                )
                assert c.read_progress(split) == b"\x00\x01"
                assert c.mark_completed(split, owned.epoch) is ProgressWrite.ACCEPTED
        assert all(c.wait_job_complete(10) for c in coordinators)
    finally:
        for coordinator in coordinators:
            coordinator.stop()


def test_single_instance_job_from_yaml_config_runs_to_completion() -> None:
    """``store: {memory: {}}`` from YAML: one instance owns every split and finishes."""
    import time

    from spate import BuildContext, SystemClock
    from spate.flow import InflightBudget
    from spate_coordination import Coordinator, load_coordination_config

    config = load_coordination_config(
        {"store": {"memory": {}}, "job": "solo", "lease_duration": "1s", "poll_interval": "50ms"}
    )
    meter = Meter("solo")
    context = BuildContext(
        pipeline="solo",
        component="source",
        meter=meter,
        clock=SystemClock(),
        run_nonce="n1",
        budget=InflightBudget(1 << 20),
    )
    coordinator = Coordinator.from_config(config, context)
    coordinator.start()
    try:
        coordinator.publish_plan(plan(4))
        deadline = time.monotonic() + 10
        while len(coordinator.owned()) < 4:
            assert time.monotonic() < deadline
            time.sleep(0.02)
        assert coordinator.is_leader()
        for split, owned in coordinator.owned().items():
            assert coordinator.mark_completed(split, owned.epoch) is ProgressWrite.ACCEPTED
        assert coordinator.wait_job_complete(10)
        kinds = [e.kind for e in coordinator.take_events()]
        assert kinds.count(SplitEventKind.ASSIGNED) == 4
        assert kinds[-1] is SplitEventKind.JOB_COMPLETE
    finally:
        coordinator.stop()
    labels = {"pipeline": "solo", "component": "coordination", "component_type": "coordination"}
    assert meter.registry.get_sample_value("spate_coordination_completed_splits_total", labels) == 4


def test_coordinator_can_run_on_a_loop_the_process_already_has() -> None:
    """One I/O loop per process (docs/concepts/architecture.md): the coordinator joins
    it and leaves it running."""
    import threading

    from spate_coordination import CoordinationError, Coordinator

    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    try:
        config = CoordinationConfig(
            store={"memory": {}},
            job="shared-loop",
            instance_id="l1",
            lease_duration=1.0,
            poll_interval=0.05,
        )
        coordinator = Coordinator(config, MemoryStore(1.0), loop=loop, meter=Meter("l1"))
        coordinator.start()
        assert coordinator.publish_plan(plan(2))

        async def blocking_call_on_the_loop() -> None:
            coordinator.read_progress("s00")

        future = asyncio.run_coroutine_threadsafe(blocking_call_on_the_loop(), loop)
        with pytest.raises(CoordinationError, match="own event loop"):
            future.result(5)
        coordinator.stop()
        assert loop.is_running() and thread.is_alive()
    finally:
        loop.call_soon_threadsafe(loop.stop)
        thread.join(5)
        loop.close()


def test_b24_a_renewal_whose_answer_was_lost_keeps_the_lease() -> None:
    """A heartbeat write that landed but whose reply was lost (a timeout across a
    reconnect) leaves a newer revision under our own session: the lease stays ours,
    while a heartbeat rewritten by another session is a lapse."""

    async def scenario() -> None:
        from spate_coordination._store import Keyspace

        clock = ManualClock()
        store = MemoryStore(LEASE, clock=clock)
        a = make(store, clock, "a")
        await a.start()
        await a.publish_plan(plan(2))
        await rounds([a], clock, 5)
        assert len(a.owned()) == 2
        entry = await store.get(Keyspace.TTL, "member.a")
        assert entry is not None
        # Our own earlier write, applied by the store after we gave up waiting for it.
        assert await store.compare_and_set(Keyspace.TTL, "member.a", entry.value, entry.revision)
        await rounds([a], clock, 2)
        assert a.alive() and len(a.owned()) == 2
        # Someone else's session in our key: the lease is lost, the splits dropped.
        entry = await store.get(Keyspace.TTL, "member.a")
        assert entry is not None
        impostor = entry.value.replace(a.session.encode(), b"other-session")
        assert await store.compare_and_set(Keyspace.TTL, "member.a", impostor, entry.revision)
        with pytest.raises(DuplicateInstanceError):
            await a.heartbeat()  # dropped its splits, then could not join again
        assert a.owned() == {}
        assert not a.alive()

    asyncio.run(scenario())
