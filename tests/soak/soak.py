"""The soak: the flagship for a long while at a steady rate, with network faults injected.

The flagship (``examples/kafka_avro_to_clickhouse.py``) runs as one process, reading the
real broker through the Kafka fault proxy (the broker's ``FAULT`` listener) and writing
to a ClickHouse HTTP front through a second fault proxy. A producer writes storefront
events at a steady rate straight to the broker, and the delivery sampler checks all along
that the group's committed offsets never pass the rows in ClickHouse (B1). Every few
minutes one fault from :data:`FAULTS` is switched on for a while and then healed, in
turn. Every 10 s the pipeline process's resident memory, open file descriptors and
threads, and the group's lag, are sampled.

At the end every produced event must be in its table exactly once after ``FINAL``, the
sampler must have seen no violation, and the resource series must be flat: their peaks in
the second half within a tolerance of their peaks in the first (:func:`flatness`). The
series, a markdown summary and the pipeline's log are written to a report directory.

    python -m tests.soak.soak --minutes 30 --report-dir soak-report

needs the broker of ``scripts/services.sh`` (``make soak`` starts it); it starts its own
ClickHouse front. ``tests/soak/test_soak.py`` runs a 3-minute soak in ``make test-full``.
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.faults.test_clickhouse_network_faults import inserts
from tests.support.chfront_fixtures import ChFront
from tests.support.delivery import DeliverySampler, PacedProducer, wait_until
from tests.support.netfault import (
    KAFKA_FAULT,
    KAFKA_FAULT_UPSTREAM,
    FaultProxy,
    kafka_request,
    peer_sockets,
)
from tests.support.no_loss import (
    TABLES,
    held_identities,
    load_example,
    start_flagship,
    storefront_records,
)
from tests.support.services import (
    KAFKA,
    committed_offsets,
    create_topic,
    end_offsets,
    probe_kafka,
    service_address,
    unique_name,
)

OFFSET_COMMIT = 8  # Kafka API key
SESSION_TIMEOUT_MS = 6000


class SteadyProducer(PacedProducer):
    """A :class:`PacedProducer` that hands ``count / seconds`` records per second to the
    producer, one second at a time, instead of bursts of a hundredth of the total."""

    def run(self) -> None:
        per_second = max(1, round(self.count / self.seconds))
        started = time.monotonic()
        for identity, key, value in self.records:
            self._produce(identity, key, value)
            if self.produced % per_second == 0:
                self._producer.poll(0)
                due = started + self.produced / per_second
                time.sleep(max(0.0, due - time.monotonic()))
        self._producer.flush(120)


@dataclass
class Point:
    """One sample of the pipeline process and its group."""

    t: float
    rss_mib: float
    anon_mib: float
    fds: int
    threads: int
    lag: int | None
    fault: str
    clickhouse_sockets: int = 0
    """The pipeline's TCP sockets to ClickHouse (its fault proxy), in any state."""
    kafka_sockets: int = 0
    """The pipeline's TCP sockets to the broker (its fault proxy), in any state."""


def process_stats(pid: int) -> tuple[float, float, int, int]:
    """Resident memory and its anonymous part (the heap, not mapped files; MiB), open
    file descriptors and threads of a Linux process."""
    rss_kib, anon_kib, threads = 0, 0, 0
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            rss_kib = int(line.split()[1])
        elif line.startswith("RssAnon:"):
            anon_kib = int(line.split()[1])
        elif line.startswith("Threads:"):
            threads = int(line.split()[1])
    fds = len(os.listdir(f"/proc/{pid}/fd"))
    return rss_kib / 1024, anon_kib / 1024, fds, threads


def group_lag(bootstrap: str, group: str, topic: str) -> int | None:
    """Records in the topic past the group's committed offsets (None: the broker did not
    answer in time)."""
    try:
        ends = end_offsets(bootstrap, topic, timeout=10)
        committed = committed_offsets(bootstrap, group, topic, timeout=10)
    except Exception:
        return None
    return sum(end - committed.get(p, 0) for p, end in ends.items())


@dataclass
class Fault:
    name: str
    start: Callable[[], None]
    heal: Callable[[], None]


@dataclass
class Flatness:
    """Each series' peak in the first half and the second half of the run."""

    rss_mib: tuple[float, float]
    fds: tuple[int, int]
    threads: tuple[int, int]

    def problems(
        self, rss_growth: float = 0.25, fd_slack: int = 8, thread_slack: int = 2
    ) -> list[str]:
        """What is not flat: the second half's peak RSS above the first half's by more than
        ``rss_growth``, its peak fds or threads above the first half's by more than the
        slack (connections reopened after a fault may be open at the moment of a sample)."""
        found = []
        first, second = self.rss_mib
        if second > first * (1 + rss_growth):
            found.append(f"RSS peak grew from {first:.1f} to {second:.1f} MiB")
        if self.fds[1] > self.fds[0] + fd_slack:
            found.append(f"open fds peak grew from {self.fds[0]} to {self.fds[1]}")
        if self.threads[1] > self.threads[0] + thread_slack:
            found.append(f"threads peak grew from {self.threads[0]} to {self.threads[1]}")
        return found


