"""One against two worker processes: the flagship job, ``spate run --processes N``.

Data: ``SPATE_BENCH_RECORDS`` (default 2,000,000) storefront events (raw Avro) in a topic
of ``SPATE_BENCH_PARTITIONS`` (default 8) partitions on the real broker (``make
services-up``), produced once and reused. Destination: the ClickHouse HTTP front of
``scripts/services.sh`` (chDB allows one data directory per process, so several workers
need a server), each run into fresh tables.

Each run is ``spate run examples/kafka_avro_to_clickhouse.yaml --chain
kafka_avro_to_clickhouse:chains --processes N`` in bounded mode with a fresh consumer
group. The two sides (1 and 2 workers) run interleaved, ``SPATE_BENCH_RUNS`` (default 5)
times each after a warm-up of each. Per side the report gives, as medians with the
spread (fastest and slowest run):

* ``whole run``: seconds from start to exit — interpreter start-up, imports, the
  consumer group's join and the final drain included;
* ``steady rate``: records per second between the first rows and the last rows
  arriving in ClickHouse (the bench polls the row count every 0.5 s), which leaves out
  start-up and exit: the throughput a long-running pipeline keeps;
* CPU seconds of every process (the parent of ``--processes 2`` and each worker, read
  from ``/proc``) and ``cpu per record``: the workers' CPU over the records for the
  whole run, and for the steady part alone (what one more record costs): what the work
  costs, independent of how long the run waited for a core;
* the CPU seconds of the broker and the ClickHouse front, which share the cores with
  the workers on a small machine; the front's figure is given without the bench's own
  polling (its cost per poll is measured after the runs on an empty database).

Then ``ratio:`` — the speed-up of 2 workers over 1 (of the medians, steady rate and
whole run, with the spread of the per-pair ratios; the target is 1.6) — and ``cpu
ratio:``, the workers' CPU per record with 2 workers over 1 (1.0 = a second worker costs
nothing extra per record). The load average before and after the runs says how much
else wanted the cores: the ratio means something only when the machine had a core per
worker, plus room for the broker and the front.
"""

from __future__ import annotations

import dataclasses
import os
import statistics
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _harness import env_int
from e2e import ensure_data, load_example
from kafka_source import bootstrap

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples"
TABLES = ("orders", "payments", "refunds")
_TICKS = os.sysconf("SC_CLK_TCK")
_POLL = 0.5


def clickhouse_url() -> str:
    url = os.environ.get("SPATE_CLICKHOUSE_URL")
    env_file = ROOT / ".services" / "env"
    if url is None and env_file.exists():
        for line in env_file.read_text().splitlines():
            if line.startswith("SPATE_CLICKHOUSE_URL="):
                url = line.split("=", 1)[1]
    return url or "http://127.0.0.1:18123"


def _cpu_seconds(pid: int) -> float | None:
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / _TICKS  # utime + stime


def _children(pid: int) -> list[int]:
    try:
        text = Path(f"/proc/{pid}/task/{pid}/children").read_text()
    except OSError:
        return []
    return [int(p) for p in text.split()]


def _listener_pid(port: int) -> int | None:
    """The pid of the process listening on ``port`` (the front, the broker), if visible."""
    inodes: set[str] = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            parts = line.split()
            if parts[3] == "0A" and int(parts[1].rsplit(":", 1)[1], 16) == port:
                inodes.add(parts[9])
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            for fd in (proc / "fd").iterdir():
                target = os.readlink(fd)
                if target.startswith("socket:[") and target[8:-1] in inodes:
                    return int(proc.name)
        except OSError:
            continue
    return None


def _port(address: str) -> int:
    return int(address.rsplit(":", 1)[1].split("/")[0].split(",")[0])


@dataclasses.dataclass
class Measured:
    """One run of one side."""

    seconds: float
    """Start to exit."""
    steady: float
    """Records per second between the first and the last rows arriving."""
    writing: float
    """Seconds between the first and the last rows arriving."""
    cpu: dict[str, float]
    """CPU seconds per process: ``parent`` (two workers only), ``worker 0``, ``worker 1``."""
    steady_cpu: float
    """The workers' CPU microseconds per record between the first and the last rows."""
    front: float
    broker: float
    polls: int
    """Row-count queries the bench sent to the front during the run."""

    @property
    def workers_cpu(self) -> float:
        return sum(v for k, v in self.cpu.items() if k.startswith("worker"))


