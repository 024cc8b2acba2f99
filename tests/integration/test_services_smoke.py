"""Smoke tests of the local services started by ``scripts/services.sh`` and of their fixtures.

Each service is exercised the way the connectors will use it: Kafka through a consumer
group with synchronous commits, NATS through a JetStream KV bucket, S3 through a bucket
round trip, the ClickHouse front through its HTTP interface. The last tests prove that a
missing service fails a test with its endpoint and log tail instead of skipping it (B29).
"""

from __future__ import annotations

import asyncio
import socket
import subprocess
import urllib.request

import pytest

from tests.support.scale import scaled
from tests.support.services import (
    KAFKA,
    SERVICES_SCRIPT,
    Service,
    committed_offsets,
    consume,
    create_topic,
    end_offsets,
    probe_kafka,
    produce_keyed,
    require_service,
    start_kafka,
    stop_kafka,
    unique_name,
)


@pytest.mark.integration
def test_kafka_group_consumes_every_produced_record_and_commits_the_end(
    kafka_bootstrap: str,
) -> None:
    """1,000 keyed records (at CI scale) through a consumer group on the real broker."""
    n = scaled(10_000, minimum=1_000)
    topic = unique_name("smoke")
    group = unique_name("smoke-group")
    create_topic(kafka_bootstrap, topic, partitions=3)

    produced = produce_keyed(kafka_bootstrap, topic, n)
    assert len(produced) == n
    assert {p for p, _ in produced.values()} == {0, 1, 2}

    records = consume(kafka_bootstrap, topic, group, n)
    consumed = {r.key: (r.partition, r.offset) for r in records}
    assert len(records) == n, "a record was delivered twice to one member"
    assert consumed == produced
    assert all(r.value == b"v" + r.key[1:] for r in records if r.key is not None)

    ends = end_offsets(kafka_bootstrap, topic)
    assert sum(ends.values()) == n
    assert committed_offsets(kafka_bootstrap, group, topic) == ends


@pytest.mark.integration
def test_kafka_restart_keeps_records_and_commits(kafka_bootstrap: str) -> None:
    """stop_kafka()/start_kafka() give fault tests a broker restart on the same data."""
    n = scaled(1_000, minimum=100)
    topic = unique_name("restart")
    group = unique_name("restart-group")
    create_topic(kafka_bootstrap, topic, partitions=2)
    produced = produce_keyed(kafka_bootstrap, topic, n)
    consume(kafka_bootstrap, topic, group, n // 2 or 1)
    committed_before = committed_offsets(kafka_bootstrap, group, topic)
    assert sum(committed_before.values()) >= n // 2

    stop_kafka()
    try:
        with pytest.raises(pytest.fail.Exception, match=r"127\.0\.0\.1"):
            require_service(KAFKA, probe_kafka)
    finally:
        start_kafka()

    assert committed_offsets(kafka_bootstrap, group, topic) == committed_before
    assert end_offsets(kafka_bootstrap, topic) == {
        p: 1 + max(o for q, o in produced.values() if q == p) for p in (0, 1)
    }
    rest = consume(kafka_bootstrap, topic, group, n - sum(committed_before.values()))
    assert {r.key for r in rest}.isdisjoint(
        k for k, (p, o) in produced.items() if o < committed_before.get(p, 0)
    )


@pytest.mark.integration
def test_nats_kv_put_get_and_compare_and_set(nats_url: str) -> None:
    import nats
    from nats.js.errors import KeyWrongLastSequenceError

    async def scenario() -> None:
        nc = await nats.connect(nats_url, connect_timeout=5, max_reconnect_attempts=0)
        try:
            js = nc.jetstream()
            bucket = unique_name("smoke").replace("-", "_")
            kv = await js.create_key_value(bucket=bucket, history=1)
            try:
                revision = await kv.put("split.0", b"owner=a")
                entry = await kv.get("split.0")
                assert entry.value == b"owner=a"
                assert entry.revision == revision
                newer = await kv.update("split.0", b"owner=b", last=revision)
                assert newer > revision
                with pytest.raises(KeyWrongLastSequenceError):
                    await kv.update("split.0", b"owner=c", last=revision)
                assert (await kv.get("split.0")).value == b"owner=b"
            finally:
                await js.delete_key_value(bucket)
        finally:
            await nc.close()

    asyncio.run(scenario())


@pytest.mark.integration
def test_s3_put_then_get_returns_the_same_bytes(s3_endpoint: str) -> None:
    import boto3
    from botocore.config import Config

    s3 = boto3.client(
        "s3",
        endpoint_url=s3_endpoint,
        region_name="us-east-1",
        aws_access_key_id="test",
        aws_secret_access_key="test",
        config=Config(s3={"addressing_style": "path"}),
    )
    bucket = unique_name("smoke")
    body = b"".join(b'{"n": %d}\n' % i for i in range(scaled(10_000, minimum=100)))
    s3.create_bucket(Bucket=bucket)
    try:
        s3.put_object(Bucket=bucket, Key="events/part-0.ndjson", Body=body)
        got = s3.get_object(Bucket=bucket, Key="events/part-0.ndjson")["Body"].read()
        assert got == body
        ranged = s3.get_object(Bucket=bucket, Key="events/part-0.ndjson", Range="bytes=0-9")
        assert ranged["Body"].read() == body[:10]
    finally:
        s3.delete_object(Bucket=bucket, Key="events/part-0.ndjson")
        s3.delete_bucket(Bucket=bucket)


@pytest.mark.integration
def test_clickhouse_front_answers_ping_and_a_query(clickhouse_url: str) -> None:
    with urllib.request.urlopen(clickhouse_url + "/ping", timeout=10) as response:
        assert response.read() == b"Ok.\n"
    request = urllib.request.Request(clickhouse_url + "/", data=b"SELECT 40 + 2", method="POST")
    with urllib.request.urlopen(request, timeout=30) as response:
        assert response.read().strip() == b"42"


@pytest.mark.integration
def test_services_up_is_idempotent_when_running(kafka_bootstrap: str) -> None:
    """A second ``up`` keeps the running broker (same pid) and succeeds."""
    pid_file = SERVICES_SCRIPT.parents[1] / ".services" / "run" / "kafka.pid"
    before = pid_file.read_text().strip()
    proc = subprocess.run(
        [str(SERVICES_SCRIPT), "up", "kafka"], capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "already running" in proc.stdout
    assert pid_file.read_text().strip() == before


def _closed_port() -> int:
    """A loopback port that nothing listens on (bound once to pick it, then released)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_missing_service_fails_with_endpoint_and_log_tail(monkeypatch: pytest.MonkeyPatch) -> None:
    """B29 for our own tooling: a dead endpoint fails the test, naming it; nothing is skipped."""
    port = _closed_port()
    monkeypatch.setenv("SPATE_SMOKE_DEAD_URL", f"127.0.0.1:{port}")
    dead = Service("no-such-service", "SPATE_SMOKE_DEAD_URL")
    with pytest.raises(pytest.fail.Exception) as failure:
        require_service(dead, probe_kafka)
    message = str(failure.value)
    assert f"127.0.0.1:{port}" in message
    assert "no-such-service.log" in message
    assert "scripts/services.sh up no-such-service" in message


def test_unknown_address_fails_with_the_start_command(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SPATE_SMOKE_UNSET_URL", raising=False)
    unset = Service("unset-service", "SPATE_SMOKE_UNSET_URL")
    with pytest.raises(pytest.fail.Exception, match="SPATE_SMOKE_UNSET_URL is not set"):
        require_service(unset, probe_kafka)
