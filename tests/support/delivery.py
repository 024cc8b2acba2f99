"""The no-loss sampler of the delivery tests (docs/development.md).

The producer records ``key -> (partition, offset)``. At every sampled moment the
sampler first reads the group's committed offsets, *then* reads the keys the
destination holds, and checks that every record below each committed offset is there.
Reading in that order makes the check sound: the destination only grows, so anything
committed before the read must already be visible in it. A violation means an offset
was committed ahead of the data (B1).
"""

from __future__ import annotations

import threading
import time
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

from tests.support.services import committed_offsets


@dataclass
class Sample:
    committed: dict[int, int]
    held: int
    missing: list[tuple[int, int]]


@dataclass
class DeliverySampler:
    """Samples committed offsets against a destination, in the background or on demand."""

    bootstrap: str
    group: str
    topic: str
    positions: Mapping[bytes, tuple[int, int]]
    destination_keys: Callable[[], Iterable[bytes]]
    samples: list[Sample] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    _by_partition: dict[int, dict[int, bytes]] = field(default_factory=dict)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def _index(self) -> dict[int, dict[int, bytes]]:
        # ``positions`` may still be growing (a producer running alongside): index a copy.
        snapshot = dict(self.positions)
        if len(snapshot) != sum(len(p) for p in self._by_partition.values()):
            by_partition: dict[int, dict[int, bytes]] = defaultdict(dict)
            for key, (partition, offset) in snapshot.items():
                by_partition[partition][offset] = key
            self._by_partition = dict(by_partition)
        return self._by_partition

    def sample(self) -> Sample:
        """One check: committed offsets first, then the destination."""
        try:
            committed = committed_offsets(self.bootstrap, self.group, self.topic, timeout=10)
        except Exception as exc:  # a broker being restarted: record it, sample again later
            self.errors.append(repr(exc))
            return Sample({}, 0, [])
        index = self._index()
        try:
            held = set(self.destination_keys())
        except Exception as exc:  # the destination is down (a fault under test): no sample
            self.errors.append(repr(exc))
            return Sample(committed, 0, [])
        missing = [
            (partition, offset)
            for partition, upto in committed.items()
            for offset, key in index.get(partition, {}).items()
            if offset < upto and key not in held
        ]
        result = Sample(committed, len(held), missing)
        self.samples.append(result)
        return result

    def violations(self) -> list[Sample]:
        return [s for s in self.samples if s.missing]

    def start(self, every: float = 0.5) -> None:
        def loop() -> None:
            while not self._stop.wait(every):
                self.sample()

        self._thread = threading.Thread(target=loop, name="delivery-sampler", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(30)


def wait_until(predicate: Callable[[], bool], timeout: float, what: str) -> None:
    """Poll ``predicate`` until it holds; fail naming ``what`` after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(0.2)


def wait_for_growth(
    measure: Callable[[], int],
    timeout: float,
    what: str,
    *,
    or_else: Callable[[], bool] | None = None,
) -> None:
    """Until ``measure()`` (rows written, offsets committed) passes what it reads now, or
    ``or_else()`` holds (say, nothing more can come): progress, waited for as a condition."""
    before = measure()
    wait_until(lambda: measure() > before or (or_else is not None and or_else()), timeout, what)


class PacedProducer(threading.Thread):
    """Produces records at a steady pace from a background thread, recording positions.

    ``records`` yields ``(identity, key, value)``; ``positions[identity]`` becomes the
    ``(partition, offset)`` the record landed at. Production is spread over about
    ``seconds`` so that a pipeline under test is still mid-stream when a fault is
    injected. ``produced`` counts records handed to the producer so far.
    """

    def __init__(
        self,
        bootstrap: str,
        topic: str,
        records: Iterable[tuple[bytes, bytes | None, bytes]],
        count: int,
        seconds: float,
    ) -> None:
        from confluent_kafka import Producer

        super().__init__(name="paced-producer", daemon=True)
        self.topic = topic
        self.records = records
        self.count = count
        self.seconds = seconds
        self.positions: dict[bytes, tuple[int, int]] = {}
        self.errors: list[str] = []
        self.produced = 0
        self.stretch: Callable[[], bool] | None = None
        """While set and true, the last tenth of the records goes one per pause: a test
        whose faults need records still flowing (commits come only while records do)
        holds production open until they have happened, however slow the machine."""
        self._producer = Producer(
            {"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 20}
        )

    def _report(self, identity: bytes) -> Callable[[object, object], None]:
        def on_delivery(err: object, msg: object) -> None:
            if err is not None:
                self.errors.append(str(err))
            else:
                self.positions[identity] = (msg.partition(), msg.offset())  # type: ignore[attr-defined]

        return on_delivery

    def _produce(self, identity: bytes, key: bytes | None, value: bytes) -> None:
        """Hand one record to the producer (waiting while its queue is full); count it."""
        while True:
            try:
                self._producer.produce(self.topic, value, key, on_delivery=self._report(identity))
                break
            except BufferError:
                self._producer.poll(0.05)
        self.produced += 1

    def run(self) -> None:
        chunk = max(1, self.count // 100)
        pause = self.seconds / 100
        for identity, key, value in self.records:
            self._produce(identity, key, value)
            stretch = self.stretch
            trickle = stretch is not None and self.produced >= self.count * 0.9 and stretch()
            if trickle or self.produced % chunk == 0:
                self._producer.flush(30)
                time.sleep(pause)
        self._producer.flush(120)

    def finish(self, timeout: float = 300) -> dict[bytes, tuple[int, int]]:
        """Wait until everything is produced; fail on any delivery error."""
        self.join(timeout)
        if self.is_alive() or self.errors or len(self.positions) != self.count:
            delivered = len(self.positions)
            raise AssertionError(
                f"producer: {delivered} of {self.count} delivered, errors {self.errors[:3]}"
            )
        return self.positions
