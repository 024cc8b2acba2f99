"""Throughput through a rebalance storm, per group protocol (ADR 0015).

Measured by the performance rules in docs/development.md, on the real broker
(``make services-up``). For each protocol (``eager``, ``cooperative``, ``consumer``),
interleaved (rest, storm, for each protocol in turn, ``SPATE_BENCH_RUNS`` rounds, at
least 5 for a figure), each run with a fresh consumer group:

* rest: members A and B of one group settle; over a window of ``SPATE_BENCH_WINDOW``
  seconds (default 30), the records per second of A's partitions;
* storm: the same, while members C join and leave again and again for as long as the
  window lasts: once a C was given partitions the next one starts, and the previous one
  leaves (SIGTERM) while it joins.

**Full pipelines (the default).** Each member is its own process running the flagship
(``examples/kafka_avro_to_clickhouse.py``: raw Avro storefront events, split and routed
into three ClickHouse tables) under the protocol measured, so a revocation costs what it
costs in production: the drain, the writes and the synchronous commit of the lanes that
move. ClickHouse is chDB, one data directory per member (a cluster that is not the
bottleneck), or ``SPATE_BENCH_CLICKHOUSE_URL`` (the HTTP front of scripts/services.sh,
shared by the members). The rate is read from the group's committed offsets, taken by a
separate client at the start and the end of the window: records a pipeline wrote *and*
committed. Only partitions that stayed with A count — owned by A at both ends of the
window and never assigned to another member in between (the member logs, with times) —
and the figure is per such partition, since A owns three partitions at rest and two or
three in a storm. Under ``eager`` those partitions are revoked and handed back on every
join and leave, and their records stop until A has drained, committed and rejoined.

**Data: a backlog, not a paced producer.** ``SPATE_BENCH_RECORDS`` (default 6,000,000)
storefront events in 6 partitions, produced once and reused; every group reads from the
start. A producer paced below the group's capacity would let an eager member catch up
after each stop within the window and hide the stop; a backlog measures capacity, which
is what a stop costs. A run whose partitions reached their end inside the window would
measure the data instead, so it fails, naming ``SPATE_BENCH_RECORDS``.

Prints per protocol each side's median and runs (records/s per partition that stayed),
the members C given partitions in each storm window, the seconds of each window A owned
no partition, then ``ratio:`` (storm / rest, medians) and its spread, the machine's load
and peak RSS.

``--bare`` runs the earlier measurement instead: bare ``KafkaSource`` instances polled on
threads with no runtime behind them (the revoke barrier returns at once), over 4 s
windows of 100-byte records (``SPATE_BENCH_RECORDS`` default 2,000,000): what the
protocol alone stops. Run::

    make services-up && .venv/bin/python bench/kafka_rebalance.py [--bare]
"""

from __future__ import annotations

import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import yaml
from confluent_kafka import Consumer, TopicPartition
from spate.config import decode
from spate.testing.conformance import RecordingEvents
from spate_kafka import KafkaSource, KafkaSourceConfig

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _harness import env_int, peak_rss_mib, uptime
from kafka_source import bootstrap, ensure_data

ROOT = Path(__file__).resolve().parent.parent
PROTOCOLS = ("eager", "cooperative", "consumer")
PARTITIONS = 6
WINDOW = 4.0
"""Seconds measured per run of ``--bare``."""


class Member(threading.Thread):
    """One group member: a KafkaSource started, polled and closed on its own thread."""

    def __init__(self, brokers: str, topic: str, group: str, protocol: str) -> None:
        super().__init__(daemon=True)
        rdkafka: dict[str, object] = {"topic.metadata.refresh.interval.ms": 1000}
        if protocol != "consumer":
            rdkafka.update({"session.timeout.ms": 6000, "heartbeat.interval.ms": 500})
        config = decode(
            KafkaSourceConfig,
            {
                "brokers": brokers,
                "topic": topic,
                "group_id": group,
                "rebalance": protocol,
                "statistics_interval": "0ms",
                "rdkafka": rdkafka,
            },
            "source.kafka",
        )
        self.source = KafkaSource(config)
        self.records = 0
        self._leaving = threading.Event()

    def run(self) -> None:
        self.source.start(RecordingEvents())
        try:
            while not self._leaving.is_set():
                for batch in self.source.poll(0.1):
                    self.records += len(batch)
        finally:
            self.source.close()

    def owns(self) -> int:
        return len(self.source.assigned_partitions)

    def leave(self) -> None:
        self._leaving.set()
        self.join(60)


