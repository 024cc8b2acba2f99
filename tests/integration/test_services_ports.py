"""``scripts/services.sh`` remembers the ports chosen at ``up`` (B135).

A copy of the script runs in a scratch checkout, so nothing here touches the services of
this one: ``env`` and ``status`` read the ports ``up`` wrote to ``.services/ports`` whatever
the calling shell exports, a shell's ``SPATE_*_PORT`` still chooses the ports of a fresh
``up`` (several service sets side by side), and ``up`` refuses to move a running service.
The CDC services (``postgres``, ``connect``) start only when named, and Connect only with
the broker's Kafka version (B366).
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.services import SERVICES_SCRIPT

_PORT_NAMES = ("KAFKA", "KAFKA_CONTROLLER", "NATS", "S3", "CLICKHOUSE")


@pytest.fixture
def checkout(tmp_path: Path) -> Path:
    """A scratch checkout holding the script, a venv python and the tools ``up`` checks."""
    root = tmp_path / "checkout"
    (root / "scripts").mkdir(parents=True)
    shutil.copy(SERVICES_SCRIPT, root / "scripts" / "services.sh")
    (root / ".venv" / "bin").mkdir(parents=True)
    (root / ".venv" / "bin" / "python").symlink_to(sys.executable)
    tools = tmp_path / "tools"
    tools.mkdir()
    for tool in ("nats-server", "docker-compose"):
        (tools / tool).write_text("#!/bin/sh\nexit 0\n")
        (tools / tool).chmod(0o755)
    return root


def _shell_env(tmp_path: Path, **ports: int) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SPATE_")}
    env["PATH"] = f"{tmp_path / 'tools'}:{env.get('PATH', '')}"
    env.update({f"SPATE_{name}_PORT": str(port) for name, port in ports.items()})
    return env


def _services(root: Path, env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(root / "scripts" / "services.sh"), *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def _exports(output: str) -> dict[str, str]:
    pairs = (line.removeprefix("export ").split("=", 1) for line in output.splitlines())
    return {key: value for key, value in pairs}


def _remember(root: Path, kafka: int, clickhouse: int) -> None:
    """The ports file ``up`` writes for a service set on ``kafka`` and ``clickhouse``."""
    services = root / ".services"
    services.mkdir(exist_ok=True)
    lines = [f"KAFKA_PORT={kafka}", f"KAFKA_CONTROLLER_PORT={kafka + 1}", "NATS_PORT=31222"]
    lines += ["S3_PORT=31500", f"CLICKHOUSE_PORT={clickhouse}"]
    offsets = ("SSL", 2), ("SASL_SSL", 3), ("SASL_PLAINTEXT", 4), ("FAULT", 5)
    lines += [f"KAFKA_{name}_PORT={kafka + n}" for name, n in offsets]
    lines += [f"KAFKA_FAULT_PROXY_PORT={kafka + 6}", f"KAFKA_SSL_SERVER_PORT={kafka + 7}"]
    (services / "ports").write_text("\n".join(lines) + "\n")


@pytest.fixture
def running_kafka(checkout: Path) -> Iterator[None]:
    """A process the script takes for this checkout's broker (its command line names it)."""
    run = checkout / ".services" / "run"
    run.mkdir(parents=True)
    holder = subprocess.Popen(
        [sys.executable, "-c", "import sys, time; time.sleep(120)", str(checkout)]
    )
    (run / "kafka.pid").write_text(f"{holder.pid}\n")
    try:
        yield
    finally:
        holder.kill()
        holder.wait()


def test_b135_env_uses_the_ports_up_chose_not_the_shells(checkout: Path, tmp_path: Path) -> None:
    _remember(checkout, kafka=31092, clickhouse=31123)
    bare = _services(checkout, _shell_env(tmp_path), "env")
    assert bare.returncode == 0, bare.stderr
    exports = _exports(bare.stdout)
    assert exports["SPATE_KAFKA_BOOTSTRAP"] == "127.0.0.1:31092"
    assert exports["SPATE_CLICKHOUSE_URL"] == "http://127.0.0.1:31123"
    assert exports["SPATE_KAFKA_SSL_BOOTSTRAP"] == "localhost:31094"
    assert exports["SPATE_NATS_URL"] == "nats://127.0.0.1:31222"
    assert exports["SPATE_S3_ENDPOINT"] == "http://127.0.0.1:31500"
    # The names the README's pipeline and the examples read, at the same addresses.
    assert exports["KAFKA_BROKERS"] == "127.0.0.1:31092"
    assert exports["CLICKHOUSE_URL"] == "http://127.0.0.1:31123"
    # Another shell's exports neither change what env prints nor rewrite the file.
    other = _services(checkout, _shell_env(tmp_path, KAFKA=32092, CLICKHOUSE=32123), "env")
    assert _exports(other.stdout) == exports
    assert "SPATE_KAFKA_PORT=32092 ignored" in other.stderr
    written = (checkout / ".services" / "env").read_text()
    assert "SPATE_KAFKA_BOOTSTRAP=127.0.0.1:31092" in written and "32092" not in written