class Run:
    def __init__(self, brokers: str, topic: str, url: str, records: int) -> None:
        self.brokers = brokers
        self.topic = topic
        self.url = url
        self.records = records
        self.example = load_example()
        self.client = self.example.clickhouse_client(url)
        self.front_pid = _listener_pid(_port(url))
        self.broker_pid = _listener_pid(_port(brokers))

    def _rows(self, database: str) -> int:
        total = " + ".join(f"(SELECT count() FROM {database}.{t})" for t in TABLES)
        return int(self.client.command(f"SELECT {total}"))

    def __call__(self, processes: int) -> Measured:
        database = f"scaling_{uuid.uuid4().hex[:8]}"
        self.example.create_tables(self.client, database)
        env = {
            **os.environ,
            "KAFKA_BROKERS": self.brokers,
            "KAFKA_TOPIC": self.topic,
            "KAFKA_GROUP": f"scaling-{uuid.uuid4().hex[:8]}",
            "STOP_AT": "end",
            "CLICKHOUSE_URL": self.url,
            "CLICKHOUSE_DATABASE": database,
            "SPATE_ADMIN_LISTEN": "none",
            "KAFKA_SESSION_TIMEOUT_MS": "6000",
            "PYTHONPATH": str(EXAMPLES),
        }
        argv = [sys.executable, "-m", "spate.cli", "--log-level", "warning", "run"]
        argv += ["kafka_avro_to_clickhouse.yaml", "--chain", "kafka_avro_to_clickhouse:chains"]
        argv += ["--processes", str(processes)]
        services = {"front": self.front_pid, "broker": self.broker_pid}
        before = {name: _cpu_seconds(pid) if pid else None for name, pid in services.items()}
        cpu: dict[int, float] = {}
        # (seconds since start, rows, the workers' CPU seconds) whenever the rows change
        arrivals: list[tuple[float, int, float]] = []
        polls = [0]
        start = time.perf_counter()
        proc = subprocess.Popen(argv, cwd=EXAMPLES, env=env)
        done = threading.Event()

        def sample() -> None:
            while not done.wait(_POLL):
                for pid in [proc.pid, *_children(proc.pid)]:
                    seconds = _cpu_seconds(pid)
                    if seconds is not None:
                        cpu[pid] = seconds
                rows = self._rows(database)
                polls[0] += 1
                if not arrivals or rows != arrivals[-1][1]:
                    workers = sum(v for p, v in cpu.items() if p != proc.pid or processes == 1)
                    arrivals.append((time.perf_counter() - start, rows, workers))

        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        code = proc.wait()
        elapsed = time.perf_counter() - start
        done.set()
        sampler.join()
        if code != 0:
            raise SystemExit(f"spate run --processes {processes} exited {code}")
        rows = self._rows(database)
        if not arrivals or arrivals[-1][1] != rows:
            # The last rows landed after the sampler's last poll: count them at the exit.
            workers = sum(v for p, v in cpu.items() if p != proc.pid or processes == 1)
            arrivals.append((elapsed, rows, workers))
        self.client.command(f"DROP DATABASE {database}")
        if rows != self.records:
            raise SystemExit(f"--processes {processes}: {rows} rows for {self.records} records")
        # Steady state: from the first rows seen to the moment the last rows were seen.
        first = next(a for a in arrivals if a[1] > 0)
        last = next(a for a in arrivals if a[1] == rows)
        writing = last[0] - first[0]
        if writing < 4 * _POLL:  # too few records for the polling to see them arrive
            steady = steady_cpu = float("nan")
        else:
            steady = (rows - first[1]) / writing
            steady_cpu = (last[2] - first[2]) / (rows - first[1]) * 1e6
        parent_pids = [proc.pid] if processes > 1 else []
        names = {pid: "parent" for pid in parent_pids}
        workers = sorted(pid for pid in cpu if pid not in names)
        names.update({pid: f"worker {i}" for i, pid in enumerate(workers)})
        spent = {
            name: (_cpu_seconds(pid) or was) - was if pid and was is not None else 0.0
            for (name, pid), was in zip(services.items(), before.values(), strict=True)
        }
        return Measured(
            seconds=elapsed,
            steady=steady,
            writing=writing,
            cpu={names[pid]: cpu[pid] for pid in sorted(cpu, key=lambda p: names[p])},
            steady_cpu=steady_cpu,
            front=spent["front"],
            broker=spent["broker"],
            polls=polls[0],
        )

    def poll_cost(self, polls: int = 40) -> float:
        """The front's CPU seconds per row-count poll, measured on an empty database."""
        if self.front_pid is None:
            return 0.0
        database = f"scaling_{uuid.uuid4().hex[:8]}"
        self.example.create_tables(self.client, database)
        before = _cpu_seconds(self.front_pid) or 0.0
        for _ in range(polls):
            self._rows(database)
        spent = (_cpu_seconds(self.front_pid) or before) - before
        self.client.command(f"DROP DATABASE {database}")
        return spent / polls