def _wait(predicate: Callable[[], object], timeout: float = 60.0, every: float = 0.02) -> bool:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            return False
        time.sleep(every)
    return True


class Idle(threading.Thread):
    """Samples every 10 ms whether a member owns no partition; ``seconds`` in total."""

    def __init__(self, member: Member) -> None:
        super().__init__(daemon=True)
        self.member = member
        self.seconds = 0.0
        self.done = threading.Event()

    def run(self) -> None:
        last = time.perf_counter()
        while not self.done.wait(0.01):
            now = time.perf_counter()
            if not self.member.owns():
                self.seconds += now - last
            last = now


def measure_bare(brokers: str, topic: str, protocol: str, storm: bool) -> tuple[float, int, float]:
    """A's records per second over the window, the number of joins and leaves, and the
    seconds of the window A owned no partition."""
    group = f"bench-rb-{uuid.uuid4().hex[:8]}"
    a = Member(brokers, topic, group, protocol)
    b = Member(brokers, topic, group, protocol)
    a.start()
    b.start()
    moves = 0
    try:
        if not _wait(lambda: a.owns() and b.owns() and a.owns() + b.owns() == PARTITIONS):
            raise SystemExit(f"{protocol}: the group did not settle")
        start, before = time.perf_counter(), a.records
        idle = Idle(a)
        idle.start()
        end = start + WINDOW
        while storm and time.perf_counter() < end:
            c = Member(brokers, topic, group, protocol)
            c.start()
            _wait(lambda c=c: c.owns() > 0, timeout=max(0.1, end - time.perf_counter()))
            c.leave()
            moves += 2
        remaining = end - time.perf_counter()
        if remaining > 0:
            time.sleep(remaining)
        elapsed = time.perf_counter() - start
        idle.done.set()
        idle.join()
        return (a.records - before) / elapsed, moves, idle.seconds
    finally:
        a.leave()
        b.leave()


def main_bare() -> None:
    brokers = bootstrap()
    count = env_int("SPATE_BENCH_RECORDS", 2_000_000)
    runs = max(5, env_int("SPATE_BENCH_RUNS", 5))
    topic = f"bench-rebalance-{count}"
    ensure_data(brokers, topic, count, PARTITIONS)
    rates: dict[tuple[str, bool], list[float]] = {}
    joins: dict[str, list[int]] = {p: [] for p in PROTOCOLS}
    idle: dict[str, list[float]] = {p: [] for p in PROTOCOLS}
    for _ in range(runs):
        for protocol in PROTOCOLS:
            for storm in (False, True):
                rate, moves, without = measure_bare(brokers, topic, protocol, storm)
                rates.setdefault((protocol, storm), []).append(rate)
                if storm:
                    joins[protocol].append(moves)
                    idle[protocol].append(without)
    for protocol in PROTOCOLS:
        at_rest, stormed = rates[(protocol, False)], rates[(protocol, True)]
        print(f"== {protocol}: member A's records/s, {runs} interleaved runs of {WINDOW:g}s")
        for name, measured in (("rest", at_rest), ("storm", stormed)):
            listed = ", ".join(f"{r:,.0f}" for r in measured)
            print(f"{name}: median {statistics.median(measured):,.0f}/s; runs {listed}")
        print(f"storm joins+leaves per run: {', '.join(map(str, joins[protocol]))}")
        listed = ", ".join(f"{s:.2f}" for s in idle[protocol])
        print(
            f"storm seconds A owned nothing: median {statistics.median(idle[protocol]):.2f}"
            f" of {WINDOW:g}; runs {listed}"
        )
        pairs = [s / r for s, r in zip(stormed, at_rest, strict=True) if r > 0]
        print(f"ratio: {statistics.median(stormed) / statistics.median(at_rest):.2f}")
        print(f"ratio spread: {min(pairs):.2f}..{max(pairs):.2f} over {len(pairs)} pairs")
    print(f"peak RSS: {peak_rss_mib():.0f} MiB")


