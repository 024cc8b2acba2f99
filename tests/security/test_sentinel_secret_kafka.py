"""The sentinel secret in the Kafka, registry, S3 and NATS settings never leaves (B67, B70).

``spate validate`` checks a Kafka -> ClickHouse pipeline whose SCRAM password (typed
``security:``), passthrough ``sasl.password``/``ssl.key.password``, schema-registry
password, and the S3 and NATS secrets of sibling configurations all hold the sentinel;
``spate run`` at DEBUG then fails at start-up on the broker's SASL_SSL listener, which
refuses the sentinel password. The sentinel appears in no output.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.support.services import _read_env_file, create_topic, unique_name

pytestmark = pytest.mark.integration

SENTINEL = "Sntl-kafka-b67-Zp3wQ8"


def _env(name: str) -> str:
    value = os.environ.get(name) or _read_env_file().get(name)
    if not value:
        pytest.fail(f"{name} is not in .services/env: restart kafka with scripts/services.sh")
    return value


def _spate(*args: str) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "spate.cli", "--log-level", "debug", *args],
        capture_output=True,
        text=True,
        timeout=180,
    )
    return f"exit={done.returncode}\n{done.stdout}{done.stderr}"


def _write(path: Path, config: dict[str, Any]) -> Path:
    path.write_text(json.dumps(config), encoding="utf-8")
    return path


def test_b67_kafka_registry_s3_and_nats_secrets_stay_out_of_every_output(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    brokers = _env("SPATE_KAFKA_SASL_SSL_BOOTSTRAP")
    ca = str(Path(_env("SPATE_KAFKA_TLS_DIR")) / "ca.pem")
    topic = unique_name("sentinel")
    create_topic(kafka_bootstrap, topic, 1)
    kafka = {
        "brokers": brokers,
        "topic": topic,
        "group_id": unique_name("sentinel"),
        "startup_timeout": "8s",
        "security": {
            "protocol": "SASL_SSL",
            "ca": ca,
            "sasl": {
                "mechanism": "SCRAM-SHA-512",
                "username": _env("SPATE_KAFKA_SASL_USER"),
                "password": SENTINEL,
            },
        },
    }
    base = {
        "pipeline": {"name": "sentinel-kafka"},
        "admin": {"listen": "none"},
        "source": {"kafka": kafka},
        "sink": {"capture": {}},
    }
    outputs: dict[str, str] = {}
    run = _write(tmp_path / "run.json", base)
    outputs["validate kafka"] = _spate("validate", str(run))
    outputs["run kafka refused"] = _spate("run", str(run))
    assert "exit=1" in outputs["run kafka refused"], outputs["run kafka refused"]
    assert "authentication" in outputs["run kafka refused"].lower()

    passthrough = {
        **kafka,
        "security": {"protocol": "PLAINTEXT"},
        "rdkafka": {"sasl.password": SENTINEL, "ssl.key.password": SENTINEL + "-key"},
    }
    registry = {
        "mode": "confluent",
        "registry": {"url": "http://127.0.0.1:1", "username": "etl", "password": SENTINEL},
    }
    mixed = {**base, "source": {"kafka": passthrough}, "deserializer": {"avro": registry}}
    outputs["validate passthrough"] = _spate("validate", str(_write(tmp_path / "m.json", mixed)))
    s3 = {
        "url": "s3://bucket/prefix/",
        "endpoint_url": "http://127.0.0.1:1",
        "access_key_id": "etl",
        "secret_access_key": SENTINEL,
    }
    nats = {"store": {"nats": {"servers": ["nats://127.0.0.1:1"], "token": SENTINEL}}, "job": "j"}
    backfill = {**base, "source": {"s3": s3}, "coordination": nats}
    outputs["validate s3 nats"] = _spate("validate", str(_write(tmp_path / "s.json", backfill)))
    broken = {**base, "source": {"s3": {**s3, "secret_access_key": SENTINEL + "${x"}}}
    outputs["validate broken"] = _spate("validate", str(_write(tmp_path / "b.json", broken)))
    assert "exit=2" in outputs["validate broken"]
    assert "source.s3.secret_access_key" in outputs["validate broken"]
    for ok in ("validate kafka", "validate passthrough", "validate s3 nats"):
        assert outputs[ok].startswith("exit=0"), outputs[ok]

    for where, text in outputs.items():
        assert SENTINEL not in text, f"the sentinel secret leaked into {where}:\n{text}"
