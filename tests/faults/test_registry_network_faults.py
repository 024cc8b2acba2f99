"""Confluent Avro on the real broker with the schema registry behind a fault proxy.

A ``spate run`` pipeline (Kafka source → Confluent Avro deserializer → fsynced file sink)
reads the broker directly and reaches the registry test server only through a
:class:`~tests.support.netfault.FaultProxy`, with basic-auth credentials in the registry
URL. The run goes through phases; each registers a schema the client has never fetched,
switches a fault on and produces records under that new id, so they arrive while the
registry misbehaves:

1. a latency spike of 1 s ± 0.5 s on every chunk, around the 2 s request timeout (20 s
   at scale 1; at reduced scale until a fetch of the new id has crossed it);
2. the connections carrying the next three schema fetches reset after the registry
   answered, before the client read the answer;
3. a full partition, and
4. a blackhole (connections accepted, never answered), each until three fetches of the
   new id were cut off (two request timeouts) and at least 20 s at scale 1.

While the registry is cut off, the new id's records stall: none is written, skipped or
committed past (B21, B30), and the pipeline keeps running. After the heal every record is
delivered. The delivery sampler checks all along that committed offsets never pass what
the file holds (B1), the run ends committed to the end of the topic and exits 0 on
SIGTERM (B14), and the registry's errors name its endpoint, never the password (B67).
"""

from __future__ import annotations

import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.kafka._pipeline import start_pipeline, stop_pipeline, write_config
from tests.kafka._registry import AvroFormat, Fields, written_keys
from tests.support.delivery import DeliverySampler, wait_until
from tests.support.netfault import FaultProxy, Matcher
from tests.support.scale import current_scale, scaled
from tests.support.schema_registry import SchemaRegistryServer
from tests.support.services import (
    committed_offsets,
    create_topic,
    end_offsets,
    produce_keyed,
    unique_name,
)

pytestmark = [pytest.mark.integration, pytest.mark.e2e]

PARTITIONS = 3
USER, PASSWORD = "etl", "registry-pw-7f3a"
REQUEST_TIMEOUT = 2.0  # the registry client's ``timeout``
FMT = AvroFormat()


def schema_fetches() -> Matcher:
    """Matches the chunk that starts a ``GET /schemas/ids/{id}`` request."""

    def match(chunk: bytes) -> bool:
        return chunk.startswith(b"GET /schemas/ids/")

    return match


def phase_fields(phase: int) -> Fields:
    """A schema of its own per phase (the same text under a subject keeps its id)."""
    return (("id", "long"), (f"note{phase}", "string=n"))


