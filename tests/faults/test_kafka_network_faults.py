"""The Kafka source with a misbehaving network between the pipeline and the real broker.

Each test streams keyed records (value = key) into its own topic while ``spate run``
pipelines (Kafka source → fsynced file sink) read them through a fault proxy
(``kafka_fault_proxy``: the broker's ``FAULT`` listener is advertised at the proxy's
port, so every connection of those pipelines crosses it). The producer and the delivery
sampler talk to the broker directly, so the sampler keeps checking, through every fault,
that the group's committed offsets never pass what the file holds (B1). Each test ends
with every key in the file and the group committed to the end of the topic.

The last test needs no proxy: a rebalance storm, members joining and leaving while
records stream. The broker killed with SIGKILL mid-stream is in
``tests/kafka/test_kafka_delivery.py``.
"""

from __future__ import annotations

import logging
import random
import subprocess
import time
from collections import defaultdict
from pathlib import Path

import pytest

from tests.kafka._pipeline import (
    Streaming,
    assignments_logged,
    read_keys,
    revocations_logged,
    start_pipeline,
    stop_pipeline,
    wait_running,
    write_config,
)
from tests.support.delivery import Sample, wait_until
from tests.support.netfault import FaultProxy, kafka_request
from tests.support.scale import current_scale

pytestmark = [pytest.mark.integration, pytest.mark.e2e]

OFFSET_COMMIT = 8  # Kafka API key

logger = logging.getLogger(__name__)


def commits_went_back(samples: list[Sample]) -> list[str]:
    """Every sampled committed offset lower than one sampled before it.

    The committed offsets of a group only move forward while members commit what they
    delivered; a commit sent from a stale generation (a member evicted during a
    partition, committing the position it had before) would move one back.
    """
    highest: dict[int, int] = defaultdict(int)
    backwards: list[str] = []
    for sample in samples:
        for partition, offset in sample.committed.items():
            if offset < highest[partition]:
                backwards.append(f"partition {partition}: {highest[partition]} -> {offset}")
            highest[partition] = max(highest[partition], offset)
    return backwards


def tail(log: Path) -> str:
    return log.read_text(errors="replace")[-3000:] if log.exists() else "(no log)"


