"""Multi-process coordination on a real nats-server with JetStream (B24).

Each test starts worker processes (``coord_worker.py``) on a private server and then
hurts them: ``kill -9`` one, SIGSTOP one past its lease, cut one off from the server
past its lease (a network partition through a fault proxy), or restart the server. Every
worker logs, with the system-wide monotonic clock, when it starts and stops working
each split and the result of every progress write. From those logs the tests check,
at every moment of the run rather than at a few samples, that no split was worked by
two live instances at once, and that every split was completed exactly once.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import signal
import subprocess
import sys
import time
import uuid
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from spate_coordination import Keyspace, NatsStoreConfig
from spate_coordination._nats import NatsStore
from spate_coordination._records import StateRecord

from tests.support.netfault import FaultProxy

pytestmark = [pytest.mark.e2e, pytest.mark.integration]

WORKER = Path(__file__).with_name("coord_worker.py")
LEASE = 2.0
RENEW = LEASE / 3


@dataclass
class Worker:
    name: str
    log: Path
    process: subprocess.Popen[bytes]
    stderr: Path
    killed_at: float | None = None
    events: list[dict[str, Any]] = field(default_factory=list)

    def read(self) -> list[dict[str, Any]]:
        if not self.log.exists():
            return []
        self.events = [json.loads(line) for line in self.log.read_text().splitlines() if line]
        return self.events


def start_workers(
    tmp_path: Path, url: str, job: str, names: list[str], **options: float
) -> list[Worker]:
    workers = []
    for name in names:
        log, err = tmp_path / f"{name}.jsonl", tmp_path / f"{name}.stderr"
        cmd = [
            sys.executable,
            str(WORKER),
            "--url",
            url,
            "--job",
            job,
            "--instance",
            name,
            "--log",
            str(log),
            "--lease",
            str(LEASE),
        ]
        for key, value in options.items():
            cmd += [f"--{key.replace('_', '-')}", str(value)]
        with err.open("wb") as stderr:
            process = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=stderr)
        workers.append(Worker(name, log, process, err))
    return workers


@pytest.fixture
def cleanup() -> Any:
    started: list[Worker] = []
    yield started
    for worker in started:
        if worker.process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(worker.process.pid, signal.SIGCONT)
            worker.process.kill()
            worker.process.wait(10)


def _ends_work(e: dict[str, Any]) -> bool:
    """Whether a log line means the worker stopped working that split (at that epoch)."""
    return (
        e["ev"] in ("drop", "unwork")
        or (e["ev"] == "complete" and e["result"] == "accepted")
        or (e["ev"] == "commit" and e["result"] == "fenced")
    )


def owned_now(worker: Worker) -> dict[str, int]:
    """Splits the worker is working at the end of its log (split -> epoch)."""
    current: dict[str, int] = {}
    for e in worker.read():
        if e["ev"] == "own":
            current[e["split"]] = e["epoch"]
        elif "split" in e and _ends_work(e) and current.get(e["split"]) == e["epoch"]:
            del current[e["split"]]
    return current


def intervals(worker: Worker) -> list[tuple[str, int, float, float]]:
    """(split, epoch, start, end) of each time the worker worked a split.

    Starts when the coordinator handed it over; ends when the worker stopped (drain,
    completion, a fenced write, a forced drop). A killed worker's open intervals end
    at the kill; a worker that exited cleanly has none open.
    """
    open_: dict[tuple[str, int], float] = {}
    out = []
    for e in worker.read():
        if e["ev"] == "own":
            open_[(e["split"], e["epoch"])] = e["t"]
            continue
        if "split" in e and _ends_work(e) and (e["split"], e["epoch"]) in open_:
            start = open_.pop((e["split"], e["epoch"]))
            out.append((e["split"], e["epoch"], start, e["t"]))
    end = worker.killed_at if worker.killed_at is not None else float("inf")
    out.extend((s, ep, start, end) for (s, ep), start in open_.items())
    return out


def assert_never_worked_twice(workers: list[Worker]) -> None:
    by_split: dict[str, list[tuple[float, float, str, int]]] = defaultdict(list)
    for worker in workers:
        for split, epoch, start, end in intervals(worker):
            by_split[split].append((start, end, worker.name, epoch))
    for split, spans in by_split.items():
        spans.sort()
        for (_s1, e1, w1, ep1), (s2, _e2, w2, ep2) in itertools.pairwise(spans):
            assert s2 >= e1, (
                f"{split} worked by {w1} (epoch {ep1}) until {e1:.3f} and by {w2} "
                f"(epoch {ep2}) from {s2:.3f}"
            )
            assert ep2 > ep1, f"{split}: epoch did not grow from {w1} to {w2}"


def wait_for(predicate: Any, timeout: float, what: str, workers: list[Worker]) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        for worker in workers:
            if worker.process.poll() not in (None, 0) and worker.killed_at is None:
                raise AssertionError(
                    f"{worker.name} exited {worker.process.returncode}:\n"
                    + worker.stderr.read_text()[-3000:]
                )
        if time.monotonic() > deadline:
            details = "\n".join(
                f"--- {w.name}: {sorted(owned_now(w))}\n{w.stderr.read_text()[-1500:]}"
                for w in workers
            )
            raise AssertionError(f"timed out waiting for {what}\n{details}")
        time.sleep(0.1)


def wait_exit(workers: list[Worker], timeout: float) -> None:
    for worker in workers:
        try:
            code = worker.process.wait(timeout)
        except subprocess.TimeoutExpired:
            raise AssertionError(
                f"{worker.name} still running:\n{worker.stderr.read_text()[-3000:]}"
            ) from None
        assert code == 0, f"{worker.name} exited {code}:\n{worker.stderr.read_text()[-3000:]}"


def final_states(url: str, job: str, lease: float = LEASE) -> dict[str, StateRecord]:
    import asyncio

    async def read() -> dict[str, StateRecord]:
        store = NatsStore(NatsStoreConfig(servers=[url]), job, lease)
        await store.open()
        try:
            entries = await store.list(Keyspace.DURABLE, "state.")
            return {e.key.split(".", 1)[1]: StateRecord.decode(e.value) for e in entries}
        finally:
            await store.close()

    return asyncio.run(read())


def assert_completed_once(
    workers: list[Worker], url: str, job: str, splits: int, lease: float = LEASE
) -> None:
    completions: dict[str, int] = defaultdict(int)
    for worker in workers:
        for e in worker.read():
            if e["ev"] == "complete" and e["result"] == "accepted":
                completions[e["split"]] += 1
    assert len(completions) == splits
    assert set(completions.values()) == {1}
    states = final_states(url, job, lease)
    assert len(states) == splits and all(s.completed for s in states.values())


def test_b24_kill_9_moves_the_dead_workers_splits_after_its_lease(
    private_nats: Any, tmp_path: Path, cleanup: list[Worker]
) -> None:
    job = f"kill-{uuid.uuid4().hex[:8]}"
    workers = start_workers(
        tmp_path, private_nats.url, job, ["a", "b", "c"], splits=60, steps=50, step=0.2
    )
    cleanup.extend(workers)
    a, b, c = workers
    wait_for(
        lambda: sorted(len(owned_now(w)) for w in workers) == [20, 20, 20],
        30,
        "60 splits balanced over three workers",
        workers,
    )
    time.sleep(1.0)
    victims = owned_now(c)
    c.process.send_signal(signal.SIGKILL)
    c.killed_at = time.monotonic()
    c.process.wait(5)

    wait_for(
        lambda: set(victims) <= set(owned_now(a)) | set(owned_now(b)),
        30,
        "the killed worker's splits to move",
        [a, b],
    )
    # Nobody took them before the dead worker's lease expired: the store keeps a
    # heartbeat for LEASE after the moment its last successful write was sent.
    last_heartbeat = max(e["sent"] for e in c.read() if e["ev"] == "heartbeat")
    expired_at = last_heartbeat + LEASE
    for worker in (a, b):
        for e in worker.read():
            if e["ev"] == "own" and e["split"] in victims and e["epoch"] > victims[e["split"]]:
                assert e["t"] >= expired_at, (
                    f"{worker.name} took {e['split']} {expired_at - e['t']:.2f}s before the "
                    f"dead worker's lease ({LEASE}s) expired"
                )
                assert e["epoch"] == victims[e["split"]] + 1
    wait_exit([a, b], 90)
    assert_never_worked_twice(workers)
    assert_completed_once(workers, private_nats.url, job, 60)


def test_b24_a_resumed_zombie_has_every_progress_write_refused(
    private_nats: Any, tmp_path: Path, cleanup: list[Worker]
) -> None:
    job = f"zombie-{uuid.uuid4().hex[:8]}"
    workers = start_workers(
        tmp_path, private_nats.url, job, ["a", "z"], splits=12, steps=45, step=0.2
    )
    cleanup.extend(workers)
    a, z = workers
    wait_for(
        lambda: sorted(len(owned_now(w)) for w in workers) == [6, 6],
        30,
        "12 splits balanced over two workers",
        workers,
    )
    held = owned_now(z)

    def z_is_working_all_it_holds() -> bool:
        working = {
            e["split"]
            for e in z.read()
            if e["ev"] == "commit"
            and e["result"] == "accepted"
            and held.get(e["split"]) == e["epoch"]
        }
        return working == set(held)

    wait_for(z_is_working_all_it_holds, 30, "z to commit progress on its splits", workers)
    os.kill(z.process.pid, signal.SIGSTOP)
    stopped_at = time.monotonic()
    # While z is frozen its lease expires and a takes over every split.
    wait_for(lambda: set(held) <= set(owned_now(a)), 30, "a to take the zombie's splits", [a])
    assert time.monotonic() - stopped_at >= LEASE - RENEW
    time.sleep(0.5)
    resumed_at = time.monotonic()
    os.kill(z.process.pid, signal.SIGCONT)

    wait_exit([a, z], 90)
    after = [e for e in z.read() if e["t"] >= resumed_at]
    # Writes *attempted* after the resume (one sent just before the stop may be logged
    # after it, with the result it got before the stop).
    stale = [
        e
        for e in after
        if e["ev"] in ("commit", "complete")
        and e["sent"] >= resumed_at
        and held.get(e["split"]) == e["epoch"]
    ]
    # It tried, and every write under its old ownership was refused...
    assert stale, "the zombie made no progress write after it resumed"
    assert {e["result"] for e in stale} == {"fenced"}
    # ...and it stopped working every split it held.
    dropped = {
        e["split"]
        for e in after
        if e["ev"] in ("drop", "commit") and held.get(e["split"]) == e["epoch"]
    }
    assert dropped == set(held)
    # The successors' epochs are higher; nothing in the store carries the zombie's epoch.
    states = final_states(private_nats.url, job)
    for split, epoch in held.items():
        assert states[split].epoch > epoch
    assert_completed_once(workers, private_nats.url, job, 12)


def test_b24_nats_restart_mid_run_the_job_continues_and_nothing_is_assigned_twice(
    private_nats: Any, tmp_path: Path, cleanup: list[Worker]
) -> None:
    job = f"restart-{uuid.uuid4().hex[:8]}"
    workers = start_workers(
        tmp_path, private_nats.url, job, ["a", "b", "c"], splits=30, steps=50, step=0.2, lease=3.0
    )
    cleanup.extend(workers)
    wait_for(
        lambda: sorted(len(owned_now(w)) for w in workers) == [10, 10, 10],
        30,
        "30 splits balanced over three workers",
        workers,
    )
    time.sleep(1.0)
    private_nats.stop()
    time.sleep(1.0)
    private_nats.start()
    restarted_at = time.monotonic()
    wait_exit(workers, 120)
    # Work went on after the restart: progress was accepted again.
    accepted_after = [
        e
        for w in workers
        for e in w.read()
        if e["t"] > restarted_at and e["ev"] == "commit" and e["result"] == "accepted"
    ]
    assert accepted_after
    assert_never_worked_twice(workers)
    assert_completed_once(workers, private_nats.url, job, 30, lease=3.0)


def test_b24_a_worker_partitioned_from_nats_past_its_lease_is_fenced_and_its_splits_move(
    private_nats: Any, tmp_path: Path, cleanup: list[Worker]
) -> None:
    """B24 over a network partition (tests/support/netfault.py): z reaches NATS through a
    fault proxy, which cuts it off (every byte swallowed, nothing closed) for longer than
    its lease. z keeps running but stops working its splits once it cannot renew its lease
    (judged locally), a takes them over, and when the partition heals nothing z writes
    under its old ownership is accepted. No split is worked twice at any moment (z drops
    its splits when its lease lapses by its clock, even while a store call of its waits
    out its timeout); every split completes once."""
    job = f"partition-{uuid.uuid4().hex[:8]}"
    with FaultProxy(private_nats.url.removeprefix("nats://")) as proxy:
        (a,) = start_workers(tmp_path, private_nats.url, job, ["a"], splits=12, steps=45, step=0.2)
        (z,) = start_workers(
            tmp_path, f"nats://{proxy.address}", job, ["z"], splits=12, steps=45, step=0.2
        )
        workers = [a, z]
        cleanup.extend(workers)
        wait_for(
            lambda: sorted(len(owned_now(w)) for w in workers) == [6, 6],
            30,
            "12 splits balanced over two workers",
            workers,
        )
        held = owned_now(z)
        wait_for(
            lambda: (
                {e["split"] for e in z.read() if e["ev"] == "commit" and e["result"] == "accepted"}
                >= set(held)
            ),
            30,
            "z to commit progress on its splits",
            workers,
        )
        proxy.partition()
        partitioned_at = time.monotonic()
        wait_for(lambda: set(held) <= set(owned_now(a)), 30, "a to take z's splits", [a])
        # Hold the partition a little longer than it took, then heal it.
        time.sleep(max(0.5, LEASE - (time.monotonic() - partitioned_at)))
        proxy.heal()
        wait_exit([a, z], 90)
    assert proxy.stats.swallowed > 0
    stale = [
        e
        for e in z.read()
        if e["ev"] in ("commit", "complete")
        and e.get("sent", 0.0) >= partitioned_at
        and held.get(e["split"]) == e["epoch"]
    ]
    assert all(e["result"] != "accepted" for e in stale), stale
    states = final_states(private_nats.url, job)
    for split, epoch in held.items():
        assert states[split].epoch > epoch
    assert_completed_once(workers, private_nats.url, job, 12)
    assert_never_worked_twice(workers)