def test_b135_status_probes_the_remembered_ports(checkout: Path, tmp_path: Path) -> None:
    _remember(checkout, kafka=31092, clickhouse=31123)
    env = _shell_env(tmp_path, CLICKHOUSE=32123)
    status = _services(checkout, env, "status", "clickhouse")
    assert status.returncode == 3
    assert status.stdout.startswith("clickhouse  stopped")
    assert "SPATE_CLICKHOUSE_PORT=32123 ignored" in status.stderr
    assert "31123" in status.stderr


def test_b135_a_shell_without_remembered_ports_still_chooses_them(
    checkout: Path, tmp_path: Path
) -> None:
    """Nothing started here yet: the shell's SPATE_*_PORT count, as for a fresh ``up``."""
    env = _shell_env(tmp_path, KAFKA=33092, CLICKHOUSE=33123)
    exports = _exports(_services(checkout, env, "env").stdout)
    assert exports["SPATE_KAFKA_BOOTSTRAP"] == "127.0.0.1:33092"
    assert exports["SPATE_KAFKA_FAULT_BOOTSTRAP"] == "127.0.0.1:33098"
    assert exports["CLICKHOUSE_URL"] == "http://127.0.0.1:33123"


@pytest.mark.usefixtures("running_kafka")
def test_b135_up_refuses_to_move_a_running_service(checkout: Path, tmp_path: Path) -> None:
    _remember(checkout, kafka=31092, clickhouse=31123)
    moved = _services(checkout, _shell_env(tmp_path, KAFKA=34092), "up", "kafka")
    assert moved.returncode == 1
    assert "SPATE_KAFKA_PORT=34092" in moved.stderr and "31092" in moved.stderr
    assert "scripts/services.sh down" in moved.stderr
    assert "KAFKA_PORT=31092" in (checkout / ".services" / "ports").read_text()
    # Without the variable, the running broker is simply reused at its remembered port.
    # (It does not answer like a broker, so do not wait for it.)
    no_wait = {"SPATE_SERVICES_READY_TIMEOUT": "0", "SPATE_SERVICES_STOP_TIMEOUT": "0"}
    bare = _shell_env(tmp_path) | no_wait
    again = _services(checkout, bare, "up", "kafka")
    assert "kafka: already running" in again.stdout
    assert "SPATE_KAFKA_BOOTSTRAP=127.0.0.1:31092" in (checkout / ".services" / "env").read_text()


# ---------------------------------------------------------------- postgres and connect (B366)


def test_b366_postgres_and_connect_start_only_when_named(checkout: Path, tmp_path: Path) -> None:
    """B366: ``env`` prints the CDC services' endpoints on their ports; ``status`` without
    names lists the four default services only, so a plain ``up`` never starts them."""
    env = _shell_env(tmp_path, POSTGRES=25432, CONNECT=28083)
    exports = _exports(_services(checkout, env, "env").stdout)
    assert exports["SPATE_POSTGRES_DSN"] == "postgresql://postgres@127.0.0.1:25432/postgres"
    assert exports["SPATE_POSTGRES_PORT"] == "25432"
    assert exports["SPATE_CONNECT_URL"] == "http://127.0.0.1:28083"
    listed = _services(checkout, env, "status").stdout
    assert [line.split()[0] for line in listed.splitlines()] == [
        "kafka",
        "nats",
        "s3",
        "clickhouse",
    ]
    named = _services(checkout, env, "status", "postgres", "connect").stdout
    assert [line.split()[:2] for line in named.splitlines()] == [
        ["postgres", "stopped"],
        ["connect", "stopped"],
    ]


def test_b366_connect_refuses_another_kafka_version_than_the_brokers(
    checkout: Path, tmp_path: Path
) -> None:
    """B366: Connect runs only with the broker's Kafka version (both poms name it)."""
    for name, version in (("kafka", "4.1.1"), ("connect", "4.0.0")):
        pom = checkout / "scripts" / name / "pom.xml"
        pom.parent.mkdir(parents=True)
        pom.write_text(f"<project><kafka.version>{version}</kafka.version></project>\n")
    with socket.socket() as probe:  # a port nothing listens on: the version is checked
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    up = _services(checkout, _shell_env(tmp_path, CONNECT=port), "up", "connect")
    assert up.returncode == 1
    assert "Kafka 4.0.0" in up.stderr and "broker is 4.1.1" in up.stderr