@pytest.mark.timeout(900)
def test_b21_b30_registry_faults_stall_unknown_ids_and_lose_nothing(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    """B1, B21, B30: records under schema ids first seen while the registry is slow,
    reset, partitioned or blackholed wait (never skipped, never committed past) and are
    all delivered once it is back; the errors name the endpoint without credentials."""
    per_phase = scaled(5_000, minimum=300)
    full_outage = 20.0 * current_scale()  # the faults last at least this long
    topic, group = unique_name("registry-faults"), unique_name("g")
    create_topic(kafka_bootstrap, topic, PARTITIONS)
    positions: dict[bytes, tuple[int, int]] = {}
    out = tmp_path / "out.jsonl"
    log = tmp_path / "run.log"
    with (
        SchemaRegistryServer(username=USER, password=PASSWORD) as registry,
        FaultProxy(f"127.0.0.1:{registry.port}") as proxy,
    ):
        endpoint = f"http://{proxy.address}"
        section = FMT.section(f"http://{USER}:{PASSWORD}@{proxy.address}")
        section["avro"]["registry"]["timeout"] = f"{REQUEST_TIMEOUT:g}s"
        config = write_config(
            tmp_path / "c.json",
            bootstrap=kafka_bootstrap,
            topic=topic,
            group=group,
            out=out,
            bounded=False,
            deserializer=section,
        )

        def produce(phase: int) -> tuple[int, dict[int, int]]:
            """Register the phase's schema, produce its records; returns the schema id
            and the first offset of the phase in each partition."""
            fields = phase_fields(phase)
            schema_id = FMT.register(registry, "users-value", fields)
            base = phase * per_phase
            produced = produce_keyed(
                kafka_bootstrap,
                topic,
                per_phase,
                key=lambda i: b"k%d" % (base + i),
                value=lambda i: FMT.encode(schema_id, fields, {"id": base + i}),
            )
            positions.update(produced)
            first: dict[int, int] = {}
            for partition, offset in produced.values():
                first[partition] = min(offset, first.get(partition, offset))
            return schema_id, first

        def delivered() -> bool:
            return set(written_keys(out)) >= set(positions)

        sampler = DeliverySampler(
            kafka_bootstrap, group, topic, positions, lambda: written_keys(out)
        )
        proc = start_pipeline(config, log)
        try:
            produce(0)
            wait_until(delivered, 300, "the first phase delivered")
            sampler.start(every=0.3)

            # 1. latency around the request timeout: fetches are slow or time out. At
            # reduced scale the spike ends once a fetch of the new id has crossed it.
            proxy.latency(1.0, jitter=0.5)
            spiked = time.monotonic()
            schema_id, _ = produce(1)
            wait_until(
                lambda: registry.requests[f"GET /schemas/ids/{schema_id}"] > 0,
                120,
                "a schema fetch through the slow link",
            )
            time.sleep(max(0.0, full_outage - (time.monotonic() - spiked)))
            proxy.heal()
            wait_until(delivered, 300, "the latency phase delivered")

            # 2. the answers to three schema fetches reset after the registry sent them.
            proxy.cut(schema_fetches, when="reply", count=3)
            produce(2)
            wait_until(lambda: proxy.stats.cuts >= 1, 120, "a schema fetch cut")
            wait_until(delivered, 300, "the reset phase delivered")
            proxy.heal()

            # 3. and 4. a partition, then a blackhole, each past the request timeout.
            for phase, fault in ((3, proxy.partition), (4, proxy.blackhole)):
                fault()
                accepted = proxy.stats.accepted
                schema_id, first = produce(phase)
                stalled(
                    proc,
                    # three fetches cut off: the first two waited out the request timeout
                    lambda since=accepted: proxy.stats.accepted >= since + 3,
                    full_outage,
                    lambda: committed_offsets(kafka_bootstrap, group, topic, timeout=10),
                    first,
                    lambda: written_since(out, phase * per_phase),  # noqa: B023 (called now)
                    log,
                )
                asked = registry.requests[f"GET /schemas/ids/{schema_id}"]
                proxy.heal()
                wait_until(delivered, 300, f"phase {phase} delivered after the heal")
                assert registry.requests[f"GET /schemas/ids/{schema_id}"] > asked

            ends = end_offsets(kafka_bootstrap, topic)
            wait_until(
                lambda: committed_offsets(kafka_bootstrap, group, topic) == ends,
                120,
                "the final commit",
            )
            assert stop_pipeline(proc, 120) == 0, log.read_text()[-3000:]
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait(30)
            sampler.stop()
        assert proxy.stats.cuts >= 1
        assert proxy.stats.swallowed > 0
    keys = written_keys(out)
    assert set(keys) == set(positions)
    sampler.sample()
    assert not sampler.violations(), sampler.violations()[:3]
    text = log.read_text()
    unavailable = [line for line in text.splitlines() if "registry unavailable" in line]
    assert unavailable, text[-3000:]
    assert all(endpoint in line for line in unavailable), unavailable[:3]
    assert PASSWORD not in text


def written_since(out: Path, first_id: int) -> set[bytes]:
    """The keys in the file of records with an id from ``first_id`` on."""
    return {k for k in written_keys(out) if int(k[1:]) >= first_id}


def stalled(
    proc: subprocess.Popen[bytes],
    enough: Callable[[], bool],
    seconds: float,
    committed: Callable[[], dict[int, int]],
    first: dict[int, int],
    written: Callable[[], set[bytes]],
    log: Path,
) -> None:
    """Until ``enough()`` holds and ``seconds`` have passed: the pipeline runs, nothing of
    the new phase is written and no committed offset passes the phase's first record in
    its partition."""
    deadline = time.monotonic() + seconds
    give_up = time.monotonic() + 120
    while time.monotonic() < deadline or not enough():
        assert time.monotonic() < give_up, "the registry was never asked through the fault"
        assert proc.poll() is None, log.read_text()[-3000:]
        for partition, offset in committed().items():
            assert offset <= first.get(partition, offset), (partition, offset, first)
        assert not written(), sorted(written())[:5]
        time.sleep(0.3)
