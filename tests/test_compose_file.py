"""Checks of ``docker/compose.yaml``, the container setup offered to users with Docker.

No container runs here (these machines have no Docker engine). The file is checked twice:
structurally with PyYAML (the services, KRaft, JetStream, healthchecks, loopback-only ports)
and by Compose itself, ``docker-compose -f docker/compose.yaml config`` from Debian's
package (``scripts/services.sh tools`` installs it; ``up`` does too).
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

COMPOSE_FILE = Path(__file__).resolve().parents[1] / "docker" / "compose.yaml"
REQUIRED_SERVICES = ("kafka", "clickhouse", "nats", "minio")


def _load() -> dict[str, Any]:
    document = yaml.safe_load(COMPOSE_FILE.read_text())
    assert isinstance(document, dict), f"{COMPOSE_FILE} is not a mapping"
    return document


def _docker_compose() -> str:
    path = shutil.which("docker-compose")
    if path is None:
        pytest.fail(
            "docker-compose is not installed; `scripts/services.sh tools` installs it "
            "(apt-get install docker-compose)",
            pytrace=False,
        )
    return path


def _compose_config(path: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [_docker_compose(), "-f", str(path), "config", "-q"],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=path.parent,
        check=False,
    )


def test_compose_declares_kafka_clickhouse_nats_and_minio_each_with_a_healthcheck() -> None:
    services = _load()["services"]
    for name in REQUIRED_SERVICES:
        assert name in services, f"service {name} missing from {COMPOSE_FILE}"
        check = services[name].get("healthcheck")
        assert check, f"service {name} has no healthcheck"
        test = check["test"]
        assert isinstance(test, list)
        assert test[0] in ("CMD", "CMD-SHELL")
        assert len(test) > 1
        assert all(isinstance(part, str) and part for part in test)


def test_kafka_runs_a_single_kraft_node_from_the_apache_image() -> None:
    kafka = _load()["services"]["kafka"]
    assert kafka["image"].startswith("apache/kafka:")
    env = kafka["environment"]
    assert set(env["KAFKA_PROCESS_ROLES"].split(",")) == {"broker", "controller"}
    assert env["KAFKA_CONTROLLER_QUORUM_VOTERS"].startswith(f"{env['KAFKA_NODE_ID']}@")
    assert "ZOOKEEPER" not in " ".join(env)
    # The two client listeners: the host's and other containers'.
    assert "localhost:9092" in env["KAFKA_ADVERTISED_LISTENERS"]
    assert "kafka:29092" in env["KAFKA_ADVERTISED_LISTENERS"]
    assert env["KAFKA_OFFSETS_TOPIC_REPLICATION_FACTOR"] == 1


def test_nats_enables_jetstream_with_storage() -> None:
    command = _load()["services"]["nats"]["command"]
    assert "-js" in command
    assert "-sd" in command


def test_every_published_port_is_bound_to_loopback() -> None:
    for name, service in _load()["services"].items():
        for port in service.get("ports", []):
            assert str(port).startswith("127.0.0.1:"), f"{name} publishes {port} on all interfaces"


def test_docker_compose_accepts_the_file() -> None:
    proc = _compose_config(COMPOSE_FILE)
    assert proc.returncode == 0, proc.stderr


def test_docker_compose_check_rejects_a_broken_copy(tmp_path: Path) -> None:
    """The Compose check above can fail: the same file with a misspelt key is refused."""
    broken = _load()
    broken["services"]["kafka"]["healthchek"] = broken["services"]["kafka"].pop("healthcheck")
    path = tmp_path / "compose.yaml"
    path.write_text(yaml.safe_dump(broken))
    proc = _compose_config(path)
    assert proc.returncode != 0
    assert "healthchek" in proc.stderr
