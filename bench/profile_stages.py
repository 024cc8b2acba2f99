"""Where the CPU goes, per stage, in the bytes-per-core benchmark's pipeline.

Runs the pipeline of ``bench/bytes_per_core.py`` (the same topic, table and
configuration) once per path and format, with the stage functions wrapped by timers of
the calling thread's CPU time (``time.thread_time``), and prints each stage's CPU
seconds and share of the process's CPU:

* consume: the Kafka source's ``consume()`` calls;
* decode: the deserializer (``deserialize_batch`` on the columnar path, each
  ``deserialize`` call on the row path);
* checks: the sink's per-column checks and coercion (``prepare_frame`` on the columnar
  path, ``prepare_rows`` and the buffer's row appends on the row path);
* encode: the Arrow IPC stream (columnar) or clickhouse-connect's Native blocks (row);
* insert: the insert call itself, without its encoding (chDB's work in this thread);
* commit: the Kafka source's offset commits;
* other: the rest of the process's CPU (the runtime, flow control, the native threads
  of librdkafka, chDB, Arrow and polars).

The CPU is also split by thread: the threads that ran Python (the stages' calling
threads) and the native ones (librdkafka's fetchers, Arrow's reader pool, chDB's).

A stage nested in another (encoding inside an insert) is charged to the inner stage
only. The timers cost a little per call (the row path's per-record decode timer most),
so the total is a little above the benchmark's own CPU figure.

    .venv/bin/python bench/profile_stages.py                 # both paths, JSON and Avro
    .venv/bin/python bench/profile_stages.py json columnar   # one format, one path
    SPATE_BENCH_RECORDS=200000 .venv/bin/python bench/profile_stages.py

The topic is the benchmark's own (``bench-wide-<format>-<records>``, with
``SPATE_BENCH_PARTITIONS`` as there), produced when missing; the destination is chDB in
this process, or ``SPATE_BENCH_CLICKHOUSE_URL``.
"""

from __future__ import annotations

import functools
import os
import sys
import tempfile
import threading
import time
from collections import defaultdict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from _harness import env_int, uptime
from bytes_per_core import FORMATS, Bench, ensure_data, payload_bytes, topic_name
from kafka_source import bootstrap

STAGES = ("consume", "decode", "checks", "encode", "insert", "commit")
PATHS = ("columnar", "row")


