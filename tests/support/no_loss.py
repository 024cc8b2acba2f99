"""The no-loss scenario of the flagship fault tests, on the real broker (B1, B14).

A pipeline runs as a process (``launch`` starts it, its output appended to one log)
while a :class:`PacedProducer` writes storefront events and a :class:`DeliverySampler`
checks that the group's committed offsets never pass what is durable. A test drives
its own faults (kills, outages, a second member) through a :class:`NoLossRun`; the run
then lets the producer finish, waits until every event is delivered and the final
offsets are committed, stops the pipeline with SIGTERM and checks that it exited 0,
that the sampler saw enough moments and that none of them was a violation.
"""

from __future__ import annotations

import importlib.util
import os
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

from spate_datagen import encode_avro, storefront_events

from tests.support.delivery import DeliverySampler, PacedProducer, wait_for_growth, wait_until
from tests.support.services import SESSION_TIMEOUT_MS, committed_offsets, end_offsets

ROOT = Path(__file__).resolve().parents[2]
FLAGSHIP = ROOT / "examples" / "kafka_avro_to_clickhouse.py"

TABLES = {"OrderPlaced": "orders", "PaymentCaptured": "payments", "RefundIssued": "refunds"}
"""The flagship's tables by event kind."""

Held = Callable[[], set[bytes]]


def storefront_records(count: int) -> Iterator[tuple[bytes, bytes, bytes]]:
    """``(b"<kind>:<order_id>", key, raw Avro)`` for each storefront event."""
    for event in storefront_events(count, seed=3):
        yield f"{event.kind}:{event.order_id}".encode(), event.key, encode_avro(event)


def held_identities(client: Any, database: str) -> set[bytes]:
    """The ``<kind>:<order_id>`` identities in the flagship's tables of ``database``."""
    held: set[bytes] = set()
    for kind, table in TABLES.items():
        result = client.query(f"SELECT order_id FROM {database}.{table}")
        held.update(f"{kind}:{row[0]}".encode() for row in result.result_rows)
    return held


def flagship_env(
    bootstrap: str, topic: str, group: str, clickhouse_url: str, database: str, name: str
) -> dict[str, str]:
    """The environment of the flagship YAML, unbounded, with no admin port.

    Commits and inserts every second, not at the flagship's 5 s default: a restarted
    process must still have rows to write after an outage, which one 50,000-row batch
    would otherwise take at once. A 3 s session (heartbeats every second): the group
    gives a killed member's partitions to its successor that much sooner.
    """
    return {
        **os.environ,
        "KAFKA_BROKERS": bootstrap,
        "KAFKA_TOPIC": topic,
        "KAFKA_GROUP": group,
        "KAFKA_SESSION_TIMEOUT_MS": str(SESSION_TIMEOUT_MS),
        "STOP_AT": "never",
        "CLICKHOUSE_URL": clickhouse_url,
        "CLICKHOUSE_DATABASE": database,
        "SPATE_ADMIN_LISTEN": "none",
        "PIPELINE_NAME": name,
        "CHECKPOINT_INTERVAL": "1s",
        "SINK_LINGER": "1s",
    }