# -- full pipelines -------------------------------------------------------------------

_MOVE = re.compile(
    r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}) .*partitions (assigned|revoked|lost) "
    r"topic=\S+ partitions=\[([0-9, ]*)\]",
    re.MULTILINE,
)


@dataclass
class PipelineMember:
    """One member of the group: the flagship pipeline in its own process."""

    log: Path
    process: subprocess.Popen[bytes]

    def moves(self) -> list[tuple[float, str, set[int]]]:
        """Its logged assignment changes: (epoch seconds, kind, partitions), in order."""
        text = self.log.read_text(errors="replace") if self.log.exists() else ""
        return [
            (
                datetime.strptime(stamp, "%Y-%m-%d %H:%M:%S,%f").timestamp(),
                kind,
                {int(p) for p in parts.split(",") if p.strip()},
            )
            for stamp, kind, parts in _MOVE.findall(text)
        ]

    def owned(self, at: float | None = None) -> set[int]:
        """The partitions it owned at ``at`` (epoch seconds; None: now)."""
        owned: set[int] = set()
        for stamp, kind, parts in self.moves():
            if at is not None and stamp > at:
                break
            owned = owned | parts if kind == "assigned" else owned - parts
        return owned

    def idle(self, start: float, end: float) -> float:
        """Seconds of [start, end] it owned no partition."""
        owned, since, idle = self.owned(start), start, 0.0
        for stamp, kind, parts in self.moves():
            if stamp <= start or stamp >= end:
                continue
            if not owned:
                idle += stamp - since
            owned = owned | parts if kind == "assigned" else owned - parts
            since = stamp
        return idle + (end - since if not owned else 0.0)

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
        try:
            self.process.wait(120)
        except subprocess.TimeoutExpired:
            self.process.kill()
            raise SystemExit(f"a member did not stop within 120s: {self.log}") from None


@dataclass
class Group:
    """The members of one run's consumer group, started from one pipeline file."""

    brokers: str
    topic: str
    protocol: str
    workdir: Path
    url: str | None
    name: str = field(default_factory=lambda: f"bench-rb-{uuid.uuid4().hex[:8]}")
    started: int = 0

    def config(self) -> Path:
        """The flagship's YAML under ``protocol``, with short group timeouts."""
        document: dict[str, Any] = yaml.safe_load(
            (ROOT / "examples" / "kafka_avro_to_clickhouse.yaml").read_text()
        )
        kafka = document["source"]["kafka"]
        kafka["rebalance"] = self.protocol
        rdkafka = kafka.setdefault("rdkafka", {})
        rdkafka["topic.metadata.refresh.interval.ms"] = 1000
        if self.protocol == "consumer":
            rdkafka.pop("session.timeout.ms", None)  # the broker's (group.consumer.*)
        else:
            rdkafka.update({"session.timeout.ms": 6000, "heartbeat.interval.ms": 500})
        path = self.workdir / f"{self.name}.yaml"
        path.write_text(yaml.safe_dump(document, sort_keys=False))
        return path

    def join(self) -> PipelineMember:
        index = self.started
        self.started += 1
        url = self.url or f"chdb://{self.workdir / f'{self.name}-{index}.chdb'}"
        env = {
            **os.environ,
            "KAFKA_BROKERS": self.brokers,
            "KAFKA_TOPIC": self.topic,
            "KAFKA_GROUP": self.name,
            "STOP_AT": "never",
            "CLICKHOUSE_URL": url,
            "CLICKHOUSE_DATABASE": self.name.replace("-", "_"),
            "SPATE_ADMIN_LISTEN": "none",
            "PIPELINE_NAME": f"{self.name}-{index}",
            # Commits follow writes closely, so the window's offsets are its records.
            "CHECKPOINT_INTERVAL": "1s",
            "SINK_LINGER": "1s",
            "PYTHONUNBUFFERED": "1",
        }
        log = self.workdir / f"{self.name}-{index}.log"
        config = self.workdir / f"{self.name}.yaml"
        if not config.exists():
            config = self.config()
        with log.open("ab") as handle:
            process = subprocess.Popen(
                [
                    sys.executable,
                    str(ROOT / "examples" / "kafka_avro_to_clickhouse.py"),
                    "--config",
                    str(config),
                ],
                stdout=handle,
                stderr=subprocess.STDOUT,
                env=env,
            )
        return PipelineMember(log, process)


