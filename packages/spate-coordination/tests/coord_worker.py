"""A worker process for the multi-process coordination tests (not collected by pytest).

It plays the part a splitting source plays in a pipeline: publishes the plan (every
worker tries; the plan is idempotent), works each owned split in ``--steps`` steps of
``--step`` seconds, commits fenced progress after each, marks the split completed after
the last, drains and releases on a revoke request, and exits 0 once the job is
complete. Every ownership change and every write result goes to ``--log`` as one JSON
line with the system-wide monotonic time, written straight through to the kernel, so
a ``kill -9`` loses nothing that happened before it.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import threading
import time
from typing import Any

from spate.metrics import Meter
from spate_coordination import (
    CoordinationConfig,
    Coordinator,
    Keyspace,
    NatsStoreConfig,
    ProgressWrite,
    SplitEvent,
    SplitEventKind,
    SplitSpec,
    StoreUnavailableError,
)
from spate_coordination._nats import NatsStore


class EventLog:
    def __init__(self, path: str, instance: str) -> None:
        self._fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        self._instance = instance
        self._lock = threading.Lock()

    def write(self, event: str, **fields: Any) -> None:
        record = {"t": time.monotonic(), "pid": os.getpid(), "who": self._instance, "ev": event}
        record.update(fields)
        line = (json.dumps(record) + "\n").encode()
        with self._lock:
            os.write(self._fd, line)


class HeartbeatLoggingStore(NatsStore):
    """The NATS store, logging when each successful write of our heartbeat was *sent*:
    the store expires the heartbeat no earlier than ``lease`` after that moment."""

    def __init__(self, log: EventLog, instance: str, *args: Any) -> None:
        super().__init__(*args)
        self._log = log
        self._heartbeat_key = f"member.{instance}"

    async def create(self, space: Keyspace, key: str, value: bytes) -> int | None:
        sent = time.monotonic()
        revision = await super().create(space, key, value)
        if revision is not None and key == self._heartbeat_key:
            self._log.write("heartbeat", sent=sent)
        return revision

    async def compare_and_set(
        self, space: Keyspace, key: str, value: bytes, revision: int
    ) -> int | None:
        sent = time.monotonic()
        new = await super().compare_and_set(space, key, value, revision)
        if new is not None and key == self._heartbeat_key:
            self._log.write("heartbeat", sent=sent)
        return new


def work_one_step(
    coordinator: Coordinator,
    working: dict[str, tuple[int, int]],
    steps: int,
    instance: str,
    log: EventLog,
) -> None:
    """Commit one step of progress for every split being worked; complete finished ones."""
    for split, (epoch, step) in sorted(working.items()):
        sent = time.monotonic()
        result = coordinator.commit_progress(split, epoch, {"step": step, "by": instance})
        log.write("commit", split=split, epoch=epoch, step=step, result=result.value, sent=sent)
        if result is ProgressWrite.FENCED:
            del working[split]
            continue
        if step + 1 >= steps:
            sent = time.monotonic()
            done = coordinator.mark_completed(split, epoch)
            log.write("complete", split=split, epoch=epoch, result=done.value, sent=sent)
            del working[split]
        else:
            working[split] = (epoch, step + 1)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--url", required=True)
    parser.add_argument("--job", required=True)
    parser.add_argument("--instance", required=True)
    parser.add_argument("--log", required=True)
    parser.add_argument("--splits", type=int, default=60)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--step", type=float, default=0.2)
    parser.add_argument("--lease", type=float, default=2.0)
    parser.add_argument("--poll", type=float, default=0.3)
    parser.add_argument("--drain", type=float, default=2.0)
    parser.add_argument("--max-seconds", type=float, default=120.0)
    args = parser.parse_args()

    logging.basicConfig(
        level=logging.INFO,
        format=f"%(asctime)s {args.instance} %(name)s %(levelname)s %(message)s",
    )
    log = EventLog(args.log, args.instance)
    config = CoordinationConfig(
        store={
            "nats": NatsStoreConfig(
                servers=[args.url], request_timeout=1.0, connect_timeout=5.0, reconnect_wait=0.2
            )
        },
        job=args.job,
        instance_id=args.instance,
        lease_duration=args.lease,
        poll_interval=args.poll,
        drain_deadline=args.drain,
    )
    store = HeartbeatLoggingStore(
        log, args.instance, config.store_config, config.job, config.lease_duration
    )
    coordinator = Coordinator(config, store, meter=Meter(args.instance), timeout=10.0)

    def on_event(event: SplitEvent) -> None:
        # Runs on the coordinator's loop right after its owned set changed.
        if event.kind is SplitEventKind.ASSIGNED:
            log.write("own", split=event.split_id, epoch=event.epoch)
        elif event.kind is SplitEventKind.FORCED:
            log.write("drop", split=event.split_id, epoch=event.epoch, reason=event.reason)

    coordinator.add_listener(on_event)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    coordinator.start()
    log.write("started")
    coordinator.publish_plan(SplitSpec(f"s{i:03d}", 1.0, {"index": i}) for i in range(args.splits))

    working: dict[str, tuple[int, int]] = {}  # split -> (epoch, next step)
    pending_events: list[SplitEvent] = []

    def handle(event: SplitEvent) -> None:
        if event.kind is SplitEventKind.ASSIGNED:
            progress = coordinator.read_progress(event.split_id)
            start = 0
            if isinstance(progress, dict) and isinstance(progress.get("step"), int):
                start = int(progress["step"]) + 1
            working[event.split_id] = (event.epoch, start)
        elif event.kind is SplitEventKind.REVOKE_REQUESTED:
            if event.split_id in working:
                # Drain: progress is committed after every step, so stop and release.
                del working[event.split_id]
                log.write("unwork", split=event.split_id, epoch=event.epoch)
                released = coordinator.release(event.split_id, event.epoch)
                log.write("release", split=event.split_id, epoch=event.epoch, ok=released)
        elif event.kind is SplitEventKind.FORCED:
            working.pop(event.split_id, None)
        elif event.kind is SplitEventKind.JOB_COMPLETE:
            log.write("job_complete")
            stop.set()

    deadline = time.monotonic() + args.max_seconds
    exit_code = 0
    while not stop.is_set():
        if time.monotonic() > deadline:
            log.write("timeout")
            exit_code = 3
            break
        try:
            work_one_step(coordinator, working, args.steps, args.instance, log)
        except StoreUnavailableError as exc:
            # The store is away (restart, partition): keep the splits and try again; if
            # it stays away for a lease, the coordinator drops them (FORCED events).
            log.write("unavailable", error=str(exc))
        events = pending_events + coordinator.take_events()
        pending_events = []
        for index, event in enumerate(events):
            try:
                handle(event)
            except StoreUnavailableError as exc:
                log.write("unavailable", error=str(exc))
                pending_events = events[index:]
                break
        time.sleep(args.step)
    coordinator.stop()
    log.write("exit", code=exit_code)
    return exit_code


if __name__ == "__main__":
    raise SystemExit(main())