def flatness(points: list[Point]) -> Flatness:
    half = len(points) // 2
    first, second = points[:half], points[half:]

    def peaks(attr: str) -> tuple[Any, Any]:
        return max(getattr(p, attr) for p in first), max(getattr(p, attr) for p in second)

    return Flatness(peaks("rss_mib"), peaks("fds"), peaks("threads"))


@dataclass
class SoakResult:
    minutes: float
    rate: int
    produced: dict[str, int]
    final: dict[str, int]
    distinct: dict[str, int]
    rows_written: dict[str, int]
    exit_code: int | None
    samples: int
    violations: int
    sampler_errors: int
    points: list[Point]
    faults: list[tuple[float, float, str]]
    proxy_stats: dict[str, dict[str, int]] = field(default_factory=dict)

    @property
    def exact(self) -> bool:
        return self.final == self.distinct == self.produced

    def problems(self) -> list[str]:
        found = [] if self.exact else [f"counts: produced {self.produced}, FINAL {self.final}"]
        if self.violations:
            found.append(f"{self.violations} sampler violations")
        if self.exit_code != 0:
            found.append(f"pipeline exit code {self.exit_code}")
        return found + flatness(self.points).problems()


def run_soak(
    minutes: float,
    rate: int,
    workdir: Path,
    *,
    fault_every: float | None = None,
    fault_for: float | None = None,
    sample_every: float = 10.0,
    log: Callable[[str], None] = lambda _: None,
) -> SoakResult:
    """Run the soak for ``minutes`` producing ``rate`` events/s; see the module docstring.

    Faults start every ``fault_every`` seconds (default: a tenth of the run, at most 3
    minutes) and last ``fault_for`` seconds (default: a third of that, at most 30 s, at
    least 10 s — longer than the session timeout, so a partition evicts the member)."""
    seconds = minutes * 60
    every = fault_every or min(180.0, seconds / 10)
    outage = fault_for or max(10.0, min(30.0, every / 3))
    bootstrap = service_address(KAFKA)
    probe_kafka(bootstrap)
    topic, group = unique_name("soak"), unique_name("soak-g")
    create_topic(bootstrap, topic, 4)
    database = "soak"
    with contextlib.ExitStack() as stack:
        # Everything started is stopped on every path, in the reverse order (the front
        # last), whichever step fails: a port already taken, a pipeline that dies.
        front = ChFront(workdir / "clickhouse")
        stack.callback(front.stop)
        front.start()
        fault_host, _, fault_port = service_address(KAFKA_FAULT).rpartition(":")
        kafka_proxy = stack.enter_context(
            FaultProxy(service_address(KAFKA_FAULT_UPSTREAM), host=fault_host, port=int(fault_port))
        )
        ch_proxy = stack.enter_context(FaultProxy(f"{front.host}:{front.port}"))
        proc: subprocess.Popen[bytes] | None = None

        def end_pipeline() -> None:
            if proc is not None and proc.poll() is None:
                proc.kill()
                proc.wait(30)

        stack.callback(end_pipeline)
        stop = threading.Event()
        stack.callback(stop.set)
        client = front.client()
        load_example().create_tables(client, database)
        env = {
            **os.environ,
            "KAFKA_BROKERS": kafka_proxy.address,
            "KAFKA_TOPIC": topic,
            "KAFKA_GROUP": group,
            "KAFKA_SESSION_TIMEOUT_MS": str(SESSION_TIMEOUT_MS),
            "STOP_AT": "never",
            "CLICKHOUSE_URL": f"http://{ch_proxy.address}",
            "CLICKHOUSE_DATABASE": database,
            "SPATE_ADMIN_LISTEN": "none",
            "PIPELINE_NAME": "soak",
        }
        pipeline_log = workdir / "flagship.log"
        proc = start_flagship(env, pipeline_log)
        count = int(rate * seconds)
        producer = SteadyProducer(bootstrap, topic, storefront_records(count), count, seconds)

        def held() -> set[bytes]:
            return held_identities(front.client(), database)

        sampler = DeliverySampler(bootstrap, group, topic, producer.positions, held)
        faults = [
            Fault("kafka partition", kafka_proxy.partition, kafka_proxy.heal),
            Fault(
                "kafka latency 2s±1s",
                lambda: kafka_proxy.latency(2.0, jitter=1.0),
                lambda: kafka_proxy.latency(0.0),
            ),
            Fault("clickhouse blackhole", ch_proxy.blackhole, ch_proxy.heal),
            Fault(
                "clickhouse 503 on inserts",
                lambda: front.inject("5xx", seconds=outage, only="insert"),
                front.recover,
            ),
            Fault(
                "clickhouse reset after insert",
                lambda: ch_proxy.cut(inserts, when="reply", count=3),
                ch_proxy.heal,
            ),
            Fault(
                "kafka reset during commit",
                lambda: kafka_proxy.cut(kafka_request(OFFSET_COMMIT), when="reply", count=3),
                kafka_proxy.heal,
            ),
        ]
        active = [""]
        injected: list[tuple[float, float, str]] = []
        points: list[Point] = []

        def inject_faults() -> None:
            n = 0
            while not stop.wait(max(0.0, started + every * (n + 0.5) - time.monotonic())):
                if time.monotonic() + outage > started + seconds:
                    return
                fault = faults[n % len(faults)]
                begin = time.monotonic() - started
                log(f"{begin:7.0f}s fault on: {fault.name}")
                active[0] = fault.name
                fault.start()
                stop.wait(outage)
                fault.heal()
                active[0] = ""
                injected.append((begin, time.monotonic() - started, fault.name))
                log(f"{time.monotonic() - started:7.0f}s fault healed: {fault.name}")
                n += 1

        def take_point() -> None:
            assert proc is not None
            rss, anon, fds, threads = process_stats(proc.pid)
            peers = peer_sockets(proc.pid)
            point = Point(
                round(time.monotonic() - started, 1),
                round(rss, 1),
                round(anon, 1),
                fds,
                threads,
                group_lag(bootstrap, group, topic),
                active[0],
                peers[ch_proxy.port],
                peers[kafka_proxy.port],
            )
            points.append(point)
            log(
                f"{point.t:7.0f}s rss {rss:.1f} MiB, fds {fds} (sockets to ClickHouse "
                f"{point.clickhouse_sockets}, to Kafka {point.kafka_sockets}), threads "
                f"{threads}, lag {point.lag}"
            )

        def sample_resources() -> None:
            while proc is not None and proc.poll() is None:
                take_point()
                if stop.wait(max(0.0, started + len(points) * sample_every - time.monotonic())):
                    return

        producer.start()
        # The series start once the pipeline is up and has written (past its start-up).
        wait_until(lambda: proc.poll() is not None or bool(held()), 300, "a first write")
        started = time.monotonic()
        sampler.start(every=sample_every / 2)
        stack.callback(sampler.stop)
        threads = [
            threading.Thread(target=inject_faults, name="soak-faults", daemon=True),
            threading.Thread(target=sample_resources, name="soak-resources", daemon=True),
        ]
        for thread in threads:
            thread.start()
        producer.finish(seconds + 600)
        log(f"{time.monotonic() - started:7.0f}s produced {count}; waiting for the tail")
        threads[0].join()
        wait_until(lambda: held() >= set(producer.positions), 900, "every event in ClickHouse")
        ends = end_offsets(bootstrap, topic)
        wait_until(lambda: committed_offsets(bootstrap, group, topic) == ends, 300, "final commit")
        alive = proc.poll() is None
        stop.set()
        threads[1].join(60)
        if alive:
            take_point()  # drained: the lag is 0
        proc.send_signal(signal.SIGTERM)
        exit_code = proc.wait(120) if alive else proc.returncode
        sampler.stop()
        sampler.sample()
        produced = dict.fromkeys(TABLES.values(), 0)
        for identity in producer.positions:
            produced[TABLES[identity.decode().split(":")[0]]] += 1

        def per_table(sql: str) -> dict[str, int]:
            return {t: int(client.command(sql.format(db=database, t=t))) for t in TABLES.values()}

        return SoakResult(
            minutes=minutes,
            rate=rate,
            produced=produced,
            final=per_table("SELECT count() FROM {db}.{t} FINAL"),
            distinct=per_table("SELECT uniqExact(order_id) FROM {db}.{t}"),
            rows_written=per_table("SELECT count() FROM {db}.{t}"),
            exit_code=exit_code,
            samples=len(sampler.samples),
            violations=len(sampler.violations()),
            sampler_errors=len(sampler.errors),
            points=points,
            faults=injected,
            proxy_stats={
                "kafka": vars(kafka_proxy.stats).copy(),
                "clickhouse": vars(ch_proxy.stats).copy(),
            },
        )


