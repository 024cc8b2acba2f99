"""Fixtures and helpers for the local services that ``scripts/services.sh`` runs.

Owns: finding each service's address (environment variable first, then ``.services/env``
written by ``scripts/services.sh up``), proving it answers before a test uses it, and a few
small helpers that integration and fault tests share on the real Kafka broker (create a
topic, produce keyed records, read committed and end offsets, stop and start the broker).

Does not own: starting services for a test run (``scripts/test.sh`` runs
``scripts/services.sh up`` first) or any connector logic.

A fixture whose service does not answer fails the test with the endpoint and the tail of the
service's log; it never skips, so a broken environment cannot pass for a green run (B29's
"name the endpoint" applies to our own test tooling too).
"""

from __future__ import annotations

import logging
import os
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import NamedTuple, TypeVar

import pytest

logger = logging.getLogger(__name__)

_T = TypeVar("_T")

REPO_ROOT = Path(__file__).resolve().parents[2]
SERVICES_DIR = REPO_ROOT / ".services"
ENV_FILE = SERVICES_DIR / "env"
LOG_DIR = SERVICES_DIR / "logs"
SERVICES_SCRIPT = REPO_ROOT / "scripts" / "services.sh"

# Short timeouts: a service that is up answers in milliseconds.
_PROBE_TIMEOUT = 5.0
SESSION_TIMEOUT_MS = 3000
"""The consumer session of pipelines whose test waits for sessions to expire (a SIGKILLed
member holds its partitions until then; the local broker allows 1 s and up)."""
_LOG_TAIL_LINES = 40


class ServiceUnavailableError(RuntimeError):
    """A local service has no known address or does not answer at it."""


@dataclass(frozen=True, slots=True)
class Service:
    """One service run by ``scripts/services.sh``: its name there and its address variable."""

    name: str
    env_var: str

    @property
    def log_path(self) -> Path:
        return LOG_DIR / f"{self.name}.log"


KAFKA = Service("kafka", "SPATE_KAFKA_BOOTSTRAP")
NATS = Service("nats", "SPATE_NATS_URL")
S3 = Service("s3", "SPATE_S3_ENDPOINT")
CLICKHOUSE = Service("clickhouse", "SPATE_CLICKHOUSE_URL")


def _read_env_file(path: Path = ENV_FILE) -> dict[str, str]:
    values: dict[str, str] = {}
    if not path.is_file():
        return values
    for line in path.read_text().splitlines():
        line = line.strip()
        if not line or line.startswith("#") or "=" not in line:
            continue
        key, _, value = line.partition("=")
        values[key.strip()] = value.strip()
    return values


def service_address(service: Service) -> str:
    """The address of ``service``: its environment variable, else ``.services/env``.

    Raises ServiceUnavailableError when neither names it (services never started here).
    """
    value = os.environ.get(service.env_var) or _read_env_file().get(service.env_var)
    if not value:
        raise ServiceUnavailableError(
            f"{service.name}: {service.env_var} is not set and {ENV_FILE} does not name it; "
            f"start the services with `scripts/services.sh up {service.name}`"
        )
    return value


def log_tail(service: Service, lines: int = _LOG_TAIL_LINES) -> str:
    """The last ``lines`` lines of the service's log, or a note that there is none."""
    try:
        text = service.log_path.read_text(errors="replace")
    except FileNotFoundError:
        return f"(no log at {service.log_path})"
    return "\n".join(text.splitlines()[-lines:])


# ---------------------------------------------------------------- probes


def _tcp_connect(host: str, port: int) -> socket.socket:
    try:
        return socket.create_connection((host, port), timeout=_PROBE_TIMEOUT)
    except OSError as exc:
        raise ServiceUnavailableError(f"cannot connect to {host}:{port}: {exc}") from exc


def _split_host_port(address: str, default_port: int) -> tuple[str, int]:
    hostport = address.split("://", 1)[-1].split("/", 1)[0].split(",", 1)[0]
    host, sep, port = hostport.rpartition(":")
    if not sep:
        return hostport, default_port
    return host, int(port)


def probe_kafka(bootstrap: str) -> None:
    """The broker answers a metadata request and lists at least one (unfenced) broker."""
    from confluent_kafka.admin import AdminClient

    host, port = _split_host_port(bootstrap, 9092)
    # Fail fast on a closed port instead of waiting out librdkafka's retries.
    _tcp_connect(host, port).close()
    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 0})
    try:
        metadata = admin.list_topics(timeout=_PROBE_TIMEOUT)
    except Exception as exc:
        raise ServiceUnavailableError(
            f"Kafka metadata request to {bootstrap} failed: {exc}"
        ) from exc
    if not metadata.brokers:
        raise ServiceUnavailableError(f"Kafka at {bootstrap} lists no live broker")