def launch(args: Sequence[str], env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    """``python ARGS`` with stdout and stderr appended to ``log``."""
    with log.open("ab") as out:
        return subprocess.Popen(
            [sys.executable, *args], stdout=out, stderr=subprocess.STDOUT, env=env
        )


def start_flagship(
    env: dict[str, str], log: Path, example: Path = FLAGSHIP
) -> subprocess.Popen[bytes]:
    """An example script of the flagship (``--no-create-tables``) as a process."""
    return launch([str(example), "--no-create-tables"], env, log)


def load_example(example: Path = FLAGSHIP) -> Any:
    """The flagship example as a module (its ``create_tables``, its chains)."""
    spec = importlib.util.spec_from_file_location("flagship", example)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class NoLossRun:
    """One pipeline process, the paced producer and the sampler of one scenario."""

    def __init__(
        self,
        bootstrap: str,
        topic: str,
        group: str,
        *,
        count: int,
        seconds: float,
        start: Callable[[], subprocess.Popen[bytes]],
        log: Path,
        durable: Held,
        delivered: Held | None = None,
    ) -> None:
        """``durable`` is what the sampler compares the commits with; ``delivered``
        (default: ``durable``) what must hold every event at the end."""
        self.bootstrap, self.topic, self.group = bootstrap, topic, group
        self.count = count
        self.log = log
        self._start = start
        self.delivered = delivered or durable
        self._log_mark = log.stat().st_size if log.exists() else 0
        """Where the current process's part of the shared log begins."""
        self.proc = start()
        self.members: list[subprocess.Popen[bytes]] = []
        """Other processes of the group a test started; sent SIGTERM at the end too."""
        self.producer = PacedProducer(
            bootstrap, topic, storefront_records(count), count, seconds=seconds
        )
        self.sampler = DeliverySampler(bootstrap, group, topic, self.producer.positions, durable)

    def tail(self) -> str:
        return self.log.read_text(errors="replace")[-3000:]

    def wait(self, predicate: Callable[[], bool], timeout: float, what: str) -> None:
        """:func:`wait_until`, failing with the pipeline's exit code and log tail."""
        try:
            wait_until(predicate, timeout, what)
        except AssertionError as exc:
            raise AssertionError(
                f"{exc}; exit code {self.proc.poll()}; log: {self.tail()}"
            ) from None

    def wait_for_growth(
        self, measure: Callable[[], int], timeout: float, what: str, *, or_done: bool = False
    ) -> None:
        """:func:`wait_for_growth` of ``measure()``, failing with the pipeline's exit code
        and log tail; with ``or_done``, also once the producer has finished (nothing more
        may come)."""
        done = (lambda: not self.producer.is_alive()) if or_done else None
        try:
            wait_for_growth(measure, timeout, what, or_else=done)
        except AssertionError as exc:
            raise AssertionError(
                f"{exc}; exit code {self.proc.poll()}; log: {self.tail()}"
            ) from None

    def wait_produced(self, share: float) -> None:
        wait_until(
            lambda: self.producer.produced >= self.count * share, 300, f"{share:.0%} produced"
        )

    def kill_and_restart(self) -> None:
        """SIGKILL the pipeline and start it again on the same log."""
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(30)
        self._log_mark = self.log.stat().st_size if self.log.exists() else 0
        self.proc = self._start()

    def wait_started(self, timeout: float = 180) -> None:
        """Until the current process is past its start-up: its part of the log says its
        partitions were assigned, and the source subscribes only after every sink has
        started (probing its endpoints, B29). A test that stops ClickHouse waits for this
        first: rows growing in a table can be a killed process's last insert finishing,
        and a producer that is done says nothing of the process, so neither shows that
        the new one is running, and a start-up that meets the outage fails (B29)."""

        def started() -> bool:
            with self.log.open("rb") as log:
                log.seek(self._log_mark)
                return b"partitions assigned" in log.read()

        self.wait(started, timeout, "the pipeline past its start-up")

    def produced_by_kind(self) -> dict[str, int]:
        """How many events of each kind the producer wrote."""
        by_kind = dict.fromkeys(TABLES, 0)
        for identity in self.producer.positions:
            by_kind[identity.decode().split(":")[0]] += 1
        return by_kind

    def run(self, faults: Callable[[], None]) -> None:
        """Produce, run ``faults``, then finish and check the delivery (B1, B14, B16)."""
        self.producer.start()
        self.sampler.start(every=0.5)
        try:
            faults()
            self.producer.finish(600)
            wait_until(
                lambda: self.delivered() >= set(self.producer.positions),
                600,
                "every event in ClickHouse",
            )
            ends = end_offsets(self.bootstrap, self.topic)
            wait_until(
                lambda: committed_offsets(self.bootstrap, self.group, self.topic) == ends,
                120,
                "final commit",
            )
        finally:
            for member in (self.proc, *self.members):
                if member.poll() is None:
                    member.send_signal(signal.SIGTERM)
            code = self.proc.wait(120)
            self.sampler.stop()
        assert code == 0, self.tail()
        self.sampler.sample()
        assert len(self.sampler.samples) > 10
        assert not self.sampler.violations(), self.sampler.violations()[:3]


def assert_final_counts(client: Any, database: str, by_kind: dict[str, int]) -> None:
    """Every event exactly once after ``FINAL`` in its table (ReplacingMergeTree)."""
    for kind, table in TABLES.items():
        final = int(client.command(f"SELECT count() FROM {database}.{table} FINAL"))
        distinct = int(client.command(f"SELECT uniqExact(order_id) FROM {database}.{table}"))
        assert final == distinct == by_kind[kind], (table, final, distinct, by_kind[kind])
