"""The Kafka source on the real broker: bounded happy path, rebalances and kill -9.

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
    assignments_logged,
    read_keys,
    start_pipeline,
    stop_pipeline,
    wait_running,
    write_config,
)
from tests.support.delivery import DeliverySampler, PacedProducer, wait_until
from tests.support.scale import current_scale, scaled
from tests.support.services import (
    committed_offsets,
    create_topic,
    end_offsets,
    produce_keyed,
    unique_name,
)

pytestmark = pytest.mark.integration

PARTITIONS = 6


def produce(bootstrap: str, topic: str, count: int) -> dict[bytes, tuple[int, int]]:
    create_topic(bootstrap, topic, PARTITIONS)
    return produce_keyed(bootstrap, topic, count, value=lambda i: b"k%d" % i)


def paced(bootstrap: str, topic: str, count: int) -> PacedProducer:
    """Keyed records (value = key) produced over ~30s at full scale, 15s at least."""
    create_topic(bootstrap, topic, PARTITIONS)
    records = ((b"k%d" % i, b"k%d" % i, b"k%d" % i) for i in range(count))
    return PacedProducer(bootstrap, topic, records, count, seconds=30 * max(current_scale(), 0.5))


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
    topic, group = unique_name("rebalance"), unique_name("g")
    count = scaled(100_000, minimum=6_000)
    producer = paced(kafka_bootstrap, topic, count)
    positions = producer.positions
    out = tmp_path / "out.jsonl"
    config = write_config(
        tmp_path / "c.json",
        bootstrap=kafka_bootstrap,
        topic=topic,
        group=group,
        out=out,
        bounded=False,
    )
    sampler = DeliverySampler(kafka_bootstrap, group, topic, positions, lambda: read_keys(out))
    sampler.start(every=0.3)
    producer.start()
    procs = [start_pipeline(config, tmp_path / f"p{i}.log") for i in range(2)]
    try:
        wait_until(lambda: producer.produced >= count // 4, 120, "a quarter produced")
        procs.append(start_pipeline(config, tmp_path / "p2.log"))
        wait_running(tmp_path / "p2.log", 0)
        wait_until(lambda: producer.produced >= count // 2, 120, "half produced")
        assert stop_pipeline(procs.pop(0)) == 0
        positions = producer.finish()
        wait_until(lambda: set(read_keys(out)) >= set(positions), 240, "every key")
        ends = end_offsets(kafka_bootstrap, topic)
        wait_until(
            lambda: committed_offsets(kafka_bootstrap, group, topic) == ends, 60, "final commits"
        )
    finally:
        codes = [stop_pipeline(p) for p in procs]
        sampler.stop()
    assert codes == [0] * len(codes)
    sampler.sample()
    assert len(sampler.samples) > 5
    assert not sampler.violations(), sampler.violations()[:3]


@pytest.mark.e2e
def test_kill_9_three_times_loses_nothing(kafka_bootstrap: str, tmp_path: Path) -> None:
    """B1, B14: kill -9 mid-stream three times; all keys at least once; duplicates only
    for offsets at or after the commit the killed process had made."""
    topic, group = unique_name("crash"), unique_name("g")
    count = scaled(100_000, minimum=6_000)
    producer = paced(kafka_bootstrap, topic, count)
    positions = producer.positions
    out = tmp_path / "out.jsonl"
    config = write_config(
        tmp_path / "c.json",
        bootstrap=kafka_bootstrap,
        topic=topic,
        group=group,
        out=out,
        bounded=False,
    )
    sampler = DeliverySampler(kafka_bootstrap, group, topic, positions, lambda: read_keys(out))
    sampler.start(every=0.3)
    rng = random.Random(7)
    commits_at_kill: list[dict[int, int]] = []
    log = tmp_path / "run.log"
    producer.start()
    proc = start_pipeline(config, log)
    try:
        for crash in range(3):
            target = int(count * (crash + 1) / 4 * rng.uniform(0.8, 1.1))
            wait_until(lambda t=target: producer.produced >= t, 180, f"{target} produced")
            wait_until(lambda t=target: len(read_keys(out)) >= t // 2, 180, "lines written")
            proc.send_signal(signal.SIGKILL)
            proc.wait(30)
            commits_at_kill.append(committed_offsets(kafka_bootstrap, group, topic))
            before = assignments_logged(log)
            proc = start_pipeline(config, log)
            wait_running(log, before)
        positions = producer.finish()
        wait_until(lambda: set(read_keys(out)) >= set(positions), 240, "every key")
        ends = end_offsets(kafka_bootstrap, topic)
        wait_until(
            lambda: committed_offsets(kafka_bootstrap, group, topic) == ends, 60, "final commits"
        )
    finally:
        code = stop_pipeline(proc)
        sampler.stop()
    assert code == 0
    sampler.sample()
    assert not sampler.violations(), sampler.violations()[:3]
    counts = Counter(read_keys(out))
    assert set(counts) == set(positions)
    for key, seen in counts.items():
        if seen > 1:
            partition, offset = positions[key]
            assert any(offset >= c.get(partition, 0) for c in commits_at_kill), (
                f"{key!r} at {partition}/{offset} duplicated below every commit made before a kill"
            )
