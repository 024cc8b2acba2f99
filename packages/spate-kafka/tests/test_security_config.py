"""B70: the typed ``security:`` section maps to librdkafka and refuses contradictions."""

from __future__ import annotations

from pathlib import Path

import pytest
from spate import Secret
from spate.config import decode
from spate.errors import ConfigError
from spate_kafka import KafkaSinkConfig, KafkaSourceConfig

from tests.support.tls import make_pki

BASE = {"brokers": "localhost:9095", "topic": "t", "group_id": "g"}


def test_b70_sasl_ssl_maps_to_librdkafka_settings(tmp_path: Path) -> None:
    ca = make_pki(tmp_path).ca
    security = {
        "protocol": "SASL_SSL",
        "ca": str(ca),
        "sasl": {"mechanism": "SCRAM-SHA-512", "username": "etl", "password": "pw-b70-1234"},
    }
    source = decode(KafkaSourceConfig, {**BASE, "security": security}, "source.kafka")
    settings = source.consumer_settings()
    assert settings["security.protocol"] == "SASL_SSL"
    assert settings["ssl.ca.location"] == str(ca)
    assert settings["sasl.mechanism"] == "SCRAM-SHA-512"
    assert settings["sasl.username"] == "etl"
    assert isinstance(settings["sasl.password"], Secret)
    assert "pw-b70-1234" not in repr(source)
    sink_body = {"brokers": "localhost:9095", "topic": "t", "security": security}
    sink = decode(KafkaSinkConfig, sink_body, "sink.kafka")
    assert sink.producer_settings()["sasl.username"] == "etl"


@pytest.mark.parametrize(
    ("security", "where"),
    [
        ({"protocol": "SASL_SSL"}, "security.sasl"),
        ({"protocol": "SSL", "sasl": {"username": "u", "password": "p"}}, "security.sasl"),
        ({"protocol": "PLAINTEXT", "ca": "/etc/ca.pem"}, "security.ca"),
        ({"protocol": "SSL", "ca": "/nonexistent/ca.pem"}, "security.ca"),
        ({"protocol": "SASL_PLAINTEXT", "sasl": {"username": "u"}}, "security.sasl.password"),
    ],
)
def test_b70_contradictory_security_is_refused_with_its_path(
    security: dict[str, object], where: str
) -> None:
    with pytest.raises(ConfigError, match=rf"source\.kafka\.{where}"):
        decode(KafkaSourceConfig, {**BASE, "security": security}, "source.kafka")


def test_b70_a_key_set_by_security_and_rdkafka_is_refused() -> None:
    body = {
        **BASE,
        "security": {"protocol": "SASL_PLAINTEXT", "sasl": {"username": "u", "password": "p"}},
        "rdkafka": {"sasl.username": "other"},
    }
    with pytest.raises(ConfigError, match=r"rdkafka\.sasl\.username: is set by security"):
        decode(KafkaSourceConfig, body, "source.kafka")
