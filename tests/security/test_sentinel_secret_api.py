"""Secrets stay out of an application's own logging when it embeds spate (B67).

The application does not go through the ``spate`` command: it calls
``logging.basicConfig`` at DEBUG with the standard formatter, then builds and runs
pipelines with :meth:`spate.Pipeline.from_config`, logging every report and exception
itself. The sentinel secret (and the real temporary credentials of moto's STS) sit in every
secret-bearing setting: the ClickHouse password (a ``password_file``) and a replica URL's
userinfo, the admin server's basic-auth password and token, the S3 secret key and
session token, the NATS token, the Kafka SASL password (typed and passthrough), the
schema registry's password and token, the ``http_poll`` headers and the Hugging Face
token. Runs succeed through failing inserts and fail at start-up of every kind; the
sentinel appears nowhere in what the application's logging printed.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from tests.s3.s3kit import AuthenticatedS3, authenticated_moto, free_port, put_ndjson
from tests.support.chfront_fixtures import ChFront

pytestmark = pytest.mark.integration

SENTINEL = "Sntl-api-b67-Hk7mT2"

APP = """
import json, logging, sys, threading
from spate import Pipeline

logging.basicConfig(level=logging.DEBUG, stream=sys.stderr,
                    format="%(levelname)s %(name)s %(message)s")
log = logging.getLogger("app")
for path in sys.argv[1:]:
    try:
        pipeline = Pipeline.from_config(path)
        log.debug("built %r from %s", pipeline, path)
        stop = threading.Timer(6.0, pipeline.request_stop)
        stop.start()
        try:
            report = pipeline.run()
        finally:
            stop.cancel()
        log.info("%s: exit %s: %s (%r)", path, report.exit_code, report.reason, report)
        print(json.dumps({"config": path, "exit": report.exit_code}), flush=True)
    except Exception as exc:
        log.exception("%s failed: %s", path, exc)
        print(json.dumps({"config": path, "error": type(exc).__name__}), flush=True)
