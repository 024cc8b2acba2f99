"""The change-data-capture proof, end to end (B410-B413).

PostgreSQL (``scripts/services.sh up postgres``) -> Debezium's PostgreSQL connector in Kafka
Connect (``up connect``) -> the real broker -> ``spate run`` on
``examples/postgres_cdc_to_clickhouse.yaml`` under ``pipeline.delivery: effectively_once``
-> the ClickHouse HTTP front, into a ``ReplacingMergeTree(_version, _is_deleted)`` table
(``items``) and a ``CollapsingMergeTree(_sign)`` table (``items_signed``).

A seeded random workload (inserts, updates, primary-key changes, deletes, a column added
mid-stream, transactions of several statements) runs on a ``REPLICA IDENTITY FULL`` table
while the pipeline is killed with SIGKILL, ClickHouse is stopped for a while and a second
member joins the group and leaves it. At the end ``SELECT ... FINAL`` of ``items`` and the
sign-collapsed rows of ``items_signed`` both equal the PostgreSQL table row for row, and no
key's raw ``sum(_sign)`` is ever outside 0..1, sampled throughout (a duplicate would make it
2, a lost state row -1). The second case starts the connector on a pre-filled table with the
workload running during its snapshot.

The workload has no ``TRUNCATE``: the example's operator refuses one by default (B377), and
``truncate="skip"`` keeps the truncated rows, so neither ends equal to the source; the unit
tests cover both. The added column is declared in the sink beforehand (JSON change events
describe no table; the Avro ``envelope: debezium`` adds it itself, B380).

Volumes and the number of kills follow ``SPATE_TEST_SCALE``.
"""

from __future__ import annotations

import contextlib
import os
import random
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.support.cdc import (
    Capture,
    CdcServices,
    Postgres,
    Workload,
    create_table,
    prefilled,
    register,
    wait_until,
)
from tests.support.cdc_target import Target, source_rows
from tests.support.chfront_fixtures import FrontFactory
from tests.support.scale import current_scale, scaled
from tests.support.services import create_topic, unique_name

pytestmark = [pytest.mark.integration, pytest.mark.e2e]

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "postgres_cdc_to_clickhouse.yaml"
CHAIN = "examples.postgres_cdc_to_clickhouse:chains"
SPATE = Path(sys.executable).parent / "spate"
TABLE = "public.items"
PARTITIONS = 3


# ---------------------------------------------------------------- sampling