def probe_nats(url: str) -> None:
    """The server greets with INFO and has JetStream enabled."""
    host, port = _split_host_port(url, 4222)
    with _tcp_connect(host, port) as sock:
        greeting = sock.makefile("rb").readline(65536)
    if not greeting.startswith(b"INFO"):
        raise ServiceUnavailableError(f"{url} does not speak NATS (got {greeting[:60]!r})")
    if b'"jetstream":true' not in greeting:
        raise ServiceUnavailableError(f"NATS at {url} runs without JetStream (-js)")


def _http_get(url: str) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(url, timeout=_PROBE_TIMEOUT) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()
    except (urllib.error.URLError, OSError) as exc:
        raise ServiceUnavailableError(f"GET {url} failed: {exc}") from exc


def probe_s3(endpoint: str) -> None:
    """The S3 endpoint answers the bucket listing."""
    status, _ = _http_get(endpoint.rstrip("/") + "/")
    if status != 200:
        raise ServiceUnavailableError(f"S3 at {endpoint} answered HTTP {status} to GET /")


def probe_clickhouse(url: str) -> None:
    """The ClickHouse HTTP interface answers ``GET /ping`` with ``Ok.``."""
    status, body = _http_get(url.rstrip("/") + "/ping")
    if status != 200 or body != b"Ok.\n":
        raise ServiceUnavailableError(f"ClickHouse at {url}: GET /ping gave {status} {body[:60]!r}")


def require_service(service: Service, probe: Callable[[str], None]) -> str:
    """The service's address once ``probe`` passed; otherwise fail the test (never skip).

    The failure names the endpoint and shows the tail of the service's log.
    """
    try:
        address = service_address(service)
        probe(address)
    except ServiceUnavailableError as exc:
        reason = str(exc)
    else:
        return address
    # Outside the except block, so the report shows this message and not a chained traceback.
    pytest.fail(
        f"{service.name} is not available: {reason}\n"
        f"---- last lines of {service.log_path} ----\n{log_tail(service)}\n----\n"
        f"(start it with `scripts/services.sh up {service.name}`)",
        pytrace=False,
    )


@pytest.fixture(scope="session")
def kafka_bootstrap() -> str:
    """``host:port`` of the real Kafka broker (KRaft, single node)."""
    return require_service(KAFKA, probe_kafka)


@pytest.fixture(scope="session")
def nats_url() -> str:
    """``nats://host:port`` of nats-server with JetStream."""
    return require_service(NATS, probe_nats)


@pytest.fixture(scope="session")
def s3_endpoint() -> str:
    """``http://host:port`` of moto's S3 server (any access key works; path-style)."""
    return require_service(S3, probe_s3)


@pytest.fixture(scope="session")
def clickhouse_url() -> str:
    """``http://host:port`` of the ClickHouse HTTP front over chDB."""
    return require_service(CLICKHOUSE, probe_clickhouse)


# ---------------------------------------------------------------- Kafka helpers


def unique_name(prefix: str) -> str:
    """``prefix`` plus a random suffix, for topics, groups and buckets no other test uses."""
    return f"{prefix}-{uuid.uuid4().hex[:12]}"


def create_topic(
    bootstrap: str,
    name: str,
    partitions: int = 1,
    *,
    config: Mapping[str, str] | None = None,
    timeout: float = 30.0,
) -> None:
    """Create ``name`` with ``partitions`` partitions and wait until every one has a leader."""
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    topic = NewTopic(
        name, num_partitions=partitions, replication_factor=1, config=dict(config or {})
    )
    futures = admin.create_topics([topic], operation_timeout=timeout, request_timeout=timeout)
    futures[name].result(timeout=timeout)
    deadline = time.monotonic() + timeout
    while True:
        metadata = admin.list_topics(topic=name, timeout=timeout).topics.get(name)
        if (
            metadata is not None
            and metadata.error is None
            and len(metadata.partitions) == partitions
            and all(p.leader >= 0 for p in metadata.partitions.values())
        ):
            return
        if time.monotonic() > deadline:
            raise TimeoutError(f"topic {name} on {bootstrap} has no leader for every partition")
        time.sleep(0.1)