def _spread(values: list[float], fmt: str) -> str:
    low, mid, high = (fmt.format(v) for v in (min(values), statistics.median(values), max(values)))
    return f"median {mid} (spread {low}-{high})"


def main() -> int:
    records = env_int("SPATE_BENCH_RECORDS", 2_000_000)
    partitions = env_int("SPATE_BENCH_PARTITIONS", 8)
    runs = max(1, env_int("SPATE_BENCH_RUNS", 5))
    brokers = bootstrap()
    topic = f"spate-bench-scaling-{records}-p{partitions}"
    ensure_data(brokers, topic, records, partitions)
    bench = Run(brokers, topic, clickhouse_url(), records)
    sides = (1, 2)
    load_before = os.getloadavg()
    for processes in sides:  # warm-up: page cache, imports, the front's first parts
        bench(processes)
    measured: dict[int, list[Measured]] = {n: [] for n in sides}
    for _ in range(runs):
        for processes in sides:
            measured[processes].append(bench(processes))
    load_after = os.getloadavg()
    per_poll = bench.poll_cost()
    print(
        f"== scaling: {records:,} records, {partitions} partitions, {os.cpu_count()} cores, "
        f"{runs} interleaved runs per side after a warm-up of each; load average "
        f"(1/5/15 min) {' '.join(f'{v:.1f}' for v in load_before)} before, "
        f"{' '.join(f'{v:.1f}' for v in load_after)} after"
    )
    for processes in sides:
        side = measured[processes]
        per_record = [m.workers_cpu / records * 1e6 for m in side]
        steady_cpu = statistics.median([m.steady_cpu for m in side])
        print(f"{processes} worker(s):")
        print(f"  whole run     {_spread([m.seconds for m in side], '{:.2f}s')}")
        print(
            f"  steady rate   {_spread([m.steady for m in side], '{:,.0f}/s')} "
            f"over the {statistics.median([m.writing for m in side]):.1f}s the rows arrived"
        )
        roles = sorted({name for m in side for name in m.cpu})
        shown = ", ".join(
            f"{name} {statistics.median([m.cpu.get(name, 0.0) for m in side]):.1f}s"
            for name in roles
        )
        print(f"  cpu (median)  {shown}")
        print(
            f"  cpu per record {statistics.median(per_record):.1f} us over the whole run, "
            f"{steady_cpu:.1f} us while the rows arrived (the workers' CPU, start-up excluded)"
        )
        front = statistics.median([m.front - m.polls * per_poll for m in side])
        print(
            f"  services cpu  broker {statistics.median([m.broker for m in side]):.1f}s, "
            f"clickhouse front {front:.1f}s (median; without the bench's polling, "
            f"{per_poll * 1000:.1f} ms a poll)"
        )
    one, two = measured[1], measured[2]
    steady = statistics.median([m.steady for m in two]) / statistics.median([m.steady for m in one])
    whole = statistics.median([m.seconds for m in one]) / statistics.median(
        [m.seconds for m in two]
    )
    steady_pairs = sorted(b.steady / a.steady for a, b in zip(one, two, strict=True))
    whole_pairs = sorted(a.seconds / b.seconds for a, b in zip(one, two, strict=True))
    cpu_ratio = statistics.median([m.workers_cpu for m in two]) / statistics.median(
        [m.workers_cpu for m in one]
    )
    print(
        f"ratio: {steady:.2f} steady rate, 2 workers over 1 (per interleaved pair "
        f"{steady_pairs[0]:.2f}-{steady_pairs[-1]:.2f}); whole run {whole:.2f} (per pair "
        f"{whole_pairs[0]:.2f}-{whole_pairs[-1]:.2f}); target 1.6"
    )
    print(
        f"cpu ratio: {cpu_ratio:.2f} (workers' CPU for the same records, 2 workers over 1; "
        "1.0 = the second worker adds no cost per record)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
