"""One against two worker processes: the flagship job, ``spate run --processes N``.

Data: ``SPATE_BENCH_RECORDS`` (default 400,000) storefront events (raw Avro) in a
4-partition topic of the real broker (``make services-up``), produced once and reused.
Destination: the ClickHouse HTTP front of ``scripts/services.sh`` (chDB allows one data
directory per process, so several workers need a server), each run into fresh tables.

Each run is ``spate run examples/kafka_avro_to_clickhouse.yaml --chain
kafka_avro_to_clickhouse:chains --processes N`` in bounded mode with a fresh consumer
group, timed from start to exit (process start-up included). The two sides run
interleaved, ``SPATE_BENCH_RUNS`` (default 5) times each after a warm-up. The report
gives each side's median and spread (fastest and slowest run), records/s, the speed-up
``ratio:`` (2 workers over 1, of the medians), the spread of the per-pair ratios, and the
CPU seconds each process used (parent and workers, sampled from ``/proc``), plus the
ClickHouse front's, because on a small machine the broker and the front share the
cores with the workers.
"""

from __future__ import annotations

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
from e2e import PARTITIONS, ensure_data, load_example
from kafka_source import bootstrap

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples"
_TICKS = os.sysconf("SC_CLK_TCK")


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
    """The pid of the process listening on ``port`` (the ClickHouse front), if visible."""
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


class Run:
    def __init__(self, brokers: str, topic: str, url: str) -> None:
        self.brokers = brokers
        self.topic = topic
        self.url = url
        self.example = load_example()
        self.client = self.example.clickhouse_client(url)
        port = int(url.rsplit(":", 1)[1].split("/")[0])
        self.front_pid = _listener_pid(port)

    def __call__(self, processes: int) -> tuple[float, dict[str, float], float]:
        """One run: seconds, CPU seconds per process, and the front's CPU seconds."""
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
        front_before = _cpu_seconds(self.front_pid) if self.front_pid else None
        cpu: dict[int, float] = {}
        start = time.perf_counter()
        proc = subprocess.Popen(argv, cwd=EXAMPLES, env=env)
        done = threading.Event()

        def sample() -> None:
            while not done.wait(0.2):
                for pid in [proc.pid, *_children(proc.pid)]:
                    seconds = _cpu_seconds(pid)
                    if seconds is not None:
                        cpu[pid] = seconds

        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        code = proc.wait()
        elapsed = time.perf_counter() - start
        done.set()
        sampler.join()
        if code != 0:
            raise SystemExit(f"spate run --processes {processes} exited {code}")
        rows = sum(
            int(self.client.command(f"SELECT count() FROM {database}.{table}"))
            for table in ("orders", "payments", "refunds")
        )
        self.client.command(f"DROP DATABASE {database}")
        per_process = {
            ("parent" if pid == proc.pid and processes > 1 else f"pid {pid}"): seconds
            for pid, seconds in sorted(cpu.items())
        }
        front = 0.0
        if front_before is not None and self.front_pid is not None:
            front = (_cpu_seconds(self.front_pid) or front_before) - front_before
        self.rows = rows
        return elapsed, per_process, front


def main() -> int:
    records = env_int("SPATE_BENCH_RECORDS", 400_000)
    runs = max(1, env_int("SPATE_BENCH_RUNS", 5))
    brokers = bootstrap()
    topic = f"spate-bench-scaling-{records}"
    ensure_data(brokers, topic, records)
    bench = Run(brokers, topic, clickhouse_url())
    sides = (1, 2)
    for processes in sides:  # warm-up: caches, imports, the front's first parts
        bench(processes)
    times: dict[int, list[float]] = {n: [] for n in sides}
    cpu: dict[int, list[dict[str, float]]] = {n: [] for n in sides}
    front: dict[int, list[float]] = {n: [] for n in sides}
    for _ in range(runs):
        for processes in sides:
            elapsed, per_process, front_cpu = bench(processes)
            times[processes].append(elapsed)
            cpu[processes].append(per_process)
            front[processes].append(front_cpu)
    load = os.getloadavg()[0]
    print(
        f"== scaling: {records} records, {PARTITIONS} partitions, {os.cpu_count()} cores, "
        f"{runs} interleaved runs per side, load average {load:.1f} at the end"
    )
    for processes in sides:
        median = statistics.median(times[processes])
        listed = ", ".join(f"{t:.2f}" for t in times[processes])
        spread = f"{min(times[processes]):.2f}-{max(times[processes]):.2f}s"
        print(
            f"{processes} worker(s): median {median:.2f}s ({records / median:,.0f} rec/s), "
            f"spread {spread}, runs [{listed}]"
        )
        last = cpu[processes][-1]
        shown = ", ".join(f"{name}={seconds:.1f}s" for name, seconds in last.items())
        print(f"  cpu per process (last run): {shown}")
        print(f"  clickhouse front cpu (median): {statistics.median(front[processes]):.1f}s")
    ratio = statistics.median(times[1]) / statistics.median(times[2])
    pairs = sorted(one / two for one, two in zip(times[1], times[2], strict=True))
    print(
        f"ratio: {ratio:.2f} (2 workers over 1, medians; per interleaved pair "
        f"{pairs[0]:.2f}-{pairs[-1]:.2f}; rows per run {bench.rows})"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