def produce_keyed(
    bootstrap: str,
    topic: str,
    n: int,
    *,
    key: Callable[[int], bytes] = lambda i: b"k%d" % i,
    value: Callable[[int], bytes] = lambda i: b"v%d" % i,
    partition: int | None = None,
    config: Mapping[str, str | int] | None = None,
    timeout: float = 60.0,
    headers: Callable[[int], list[tuple[str, bytes | None]] | None] | None = None,
    timestamp: Callable[[int], int] | None = None,
) -> dict[bytes, tuple[int, int]]:
    """Produce ``n`` records (idempotent, ``acks=all``) and return key -> (partition, offset).

    Keys are partitioned by librdkafka's default partitioner unless ``partition`` is given.
    When ``key`` repeats a key, the last record's position wins in the result.
    ``headers`` and ``timestamp`` (milliseconds), when given, set each record's.
    Raises RuntimeError on the first failed delivery.
    """
    from confluent_kafka import KafkaError, Message, Producer

    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "enable.idempotence": True,
            "acks": "all",
            "linger.ms": 5,
            **(config or {}),
        }
    )
    positions: dict[bytes, tuple[int, int]] = {}
    errors: list[str] = []

    def on_delivery(err: KafkaError | None, msg: Message) -> None:
        record_key, record_partition, offset = msg.key(), msg.partition(), msg.offset()
        if err is not None or record_key is None or record_partition is None or offset is None:
            errors.append(str(err) if err is not None else f"incomplete report for {msg}")
            return
        positions[record_key] = (record_partition, offset)

    # -1 lets the partitioner choose (librdkafka's "unassigned partition").
    target = -1 if partition is None else partition
    for i in range(n):
        while True:
            try:
                producer.produce(
                    topic,
                    value(i),
                    key(i),
                    target,
                    on_delivery=on_delivery,
                    headers=headers(i) if headers is not None else None,
                    timestamp=timestamp(i) if timestamp is not None else 0,
                )
                break
            except BufferError:
                producer.poll(0.1)
        producer.poll(0)
    remaining = producer.flush(timeout)
    if errors:
        raise RuntimeError(f"{len(errors)} deliveries to {topic} failed, first: {errors[0]}")
    if remaining:
        raise TimeoutError(f"{remaining} records to {topic} undelivered after {timeout}s")
    return positions


class ConsumedRecord(NamedTuple):
    key: bytes | None
    value: bytes | None
    partition: int
    offset: int


def consume(
    bootstrap: str,
    topic: str,
    group: str,
    n: int,
    *,
    timeout: float = 60.0,
    commit: bool = True,
    config: Mapping[str, str | int] | None = None,
) -> list[ConsumedRecord]:
    """Join ``group``, read ``n`` records of ``topic`` from the earliest offset, then leave.

    With ``commit`` the positions after the read records are committed synchronously.
    Raises TimeoutError (with the count read so far) when fewer than ``n`` arrive in time.
    """
    from confluent_kafka import Consumer, KafkaException

    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            "session.timeout.ms": 6000,
            **(config or {}),
        }
    )
    records: list[ConsumedRecord] = []
    try:
        consumer.subscribe([topic])
        deadline = time.monotonic() + timeout
        while len(records) < n:
            if time.monotonic() > deadline:
                raise TimeoutError(f"read {len(records)} of {n} records from {topic} in {timeout}s")
            for msg in consumer.consume(num_messages=min(500, n - len(records)), timeout=0.5):
                if msg.error() is not None:
                    raise KafkaException(msg.error())
                record_partition, offset = msg.partition(), msg.offset()
                if record_partition is None or offset is None:
                    raise RuntimeError(f"message without a position from {topic}: {msg}")
                records.append(ConsumedRecord(msg.key(), msg.value(), record_partition, offset))
        if commit and records:
            consumer.commit(asynchronous=False)
    finally:
        consumer.close()
    return records


def _partitions(bootstrap: str, topic: str, timeout: float) -> list[int]:
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap})
    metadata = admin.list_topics(topic=topic, timeout=timeout).topics.get(topic)
    if metadata is None or metadata.error is not None:
        reason = "missing" if metadata is None else metadata.error
        raise RuntimeError(f"topic {topic} on {bootstrap}: {reason}")
    return sorted(metadata.partitions)


def _retrying(call: Callable[[], _T], timeout: float) -> _T:
    """``call()``, repeated while the broker answers with a retriable error.

    Right after a broker (re)start the group and transaction coordinators load their
    partitions; admin requests fail with COORDINATOR_LOAD_IN_PROGRESS until they are done,
    and AdminClient does not retry those by itself.
    """
    from confluent_kafka import KafkaError, KafkaException

    transient = {
        KafkaError.COORDINATOR_LOAD_IN_PROGRESS,
        KafkaError.COORDINATOR_NOT_AVAILABLE,
        KafkaError.NOT_COORDINATOR,
        KafkaError.LEADER_NOT_AVAILABLE,
        KafkaError.NOT_LEADER_FOR_PARTITION,
        KafkaError.UNKNOWN_TOPIC_OR_PART,
    }
    deadline = time.monotonic() + timeout
    while True:
        try:
            return call()
        except KafkaException as exc:
            error = exc.args[0] if exc.args else None
            retriable = isinstance(error, KafkaError) and (
                error.retriable() or error.code() in transient
            )
            if not retriable or time.monotonic() > deadline:
                raise
            logger.debug("retrying after %s", error)
            time.sleep(0.2)


