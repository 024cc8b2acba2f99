"""Coordinated S3 backfill across processes, on moto's S3 server and the real nats-server.

Each test writes 200 NDJSON objects (plain, gzip and zstd; about 1M records under
``make test-full``, scaled down in ``make test``) to a fresh bucket, then runs worker
processes (``s3_worker.py``: S3 source → the test kit's fsynced file sink) of one
coordination job on NATS JetStream KV, and hurts them. The assertions:

* every record is in the sink at least once, and the job ends with exit 0 (B25);
* no split was worked by two live instances at the same moment — checked over the whole
  run from the workers' start/stop logs (system-wide monotonic clock), not only at a few
  samples; a killed worker stops working at the moment it is killed (B24);
* ``kill -9`` of one worker mid-run loses nothing: its splits move after its lease;
* killing the whole job and starting it again resumes from the committed progress: the
  second run reads far less than everything, and together the runs hold every record.
"""

from __future__ import annotations

import itertools
import json
import os
import signal
import subprocess
import sys
import time
import uuid
from collections import Counter, defaultdict
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.s3.s3kit import AWS_ENV, nats_coordination, put_ndjson, s3_client, split_states
from tests.support.scale import scaled

pytestmark = [pytest.mark.integration, pytest.mark.e2e]

WORKER = Path(__file__).with_name("s3_worker.py")
OBJECTS = 200
LEASE = "2s"


@dataclass
class Job:
    """One backfill job's data and settings, shared by its worker processes."""

    tmp: Path
    endpoint: str
    nats_url: str
    bucket: str
    ids: set[str]
    name: str
    target_bytes: int
    started: list[Worker]

    def config(self, instance: str, sink: Path) -> Path:
        path = self.tmp / f"{instance}.json"
        path.write_text(
            json.dumps(
                {
                    "pipeline": {"name": f"s3-e2e-{instance}"},
                    "admin": {"listen": "none"},
                    "checkpoint": {"interval": "200ms", "drain_timeout": "20s"},
                    "source": {
                        "s3": {
                            "url": f"s3://{self.bucket}/data/",
                            "endpoint_url": self.endpoint,
                            "split_target_bytes": self.target_bytes,
                            "prefetch_bytes": "256KiB",
                            "batch_records": 1000,
                        }
                    },
                    "coordination": {
                        "store": {"nats": {"servers": [self.nats_url]}},
                        "job": self.name,
                        "instance_id": instance,
                        "lease_duration": LEASE,
                        "poll_interval": "200ms",
                        "drain_deadline": "10s",
                    },
                    "sink": {"file": {"path": str(sink), "max_rows": 1000}},
                }
            )
        )
        return path


@dataclass
class Worker:
    instance: str
    process: subprocess.Popen[bytes]
    log: Path
    killed_at: float | None = None

    def kill(self) -> None:
        self.killed_at = time.monotonic()
        self.process.send_signal(signal.SIGKILL)
        self.process.wait(10)

    def wait(self, timeout: float) -> int:
        try:
            return self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(10)
            tail = self.log.read_text(errors="replace")[-3000:]
            raise AssertionError(f"{self.instance} did not finish in {timeout}s:\n{tail}") from None


def start(job: Job, instance: str, sink: Path, events: Path, *, seconds: float = 0) -> Worker:
    """Start a worker; ``seconds`` paces it so that two workers need about that long."""
    log = job.tmp / f"{instance}.log"
    pace = seconds / (len(job.ids) / 2 / 1000) if seconds else 0.0
    env = {**os.environ, **AWS_ENV, "PYTHONUNBUFFERED": "1"}
    with log.open("ab") as out:
        process = subprocess.Popen(
            [sys.executable, str(WORKER), str(job.config(instance, sink)), str(events), str(pace)],
            stdout=out,
            stderr=subprocess.STDOUT,
            env=env,
        )
    worker = Worker(instance, process, log)
    job.started.append(worker)
    return worker


def sink_ids(path: Path) -> list[str]:
    """Record ids in the file sink (each line is one NDJSON record as a JSON string)."""
    if not path.exists():
        return []
    found = []
    for line in path.read_bytes().split(b"\n")[:-1]:  # a torn last line is skipped
        if line:
            found.append(json.loads(json.loads(line))["id"])
    return found


def committed_records(job: Job) -> int:
    """Records of the job committed in the coordination store (sum of split offsets)."""
    total = 0
    for state in split_states(nats_coordination(job.nats_url, job.name)).values():
        progress = state.progress
        if isinstance(progress, dict):
            offset = progress.get("offset")
            total += offset if isinstance(offset, int) else 0
    return total


def wait_for(predicate: Any, timeout: float, what: str, workers: list[Worker]) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        dead = [w.instance for w in workers if w.process.poll() not in (None, 0)]
        if dead or time.monotonic() > deadline:
            logs = "\n".join(w.log.read_text(errors="replace")[-1500:] for w in workers)
            raise AssertionError(f"waiting for {what}: failed workers {dead}\n{logs}")
        time.sleep(0.1)


