"""Kafka over TLS and SASL on the real broker's extra listeners (B70, B29, B67).

``scripts/services.sh`` gives the broker an ``SSL`` listener that requires a client
certificate (mutual TLS), an ``SSL`` listener that asks for none (one-way TLS: the client
verifies the broker with the CA only), a ``SASL_SSL`` listener with ``SCRAM-SHA-512``
(the user is created with Kafka's own ``kafka-storage format --add-scram``) and a
``SASL_PLAINTEXT`` listener with ``PLAIN``; its certificates are made with openssl when
the services start.
Each mode carries records sink -> topic -> source through the typed ``security:`` keys; a
wrong password or an untrusted certificate fails start-up with one line naming the
brokers, and never the password; so does a one-way TLS client without ``ca`` (it trusts
only the system's store).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from spate import Pipeline, SpateError, load_config

from tests.support.services import _read_env_file, create_topic, end_offsets, unique_name

pytestmark = [pytest.mark.integration]

RECORDS = 40


def _env(name: str) -> str:
    value = os.environ.get(name) or _read_env_file().get(name)
    if not value:
        pytest.fail(f"{name} is not in .services/env: restart kafka with scripts/services.sh")
    return value


def _tls(name: str) -> str:
    return str(Path(_env("SPATE_KAFKA_TLS_DIR")) / name)


def _modes() -> dict[str, tuple[str, dict[str, Any]]]:
    user, password = _env("SPATE_KAFKA_SASL_USER"), _env("SPATE_KAFKA_SASL_PASSWORD")
    return {
        "ssl-mutual": (
            _env("SPATE_KAFKA_SSL_BOOTSTRAP"),
            {
                "protocol": "SSL",
                "ca": _tls("ca.pem"),
                "cert": _tls("client.pem"),
                "key": _tls("client.key"),
            },
        ),
        "ssl-one-way": (
            _env("SPATE_KAFKA_SSL_SERVER_BOOTSTRAP"),
            {"protocol": "SSL", "ca": _tls("ca.pem")},
        ),
        "sasl-ssl-scram": (
            _env("SPATE_KAFKA_SASL_SSL_BOOTSTRAP"),
            {
                "protocol": "SASL_SSL",
                "ca": _tls("ca.pem"),
                "sasl": {"mechanism": "SCRAM-SHA-512", "username": user, "password": password},
            },
        ),
        "sasl-plaintext-plain": (
            _env("SPATE_KAFKA_SASL_PLAINTEXT_BOOTSTRAP"),
            {
                "protocol": "SASL_PLAINTEXT",
                "sasl": {"mechanism": "PLAIN", "username": user, "password": password},
            },
        ),
    }


def _pipeline(tmp_path: Path, name: str, source: dict[str, Any], sink: dict[str, Any]) -> Pipeline:
    path = tmp_path / f"{name}.json"
    path.write_text(
        json.dumps(
            {
                "pipeline": {"name": unique_name(name), "status_interval": "0s"},
                "checkpoint": {"interval": "200ms"},
                "admin": {"listen": "none"},
                "source": source,
                "sink": sink,
            }
        ),
        encoding="utf-8",
    )
    return Pipeline.from_config(load_config(path), handle_signals=False)


def _kafka_source(brokers: str, topic: str, security: dict[str, Any]) -> dict[str, Any]:
    return {
        "kafka": {
            "brokers": brokers,
            "topic": topic,
            "group_id": unique_name("secure-reader"),
            "stop_at": "end",
            "startup_timeout": "20s",
            "security": security,
        }
    }


@pytest.mark.parametrize(
    "mode", ["ssl-mutual", "ssl-one-way", "sasl-ssl-scram", "sasl-plaintext-plain"]
)
def test_b70_records_travel_through_each_secure_listener(
    mode: str, kafka_bootstrap: str, tmp_path: Path
) -> None:
    brokers, security = _modes()[mode]
    topic = unique_name(f"secure-{mode}")
    create_topic(kafka_bootstrap, topic, 2)
    writer = _pipeline(
        tmp_path,
        "secure-writer",
        {"memory": {"stream": "in", "partitions": 2, "records": RECORDS // 2}},
        {
            "kafka": {
                "brokers": brokers,
                "topic": topic,
                "batch": {"linger": "50ms"},
                "security": security,
            }
        },
    )
    assert writer.run().exit_code == 0
    out = tmp_path / "out.jsonl"
    reader = _pipeline(
        tmp_path,
        "secure-reader",
        _kafka_source(brokers, topic, security),
        {"file": {"path": str(out)}},
    )
    report = reader.run()
    assert report.exit_code == 0, report.reason
    assert report.records_in == RECORDS


@pytest.mark.parametrize(
    ("mode", "change"),
    [
        ("sasl-ssl-scram", {"sasl": "wrong"}),
        ("sasl-plaintext-plain", {"sasl": "wrong"}),
        ("ssl-mutual", {"ca": "other"}),
        ("ssl-one-way", {"ca": "other"}),
        ("ssl-one-way", {"ca": "none"}),
    ],
)
def test_b70_wrong_password_or_untrusted_certificate_fails_start_naming_the_brokers(
    mode: str, change: dict[str, str], kafka_bootstrap: str, tmp_path: Path
) -> None:
    brokers, security = _modes()[mode]
    topic = unique_name("secure-refused")
    create_topic(kafka_bootstrap, topic, 1)
    wrong_password = "Wr0ng-b70-secret"
    if change.get("sasl") == "wrong":
        security = {**security, "sasl": {**security["sasl"], "password": wrong_password}}
    elif change["ca"] == "none":
        # Without ``ca`` the client trusts only the system's store, not the test CA.
        security = {k: v for k, v in security.items() if k != "ca"}
    else:
        security = {**security, "ca": str(_untrusted_ca(tmp_path))}
    source = _kafka_source(brokers, topic, security)
    source["kafka"]["startup_timeout"] = "8s"
    reader = _pipeline(tmp_path, "secure-refused", source, {"capture": {}})
    with pytest.raises(SpateError) as info:
        reader.run()
    text = str(info.value)
    assert "\n" not in text and brokers in text, text
    assert wrong_password not in text
    cause = "authentication" if change.get("sasl") else "certificate"
    assert cause in text.lower(), text


def _untrusted_ca(tmp_path: Path) -> Path:
    from tests.support.tls import make_pki

    return make_pki(tmp_path / "other-pki").ca


def _datagen(brokers: str, topic: str, security: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [
            *(sys.executable, "-m", "spate.cli", "datagen", "--brokers", brokers),
            *("--topic", topic, "--count", str(RECORDS), "--partitions", "2"),
            *("--security", str(security), "--connect-timeout", "8"),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_b70_datagen_produces_through_scram_over_tls_from_a_security_file(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    brokers, security = _modes()["sasl-ssl-scram"]
    password_file = tmp_path / "kafka-password"
    password_file.write_text(security["sasl"]["password"] + "\n", encoding="utf-8")
    sasl = {k: v for k, v in security["sasl"].items() if k != "password"}
    good = tmp_path / "security.yaml"
    good.write_text(
        json.dumps({**security, "sasl": {**sasl, "password_file": str(password_file)}}),
        encoding="utf-8",
    )
    topic = unique_name("secure-datagen")
    done = _datagen(brokers, topic, good)
    assert done.returncode == 0, done.stderr
    assert sum(end_offsets(kafka_bootstrap, topic).values()) == RECORDS

    wrong_password = "Wr0ng-datagen-b70"
    bad = tmp_path / "bad.yaml"
    bad.write_text(
        json.dumps({**security, "sasl": {**sasl, "password": wrong_password}}), encoding="utf-8"
    )
    done = _datagen(brokers, unique_name("secure-datagen-refused"), bad)
    assert done.returncode == 1
    assert brokers in done.stderr and "authentication" in done.stderr.lower(), done.stderr
    assert wrong_password not in done.stdout + done.stderr


def _dlq_config(path: Path, brokers: str, topic: str, dlq: str, security: dict[str, Any]) -> Path:
    path.write_text(
        json.dumps(
            {
                "pipeline": {"name": unique_name("secure-dlq")},
                "source": _kafka_source(brokers, topic, security),
                "sink": {"capture": {}},
                "dead_letter": {
                    "sink": {"kafka": {"brokers": brokers, "topic": dlq, "security": security}}
                },
            }
        ),
        encoding="utf-8",
    )
    return path


def _dlq(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "spate.cli", "dlq", *args, "--connect-timeout", "8"],
        capture_output=True,
        text=True,
        timeout=180,
    )


def test_b70_dlq_inspect_and_replay_use_the_security_sections(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    """``spate dlq inspect|replay`` reach a SCRAM-over-TLS listener with the dead-letter
    sink's and the source's ``security:`` sections (B70, B73); a wrong password fails in
    one line naming the brokers, never the password."""
    from confluent_kafka import Producer

    brokers, security = _modes()["sasl-ssl-scram"]
    topic, dlq = unique_name("secure-dlq-src"), unique_name("secure-dlq")
    create_topic(kafka_bootstrap, topic, 1)
    create_topic(kafka_bootstrap, dlq, 1)
    producer = Producer({"bootstrap.servers": kafka_bootstrap})
    for i in range(3):
        headers = [("spate.error.reason", b"ValueError"), ("spate.error.stage", b"operator")]
        producer.produce(dlq, f"v{i}".encode(), f"k{i}".encode(), headers=headers)
    assert producer.flush(30) == 0

    config = _dlq_config(tmp_path / "dlq.json", brokers, topic, dlq, security)
    inspected = _dlq("inspect", str(config), "--json")
    assert inspected.returncode == 0, inspected.stderr
    rows = [json.loads(line) for line in inspected.stdout.splitlines()]
    assert [(r["key"], r["error"]["reason"]) for r in rows] == [
        (f"k{i}", "ValueError") for i in range(3)
    ]
    replayed = _dlq("replay", str(config))
    assert replayed.returncode == 0, replayed.stderr
    assert sum(end_offsets(kafka_bootstrap, topic).values()) == 3

    wrong_password = "Wr0ng-dlq-b70"
    bad = {**security, "sasl": {**security["sasl"], "password": wrong_password}}
    bad_config = _dlq_config(tmp_path / "bad.json", brokers, topic, dlq, bad)
    for action in ("inspect", "replay"):
        done = _dlq(action, str(bad_config))
        assert done.returncode == 1, done.stderr
        lines = done.stderr.strip().splitlines()
        assert len(lines) == 1 and brokers in lines[0], done.stderr
        assert "authentication" in lines[0].lower(), done.stderr
        assert wrong_password not in done.stdout + done.stderr
