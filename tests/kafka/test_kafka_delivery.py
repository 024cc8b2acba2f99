"""The Kafka source on the real broker: bounded happy path, rebalances, kill -9 of a
pipeline and of the broker.

Each test produces keyed records (value = key) into its own topic, runs ``spate run``
pipeline processes (Kafka source → fsynced file sink) and samples, while they run, that
the group's committed offsets never pass what the file holds (B1, B15). At the end every
key is in the file at least once.
"""

from __future__ import annotations

import random
import signal
from collections import Counter
from pathlib import Path

import pytest

from tests.kafka._pipeline import (
    PARTITIONS,
    Streaming,
    assignments_logged,
    read_keys,
    revocations_logged,
    start_pipeline,
    stop_pipeline,
    wait_running,
    write_config,
)
from tests.support.delivery import wait_until
from tests.support.scale import scaled
from tests.support.services import (
    SESSION_TIMEOUT_MS,
    committed_offsets,
    create_topic,
    end_offsets,
    kill_kafka,
    produce_keyed,
    start_kafka,
    unique_name,
)

pytestmark = pytest.mark.integration


def produce(bootstrap: str, topic: str, count: int) -> dict[bytes, tuple[int, int]]:
    create_topic(bootstrap, topic, PARTITIONS)
    return produce_keyed(bootstrap, topic, count, value=lambda i: b"k%d" % i)


def test_bounded_run_delivers_every_key_and_commits_the_end(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    """B1, B14, B16: stop_at end drains, commits exactly the end offsets and exits 0."""
    topic, group = unique_name("happy"), unique_name("g")
    count = scaled(100_000, minimum=2_000)
    positions = produce(kafka_bootstrap, topic, count)
    out = tmp_path / "out.jsonl"
    config = write_config(
        tmp_path / "c.json",
        bootstrap=kafka_bootstrap,
        topic=topic,
        group=group,
        out=out,
        bounded=True,
    )
    proc = start_pipeline(config, tmp_path / "run.log")
    assert proc.wait(300) == 0, (tmp_path / "run.log").read_text()[-3000:]
    keys = read_keys(out)
    assert set(keys) == set(positions)
    assert committed_offsets(kafka_bootstrap, group, topic) == end_offsets(kafka_bootstrap, topic)


@pytest.mark.e2e
def test_rebalances_never_commit_ahead_of_the_file(kafka_bootstrap: str, tmp_path: Path) -> None:
    """B1, B15: two members, a third joins, one leaves; all keys arrive, no commit ahead."""
    run = Streaming.start(kafka_bootstrap, tmp_path, "rebalance")
    procs = [start_pipeline(run.config, tmp_path / f"p{i}.log") for i in range(2)]
    try:
        wait_until(lambda: run.producer.produced >= run.count // 4, 120, "a quarter produced")
        procs.append(start_pipeline(run.config, tmp_path / "p2.log"))
        wait_running(tmp_path / "p2.log", 0)
        wait_until(lambda: run.producer.produced >= run.count // 2, 120, "half produced")
        assert stop_pipeline(procs.pop(0)) == 0
        run.finish()
    finally:
        codes = [stop_pipeline(p) for p in procs]
    assert codes == [0] * len(codes)
    run.check_sampler()


@pytest.mark.e2e
def test_kill_9_three_times_loses_nothing(kafka_bootstrap: str, tmp_path: Path) -> None:
    """B1, B14: kill -9 mid-stream three times; all keys at least once; duplicates only
    for offsets at or after the commit the killed process had made."""
    run = Streaming.start(kafka_bootstrap, tmp_path, "crash", session_timeout_ms=SESSION_TIMEOUT_MS)
    rng = random.Random(7)
    commits_at_kill: list[dict[int, int]] = []
    log = tmp_path / "run.log"
    proc = start_pipeline(run.config, log)
    try:
        for crash in range(3):
            target = int(run.count * (crash + 1) / 4 * rng.uniform(0.8, 1.1))
            wait_until(lambda t=target: run.producer.produced >= t, 180, f"{target} produced")
            wait_until(lambda t=target: len(read_keys(run.out)) >= t // 2, 180, "lines written")
            proc.send_signal(signal.SIGKILL)
            proc.wait(30)
            commits_at_kill.append(committed_offsets(kafka_bootstrap, run.group, run.topic))
            before = assignments_logged(log)
            proc = start_pipeline(run.config, log)
            wait_running(log, before)
        positions = run.finish()
    finally:
        code = stop_pipeline(proc)
    assert code == 0
    run.check_sampler()
    counts = Counter(read_keys(run.out))
    assert set(counts) == set(positions)
    for key, seen in counts.items():
        if seen > 1:
            partition, offset = positions[key]
            assert any(offset >= c.get(partition, 0) for c in commits_at_kill), (
                f"{key!r} at {partition}/{offset} duplicated below every commit made before a kill"
            )


@pytest.mark.e2e
def test_b36_broker_crash_longer_than_the_session_keeps_the_group_running(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    """B36, B1, B15: three members; the broker is killed with SIGKILL and restarted after
    longer than session.timeout.ms. Every member revokes while the broker is down, its
    commit on revocation cannot succeed, and it keeps running, rejoins and delivers:
    every key arrives and no commit ever passes the file."""
    run = Streaming.start(
        kafka_bootstrap, tmp_path, "broker-crash", session_timeout_ms=SESSION_TIMEOUT_MS
    )
    logs = [tmp_path / f"p{i}.log" for i in range(3)]
    procs = [start_pipeline(run.config, log) for log in logs]
    try:
        for log in logs:
            wait_running(log, 0)
        wait_until(lambda: run.producer.produced >= run.count // 4, 120, "a quarter produced")
        wait_until(lambda: len(read_keys(run.out)) >= run.count // 8, 120, "lines written")
        revoked_before = [revocations_logged(log) for log in logs]
        kill_kafka()
        try:
            # Longer than session.timeout.ms (3 s): every member's session expires.
            wait_until(
                lambda: all(
                    revocations_logged(log) > before
                    for log, before in zip(logs, revoked_before, strict=True)
                ),
                60,
                "every member to revoke its partitions while the broker is down",
            )
        finally:
            start_kafka()
        alive = [proc.poll() is None for proc in procs]
        assert all(alive), [log.read_text(errors="replace")[-3000:] for log in logs]
        run.finish()
        assert all(proc.poll() is None for proc in procs), "a member exited after the outage"
    finally:
        codes = [stop_pipeline(p) for p in procs]
    assert codes == [0] * len(codes), [log.read_text(errors="replace")[-3000:] for log in logs]
    run.check_sampler()