def check_exclusive(events: Path, workers: list[Worker]) -> int:
    """B24: per split, the work intervals of different instances never overlap.

    Returns how many intervals were checked. An interval still open when its process
    was killed ends at the kill; one still open at a clean exit is an error.
    """
    killed = {w.instance: w.killed_at for w in workers}
    open_: dict[tuple[str, str], float] = {}
    intervals: dict[str, list[tuple[float, float, str]]] = defaultdict(list)
    for line in events.read_text().splitlines():
        event = json.loads(line)
        key = (event["instance"], event["split"])
        if event["event"] == "start":
            assert key not in open_, f"{key} started twice without stopping"
            open_[key] = event["t"]
        else:
            begun = open_.pop(key)
            intervals[event["split"]].append((begun, event["t"], event["instance"]))
    for (instance, split), begun in open_.items():
        end = killed.get(instance)
        assert end is not None, f"{instance} never stopped working {split} yet exited cleanly"
        intervals[split].append((begun, end, instance))
    count = 0
    for split, spans in intervals.items():
        spans.sort()
        for (_, end, who), (begin, _, other) in itertools.pairwise(spans):
            assert who == other or end <= begin, (
                f"split {split} worked by {who} until {end:.3f} and by {other} from {begin:.3f}"
            )
        count += len(spans)
    return count


@pytest.fixture
def reap() -> Iterator[list[Worker]]:
    """Workers a test started; any still running at teardown are killed and reaped."""
    started: list[Worker] = []
    yield started
    for worker in started:
        if worker.process.poll() is None:
            worker.process.kill()
        worker.process.wait(10)


@pytest.fixture
def job(tmp_path: Path, s3_endpoint: str, nats_url: str, reap: list[Worker]) -> Job:
    client = s3_client(s3_endpoint)
    bucket = f"e2e-{uuid.uuid4().hex[:12]}"
    client.create_bucket(Bucket=bucket)
    per_object = max(20, scaled(1_000_000) // OBJECTS)
    ids = put_ndjson(
        client, bucket, "data/", OBJECTS, per_object, compression=("none", "gzip", "zstd")
    )
    # About 24 splits: enough for three instances to share and to move around.
    sizes = sum(o["Size"] for o in client.list_objects_v2(Bucket=bucket)["Contents"])
    return Job(
        tmp=tmp_path,
        endpoint=s3_endpoint,
        nats_url=nats_url,
        bucket=bucket,
        ids=ids,
        name=f"s3e2e-{uuid.uuid4().hex[:8]}",
        target_bytes=max(1, sizes // 24),
        started=reap,
    )


def test_b24_b25_three_instances_backfill_every_record_with_no_split_worked_twice(
    job: Job,
) -> None:
    sink, events = job.tmp / "sink.jsonl", job.tmp / "events.jsonl"
    workers = [start(job, f"w{i}", sink, events) for i in range(3)]
    codes = [w.wait(240) for w in workers]
    assert codes == [0, 0, 0], [w.log.read_text()[-2000:] for w in workers]
    got = Counter(sink_ids(sink))
    assert set(got) == job.ids
    assert check_exclusive(events, workers) >= 24
    # Work was shared: every instance worked some split.
    workers_seen = {json.loads(x)["instance"] for x in events.read_text().splitlines()}
    assert workers_seen == {"w0", "w1", "w2"}


def test_b24_kill_9_of_one_instance_mid_run_loses_nothing(job: Job) -> None:
    sink, events = job.tmp / "sink.jsonl", job.tmp / "events.jsonl"
    workers = [start(job, f"w{i}", sink, events, seconds=12) for i in range(3)]
    wait_for(lambda: len(sink_ids(sink)) >= len(job.ids) // 4, 180, "a quarter", workers)
    assert len(sink_ids(sink)) < len(job.ids) * 3 // 4, "the job ran too fast to be hurt"
    victim = workers[1]
    victim.kill()
    codes = [w.wait(240) for w in (workers[0], workers[2])]
    assert codes == [0, 0], [w.log.read_text()[-2000:] for w in workers]
    got = Counter(sink_ids(sink))
    assert set(got) == job.ids
    check_exclusive(events, workers)


def test_b25_a_restarted_job_resumes_from_committed_progress(job: Job) -> None:
    first_sink, second_sink = job.tmp / "first.jsonl", job.tmp / "second.jsonl"
    events = job.tmp / "events.jsonl"
    first = [start(job, f"a{i}", first_sink, events, seconds=10) for i in range(2)]
    wait_for(lambda: len(sink_ids(first_sink)) >= len(job.ids) // 2, 180, "a half", first)
    assert len(sink_ids(first_sink)) < len(job.ids) * 9 // 10, "the job ran too fast"
    for worker in first:
        worker.kill()
    before = set(sink_ids(first_sink))
    committed = committed_records(job)
    assert 0 < committed <= len(before)
    # New instance ids: the killed ones stay members until their leases expire.
    second = [start(job, f"b{i}", second_sink, events) for i in range(2)]
    codes = [w.wait(240) for w in second]
    assert codes == [0, 0], [w.log.read_text()[-2000:] for w in second]
    after = sink_ids(second_sink)
    assert before | set(after) == job.ids
    # B25: the second run reads exactly what was not committed, each record once (a
    # clean run moves splits only after their owner committed them).
    numbers = f"committed {committed}, first run {len(before)}, second {len(after)}"
    assert len(after) == len(set(after)) == len(job.ids) - committed, numbers
    check_exclusive(events, first + second)