class StageClock:
    """CPU seconds per stage, summed over threads; a stage entered inside another is
    charged to the inner one only (a stack per thread)."""

    def __init__(self) -> None:
        self.spent: dict[str, float] = defaultdict(float)
        self.calls: dict[str, int] = defaultdict(int)
        self._local = threading.local()
        self._lock = threading.Lock()

    def _stack(self) -> list[list[Any]]:
        stack: list[list[Any]] | None = getattr(self._local, "stack", None)
        if stack is None:
            stack = self._local.stack = []
        return stack

    def enter(self, stage: str) -> None:
        now = time.thread_time()
        stack = self._stack()
        if stack:
            top = stack[-1]
            self._charge(top[0], now - top[1])
        stack.append([stage, now])

    def leave(self) -> None:
        now = time.thread_time()
        stack = self._stack()
        stage, start = stack.pop()
        self._charge(stage, now - start)
        self.calls[stage] += 1
        if stack:
            stack[-1][1] = now

    def _charge(self, stage: str, seconds: float) -> None:
        with self._lock:
            self.spent[stage] += seconds

    def wrap(self, stage: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(fn)
        def timed(*args: Any, **kwargs: Any) -> Any:
            self.enter(stage)
            try:
                return fn(*args, **kwargs)
            finally:
                self.leave()

        return timed

    def wrap_generator(self, stage: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        """``fn`` returns a generator whose every step is charged to ``stage``."""

        @functools.wraps(fn)
        def timed(*args: Any, **kwargs: Any) -> Iterator[Any]:
            inner = fn(*args, **kwargs)
            while True:
                self.enter(stage)
                try:
                    item = next(inner)
                except StopIteration:
                    return
                finally:
                    self.leave()
                yield item

        return timed


@contextmanager
def patched(clock: StageClock) -> Iterator[None]:
    """The stage functions wrapped by ``clock`` while the block runs."""
    import confluent_kafka
    import spate_avro._deserializer as avro_deser
    import spate_clickhouse._encoder as encoder
    import spate_clickhouse._frames as frames
    import spate_clickhouse._writer as writer
    import spate_json._deserializer as json_deser
    import spate_kafka._commits as commits
    import spate_kafka._source as source
    from clickhouse_connect.driver import transform

    undo: list[tuple[Any, str, Any]] = []

    def swap(owner: Any, name: str, stage: str, generator: bool = False) -> None:
        original = owner.__dict__[name] if isinstance(owner, type) else getattr(owner, name)
        fn = original.__func__ if isinstance(original, staticmethod) else original
        timed = (clock.wrap_generator if generator else clock.wrap)(stage, fn)
        setattr(owner, name, staticmethod(timed) if isinstance(original, staticmethod) else timed)
        undo.append((owner, name, original))

    class Consumer(confluent_kafka.Consumer):  # the C type's methods cannot be replaced
        consume = clock.wrap("consume", confluent_kafka.Consumer.consume)
        commit = clock.wrap("commit", confluent_kafka.Consumer.commit)

    for module in (source, commits):
        undo.append((module, "Consumer", module.Consumer))
        module.Consumer = Consumer
    for module in (json_deser, avro_deser):
        for cls in vars(module).values():
            if isinstance(cls, type) and cls.__module__ == module.__name__:
                for name in ("deserialize", "deserialize_batch"):
                    if name in cls.__dict__:
                        swap(cls, name, "decode")
    swap(frames, "prepare_frame", "checks")
    swap(encoder.RowEncoder, "prepare_rows", "checks")
    swap(encoder.ColumnBuffer, "append_rows", "checks")
    swap(frames, "arrow_stream", "encode")
    swap(transform.NativeTransform, "build_insert", "encode", generator=True)
    swap(writer.ClickHouseShardWriter, "_insert_stream", "insert")
    from clickhouse_connect.driver.client import Client

    swap(Client, "insert", "insert")
    try:
        yield
    finally:
        for owner, name, original in reversed(undo):
            setattr(owner, name, original)


def thread_cpu(names: dict[int, str] | None = None) -> dict[int, float]:
    """CPU seconds of each thread of this process so far, by thread id (its name into
    ``names`` when given)."""
    tick = os.sysconf("SC_CLK_TCK")
    out: dict[int, float] = {}
    for task in Path("/proc/self/task").iterdir():
        try:
            stat = (task / "stat").read_text()
        except OSError:
            continue  # the thread ended
        fields = stat[stat.rindex(")") + 2 :].split()
        out[int(task.name)] = (int(fields[11]) + int(fields[12])) / tick
        if names is not None:
            names[int(task.name)] = stat[stat.index("(") + 1 : stat.rindex(")")]
    return out


class ThreadSampler:
    """Each thread's CPU seconds, read every 0.1 s while a run goes on (threads that end
    during the run keep their last reading), and which of them ran Python."""

    def __init__(self) -> None:
        self.before = thread_cpu()
        self.last: dict[int, float] = dict(self.before)
        self.python: set[int] = set()
        self.names: dict[int, str] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, name="stage-sampler", daemon=True)
        self._thread.start()

    def _read(self) -> None:
        self.last.update(thread_cpu(self.names))
        self.python.update(t.native_id for t in threading.enumerate() if t.native_id)

    def _sample(self) -> None:
        while not self._stop.wait(0.1):
            self._read()

    def stop(self) -> dict[str, float]:
        """CPU seconds since the start: in threads that ran Python, in librdkafka's
        (named ``rdk:``), in unnamed native threads (Arrow's and polars' pools, which keep
        the process's name) and in named ones (chDB's)."""
        self._read()
        self._stop.set()
        self._thread.join()
        process = Path("/proc/self/comm").read_text().strip()
        kinds: dict[str, float] = defaultdict(float)
        for tid, seconds in self.last.items():
            name = self.names.get(tid, "")
            if tid in self.python:
                kind = "python threads"
            elif name.startswith("rdk:"):
                kind = "librdkafka threads"
            elif name == process:
                kind = "unnamed native threads (Arrow, polars)"
            else:
                kind = "named native threads (chDB)"
            kinds[kind] += seconds - self.before.get(tid, 0.0)
        return dict(kinds)


def profile(bench: Bench, path: str) -> tuple[StageClock, float, int, dict[str, float]]:
    clock = StageClock()
    bench.setup()
    with patched(clock):
        sampler = ThreadSampler()
        start = time.process_time()
        records = bench.columnar() if path == "columnar" else bench.row()
        total = time.process_time() - start
        kinds = sampler.stop()
    return clock, total, records, kinds


def report(
    fmt: str,
    path: str,
    profiled: tuple[StageClock, float, int, dict[str, float]],
    mb: float,
) -> None:
    clock, total, records, kinds = profiled
    print(f"== stages, {fmt}, {path}: {records:,} records, {mb:,.1f} MB, {total:.2f} CPU-s")
    known = 0.0
    for stage in STAGES:
        spent = clock.spent.get(stage, 0.0)
        known += spent
        share = 100 * spent / total if total else 0.0
        print(f"{stage:>8}: {spent:6.2f} s  {share:5.1f}%  ({clock.calls.get(stage, 0):,} calls)")
    other = total - known
    print(f"{'other':>8}: {other:6.2f} s  {100 * other / total if total else 0:5.1f}%")
    for kind, seconds in sorted(kinds.items()):
        print(f"  threads: {kind}: {seconds:.2f} s (all stages)")
    print(f"MB/s/core: {mb / total:,.1f}" if total else "MB/s/core: -")


def main() -> int:
    brokers = bootstrap()
    count = env_int("SPATE_BENCH_RECORDS", 200_000)
    formats = [a for a in sys.argv[1:] if a in FORMATS] or list(FORMATS)
    paths = [a for a in sys.argv[1:] if a in PATHS] or list(PATHS)
    print(uptime())
    with tempfile.TemporaryDirectory(prefix="spate-bench-", ignore_cleanup_errors=True) as chdb_dir:
        url = os.environ.get("SPATE_BENCH_CLICKHOUSE_URL") or f"chdb://{chdb_dir}"
        for fmt in formats:
            topic = topic_name(fmt, count)
            ensure_data(brokers, topic, fmt, count)
            mb = payload_bytes(fmt, count) / 1e6
            bench = Bench(brokers, topic, fmt, url)
            for path in paths:  # a warm-up run first: imports and first-batch set-up
                bench.setup()
                bench.columnar() if path == "columnar" else bench.row()
                report(fmt, path, profile(bench, path), mb)
    print(uptime())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
