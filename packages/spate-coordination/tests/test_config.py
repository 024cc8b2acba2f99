"""The ``coordination`` section decodes strictly, with dotted paths in errors (B17, B29)."""

from __future__ import annotations

import pytest
from spate import ConfigError
from spate_coordination import (
    CoordinationConfig,
    MemoryStoreConfig,
    NatsStoreConfig,
    load_coordination_config,
)


def test_full_nats_section_decodes_with_units() -> None:
    config = load_coordination_config(
        {
            "store": {
                "nats": {
                    "servers": ["nats://a:4222", "tls://b:4222"],
                    "user": "u",
                    "password": "hunter2-secret",
                    "tls": {"ca_file": "/ca.pem", "verify": "true"},
                    "request_timeout": "750ms",
                }
            },
            "job": "backfill-1",
            "instance_id": "w_1",
            "lease_duration": "6s",
            "drain_deadline": "1m",
            "poll_interval": "500ms",
        }
    )
    assert config.store_name == "nats"
    assert isinstance(config.store_config, NatsStoreConfig)
    assert config.store_config.request_timeout == 0.75
    assert config.store_config.tls is not None and config.store_config.tls.ca_file == "/ca.pem"
    assert (config.lease_duration, config.drain_deadline, config.poll_interval) == (6, 60, 0.5)
    assert config.renew_interval == 2.0
    assert "hunter2-secret" not in repr(config)


def test_memory_is_the_default_store_and_instance_id_defaults_to_host_and_pid() -> None:
    config = load_coordination_config({"job": "j"})
    assert config.store_name == "memory"
    assert isinstance(config.store_config, MemoryStoreConfig)
    assert config.instance_id.endswith(f"-{__import__('os').getpid()}")


@pytest.mark.parametrize(
    ("raw", "path", "message"),
    [
        ({}, "coordination.job", "required"),
        ({"job": "j", "leese": "1s"}, "coordination.leese", "unknown key"),
        ({"job": "a.b"}, "coordination.job", "letters, digits"),
        ({"job": "j", "instance_id": "x y"}, "coordination.instance_id", "letters"),
        ({"job": "j", "lease_duration": "500ms"}, "coordination.lease_duration", "at least 1s"),
        (
            {"job": "j", "lease_duration": "3s", "heartbeat_interval": "2s"},
            "coordination.heartbeat_interval",
            "half",
        ),
        ({"job": "j", "store": {"memory": {}, "nats": {}}}, "coordination.store", "exactly one"),
        (
            {"job": "j", "store": {"nats": {"servers": ["host:4222"]}}},
            "coordination.store.nats.servers[0]",
            "URL",
        ),
        (
            {"job": "j", "store": {"nats": {"token": "t", "creds_file": "/c"}}},
            "coordination.store.nats.creds_file",
            "only one",
        ),
        (
            {"job": "j", "store": {"nats": {"user": "u"}}},
            "coordination.store.nats.user",
            "together",
        ),
        (
            {"job": "j", "store": {"nats": {"tls": {"cert_file": "/c"}}}},
            "coordination.store.nats.tls.cert_file",
            "together",
        ),
        ({"job": "j", "store": {"memory": {"x": 1}}}, "coordination.store.memory.x", "unknown"),
    ],
)
def test_b17_bad_sections_are_refused_with_their_path(
    raw: dict[str, object], path: str, message: str
) -> None:
    with pytest.raises(ConfigError) as info:
        load_coordination_config(raw)
    assert info.value.path == path
    assert message in info.value.message


def test_config_in_code_accepts_a_store_model() -> None:
    nats = NatsStoreConfig(servers=["nats://10.0.0.1:4222"])
    config = CoordinationConfig(store={"nats": nats}, job="j", instance_id="i")
    assert config.store_config is nats
