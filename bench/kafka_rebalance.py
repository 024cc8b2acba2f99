"""Throughput through a rebalance storm, per group protocol (ADR 0015).

Measured by the performance rules in docs/development.md, on the real broker
(``make services-up``): ``SPATE_BENCH_RECORDS`` (default 2,000,000) messages of 100 bytes
in a 6-partition topic, produced once and reused.

For each protocol (``eager``, ``cooperative``, ``consumer``), interleaved, each run with
fresh consumer groups:

* rest: members A and B of one group settle; A's records per second over a window;
* storm: members A and B settle; during the same window a member C joins and leaves
  again and again (each time once it was given partitions); A's records per second.

A and C are :class:`KafkaSource` instances polled on their own threads with no runtime
behind them (the revoke barrier returns at once), so the figure is what the protocol
itself stops: under ``eager`` every join and leave revokes all of A's partitions until
the group has rejoined; under the incremental protocols A reads on through every
rebalance. Prints each side's median and runs, the seconds of each storm window A owned
no partition (what the protocol stops, less sensitive to a loaded machine than a rate),
then ``ratio:`` (storm / rest) and its spread per protocol. Run::

    make services-up && .venv/bin/python bench/kafka_rebalance.py
"""

from __future__ import annotations

import statistics
import sys
import threading
import time
import uuid
from pathlib import Path

from spate.config import decode
from spate.testing.conformance import RecordingEvents
from spate_kafka import KafkaSource, KafkaSourceConfig

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _harness import env_int, peak_rss_mib
from kafka_source import bootstrap, ensure_data

PROTOCOLS = ("eager", "cooperative", "consumer")
PARTITIONS = 6
WINDOW = 4.0
"""Seconds measured per run."""


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


def _wait(predicate: object, timeout: float = 60.0) -> bool:
    deadline = time.monotonic() + timeout
    while not predicate():  # type: ignore[operator]
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
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


def measure(brokers: str, topic: str, protocol: str, storm: bool) -> tuple[float, int, float]:
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


def main() -> None:
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
                rate, moves, without = measure(brokers, topic, protocol, storm)
                rates.setdefault((protocol, storm), []).append(rate)
                if storm:
                    joins[protocol].append(moves)
                    idle[protocol].append(without)
    for protocol in PROTOCOLS:
        rest, storm = rates[(protocol, False)], rates[(protocol, True)]
        print(f"== {protocol}: member A's records/s, {runs} interleaved runs of {WINDOW:g}s")
        for name, measured in (("rest", rest), ("storm", storm)):
            listed = ", ".join(f"{r:,.0f}" for r in measured)
            print(f"{name}: median {statistics.median(measured):,.0f}/s; runs {listed}")
        print(f"storm joins+leaves per run: {', '.join(map(str, joins[protocol]))}")
        listed = ", ".join(f"{s:.2f}" for s in idle[protocol])
        print(
            f"storm seconds A owned nothing: median {statistics.median(idle[protocol]):.2f}"
            f" of {WINDOW:g}; runs {listed}"
        )
        pairs = [s / r for s, r in zip(storm, rest, strict=True) if r > 0]
        print(f"ratio: {statistics.median(storm) / statistics.median(rest):.2f}")
        print(f"ratio spread: {min(pairs):.2f}..{max(pairs):.2f} over {len(pairs)} pairs")
    print(f"peak RSS: {peak_rss_mib():.0f} MiB")


if __name__ == "__main__":
    main()