def end_offsets(bootstrap: str, topic: str, *, timeout: float = 30.0) -> dict[int, int]:
    """Partition -> high watermark (the offset the next record will get)."""
    from confluent_kafka import Consumer, TopicPartition

    # A consumer that never subscribes: it only asks the partition leaders.
    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": unique_name("end-offsets"), "log_level": 3}
    )

    def high_watermark(partition: int) -> int:
        tp = TopicPartition(topic, partition)
        watermarks = consumer.get_watermark_offsets(tp, timeout=timeout, cached=False)
        if watermarks is None:
            raise TimeoutError(f"no watermarks for {topic} [{partition}] from {bootstrap}")
        return int(watermarks[1])

    try:
        partitions = _partitions(bootstrap, topic, timeout)
        return {p: _retrying(partial(high_watermark, p), timeout) for p in partitions}
    finally:
        consumer.close()


def committed_offsets(
    bootstrap: str, group: str, topic: str, *, timeout: float = 30.0
) -> dict[int, int]:
    """Partition -> offset committed by ``group``; partitions without a commit are left out.

    Reads through a consumer that never joins the group (``committed()`` only), so it does
    not disturb the members. Not through ``AdminClient.list_consumer_group_offsets``:
    librdkafka 2.16 crashes the process (SIGSEGV in ``rd_kafka_cgrp_op``) when that
    request meets a coordinator that is still loading, as it is right after a restart.
    """
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "enable.auto.commit": False,
            "log_level": 3,
        }
    )
    try:
        wanted = [TopicPartition(topic, p) for p in _partitions(bootstrap, topic, timeout)]
        result = _retrying(lambda: consumer.committed(wanted, timeout=timeout), timeout)
    finally:
        consumer.close()
    for tp in result:
        if tp.error is not None:
            raise RuntimeError(f"committed offset of {topic} [{tp.partition}]: {tp.error}")
    return {tp.partition: tp.offset for tp in result if tp.offset >= 0}


def committed_total(bootstrap: str, group: str, topic: str) -> int:
    """The offsets ``group`` committed on ``topic``, summed over its partitions: a count
    that grows with every commit, for waiting on a pipeline's progress."""
    return sum(committed_offsets(bootstrap, group, topic).values())


# ---------------------------------------------------------------- stopping and starting


def _services_command(*args: str, timeout: float = 180.0) -> str:
    proc = subprocess.run(
        [str(SERVICES_SCRIPT), *args],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    if proc.returncode != 0:
        raise RuntimeError(
            f"scripts/services.sh {' '.join(args)} exited {proc.returncode}:\n"
            f"{proc.stdout}{proc.stderr}"
        )
    logger.info("scripts/services.sh %s: %s", " ".join(args), proc.stdout.strip())
    return proc.stdout


def start_services(*names: str) -> None:
    """Start the named services that do not run yet (``scripts/services.sh up NAME...``);
    blocks until each answers, raises with their log tails otherwise."""
    _services_command("up", *names, timeout=900.0)


def stop_service(name: str) -> None:
    """Stop one service, keeping its data (for fault tests). Blocks until it has exited."""
    _services_command("stop", name)


def start_service(name: str) -> None:
    """Start one service again; blocks until it answers (or raises with its log tail)."""
    _services_command("start", name)


def stop_kafka() -> None:
    """Stop the broker (a clean shutdown); topics, records and commits stay on disk."""
    stop_service(KAFKA.name)


def start_kafka() -> None:
    """Start the broker again on the same data and port; returns once it answers metadata."""
    start_service(KAFKA.name)


def kill_kafka(timeout: float = 30.0) -> None:
    """Kill the broker with SIGKILL (a crash, no clean shutdown); blocks until it is gone.

    Only the process ``scripts/services.sh`` started for this checkout (its pid file, with a
    command line naming this repository) is killed. ``start_kafka()`` brings it back.
    """
    pid_file = SERVICES_DIR / "run" / f"{KAFKA.name}.pid"
    pid = int(pid_file.read_text().strip())
    cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ")
    if str(REPO_ROOT).encode() not in cmdline:
        raise RuntimeError(f"pid {pid} in {pid_file} is not this checkout's broker")
    # scripts/services.sh starts the broker as a process-group leader.
    os.killpg(pid, signal.SIGKILL)
    deadline = time.monotonic() + timeout
    while Path(f"/proc/{pid}").exists():
        if time.monotonic() > deadline:
            raise TimeoutError(f"broker pid {pid} still alive {timeout:.0f}s after SIGKILL")
        time.sleep(0.05)
    logger.info("kafka broker pid %d killed", pid)