@dataclass
class SignSampler:
    """Samples the raw sign sums every ``every`` seconds in a thread; keeps what left 0..1."""

    target: Target
    every: float = 0.5
    samples: int = 0
    violations: list[tuple[int, int]] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def sample(self) -> None:
        try:
            low, high = self.target.sign_range()
        except Exception:  # not created yet, or ClickHouse is stopped
            return
        self.samples += 1
        if low < 0 or high > 1:
            self.violations.append((low, high))

    def __enter__(self) -> SignSampler:
        def loop() -> None:
            while not self._stop.wait(self.every):
                self.sample()

        self._thread = threading.Thread(target=loop, name="sign-sampler", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(30)
        self.sample()


# ---------------------------------------------------------------- the pipeline


@dataclass
class Group:
    """``spate run`` of the example, as members of one consumer group sharing a log."""

    env: dict[str, str]
    log: Path
    proc: subprocess.Popen[bytes] | None = None
    _mark: int = 0

    @classmethod
    def of(cls, bootstrap: str, topic: str, url: str, log: Path) -> Group:
        env = {
            **os.environ,
            "PYTHONUNBUFFERED": "1",
            "PYTHONPATH": str(ROOT),
            "KAFKA_BROKERS": bootstrap,
            "KAFKA_TOPIC": topic,
            "KAFKA_GROUP": unique_name("cdc-proof"),
            "CLICKHOUSE_URL": url,
            "PIPELINE_NAME": unique_name("cdc-proof"),
            "KAFKA_SESSION_TIMEOUT_MS": "6000",
            "SPATE_ADMIN_LISTEN": "none",
        }
        return cls(env, log)

    def spawn(self, log: Path | None = None) -> subprocess.Popen[bytes]:
        with (log or self.log).open("ab") as out:
            return subprocess.Popen(
                [str(SPATE), "run", str(EXAMPLE), "--chain", CHAIN],
                stdout=out,
                stderr=subprocess.STDOUT,
                env=self.env,
                cwd=ROOT,
            )

    def start(self) -> None:
        self._mark = self.log.stat().st_size if self.log.exists() else 0
        self.proc = self.spawn()

    def tail(self, log: Path | None = None) -> str:
        return (log or self.log).read_text(errors="replace")[-4000:]

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def wait_started(self, timeout: float = 180) -> None:
        """Until the current process got its partitions (past the sinks' start-up)."""

        def started() -> bool:
            assert self.alive(), self.tail()
            with self.log.open("rb") as log:
                log.seek(self._mark)
                return b"partitions assigned" in log.read()

        wait_until(started, "the pipeline past its start-up", timeout)

    def kill_and_restart(self) -> None:
        assert self.proc is not None and self.alive(), self.tail()
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(30)
        self.start()

    def stop(self) -> int:
        assert self.proc is not None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(120)

    def rebalance(self, tmp_path: Path, wait_for_write: Callable[[], None]) -> None:
        """A second member joins (the partitions are shared out again), writes, and leaves
        with SIGTERM (they come back to the first)."""
        second_log = tmp_path / "second.log"
        second = self.spawn(second_log)
        try:
            wait_until(
                lambda: second_log.exists() and b"partitions assigned" in second_log.read_bytes(),
                "the second member's partitions",
                180,
            )
            wait_for_write()
        finally:
            if second.poll() is None:
                second.send_signal(signal.SIGTERM)
            code = second.wait(120)
        assert code == 0, self.tail(second_log)


def wait_for_write(target: Target, group: Group, timeout: float = 180) -> None:
    """Until ``items`` grows (the running pipeline wrote since)."""
    before = target.written()

    def grew() -> bool:
        assert group.alive(), group.tail()
        return target.written() > before

    wait_until(grew, "a write by the pipeline", timeout)


# ---------------------------------------------------------------- the workload


class Paced:
    """The workload's transactions in ``chunks`` from a thread, a pause after each, never
    past the share the test has allowed: the faults interleave with the workload whatever
    a process's start-up takes."""

    def __init__(
        self, workload: Workload, postgres: Postgres, database: str, chunks: int, pause: float
    ) -> None:
        self.workload, self.postgres, self.database = workload, postgres, database
        self.chunks, self.pause = chunks, pause
        self.done = 0
        self.allowed = 0
        self.error: BaseException | None = None
        self._changed = threading.Condition()
        self._thread = threading.Thread(target=self._run, name="workload", daemon=True)

    def _run(self) -> None:
        total = len(self.workload.transactions)
        try:
            for chunk in range(self.chunks):
                with self._changed:
                    self._changed.wait_for(lambda chunk=chunk: self.allowed > chunk)
                start, stop = total * chunk // self.chunks, total * (chunk + 1) // self.chunks
                if stop > start:
                    self.workload.run(self.postgres, self.database, start, stop)
                self.done = chunk + 1
                time.sleep(self.pause)
        except BaseException as exc:
            self.error = exc

    def allow(self, share: float) -> None:
        """Let the workload run up to ``share`` of its transactions (starts the thread)."""
        with self._changed:
            self.allowed = max(self.allowed, min(self.chunks, round(self.chunks * share)))
            self._changed.notify_all()
        if not self._thread.is_alive() and self.done < self.chunks:
            self._thread.start()

    def finish(self) -> None:
        self.allow(1.0)
        self._thread.join(600)
        if self.error is not None:
            raise self.error
        assert self.done == self.chunks


# ---------------------------------------------------------------- the cases


@pytest.fixture
def capture_topic(cdc_services: CdcServices) -> Iterator[tuple[str, str]]:
    """A fresh topic prefix and its table's topic, created with several partitions
    (Debezium keys each record by the primary key, so a key keeps its order)."""
    prefix = f"cdc_{unique_name('proof').replace('-', '_')}"
    topic = f"{prefix}.{TABLE}"
    create_topic(cdc_services.bootstrap, topic, PARTITIONS)
    yield prefix, topic


def assert_equal(postgres: Postgres, database: str, target: Target, group: Group) -> None:
    """Wait until both tables equal the source (the pipeline catches up), then assert it."""
    expected = source_rows(postgres, database, TABLE)

    def caught_up() -> bool:
        assert group.alive(), group.tail()
        try:
            return target.replacing() == expected and target.collapsed() == expected
        except Exception:
            return False

    with contextlib.suppress(TimeoutError):  # the asserts below say how they differ
        wait_until(caught_up, "ClickHouse equal to PostgreSQL", 300)
    assert target.replacing() == expected
    assert target.collapsed() == expected
    # A key whose signs cancel (a delete) can be gone altogether once a merge collapsed it.
    low, high = target.sign_range()
    assert low >= 0 and high == (1 if expected else 0), (low, high)


@contextlib.contextmanager
def proving(group: Group, capture: Capture, target: Target) -> Iterator[SignSampler]:
    """Sample the sign sums while the body runs; then stop the pipeline (exit 0), remove
    the connector, and check that some sample was taken and none left 0..1 (B411)."""
    try:
        with SignSampler(target) as sampler:
            yield sampler
        assert group.stop() == 0, group.tail()
    finally:
        if group.alive():
            group.stop()
        capture.close()
    assert sampler.samples > 0
    assert not sampler.violations, sampler.violations[:5]


def test_b410_a_random_workload_under_kills_an_outage_and_a_rebalance_ends_equal(
    cdc_services: CdcServices,
    cdc_database: str,
    capture_topic: tuple[str, str],
    chfront: FrontFactory,
    tmp_path: Path,
) -> None:
    """B410: the workload (no truncate; a column added mid-stream) streamed through the
    example under effectively-once, with SIGKILLs mid-stream, a ClickHouse outage and a
    rebalance both ways: the replacing table's ``FINAL`` and the collapsing table's
    sign-collapsed rows equal PostgreSQL row for row, and no key's raw ``sum(_sign)`` is
    ever outside 0..1 (B411)."""
    seed = int(os.environ.get("SPATE_CDC_SEED", "410"))
    rng = random.Random(seed)
    postgres = cdc_services.postgres
    prefix, topic = capture_topic
    create_table(postgres, cdc_database, TABLE, replica_identity_full=True)
    capture = register(cdc_services, cdc_database, [TABLE], snapshot_mode="no_data", prefix=prefix)
    front = chfront()
    target = Target(front.client)
    group = Group.of(cdc_services.bootstrap, topic, front.url, tmp_path / "pipeline.log")
    workload = Workload.generate(
        TABLE, seed=seed, operations=scaled(6000, minimum=600), truncate=False
    )
    paced = Paced(workload, postgres, cdc_database, chunks=60, pause=0.2)
    kills = max(2, round(6 * current_scale()))
    outage = 10.0 * min(1.0, max(current_scale() * 2, 0.4))
    group.start()
    with proving(group, capture, target):
        for kill in range(kills):
            # The workload's segment for this fault, let through in thirds.
            low, high = kill / (kills + 1), (kill + 1) / (kills + 1)
            middle = low + 2 * (high - low) / 3
            paced.allow(low + (high - low) / 3)
            wait_for_write(target, group)

            def write_more(share: float = middle) -> None:
                paced.allow(share)
                wait_for_write(target, group)

            if kill == 0:  # a second member joins, writes its share, and leaves
                group.rebalance(tmp_path, write_more)
            if kill == 1:  # ClickHouse stopped while the pipeline runs
                group.wait_started()
                front.stop()
                paced.allow(middle)
                time.sleep(outage)
                assert group.alive(), group.tail()
                front.start()
                wait_for_write(target, group)
            paced.allow(high)
            time.sleep(rng.uniform(0.0, 1.0))
            group.kill_and_restart()  # mid-stream: the workload is still running
        paced.finish()
        assert_equal(postgres, cdc_database, target, group)


def test_b412_the_snapshot_of_a_prefilled_table_hands_over_without_loss_or_duplication(
    cdc_services: CdcServices,
    cdc_database: str,
    capture_topic: tuple[str, str],
    chfront: FrontFactory,
    tmp_path: Path,
) -> None:
    """B412: the connector starts on a pre-filled table while the pipeline runs and the
    workload changes the table during the snapshot; after a SIGKILL while the snapshot's
    rows are written, both ClickHouse tables equal PostgreSQL and no key's raw
    ``sum(_sign)`` leaves 0..1 (each row read once, each change after it applied once)."""
    postgres = cdc_services.postgres
    prefix, topic = capture_topic
    workload = prefilled(
        postgres,
        cdc_database,
        TABLE,
        scaled(20000, minimum=2000),
        seed=412,
        operations=scaled(2000, minimum=300),
        replica_identity_full=True,
    )
    half = len(workload.transactions) // 2
    front = chfront()
    target = Target(front.client)
    group = Group.of(cdc_services.bootstrap, topic, front.url, tmp_path / "pipeline.log")
    group.start()
    capture = register(
        cdc_services, cdc_database, [TABLE], snapshot_mode="initial", prefix=prefix, wait=False
    )
    with proving(group, capture, target):
        workload.run(postgres, cdc_database, 0, half)
        wait_until(lambda: postgres.slot_consistent(capture.slot), "slot consistent")
        workload.run(postgres, cdc_database, half)
        wait_for_write(target, group)
        group.kill_and_restart()
        capture.wait_streaming()
        assert_equal(postgres, cdc_database, target, group)