def _offsets(brokers: str, topic: str, group: str) -> tuple[dict[int, int], dict[int, int]]:
    """The group's committed offset and the end offset of each partition."""
    consumer = Consumer({"bootstrap.servers": brokers, "group.id": group})
    try:
        tps = [TopicPartition(topic, p) for p in range(PARTITIONS)]
        committed = {tp.partition: max(tp.offset, 0) for tp in consumer.committed(tps, 30)}
        ends = {
            p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=30)[1]
            for p in range(PARTITIONS)
        }
        return committed, ends
    finally:
        consumer.close()


def _alive(*members: PipelineMember) -> bool:
    """True, or SystemExit with the log of a member that exited."""
    for member in members:
        if member.process.poll() is not None:
            tail = member.log.read_text(errors="replace")[-2000:]
            raise SystemExit(f"a member exited ({member.process.returncode}):\n{tail}")
    return True


@dataclass(frozen=True)
class Measured:
    rate: float
    """Records per second per partition that stayed with A, written and committed."""
    joined: int
    """Members C given partitions inside the window (each joined and left)."""
    idle: float
    stayed: int


def measure_pipelines(
    brokers: str, topic: str, protocol: str, storm: bool, window: float, workdir: Path
) -> Measured:
    """One run: A and B settle and commit; over ``window`` seconds (C joining and leaving
    throughout when ``storm``) the committed records of A's partitions that stayed.

    A member C starts (a process takes seconds to import and join); once it was given
    partitions the next C starts and the previous one leaves (SIGTERM) while it does, so
    joins and leaves follow each other as closely as process start-up allows.
    """
    url = os.environ.get("SPATE_BENCH_CLICKHOUSE_URL")
    if url:
        sys.path.insert(0, str(ROOT / "examples"))
        from kafka_avro_to_clickhouse import clickhouse_client, create_tables

    group = Group(brokers, topic, protocol, workdir, url)
    if url:
        create_tables(clickhouse_client(url), group.name.replace("-", "_"))
    a, b = group.join(), group.join()
    members = [a, b]
    try:
        settled = _wait(
            lambda: (
                _alive(a, b)
                and a.owned()
                and b.owned()
                and a.owned() | b.owned() == set(range(PARTITIONS))
                and all(_offsets(brokers, topic, group.name)[0].values())
            ),
            timeout=300,
            every=0.5,
        )
        if not settled:
            raise SystemExit(f"{protocol}: the group did not settle and commit")
        start = time.time()
        before, _ = _offsets(brokers, topic, group.name)
        end = start + window
        previous: PipelineMember | None = None
        while storm and time.time() < end:
            c = group.join()
            members.append(c)
            if previous is not None:
                previous.stop()  # leaves while the next one joins
            previous = c
            _wait(lambda c=c: _alive(a, b) and c.owned(), timeout=max(0.1, end - time.time()))
        if previous is not None:
            previous.stop()
        if time.time() < end:
            time.sleep(end - time.time())
        stop = time.time()
        after, ends = _offsets(brokers, topic, group.name)
        _alive(a, b)
    finally:
        for member in members:
            member.stop()
    others: set[int] = set()
    joined = 0
    for member in members[1:]:
        given = [
            parts
            for stamp, kind, parts in member.moves()
            if kind == "assigned" and start < stamp < stop and parts
        ]
        others |= set().union(*given)
        joined += member is not b and bool(given)
    stayed = (a.owned(start) & a.owned(stop)) - others
    if not stayed:
        raise SystemExit(f"{protocol}: no partition stayed with A through the window")
    ran_out = sorted(p for p in stayed if after[p] >= ends[p])
    if ran_out:
        raise SystemExit(
            f"{protocol}: partitions {ran_out} were read to their end inside the window: "
            "raise SPATE_BENCH_RECORDS (or shorten SPATE_BENCH_WINDOW)"
        )
    records = sum(after[p] - before[p] for p in stayed)
    rate = records / (stop - start) / len(stayed)
    return Measured(rate, joined, a.idle(start, stop), len(stayed))


