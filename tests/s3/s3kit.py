"""Helpers shared by the S3 source's tests: moto servers, test objects and in-process runs.

* :class:`MotoServer` — moto's S3 server on a free loopback port, in this process
  (``ThreadedMotoServer``), or as a ``moto_server`` child process for multi-process tests;
* :func:`s3_client` (boto3, path-style) and :func:`put_ndjson` (objects of numbered NDJSON
  records, plain, gzip or zstd), so every record has a unique ``id`` a test can look for;
* :func:`run_pipeline` — one S3 source into a capture sink, in this process;
* :func:`authenticated_moto` — a moto server that checks request signatures, with an IAM
  user allowed S3 and a role it may assume (temporary credentials from moto's STS).

The AWS SDK needs credentials and a region even for moto; :data:`AWS_ENV` holds dummy
ones, set in this process at import and passed to child processes.
"""

from __future__ import annotations

import gzip
import json
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from spate.pipeline import ExitReport
    from spate.plugins import BuildContext
    from spate_coordination import CoordinationConfig, CoordinationStore, SplitState
    from spate_s3 import S3Source, S3SourceConfig

AWS_ENV = {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_DEFAULT_REGION": "us-east-1",
}
for _key, _value in AWS_ENV.items():
    os.environ.setdefault(_key, _value)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _wait_http(url: str, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            with urllib.request.urlopen(url, timeout=2):
                return
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)


class MotoServer:
    """moto's S3 on ``127.0.0.1:<free port>``; ``threaded`` runs it inside this process."""

    def __init__(self, *, threaded: bool = True, log: Path | None = None) -> None:
        self.port = free_port()
        self.threaded = threaded
        self.log = log
        self._server: Any = None
        self._process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> None:
        if self.threaded:
            from moto.server import ThreadedMotoServer

            self._server = ThreadedMotoServer(ip_address="127.0.0.1", port=self.port)
            self._server.start()
        else:
            binary = shutil.which("moto_server") or str(
                Path(sys.executable).with_name("moto_server")
            )
            out = self.log.open("ab") if self.log is not None else subprocess.DEVNULL
            self._process = subprocess.Popen(
                [binary, "-H", "127.0.0.1", "-p", str(self.port)], stdout=out, stderr=out
            )
        _wait_http(self.url + "/")

    def stop(self) -> None:
        if self._server is not None:
            self._server.stop()
            self._server = None
        if self._process is not None:
            self._process.kill()
            self._process.wait(10)
            self._process = None


@dataclass(frozen=True)
class AuthenticatedS3:
    """A moto server checking signatures: its endpoint, an IAM user's key, a role's ARN."""

    endpoint: str
    access_key_id: str
    secret_access_key: str
    role_arn: str

    def client(self, service: str, **keys: str) -> Any:
        """A boto3 client of ``service`` signing with the user's key (or ``keys``)."""
        import boto3
        from botocore.config import Config

        return boto3.client(
            service,
            endpoint_url=self.endpoint,
            region_name="us-east-1",
            aws_access_key_id=keys.get("access_key_id", self.access_key_id),
            aws_secret_access_key=keys.get("secret_access_key", self.secret_access_key),
            aws_session_token=keys.get("session_token"),
            config=Config(s3={"addressing_style": "path"}),
        )

    def temporary_credentials(self) -> dict[str, str]:
        """``access_key_id``, ``secret_access_key`` and ``session_token`` from STS AssumeRole."""
        answer = self.client("sts").assume_role(RoleArn=self.role_arn, RoleSessionName="etl")
        found = answer["Credentials"]
        return {
            "access_key_id": found["AccessKeyId"],
            "secret_access_key": found["SecretAccessKey"],
            "session_token": found["SessionToken"],
        }


