"""Kafka source configuration: required keys, defaults and passthrough refusal (B17, B19)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from spate.config import decode
from spate.errors import ConfigError
from spate_kafka import CONSUMER_DEFAULTS, KafkaSourceConfig

BASE = {"brokers": "127.0.0.1:9092", "topic": "events", "group_id": "etl"}


def load(**extra: object) -> KafkaSourceConfig:
    return decode(KafkaSourceConfig, {**BASE, **extra}, "source.kafka")


def test_defaults_apply() -> None:
    cfg = load()
    assert cfg.commit_interval == 5.0
    assert cfg.startup_timeout == 30.0
    assert cfg.assignment_timeout is None
    assert cfg.statistics_interval == 1.0
    assert cfg.stop_at == "never"
    settings = cfg.consumer_settings()
    assert settings["enable.auto.commit"] is False
    assert settings["enable.auto.offset.store"] is False
    assert settings["fetch.queue.backoff.ms"] == CONSUMER_DEFAULTS["fetch.queue.backoff.ms"]
    assert settings["statistics.interval.ms"] == 1000


@pytest.mark.parametrize("missing", ["brokers", "topic", "group_id"])
def test_required_keys_named_with_their_path(missing: str) -> None:
    raw = {k: v for k, v in BASE.items() if k != missing}
    with pytest.raises(ConfigError) as info:
        decode(KafkaSourceConfig, raw, "source.kafka")
    assert info.value.path == f"source.kafka.{missing}"


@pytest.mark.parametrize(
    "key",
    [
        "enable.auto.commit",
        "auto.commit.enable",
        "enable.auto.offset.store",
        "auto.commit.interval.ms",
        "enable.partition.eof",
        "bootstrap.servers",
        "metadata.broker.list",
        "group.id",
        "statistics.interval.ms",
        "group.protocol",
    ],
)
def test_b19_owned_passthrough_keys_are_refused(key: str) -> None:
    with pytest.raises(ConfigError) as info:
        load(rdkafka={key: "x"})
    assert info.value.path == f"source.kafka.rdkafka.{key}"
    assert "owned by spate" in info.value.message


@pytest.mark.parametrize("strategy", ["cooperative-sticky", "range,cooperative-sticky"])
def test_b19_cooperative_assignor_is_refused(strategy: str) -> None:
    with pytest.raises(ConfigError) as info:
        load(rdkafka={"partition.assignment.strategy": strategy})
    assert info.value.path == "source.kafka.rdkafka.partition.assignment.strategy"
    assert "cooperative" in info.value.message


def test_eager_assignor_and_tls_pass_through() -> None:
    cfg = load(
        rdkafka={
            "partition.assignment.strategy": "roundrobin",
            "security.protocol": "SSL",
            "fetch.min.bytes": 1024,
            "auto.offset.reset": "latest",
        }
    )
    settings = cfg.consumer_settings()
    assert settings["partition.assignment.strategy"] == "roundrobin"
    assert settings["security.protocol"] == "SSL"
    assert settings["auto.offset.reset"] == "latest"


def test_b108_heartbeat_every_second_or_a_third_of_the_session() -> None:
    """A member learns of a rebalance (another member joining) from a heartbeat's answer."""
    assert load().consumer_settings()["heartbeat.interval.ms"] == 1000
    short = load(rdkafka={"session.timeout.ms": 1500}).consumer_settings()
    assert short["heartbeat.interval.ms"] == 500
    chosen = load(rdkafka={"heartbeat.interval.ms": 3000}).consumer_settings()
    assert str(chosen["heartbeat.interval.ms"]) == "3000"


def test_units_and_bounded_mode_parse() -> None:
    cfg = load(commit_interval="250ms", assignment_timeout="2m", stop_at="end")
    assert cfg.commit_interval == 0.25
    assert cfg.assignment_timeout == 120.0
    assert cfg.stop_at == "end"


def test_unknown_key_is_refused_with_path() -> None:
    with pytest.raises(ConfigError) as info:
        load(comit_interval="5s")
    assert info.value.path == "source.kafka.comit_interval"


@pytest.mark.parametrize(
    ("rdkafka", "path", "fragment"),
    [
        ({"fetch.max.byts": 1024}, "source.kafka.rdkafka.fetch.max.byts", "No such configuration"),
        ({"fetch.min.bytes": "lots"}, "source.kafka.rdkafka.fetch.min.bytes", "Invalid value"),
    ],
)
def test_b44_librdkafka_refuses_a_bad_passthrough_key_at_decode(
    rdkafka: dict[str, object], path: str, fragment: str
) -> None:
    """B44: passthrough keys are checked by librdkafka when the config is decoded (no
    broker is contacted: the brokers here do not exist)."""
    with pytest.raises(ConfigError) as info:
        load(rdkafka=rdkafka)
    assert info.value.path == path
    assert fragment in info.value.message


def test_b44_sink_passthrough_keys_are_checked_too() -> None:
    from spate_kafka import KafkaSinkConfig

    with pytest.raises(ConfigError) as info:
        decode(
            KafkaSinkConfig,
            {"brokers": "127.0.0.1:1", "topic": "t", "rdkafka": {"linger.mss": 5}},
            "sink.kafka",
        )
    assert info.value.path == "sink.kafka.rdkafka.linger.mss"


def test_b44_spate_validate_names_a_mistyped_passthrough_key(tmp_path: Path) -> None:
    config = tmp_path / "p.yaml"
    config.write_text(
        "source:\n"
        "  kafka:\n"
        "    brokers: 127.0.0.1:1\n"
        "    topic: t\n"
        "    group_id: g\n"
        "    rdkafka:\n"
        "      sesion.timeout.ms: 6000\n"
        "sink:\n"
        "  capture: {}\n",
        encoding="utf-8",
    )
    result = subprocess.run(
        [sys.executable, "-m", "spate.cli", "validate", str(config)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 2
    assert result.stderr.startswith(f"{config}:7:7: source.kafka.rdkafka.sesion.timeout.ms: ")
    assert "No such configuration property" in result.stderr
    assert result.stderr.count("\n") == 1


def test_b43_while_unassigned_the_source_names_its_group_and_the_session_wait() -> None:
    """The status line's "waiting for ..." names the group and how long a dead member can
    hold the partitions (its session timeout), from the configuration in effect."""
    from spate_kafka import KafkaSource

    cfg = decode(
        KafkaSourceConfig,
        {
            "brokers": "127.0.0.1:1",
            "topic": "orders",
            "group_id": "loader",
            "rdkafka": {"session.timeout.ms": "12000"},
        },
        "source.kafka",
    )
    wait = KafkaSource(cfg).assignment_wait()
    assert wait is not None
    assert "'loader'" in wait and "orders" in wait and "session.timeout.ms, 12s" in wait