def test_b1_b15_b36_a_partition_longer_than_the_session_evicts_the_member_and_it_rejoins(
    kafka_bootstrap: str, kafka_fault_proxy: FaultProxy, tmp_path: Path
) -> None:
    """B1, B15, B36: two members, one behind the proxy. A full partition of that member
    from the broker, longer than session.timeout.ms (6 s): it revokes its partitions, the
    broker evicts it and the other member takes everything; once the partition heals it
    rejoins. Nothing is lost, no commit passes the file, and no commit from the stale
    generation moves the group's offsets back. The partition lasts 30 s at scale 1; at
    reduced scale it heals as soon as the other member has taken the partitions over,
    which the broker does only once the session has expired."""
    outage = 30.0 * current_scale()
    proxy = kafka_fault_proxy
    run = Streaming.start(kafka_bootstrap, tmp_path, "partition", pipeline_bootstrap=proxy.address)
    direct = write_config(
        tmp_path / "direct.json",
        bootstrap=kafka_bootstrap,
        topic=run.topic,
        group=run.group,
        out=run.out,
        bounded=False,
    )
    behind, other = tmp_path / "behind.log", tmp_path / "other.log"
    procs = [start_pipeline(run.config, behind), start_pipeline(direct, other)]
    try:
        wait_running(behind, 0)
        wait_running(other, 0)
        wait_until(lambda: run.producer.produced >= run.count // 4, 120, "a quarter produced")
        wait_until(lambda: len(read_keys(run.out)) >= run.count // 8, 120, "lines written")
        revoked, taken, rejoined = (
            revocations_logged(behind),
            assignments_logged(other),
            assignments_logged(behind),
        )
        proxy.partition()
        cut_at = time.monotonic()
        wait_until(
            lambda: revocations_logged(behind) > revoked,
            60,
            "the partitioned member to revoke its partitions",
        )
        wait_until(
            lambda: assignments_logged(other) > taken,
            60,
            "the other member to be given the partitions after the eviction",
        )
        time.sleep(max(0.0, outage - (time.monotonic() - cut_at)))
        proxy.heal()
        wait_until(
            lambda: assignments_logged(behind) > rejoined, 120, "the partitioned member to rejoin"
        )
        run.finish()
        assert all(p.poll() is None for p in procs), tail(behind) + tail(other)
    finally:
        codes = [stop_pipeline(p) for p in procs]
    assert codes == [0, 0], tail(behind) + tail(other)
    run.check_sampler()
    assert not commits_went_back(run.sampler.samples), commits_went_back(run.sampler.samples)
    assert proxy.stats.swallowed > 0


def test_b1_latency_spikes_of_seconds_lose_nothing(
    kafka_bootstrap: str, kafka_fault_proxy: FaultProxy, tmp_path: Path
) -> None:
    """B1, B14: two spikes of 2 s ± 1 s latency on every byte between the pipeline and
    the broker, while records stream; every key arrives and no commit passes the file."""
    spike = max(4.0, 20.0 * current_scale())
    proxy = kafka_fault_proxy
    run = Streaming.start(kafka_bootstrap, tmp_path, "latency", pipeline_bootstrap=proxy.address)
    log = tmp_path / "run.log"
    proc = start_pipeline(run.config, log)
    try:
        wait_running(log, 0)
        for fraction in (4, 2):
            wait_until(
                lambda f=fraction: run.producer.produced >= run.count // f,
                120,
                f"1/{fraction} produced",
            )
            proxy.latency(2.0, jitter=1.0)
            time.sleep(spike)
            proxy.latency(0.0)
        run.finish()
        assert proc.poll() is None, tail(log)
    finally:
        code = stop_pipeline(proc)
    assert code == 0, tail(log)
    run.check_sampler()
    assert proxy.stats.resets == 0  # the proxy reset nothing: only latency was injected


def test_b1_b35_connections_reset_during_commits_lose_nothing(
    kafka_bootstrap: str, kafka_fault_proxy: FaultProxy, tmp_path: Path
) -> None:
    """B1, B35: the connection carrying an OffsetCommit is reset — twice before the
    broker sees the commit, and after it was forwarded and before its answer came back
    (the commit may have been made, the client cannot know): once at least, twice armed.
    Every key arrives, no commit passes the file, and the group ends committed to the end
    of the topic."""
    proxy = kafka_fault_proxy
    run = Streaming.start(
        kafka_bootstrap, tmp_path, "commit-reset", pipeline_bootstrap=proxy.address
    )
    # Commits come only while records do, so the resets must fall inside the
    # production: its last tenth trickles until they have happened (not a race with a
    # loaded machine). Three are awaited (both request cuts and a reply cut): in one
    # run of many the proxy's second reply cut never fired although commits went on.
    run.producer.stretch = lambda: proxy.stats.cuts < 3
    log = tmp_path / "run.log"
    proc = start_pipeline(run.config, log)
    try:
        wait_running(log, 0)
        wait_until(lambda: run.producer.produced >= run.count // 4, 120, "a quarter produced")
        # Both rules at once, applied in order: the next two commits are reset before the
        # broker sees them, the two after those once their answer starts.
        proxy.cut(kafka_request(OFFSET_COMMIT), when="request", count=2)
        proxy.cut(kafka_request(OFFSET_COMMIT), when="reply", count=2)
        try:
            wait_until(lambda: proxy.stats.cuts >= 3, 300, "three commits reset")
        except AssertionError as timeout:
            raise AssertionError(f"{timeout}; {proxy.stats}\n{tail(log)}") from None
        logger.info("commits reset: %s", proxy.stats)
        run.finish()
        logger.info("every key written and committed")
        assert proc.poll() is None, tail(log)
    finally:
        code = stop_pipeline(proc)
    assert code == 0, tail(log)
    run.check_sampler()
    assert proxy.stats.resets >= 3


def leave(proc: subprocess.Popen[bytes], log: Path) -> int:
    """SIGTERM a member once it has started (its signal handlers are installed when it
    starts its source: on a loaded machine the interpreter may still be importing, and a
    SIGTERM then ends it with -15); its exit code."""
    deadline = time.monotonic() + 120
    while proc.poll() is None and time.monotonic() < deadline:
        if log.exists() and "waiting for brokers" in log.read_text(errors="replace"):
            break
        time.sleep(0.1)
    return stop_pipeline(proc)


def test_b1_b15_a_rebalance_storm_loses_nothing(kafka_bootstrap: str, tmp_path: Path) -> None:
    """B1, B15, B40: while records stream, members join and leave every one to three
    seconds for a minute (10 s at scale 0.1) — one in three leaves by SIGKILL, the others
    drain on SIGTERM — around one member that stays. Every key arrives, no commit passes
    the file, and every member that was asked to leave drained and exited 0."""
    storm = max(10.0, 60.0 * current_scale())
    rng = random.Random(11)
    run = Streaming.start(kafka_bootstrap, tmp_path, "storm")
    steady_log = tmp_path / "steady.log"
    steady = start_pipeline(run.config, steady_log)
    members: list[tuple[subprocess.Popen[bytes], Path]] = []
    codes: list[int] = []
    joined = 0
    try:
        wait_running(steady_log, 0)
        end = time.monotonic() + storm
        while time.monotonic() < end or joined < 3:  # a slow start is not a storm
            if not members or (len(members) < 3 and rng.random() < 0.5):
                log = tmp_path / f"m{joined}.log"
                members.append((start_pipeline(run.config, log), log))
                joined += 1
            else:
                leaving, log = members.pop(rng.randrange(len(members)))
                if rng.random() < 1 / 3:
                    leaving.kill()
                    leaving.wait(30)
                else:
                    codes.append(leave(leaving, log))
            time.sleep(rng.uniform(1.0, 3.0))
        run.finish()
        assert steady.poll() is None, tail(steady_log)
    finally:
        codes += [leave(p, log) for p, log in [(steady, steady_log), *members]]
    assert joined >= 3
    assert codes == [0] * len(codes), [tail(tmp_path / f"m{i}.log") for i in range(joined)]
    run.check_sampler()