@contextmanager
def authenticated_moto(log: Path) -> Iterator[AuthenticatedS3]:
    """A ``moto_server`` child that checks request signatures after its first actions.

    moto answers ``INITIAL_NO_AUTH_ACTION_COUNT`` actions unauthenticated: they create an
    IAM user with an access key allowed ``s3:*`` and ``sts:AssumeRole``, and a role
    allowed ``s3:*``. From then on a wrong secret answers ``SignatureDoesNotMatch`` and a
    wrong session token ``InvalidToken``.
    """
    import boto3

    port = free_port()
    env = {**os.environ, "INITIAL_NO_AUTH_ACTION_COUNT": "5"}
    binary = str(Path(sys.executable).with_name("moto_server"))
    with log.open("ab") as out:
        process = subprocess.Popen(
            [binary, "-H", "127.0.0.1", "-p", str(port)], stdout=out, stderr=out, env=env
        )
    try:
        url = f"http://127.0.0.1:{port}"
        _wait_http(url + "/moto-api/")
        iam = boto3.client("iam", endpoint_url=url, region_name="us-east-1")
        allow = {"Effect": "Allow", "Action": ["s3:*", "sts:AssumeRole"], "Resource": "*"}
        policy = json.dumps({"Version": "2012-10-17", "Statement": [allow]})
        iam.create_user(UserName="etl")
        key = iam.create_access_key(UserName="etl")["AccessKey"]
        iam.put_user_policy(UserName="etl", PolicyName="s3", PolicyDocument=policy)
        trust = {"Effect": "Allow", "Principal": {"AWS": "*"}, "Action": "sts:AssumeRole"}
        role = iam.create_role(
            RoleName="etl-role",
            AssumeRolePolicyDocument=json.dumps({"Version": "2012-10-17", "Statement": [trust]}),
        )["Role"]
        iam.put_role_policy(RoleName="etl-role", PolicyName="s3", PolicyDocument=policy)
        yield AuthenticatedS3(url, key["AccessKeyId"], key["SecretAccessKey"], role["Arn"])
    finally:
        process.kill()
        process.wait(10)


def s3_client(endpoint: str) -> Any:
    """A boto3 S3 client for ``endpoint`` (path-style, dummy credentials)."""
    import boto3
    from botocore.config import Config

    return boto3.client(
        "s3",
        endpoint_url=endpoint,
        region_name="us-east-1",
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
        config=Config(s3={"addressing_style": "path"}),
    )


def record_line(object_index: int, record: int) -> bytes:
    """The NDJSON line of one record; ``id`` is unique across a test's objects."""
    return json.dumps({"id": f"{object_index}:{record}", "o": object_index, "r": record}).encode()


def encode(lines: Iterable[bytes], compression: str) -> bytes:
    body = b"".join(line + b"\n" for line in lines)
    if compression == "gzip":
        return gzip.compress(body)
    if compression == "zstd":
        import zstandard

        return zstandard.ZstdCompressor().compress(body)
    return body


def put_ndjson(
    client: Any,
    bucket: str,
    prefix: str,
    objects: int,
    records: int,
    *,
    compression: Sequence[str] = ("none",),
) -> set[str]:
    """Write ``objects`` NDJSON objects of ``records`` records under ``prefix``.

    Object ``i`` is compressed with ``compression[i % len(compression)]``. Returns every
    record id written.
    """
    ids: set[str] = set()
    for i in range(objects):
        codec = compression[i % len(compression)]
        suffix = {"none": "", "gzip": ".gz", "zstd": ".zst"}[codec]
        lines = [record_line(i, r) for r in range(records)]
        client.put_object(
            Bucket=bucket, Key=f"{prefix}obj-{i:05d}.ndjson{suffix}", Body=encode(lines, codec)
        )
        ids.update(f"{i}:{r}" for r in range(records))
    return ids


def ids_of(rows: Iterable[object]) -> list[str]:
    """Record ids of captured rows (JSON text or dicts)."""
    found: list[str] = []
    for row in rows:
        value = json.loads(row) if isinstance(row, (str, bytes)) else row
        if isinstance(value, dict):
            found.append(str(value["id"]))
    return found


def coordination(job: str | None = None) -> CoordinationConfig:
    """A single-process job on an in-memory store with short leases."""
    import uuid

    from spate_coordination import CoordinationConfig

    return CoordinationConfig(
        store={"memory": {}},
        job=job or f"job-{uuid.uuid4().hex[:8]}",
        instance_id=f"i-{uuid.uuid4().hex[:8]}",
        lease_duration=2.0,
        poll_interval=0.1,
    )


def nats_coordination(nats_url: str, job: str | None = None, **extra: object) -> CoordinationConfig:
    """One instance of a job on the NATS store at ``nats_url`` (short leases)."""
    import uuid

    from spate_coordination import CoordinationConfig

    return CoordinationConfig(
        store={"nats": {"servers": [nats_url]}},
        job=job or f"job-{uuid.uuid4().hex[:8]}",
        instance_id=f"i-{uuid.uuid4().hex[:8]}",
        lease_duration=2.0,
        poll_interval=0.1,
        **extra,  # type: ignore[arg-type]
    )


