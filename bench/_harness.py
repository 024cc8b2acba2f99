"""How every benchmark measures (docs/development.md, performance rules), in one place.

Both sides do the same work on the same data; they run interleaved (framework,
baseline, framework, …), each at least three times after one warm-up run each, in one
invocation. The report gives each side's median, the ratio of medians
(``ratio: 0.93`` = the framework reaches 93% of the baseline's throughput) and the
process's peak RSS. It also gives each side's CPU seconds (this process, all its threads)
and ``cpu ratio:``, the ratio of their medians: on a machine shared with other work the
wall-clock times mostly measure waiting for a core, the CPU seconds what each side costs.
"""

from __future__ import annotations

import os
import resource
import statistics
import time
from collections.abc import Callable

Side = Callable[[], int]
"""One measured run: does the work and returns how many records it handled."""


def env_int(name: str, default: int) -> int:
    raw = os.environ.get(name)
    return int(raw) if raw else default


def uptime() -> str:
    """The machine's load when the line is printed: benchmark figures are read beside it."""
    one, five, fifteen = os.getloadavg()
    return f"uptime: load average {one:.2f}, {five:.2f}, {fifteen:.2f} on {os.cpu_count()} cores"


def peak_rss_mib() -> float:
    """Peak resident set size of this process (and its finished children), in MiB."""
    own = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    children = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    return max(own, children) / 1024


def measure(
    sides: dict[str, Side],
    *,
    runs: int,
    warmup: bool = True,
    setup: Callable[[], None] | None = None,
) -> tuple[dict[str, list[float]], dict[str, list[float]], dict[str, int]]:
    """Run ``sides`` interleaved (one warm-up each, then ``runs`` rounds of every side in
    turn): each side's wall-clock seconds, CPU seconds of this process and record count.

    ``setup``, when given, runs before every run of any side and is not timed.
    """
    if warmup:
        for side in sides.values():
            if setup is not None:
                setup()
            side()
    times: dict[str, list[float]] = {name: [] for name in sides}
    cpu: dict[str, list[float]] = {name: [] for name in sides}
    counts: dict[str, int] = {}
    for _ in range(runs):
        for name, side in sides.items():
            if setup is not None:
                setup()
            start, cpu_start = time.perf_counter(), time.process_time()
            counts[name] = side()
            times[name].append(time.perf_counter() - start)
            cpu[name].append(time.process_time() - cpu_start)
    return times, cpu, counts


def print_ratio(label: str, baseline: list[float], framework: list[float]) -> float:
    """``label: R`` (ratio of the medians, baseline over framework: above 1, the framework
    is faster or cheaper) and ``label spread:`` (each interleaved pair's own ratio)."""
    ratio = statistics.median(baseline) / statistics.median(framework)
    print(f"{label}: {ratio:.2f}")
    pairs = [b / f for b, f in zip(baseline, framework, strict=True) if f > 0]
    if pairs:
        print(f"{label} spread: {min(pairs):.2f}..{max(pairs):.2f} over {len(pairs)} pairs")
    return ratio


def compare(
    title: str,
    framework: Side,
    baseline: Side,
    *,
    runs: int | None = None,
    warmup: bool = True,
    label: str = "ratio",
    setup: Callable[[], None] | None = None,
) -> float:
    """Run both sides interleaved and print the report; return the ratio of medians.

    ``setup``, when given, runs before every run of either side and is not timed: what a
    running system would already have (a destination's tables, say), not work per record.
    """
    runs = runs if runs is not None else max(3, env_int("SPATE_BENCH_RUNS", 3))
    sides = {"framework": framework, "baseline": baseline}
    times, cpu, counts = measure(sides, runs=runs, warmup=warmup, setup=setup)
    print(f"== {title}")
    for name, measured in times.items():
        median = statistics.median(measured)
        rate = counts[name] / median if median > 0 else float("inf")
        listed = ", ".join(f"{t:.3f}" for t in measured)
        print(
            f"{name}: {counts[name]:,} records, median {median:.3f}s ({rate:,.0f}/s); runs {listed}"
        )
        cpu_listed = ", ".join(f"{t:.2f}" for t in cpu[name])
        print(f"{name} cpu: median {statistics.median(cpu[name]):.2f}s; runs {cpu_listed}")
    ratio = print_ratio(label, times["baseline"], times["framework"])
    cpu_ratio = statistics.median(cpu["baseline"]) / statistics.median(cpu["framework"])
    print(f"cpu {label}: {cpu_ratio:.2f}")
    print(f"peak RSS: {peak_rss_mib():.0f} MiB")
    return ratio
