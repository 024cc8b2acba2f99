"""Effectively once across a hand-over of partitions, as real processes (B125).

``spate run`` reads a two-partition topic through the JSON deserializer into a plain
``MergeTree`` table on the ClickHouse HTTP front under ``pipeline.delivery:
effectively_once`` (each message is ``{"k": key}``, every key distinct). Member A writes
the first records; then the front holds A's next request — the intent of its next block
— while the partitions move on:

- a second member joins: A's revocation gives up waiting after ``drain_timeout`` and the
  group hands the partitions over, the new owners read the intents without the held one
  and write every record their own way; then the held intent lands;
- A is frozen with SIGSTOP past its session timeout, so the group gives every partition
  to a second member, which writes every record; the held intent lands while A is still
  frozen, then A gets SIGCONT.

Either way the table must end with every key exactly once: an owner whose intent landed
after another owner read the intents never inserts that block. Every step waits for a
condition (a request held, the rows written, the held request answered), never a sleep.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.kafka._pipeline import JSON_VALUES, kafka_source, pipeline_document, write_document
from tests.support.chfront_fixtures import ChFront, FrontFactory
from tests.support.delivery import wait_until
from tests.support.matrix import matrix
from tests.support.scale import scaled
from tests.support.services import SESSION_TIMEOUT_MS, create_topic, produce_keyed, unique_name

pytestmark = [pytest.mark.integration, pytest.mark.e2e]


def _value(i: int) -> bytes:
    return json.dumps({"k": f"key-{i:08d}"}).encode()


def _key(i: int) -> bytes:
    return f"key-{i:08d}".encode()


def _config(
    path: Path,
    *,
    bootstrap: str,
    topic: str,
    group: str,
    front: ChFront,
    max_rows: int,
    rebalance: str,
    client_id: str,
) -> Path:
    # Under the consumer protocol the broker owns the session (6 s on the test broker).
    # A member id starts with the client id: the range assignor of the eager protocol
    # gives the first partition to the member whose id sorts first.
    source = kafka_source(
        bootstrap,
        topic,
        group,
        rebalance=rebalance,
        session_timeout_ms=SESSION_TIMEOUT_MS if rebalance != "consumer" else None,
        rdkafka={"client.id": client_id},
    )
    sink = {
        "clickhouse": {
            "table": "handover",
            "columns": ["k"],
            "shards": [{"replicas": [front.url]}],
            "batch": {"max_rows": max_rows, "linger": "200ms"},
            "inflight": {"max_per_shard": 4},
        }
    }
    document = pipeline_document(
        f"handover-{topic}",
        source,
        sink,
        delivery="effectively_once",
        drain_timeout="1s",
        deserializer=JSON_VALUES,
    )
    return write_document(path, document)


def _spate(log: Path, config: Path) -> subprocess.Popen[bytes]:
    with log.open("ab") as out:
        return subprocess.Popen(
            [sys.executable, "-m", "spate.cli", "run", str(config)], stdout=out, stderr=out
        )


def _counts(front: ChFront) -> tuple[int, int]:
    """``(count(), uniqExact(k))`` of the table: raw, no ``FINAL``."""
    row = front.client().query("SELECT count(), uniqExact(k) FROM handover").result_rows[0]
    return int(row[0]), int(row[1])


def _run_handover(
    kafka_bootstrap: str, chfront: FrontFactory, tmp_path: Path, *, frozen: bool, rebalance: str
) -> None:
    topic, group = unique_name("handover"), unique_name("handover-g")
    create_topic(kafka_bootstrap, topic, 2)
    front = chfront()
    front.client().command(
        "CREATE TABLE handover (k String) ENGINE = MergeTree ORDER BY k "
        "SETTINGS non_replicated_deduplication_window = 1000"
    )
    # B cuts blocks of another size than A, so its tokens differ from A's held block's.
    config_a, config_b = (
        _config(
            tmp_path / f"handover-{name}.json",
            bootstrap=kafka_bootstrap,
            topic=topic,
            group=group,
            front=front,
            max_rows=max_rows,
            rebalance=rebalance,
            client_id=client_id,
        )
        for name, max_rows, client_id in (("a", 50, "handover-z"), ("b", 37, "handover-a"))
    )
    first = scaled(2_000, minimum=200)
    more = 200
    produce_keyed(kafka_bootstrap, topic, first, key=_key, value=_value)
    log_a, log_b = tmp_path / "a.log", tmp_path / "b.log"
    member_a = _spate(log_a, config_a)
    member_b: subprocess.Popen[bytes] | None = None
    try:
        wait_until(lambda: _counts(front)[1] == first, 120, "member A to write the first rows")
        # A is idle: its next request is the intent of its next block. Hold it. The
        # block is of partition 0, which goes to B at the hand-over (B's member id sorts
        # first; a frozen A loses every partition): if A kept it, A would cut it again
        # under the same tokens and a late insert would be dropped as a duplicate block,
        # so the test would not see one.
        held = int(front.status()["faulted_requests"])
        front.inject("slow", only="insert", count=1, delay=600)
        produce_keyed(
            kafka_bootstrap,
            topic,
            more,
            key=lambda i: _key(first + i),
            value=lambda i: _value(first + i),
            partition=0,
        )
        wait_until(
            lambda: int(front.status()["faulted_requests"]) > held, 60, "A's intent to be held"
        )
        if frozen:
            member_a.send_signal(signal.SIGSTOP)
        member_b = _spate(log_b, config_b)
        # The owners after the hand-over (B alone while A is frozen) read the intents
        # without the held one and write every record.
        wait_until(
            lambda: _counts(front)[1] == first + more, 180, "the new owners to write every row"
        )
        inserts = int(front.status()["inserts"])
        front.release()  # the held intent lands now (A may still be frozen)
        wait_until(lambda: int(front.status()["inserts"]) > inserts, 60, "the held intent to land")
        if frozen:
            member_a.send_signal(signal.SIGCONT)
        # A goes on with its block's intent recorded: it must find the partition revoked
        # or claimed by B and fail the block instead of inserting it.
        wait_until(
            lambda: (
                any(
                    refusal in log_a.read_text(errors="replace")
                    for refusal in ("was claimed by another member", "was revoked while")
                )
                or _counts(front)[0] > first + more
            ),
            60,
            "A to finish the block it was writing",
        )
        for member in (member_a, member_b):
            member.send_signal(signal.SIGTERM)
        for member in (member_a, member_b):
            member.wait(timeout=120)
        assert _counts(front) == (first + more, first + more), (
            f"rows written twice; A: {log_a.read_text(errors='replace')[-3000:]}"
        )
    finally:
        for member in (member_a, member_b):
            if member is not None and member.poll() is None:
                member.send_signal(signal.SIGCONT)
                member.kill()
                member.wait()


PROTOCOLS = matrix("rebalance", ["eager", "cooperative", "consumer"], ci="cooperative")
"""B181: each group protocol keeps effectively-once across the hand-over (all three at full
scale; on every commit the effectively-once storm of ``test_kafka_rebalance_storm.py``
runs the consumer protocol and the slow-intent test above the eager one)."""


def test_b125_a_slow_intent_across_a_revocation_writes_no_row_twice(
    kafka_bootstrap: str, chfront: FrontFactory, tmp_path: Path
) -> None:
    """Eager only: under an incremental protocol A may keep the partition whose block
    it is writing, and then waits for that block itself rather than handing it over."""
    _run_handover(kafka_bootstrap, chfront, tmp_path, frozen=False, rebalance="eager")


@PROTOCOLS
def test_b125_b181_a_member_frozen_past_its_session_writes_no_row_twice_when_resumed(
    kafka_bootstrap: str, chfront: FrontFactory, tmp_path: Path, rebalance: str
) -> None:
    _run_handover(kafka_bootstrap, chfront, tmp_path, frozen=True, rebalance=rebalance)