def split_states(coord: CoordinationConfig) -> dict[str, SplitState]:
    """Every split state of ``coord``'s job, read from its store (not as a member)."""
    import asyncio

    from spate_coordination import read_split_states

    async def read() -> dict[str, SplitState]:
        store = coord.open_store(build_context())
        await store.open()
        try:
            return await read_split_states(store)
        finally:
            await store.close()

    return asyncio.run(read())


def make_source(
    config: S3SourceConfig,
    store: CoordinationStore | None = None,
    coord: CoordinationConfig | None = None,
) -> tuple[S3Source, CoordinationStore]:
    from spate_coordination import MemoryStore
    from spate_s3 import S3Source

    coord = coord or coordination()
    if store is None:
        # The in-memory store is per test (shared by passing it on), NATS per job.
        memory = coord.store_name == "memory"
        store = MemoryStore(2.0) if memory else coord.open_store(build_context())
    return S3Source(config, coord, store), store


def run_to_end(source: S3Source, name: str = "s3-test") -> tuple[ExitReport, list[object]]:
    """Run ``source`` into a capture sink until it ends; the report and the rows (text)."""
    from spate.config import CheckpointConfig
    from spate.pipeline import Pipeline
    from spate.testing import CopyToSinkProcessor, capture_sink

    sink, script = capture_sink("out", max_rows=500)
    pipeline = Pipeline(
        name,
        source,
        {"out": sink},
        processor=CopyToSinkProcessor(sink, as_text=True),
        checkpoint=CheckpointConfig(interval=0.1, drain_timeout=10.0),
        handle_signals=False,
    )
    report = pipeline.run()
    return report, list(script.rows)


def build_context(coordination_section: dict[str, object] | None = None) -> BuildContext:
    from spate.flow._budget import InflightBudget
    from spate.metrics import Meter
    from spate.plugins import BuildContext
    from spate.testing import ManualClock

    return BuildContext(
        pipeline="s3 test",
        component="source",
        meter=Meter("s3-test"),
        clock=ManualClock(),
        run_nonce="n",
        budget=InflightBudget(1 << 20),
        coordination=coordination_section,
    )


class Driver:
    """``SourceEvents`` that deliver every polled batch at once: each batch is committed
    right after it is polled, and a revocation commits what was delivered (B15)."""

    def __init__(self, source: S3Source) -> None:
        self.source = source
        self.records: list[bytes] = []
        self.by_lane: dict[object, list[bytes]] = {}
        self.delivered: dict[object, int] = {}
        self.batch_ends: list[int] = []
        self.assigned_lanes: list[object] = []
        self.revoked_lanes: list[object] = []
        self.drained_calls = 0

    def assigned(self, lanes: Iterable[object]) -> None:
        self.assigned_lanes.extend(lanes)

    def revoked(self, lanes: Iterable[object]) -> None:
        lanes = list(lanes)
        self.revoked_lanes.extend(lanes)
        positions = {lane: self.delivered[lane] for lane in lanes if lane in self.delivered}
        if positions:
            self.source.commit(positions, sync=True)  # type: ignore[arg-type]

    def drained(self) -> None:
        self.drained_calls += 1

    def poll(self, *, commit: bool = True) -> int:
        count = 0
        for batch in self.source.poll(0.2):
            payloads = [bytes(p) for p in batch.payloads]
            self.records.extend(payloads)
            self.by_lane.setdefault(batch.lane, []).extend(payloads)
            count += len(payloads)
            self.batch_ends.append(batch.next_offset)
            if commit:
                self.delivered[batch.lane] = batch.next_offset
                self.source.commit({batch.lane: batch.next_offset}, sync=False)
        return count

    def run(self, *, until: int | None = None, timeout: float = 60.0, commit: bool = True) -> None:
        """Poll until drained (or ``until`` records were seen); fail after ``timeout``."""
        deadline = time.monotonic() + timeout
        while not self.drained_calls and (until is None or len(self.records) < until):
            if time.monotonic() > deadline:
                raise AssertionError(f"source not drained after {timeout}s: {len(self.records)}")
            self.poll(commit=commit)
