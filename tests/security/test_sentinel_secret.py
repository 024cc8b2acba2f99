"""A sentinel secret in every secret-bearing setting never leaves the process (B67, B68).

One pipeline (memory source, JSON, ClickHouse sink on the HTTP front guarded by a user
and password) runs as ``spate run`` at DEBUG with the sentinel as the ClickHouse password
(from a ``password_file:``), inside a replica URL's userinfo, as the admin server's
basic-auth password and bearer token (``${file:...}``), and as passthrough-looking keys.
It starts, survives failing inserts, is scraped and drains on SIGTERM; other runs fail at
start-up on a wrong password and an unreachable replica, and ``spate validate`` refuses
broken files. The sentinel must appear in none of the outputs, endpoint bodies or
exception texts.
"""

from __future__ import annotations

import base64
import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path

import pytest
from spate.config import parse_config
from spate.errors import SinkError
from spate.plugins import default_registry

from tests.clickhouse.sinkkit import build_sink
from tests.support.chfront_fixtures import ChFront

pytestmark = pytest.mark.integration

SENTINEL = "Sntl-b67-Xq4vR9"
WAIT = 120.0


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _spate(*args: str, timeout: float = WAIT) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "spate.cli", "--log-level", "debug", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=os.environ.copy(),
    )


def _sink_yaml(replicas: list[str], password: str) -> str:
    shards = ", ".join(f"{{replicas: ['{r}']}}" for r in replicas)
    return (
        "sink:\n"
        "  clickhouse:\n"
        "    table: t\n"
        "    columns: [id]\n"
        f"    shards: [{shards}]\n"
        "    user: writer\n"
        f"    {password}\n"
        "    batch: {linger: 200ms}\n"
        "    retry: {initial: 50ms, max: 200ms}\n"
        "    breaker: {failure_threshold: 2, open_for: 200ms}\n"
    )


def _pipeline_yaml(admin: str, source: str, sink: str) -> str:
    return (
        "pipeline: {name: sentinel, status_interval: 500ms}\n"
        f"admin: {admin}\n"
        f"source: {source}\n"
        "deserializer: {json: {}}\n" + sink
    )


def _get(url: str, headers: dict[str, str] | None = None) -> tuple[int, str]:
    request = urllib.request.Request(url, headers=headers or {})
    try:
        with urllib.request.urlopen(request, timeout=10) as answer:
            return answer.status, answer.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def _assert_clean(where: str, text: str) -> None:
    assert SENTINEL not in text, f"the sentinel secret leaked into {where}"


