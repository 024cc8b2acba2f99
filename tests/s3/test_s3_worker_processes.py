"""B93: a coordinated S3 backfill under ``spate run --processes 3``, on moto's S3 server
and the real nats-server.

The three workers read one configuration that names one ``instance_id``; each must run
as its own member of the coordination job (``<instance_id>-w<index>``), or the store
refuses all but one of them. The assertions read the job's split states from NATS:

* every record in the sink, every split completed, and the splits completed by all three
  workers; every record exactly once unless a worker's heartbeat lease lapsed on the
  loaded machine (then the splits it dropped are read again: at-least-once) (B24, B25);
* ``kill -9`` of one worker mid-run: the parent restarts it under a new id, the splits
  it held move to live members after its lease, every record is in the sink and the
  run exits 0.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest
from spate_coordination import CoordinationConfig, SplitState

from tests.s3.s3kit import AWS_ENV, split_states
from tests.s3.test_s3_coordinated_backfill import Job, sink_ids

pytestmark = [pytest.mark.integration, pytest.mark.e2e]

LEASE = "6s"

CHAIN = """
import os, time

PACE = float(os.environ.get("PACE", "0"))
seen = [0]


def paced(value):
    seen[0] += 1
    if PACE and seen[0] % 100 == 0:
        time.sleep(PACE / 10)
    return value


def chains(ctx):
    return ctx.chain().map(paced).sink()
"""


class _Parent:
    """``spate run CONFIG --processes 3`` as a process, its output in a file."""

    def __init__(self, job: Job, sink: Path, *, seconds: float = 0) -> None:
        (job.tmp / "slow.py").write_text(CHAIN)
        self.log = job.tmp / "parent.log"
        pace = seconds / (len(job.ids) / 3 / 1000) if seconds else 0.0
        env = {**os.environ, **AWS_ENV, "PYTHONUNBUFFERED": "1", "PACE": str(pace)}
        config = job.config("bf", sink)
        # Longer leases than the other S3 tests: three workers and their parent share a
        # small machine, and a lapsed lease replays splits (correct, but not "once").
        settings = json.loads(config.read_text())
        settings["coordination"]["lease_duration"] = LEASE
        config.write_text(json.dumps(settings))
        with self.log.open("ab") as out:
            self.proc = subprocess.Popen(
                [
                    *(sys.executable, "-m", "spate.cli", "run", str(config)),
                    *("--processes", "3", "--chain", "slow:chains"),
                ],
                stdout=out,
                stderr=subprocess.STDOUT,
                env=env,
                cwd=job.tmp,
            )

    @property
    def text(self) -> str:
        return self.log.read_text(errors="replace")

    def wait(self, timeout: float = 300) -> int:
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(10)
            raise AssertionError(f"the run did not finish:\n{self.text[-4000:]}") from None

    def until(self, predicate: object, what: str, timeout: float = 180) -> None:
        deadline = time.monotonic() + timeout
        while not predicate():  # type: ignore[operator]
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise AssertionError(f"waiting for {what}:\n{self.text[-4000:]}")
            time.sleep(0.1)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(10)


def _states(job: Job) -> dict[str, SplitState]:
    """The job's split states, read with the job's own lease (its buckets' TTL)."""
    reader = CoordinationConfig(
        store={"nats": {"servers": [job.nats_url]}},
        job=job.name,
        instance_id="reader",
        lease_duration=float(LEASE.removesuffix("s")),
        poll_interval=0.1,
    )
    return split_states(reader)


def test_b93_three_worker_processes_split_the_backfill_each_record_once(job: Job) -> None:
    sink = job.tmp / "sink.jsonl"
    parent = _Parent(job, sink)
    try:
        code = parent.wait()
    finally:
        parent.stop()
    assert code == 0, parent.text[-4000:]
    got = Counter(sink_ids(sink))
    assert set(got) == job.ids
    if "lease lapsed" not in parent.text:
        assert max(got.values()) == 1, "a run without failures reads every record once (B25)"
    states = _states(job)
    assert len(states) >= 12 and all(s.settled for s in states.values())
    owners = {s.owner for s in states.values()}
    assert owners == {"bf-w0", "bf-w1", "bf-w2"}, owners


def test_b93_a_killed_worker_is_restarted_and_its_splits_move_after_the_lease(
    job: Job,
) -> None:
    sink = job.tmp / "sink.jsonl"
    parent = _Parent(job, sink, seconds=15)
    try:
        parent.until(lambda: len(sink_ids(sink)) >= len(job.ids) // 4, "a quarter of the data")
        assert len(sink_ids(sink)) < len(job.ids) * 3 // 4, "the job ran too fast to be hurt"
        pids = dict(re.findall(r"worker (\d) started \(pid (\d+)\)", parent.text))
        held: set[str] = set()

        def worker_1_holds_splits() -> bool:
            held.clear()
            held.update(k for k, s in _states(job).items() if s.owner == "bf-w1" and not s.settled)
            return bool(held)

        parent.until(worker_1_holds_splits, "worker 1 to hold a split")
        os.kill(int(pids["1"]), signal.SIGKILL)
        code = parent.wait()
    finally:
        parent.stop()
    assert code == 0, parent.text[-4000:]
    assert "worker 1 died (killed by SIGKILL" in parent.text
    assert len(re.findall(r"worker 1 started", parent.text)) == 2
    assert set(sink_ids(sink)) == job.ids  # nothing lost; replays are at-least-once
    states = _states(job)
    assert all(s.settled for s in states.values())
    moved = {states[k].owner for k in held}
    assert "bf-w1" not in moved, moved
    assert moved <= {"bf-w0", "bf-w2", "bf-w1r1"}, moved