def main_pipelines() -> None:
    brokers = bootstrap()
    count = env_int("SPATE_BENCH_RECORDS", 6_000_000)
    runs = env_int("SPATE_BENCH_RUNS", 5)
    window = float(env_int("SPATE_BENCH_WINDOW", 30))
    if runs < 5:
        print(f"note: {runs} run(s) per side: a smoke run, not a figure (5 at least)")
    sys.path.insert(0, str(ROOT / "bench"))
    from e2e import ensure_data as ensure_events

    topic = f"bench-rebalance-storefront-{count}"
    ensure_events(brokers, topic, count, PARTITIONS)
    where = os.environ.get("SPATE_BENCH_CLICKHOUSE_URL") or "chDB, one directory per member"
    print(uptime())
    results: dict[tuple[str, bool], list[Measured]] = {}
    with tempfile.TemporaryDirectory(prefix="spate-rebalance-", ignore_cleanup_errors=True) as tmp:
        for _ in range(runs):
            for protocol in PROTOCOLS:
                for storm in (False, True):
                    measured = measure_pipelines(brokers, topic, protocol, storm, window, Path(tmp))
                    results.setdefault((protocol, storm), []).append(measured)
    print(
        f"== records/s per partition that stayed with member A, written into {where} and "
        f"committed; {runs} interleaved runs of {window:g}s per side; {count:,} events"
    )
    for protocol in PROTOCOLS:
        at_rest, stormed = results[(protocol, False)], results[(protocol, True)]
        print(f"== {protocol}")
        for name, side in (("rest", at_rest), ("storm", stormed)):
            rates = [m.rate for m in side]
            listed = ", ".join(f"{r:,.0f}" for r in rates)
            print(f"{name}: median {statistics.median(rates):,.0f}/s; runs {listed}")
        print(
            f"storm members C given partitions per run: {', '.join(str(m.joined) for m in stormed)}"
        )
        print(f"storm partitions that stayed with A: {', '.join(str(m.stayed) for m in stormed)}")
        idle = [m.idle for m in stormed]
        print(
            f"storm seconds A owned nothing: median {statistics.median(idle):.2f} of "
            f"{window:g}; runs {', '.join(f'{s:.2f}' for s in idle)}"
        )
        rest_rates, storm_rates = [m.rate for m in at_rest], [m.rate for m in stormed]
        pairs = [s / r for s, r in zip(storm_rates, rest_rates, strict=True) if r > 0]
        ratio = statistics.median(storm_rates) / statistics.median(rest_rates)
        print(f"ratio: {ratio:.2f}")
        print(f"ratio spread: {min(pairs):.2f}..{max(pairs):.2f} over {len(pairs)} pairs")
    print(uptime())
    print(f"peak RSS: {peak_rss_mib():.0f} MiB (this process and its finished members)")


if __name__ == "__main__":
    main_bare() if "--bare" in sys.argv[1:] else main_pipelines()