def test_b67_sentinel_secret_appears_in_no_output_endpoint_or_error(
    chfront: Callable[..., ChFront], tmp_path: Path
) -> None:
    front = chfront(user="writer", password=SENTINEL)
    front.client().command("CREATE TABLE t (id UInt64) ENGINE = MergeTree ORDER BY id")
    secret_file = tmp_path / "ch-password"
    secret_file.write_text(SENTINEL + "\n", encoding="utf-8")
    hostport = front.url.removeprefix("http://")
    with_userinfo = f"http://writer:{SENTINEL}@{hostport}"
    source = (
        "{memory: {partitions: 2, bounded: false, "
        "payloads: ['{\"id\": 1}', '{\"id\": 2}', '{\"id\": 3}']}}"
    )
    admin = (
        "{listen: '127.0.0.1:0', metrics_auth: {user: prom, "
        f"password_file: {secret_file}, token: '${{file:{secret_file}}}'}}}}"
    )
    outputs: dict[str, str] = {}

    def config(name: str, replicas: list[str], password: str) -> Path:
        path = tmp_path / f"{name}.yaml"
        path.write_text(_pipeline_yaml(admin, source, _sink_yaml(replicas, password)), "utf-8")
        return path

    def spate(where: str, *args: str) -> subprocess.CompletedProcess[str]:
        done = _spate(*args)
        outputs[where] = done.stdout + done.stderr
        return done

    # -- spate validate: a good file, an interpolation error, a malformed replica URL --
    from_file = f"password_file: {secret_file}"
    good = config("good", [with_userinfo, front.url], from_file)
    done = spate("validate ok", "validate", str(good))
    assert done.returncode == 0, done.stderr
    broken = config("broken", [front.url], f"password: '{SENTINEL}${{x'")
    done = spate("validate interpolation error", "validate", str(broken))
    assert done.returncode == 2 and "sink.clickhouse.password" in done.stderr
    done = spate("validate bad url", "validate", str(config("url", [with_userinfo + "/db"], "")))
    assert done.returncode == 2 and "replicas" in done.stderr

    # -- spate run failing at start-up: a wrong password, an unreachable replica --------
    wrong = config("wrong", [f"http://writer:wrong-{SENTINEL}@{hostport}"], "password: x")
    done = spate("run wrong password", "run", str(wrong))
    assert done.returncode != 0 and "516" in done.stderr
    closed = f"http://writer:{SENTINEL}@127.0.0.1:{_free_port()}"
    done = spate("run unreachable replica", "run", str(config("closed", [closed], "password: x")))
    assert done.returncode != 0

    # -- spate run: start, failing inserts, scrape, drain on SIGTERM ---------------------
    front.inject("5xx", only="insert", count=6)
    proc = subprocess.Popen(
        [sys.executable, "-m", "spate.cli", "--log-level", "debug", "run", str(good)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    watchdog = threading.Timer(WAIT * 2, proc.kill)
    watchdog.start()
    lines: list[str] = []
    try:
        assert proc.stderr is not None
        admin_url = ""
        for line in proc.stderr:
            lines.append(line)
            found = re.search(r"reachable at (http://127\.0\.0\.1:\d+)", line)
            if found:
                admin_url = found.group(1)
                break
        assert admin_url, "".join(lines)
        collector = threading.Thread(target=lambda: lines.extend(proc.stderr or ()), daemon=True)
        collector.start()
        deadline = time.monotonic() + WAIT
        while front.client().command("SELECT count() FROM t") != 6:
            assert time.monotonic() < deadline, "".join(lines)
            assert proc.poll() is None, "".join(lines)
            time.sleep(0.2)
        status, body = _get(admin_url + "/metrics")
        assert status == 401
        outputs["/metrics unauthorized"] = body
        basic = base64.b64encode(f"prom:{SENTINEL}".encode()).decode()
        status, body = _get(admin_url + "/metrics", {"Authorization": f"Basic {basic}"})
        assert status == 200 and "spate_sink_replica_healthy" in body
        assert f'replica="http://{hostport}"' in body
        outputs["/metrics"] = body
        status, body = _get(admin_url + "/metrics", {"Authorization": f"Bearer {SENTINEL}"})
        assert status == 200
        for probe in ("/healthz", "/readyz"):
            status, body = _get(admin_url + probe)
            assert status == 200, body
            outputs[probe] = body
        proc.send_signal(signal.SIGTERM)
        stdout = proc.stdout.read() if proc.stdout is not None else ""
        assert proc.wait(timeout=WAIT) == 0
        collector.join(timeout=WAIT)
    finally:
        watchdog.cancel()
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        for pipe in (proc.stdout, proc.stderr):
            if pipe is not None:
                pipe.close()
    stderr = "".join(lines)
    assert "breaker of sink clickhouse shard 0 replica" in stderr, stderr[-6000:]
    assert "level=debug" in stderr
    outputs["run stdout"] = stdout
    outputs["run stderr"] = stderr

    # -- in-process exception texts and config objects -----------------------------------
    cfg = parse_config(good.read_text(encoding="utf-8"), resolver=default_registry())
    outputs["repr(config)"] = repr(cfg) + str(cfg)
    built = build_sink(
        {"table": "t", "columns": ["id"], "shards": [{"replicas": [with_userinfo]}]}
        | {"user": "writer", "password": "wrong-" + SENTINEL}
    )
    outputs["repr(sink config)"] = repr(built.sink)
    wrong_url = build_sink(
        {
            "table": "t",
            "columns": ["id"],
            "shards": [{"replicas": [f"http://writer:wrong-{SENTINEL}@{hostport}"]}],
        }
    )
    with pytest.raises(SinkError) as info:
        wrong_url.sink.start()
    outputs["SinkError"] = str(info.value) + repr(info.value.reason)
    wrong_url.sink.close()
    built.sink.close()

    for where, text in outputs.items():
        _assert_clean(where, text)
    json.dumps(outputs)  # every output was text
