"""The cross-process commit gate on a real nats-server (B52).

Two gates on one destination, each with its own NATS connection and its own in-process
lock (as in two processes), hammer the gate: never two holders at once, and every part
each publishes is in the final manifest. A holder that stalls longer than the timeout
does not stop the other from publishing.

The gate is best effort by design: a writer whose store call fails, or that waits past
``gate_timeout``, publishes without it (the manifest's compare-and-set keeps that
correct), and a holder that stalls past the lease loses it. So the test that asserts
mutual exclusion gives the store room a loaded machine needs — requests, the lease and
the wait all a minute or more — and names a bypass as such if one still happens, rather
than reporting it as two holders.
"""

from __future__ import annotations

import logging
import threading
import uuid
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from spate.checkpoint._ack import AckStatus
from spate.config import decode
from spate.errors import ConfigError
from spate.records import Lane
from spate.sink.writebehind import CommitGates
from spate.testing.conformance import conformance_context
from spate_coordination import NatsStoreConfig
from spate_coordination._nats import NatsStore
from spate_parquet import (
    LocalStore,
    Manifest,
    ManifestStore,
    ParquetSinkConfig,
    Part,
    StoreGate,
    build_sink,
)

from .harness import Feeder

pytestmark = pytest.mark.integration


ROOMY = 60.0
"""Request timeout and lease duration of the exclusion test: far beyond any stall."""


def _gate(url: str, job: str, destination: str, timeout: float, *, lease: float = 5.0) -> StoreGate:
    config = NatsStoreConfig(servers=[url], connect_timeout=ROOMY, request_timeout=ROOMY)
    # A registry of its own: its own process, as far as the in-process lock goes.
    return StoreGate(destination, timeout, NatsStore(config, job, lease), gates=CommitGates())


def test_b52_the_coordination_gate_admits_one_writer_at_a_time(
    nats_url: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    job = f"gate-{uuid.uuid4().hex[:8]}"
    destination = f"file://{tmp_path}#t"
    gates = [_gate(nats_url, job, destination, timeout=2 * ROOMY, lease=ROOMY) for _ in range(2)]
    store = LocalStore(str(tmp_path))
    inside: list[int] = []
    overlaps: list[int] = []
    lock = threading.Lock()
    per_writer = 15

    def write(i: int) -> None:
        manifests = ManifestStore(store, "t", gates[i])
        for n in range(per_writer):
            part = Part(f"t.parts/w{i}-{n}.parquet", 1, 1, f"s{i}", 0, n, n, 0)

            def publish(part: Part = part) -> Manifest:
                with lock:
                    inside.append(i)
                    if len(inside) > 1:
                        overlaps.append(len(inside))
                threading.Event().wait(0.005)
                try:
                    return manifests._publish(part, "id: int64")
                finally:
                    with lock:
                        inside.remove(i)

            gates[i].run(publish)

    failures: list[BaseException] = []

    def writer(i: int) -> None:
        try:
            write(i)
        except BaseException as exc:  # reported below, not lost with the thread
            failures.append(exc)

    caplog.set_level(logging.WARNING, logger="spate_parquet._gate")
    threads = [threading.Thread(target=writer, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for gate in gates:
        gate.close()
    bypassed = [r.getMessage() for r in caplog.records if "without it" in r.getMessage()]
    assert bypassed == [], f"a writer published without the gate, not a second holder: {bypassed}"
    assert failures == []
    assert overlaps == []
    final = ManifestStore(store, "t", gates[0]).latest()
    assert len(final.parts) == 2 * per_writer


def test_b52_a_stalled_holder_elsewhere_does_not_stop_publishing(
    nats_url: str,
    tmp_path: Path,
) -> None:
    job = f"gate-{uuid.uuid4().hex[:8]}"
    destination = f"file://{tmp_path}#t"
    stalled = _gate(nats_url, job, destination, timeout=30.0)
    other = _gate(nats_url, job, destination, timeout=0.3)
    held, release = threading.Event(), threading.Event()

    def hold() -> Any:
        held.set()
        release.wait(60)
        return None

    holder = threading.Thread(target=stalled.run, args=(hold,))
    holder.start()
    assert held.wait(60)
    try:
        manifest = ManifestStore(LocalStore(str(tmp_path)), "t", other).publish(
            Part("t.parts/p.parquet", 1, 1, "s", 0, 0, 0, 0), "id: int64"
        )
    finally:
        release.set()
        holder.join()
        stalled.close()
        other.close()
    assert manifest.version == 1


def test_b52_gate_coordination_uses_the_pipelines_coordination_store(
    nats_url: str, tmp_path: Path
) -> None:
    body = {
        "path": str(tmp_path),
        "publish": "manifest",
        "table": "t",
        "gate": "coordination",
        "gate_timeout": "10s",
    }
    config = decode(ParquetSinkConfig, body, "sinks.lake.parquet")
    with pytest.raises(ConfigError, match="coordination section"):
        build_sink(config, conformance_context("lake"))
    context = replace(
        conformance_context("lake"),
        coordination={
            "store": {"nats": {"servers": [nats_url]}},
            "job": f"j-{uuid.uuid4().hex[:8]}",
        },
    )
    sink = build_sink(config, context)
    sink.start()
    try:
        feeder = Feeder(sink)
        token = feeder.batch(Lane("orders", 0), 0, [{"id": 1}, {"id": 2}])
        assert sink.flush(float("inf"))
        assert isinstance(sink._gate, StoreGate)
    finally:
        sink.close()
    assert token.status is AckStatus.DELIVERED
    assert ManifestStore(LocalStore(str(tmp_path)), "t", sink._gate).latest().total_rows == 2