def summary_row(name: str, values: list[Any], unit: str = "") -> str:
    known = [v for v in values if v is not None]
    if not known:
        return f"| {name} | - | - | - | - |"
    return f"| {name}{unit} | {known[0]} | {min(known)} | {max(known)} | {known[-1]} |"


def write_report(result: SoakResult, directory: Path, command: str) -> Path:
    """The series as ``series.csv`` and a markdown summary as ``summary.md``; returns the
    summary's path."""
    directory.mkdir(parents=True, exist_ok=True)
    with (directory / "series.csv").open("w", newline="") as out:
        writer = csv.writer(out)
        writer.writerow(
            [
                "seconds",
                "rss_mib",
                "anon_mib",
                "open_fds",
                "clickhouse_sockets",
                "kafka_sockets",
                "threads",
                "lag",
                "fault",
            ]
        )
        for p in result.points:
            lag = "" if p.lag is None else p.lag
            writer.writerow(
                [
                    p.t,
                    p.rss_mib,
                    p.anon_mib,
                    p.fds,
                    p.clickhouse_sockets,
                    p.kafka_sockets,
                    p.threads,
                    lag,
                    p.fault,
                ]
            )
    points = result.points
    flat = flatness(points)
    problems = result.problems()
    lines = [
        f"Command: `{command}`",
        "",
        f"Duration: {result.minutes:g} min of production at {result.rate} events/s; "
        f"{len(points)} resource samples, every 10 s, until the pipeline had drained.",
        "",
        "| series | start | min | max | end |",
        "|---|---|---|---|---|",
        summary_row("RSS", [p.rss_mib for p in points], " (MiB)"),
        summary_row("RSS, anonymous", [p.anon_mib for p in points], " (MiB)"),
        summary_row("open file descriptors", [p.fds for p in points]),
        summary_row("sockets to ClickHouse", [p.clickhouse_sockets for p in points]),
        summary_row("sockets to Kafka", [p.kafka_sockets for p in points]),
        summary_row("threads", [p.threads for p in points]),
        summary_row("consumer lag", [p.lag for p in points], " (records)"),
        "",
        f"Peaks, first half → second half: RSS {flat.rss_mib[0]} → {flat.rss_mib[1]} MiB, "
        f"fds {flat.fds[0]} → {flat.fds[1]}, threads {flat.threads[0]} → {flat.threads[1]}.",
        "",
        "| table | produced | rows written | FINAL | distinct order_id |",
        "|---|---|---|---|---|",
        *(
            f"| {t} | {result.produced[t]} | {result.rows_written[t]} | {result.final[t]} "
            f"| {result.distinct[t]} |"
            for t in result.produced
        ),
        "",
        f"Delivery sampler: {result.samples} samples, {result.violations} violations "
        f"({result.sampler_errors} samples skipped while a service did not answer).",
        f"Pipeline exit code after SIGTERM: {result.exit_code}.",
        "",
        "Faults injected (seconds from the start):",
        "",
        *(f"- {begin:.0f} to {end:.0f} s: {name}" for begin, end, name in result.faults),
        "",
        f"Fault proxies: {result.proxy_stats}.",
        "",
        "Result: " + ("passed" if not problems else "FAILED: " + "; ".join(problems)),
        "",
    ]
    summary = directory / "summary.md"
    summary.write_text("\n".join(lines))
    return summary


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=float(os.environ.get("SOAK_MINUTES", 30)))
    parser.add_argument(
        "--rate", type=int, default=int(os.environ.get("SOAK_RATE", 200)), help="events per second"
    )
    parser.add_argument("--fault-every", type=float, default=None, help="seconds between faults")
    parser.add_argument("--fault-for", type=float, default=None, help="seconds each fault lasts")
    parser.add_argument(
        "--report-dir", type=Path, default=Path(os.environ.get("SOAK_REPORT_DIR", "soak-report"))
    )
    args = parser.parse_args(argv)

    def log(message: str) -> None:
        print(message, flush=True)

    with tempfile.TemporaryDirectory(prefix="spate-soak-") as workdir:
        try:
            result = run_soak(
                args.minutes,
                args.rate,
                Path(workdir),
                fault_every=args.fault_every,
                fault_for=args.fault_for,
                log=log,
            )
        finally:
            # The pipeline's own log goes with the report: its rebalances, retries and
            # run summary explain a row written twice before FINAL, or a failure.
            pipeline_log = Path(workdir) / "flagship.log"
            if pipeline_log.exists():
                args.report_dir.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(pipeline_log, args.report_dir / "flagship.log")
    command = " ".join(["python -m tests.soak.soak", *(argv if argv is not None else sys.argv[1:])])
    summary = write_report(result, args.report_dir, command)
    print(summary.read_text())
    return 1 if result.problems() else 0


if __name__ == "__main__":
    raise SystemExit(main())