"""


class _Refusing(BaseHTTPRequestHandler):
    """An API that refuses every request with 401, echoing the headers it got."""

    def do_GET(self) -> None:
        body = json.dumps({"error": "unauthorized", "got": dict(self.headers)}).encode()
        self.send_response(401)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def refusing_api() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Refusing)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/readings"
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture
def moto(tmp_path: Path) -> Iterator[AuthenticatedS3]:
    with authenticated_moto(tmp_path / "moto.log") as server:
        s3 = server.client("s3")
        s3.create_bucket(Bucket="secured")
        put_ndjson(s3, "secured", "data/", 2, 5)
        yield server


def test_b67_an_application_logging_at_debug_sees_no_secret(
    chfront: Callable[..., ChFront],
    moto: AuthenticatedS3,
    refusing_api: str,
    tmp_path: Path,
) -> None:
    front = chfront(user="writer", password=SENTINEL)
    front.client().command("CREATE TABLE t (id UInt64) ENGINE = MergeTree ORDER BY id")
    secret_file = tmp_path / "password"
    secret_file.write_text(SENTINEL + "\n", encoding="utf-8")
    hostport = front.url.removeprefix("http://")
    closed = f"127.0.0.1:{free_port()}"
    temporary = moto.temporary_credentials()
    secrets = [SENTINEL, temporary["secret_access_key"], temporary["session_token"]]

    admin = {
        "listen": "127.0.0.1:0",
        "metrics_auth": {
            "user": "prom",
            "password_file": str(secret_file),
            "token": f"${{file:{secret_file}}}",
        },
    }
    memory = {"memory": {"partitions": 2, "payloads": ['{"id": 1}', '{"id": 2}']}}

    def clickhouse(replicas: list[str]) -> dict[str, Any]:
        return {
            "clickhouse": {
                "table": "t",
                "columns": ["id"],
                "shards": [{"replicas": replicas}],
                "user": "writer",
                "password_file": str(secret_file),
                "batch": {"linger": "100ms"},
                "retry": {"initial": "50ms", "max": "200ms"},
            }
        }

    s3 = {
        "url": "s3://secured/data/",
        "endpoint_url": moto.endpoint,
        "region": "us-east-1",
        "startup_timeout": "5s",
        **temporary,
    }
    local = {"store": {"memory": {}}, "job": "sentinel"}
    nats = {"store": {"nats": {"servers": [f"nats://{closed}"], "token": SENTINEL}}, "job": "j"}
    kafka = {
        "brokers": closed,
        "topic": "events",
        "group_id": "etl",
        "startup_timeout": "3s",
    }
    typed = {"protocol": "SASL_PLAINTEXT", "sasl": {"mechanism": "PLAIN", "username": "etl"}}
    typed["sasl"]["password"] = SENTINEL  # type: ignore[index]
    passthrough = {
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": "PLAIN",
        "sasl.username": "etl",
        "sasl.password": SENTINEL,
    }
    registry_user: dict[str, str] = {"url": f"http://{closed}", "username": "etl"}
    registry_user["password"] = SENTINEL
    registry_token = {"url": f"http://{closed}", "token": SENTINEL}
    http_poll = {
        "url": refusing_api,
        "headers": {"Authorization": f"Bearer {SENTINEL}", "X-Api-Key": SENTINEL},
        "interval": "500ms",
        "records": "data",
    }
    huggingface = {"repo": "org/data", "endpoint": f"http://{closed}", "token": SENTINEL}

    def pipeline(name: str, source: dict[str, Any], sink: dict[str, Any], **more: Any) -> dict:
        return {"pipeline": {"name": name}, "admin": admin, "source": source, "sink": sink} | more

    capture: dict[str, Any] = {"capture": {}}
    configs = {
        "clickhouse run": pipeline(
            "ch",
            memory,
            clickhouse([f"http://writer:{SENTINEL}@{hostport}", front.url]),
            deserializer={"json": {}},
        ),
        "clickhouse wrong password": pipeline(
            "ch-wrong",
            memory,
            clickhouse([f"http://writer:wrong-{SENTINEL}@{hostport}"]),
            deserializer={"json": {}},
        ),
        "clickhouse unreachable": pipeline(
            "ch-closed", memory, clickhouse([f"http://writer:{SENTINEL}@{closed}"])
        ),
        "s3 run": pipeline("s3", {"s3": s3}, capture, coordination=local),
        "s3 wrong token": pipeline(
            "s3-token", {"s3": {**s3, "session_token": SENTINEL}}, capture, coordination=local
        ),
        "s3 wrong secret": pipeline(
            "s3-secret",
            {"s3": {**s3, "secret_access_key": SENTINEL}},
            capture,
            coordination=local,
        ),
        "nats unreachable": pipeline("nats", {"s3": s3}, capture, coordination=nats),
        "kafka typed": pipeline("kafka-typed", {"kafka": {**kafka, "security": typed}}, capture),
        "kafka passthrough": pipeline(
            "kafka-rdkafka", {"kafka": {**kafka, "rdkafka": passthrough}}, capture
        ),
        "registry password": pipeline(
            "registry-user",
            {"kafka": {**kafka, "security": typed}},
            capture,
            deserializer={"avro": {"mode": "confluent", "registry": registry_user}},
        ),
        "registry token": pipeline(
            "registry-token",
            {"kafka": kafka},
            capture,
            deserializer={"avro": {"mode": "confluent", "registry": registry_token}},
        ),
        "http_poll refused": pipeline("http", {"http_poll": http_poll}, capture),
        "huggingface unreachable": pipeline(
            "hf", memory, {"huggingface": huggingface}, deserializer={"json": {}}
        ),
    }
    paths = []
    for index, config in enumerate(configs.values()):
        path = tmp_path / f"config-{index}.json"
        path.write_text(json.dumps(config), encoding="utf-8")
        paths.append(str(path))
    app = tmp_path / "app.py"
    app.write_text(APP, encoding="utf-8")

    front.inject("5xx", only="insert", count=2)
    done = subprocess.run(
        [sys.executable, str(app), *paths],
        capture_output=True,
        text=True,
        timeout=600,
    )
    output = done.stdout + done.stderr
    (tmp_path / "app.log").write_text(output, encoding="utf-8")
    results = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    assert len(results) == len(configs), output[-8000:]
    outcome = dict(zip(configs, results, strict=True))
    assert outcome["clickhouse run"].get("exit") == 0, output[-8000:]
    assert front.client().command("SELECT count() FROM t") == 4
    assert outcome["s3 run"].get("exit") == 0, output[-8000:]
    for name in ("clickhouse wrong password", "s3 wrong token", "s3 wrong secret"):
        assert "exit" not in outcome[name] or outcome[name]["exit"] != 0, name
    assert "DEBUG" in done.stderr and "516" in done.stderr
    assert "InvalidToken" in done.stderr and "SignatureDoesNotMatch" in done.stderr
    for name in ("kafka typed", "kafka passthrough", "registry password", "registry token"):
        assert outcome[name].get("error"), name
    for secret in secrets:
        assert secret not in output, (
            "a secret leaked into the application's log:\n"
            + "\n".join(line for line in output.splitlines() if secret in line)[:6000]
        )
