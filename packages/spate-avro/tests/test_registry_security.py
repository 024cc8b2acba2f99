"""The schema registry over HTTPS with a CA, basic auth and a bearer token (B67).

Against the registry test server in its TLS mode, with certificates made by the test.
"""

from __future__ import annotations

import json
import ssl
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from spate import ManualClock, Secret
from spate.config import decode
from spate.errors import ConfigError
from spate_avro._registry import RegistryError, SchemaRegistryClient
from spate_avro.config import RegistryConfig

from tests.support.schema_registry import SchemaRegistryServer
from tests.support.tls import Pki, make_pki

USER = json.dumps({"type": "record", "name": "U", "fields": [{"name": "id", "type": "long"}]})


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("registry-pki"))


def _server_tls(pki: Pki) -> ssl.SSLContext:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(str(pki.server_cert), str(pki.server_key))
    return context


@pytest.fixture
def https_registry(pki: Pki) -> Iterator[SchemaRegistryServer]:
    with SchemaRegistryServer(username="etl", password="reg-pw-1234", tls=_server_tls(pki)) as s:
        yield s


def _client(**registry: Any) -> SchemaRegistryClient:
    config = decode(RegistryConfig, registry, "deserializer.avro.registry")
    return SchemaRegistryClient(config, clock=ManualClock(), negative_cache_ttl=1.0)


def test_https_registry_with_the_ca_and_basic_auth(
    https_registry: SchemaRegistryServer, pki: Pki
) -> None:
    schema_id = https_registry.register("u-value", USER)
    client = _client(url=https_registry.url, ca=str(pki.ca), username="etl", password="reg-pw-1234")
    try:
        client.probe()
        assert client.fetch(schema_id) is not None
    finally:
        client.close()


def test_b67_credentials_in_the_registry_url_authenticate_and_are_never_shown(
    https_registry: SchemaRegistryServer, pki: Pki
) -> None:
    """``https://user:password@registry`` is basic auth, as Confluent's clients take it."""
    schema_id = https_registry.register("u-value", USER)
    host = https_registry.url.removeprefix("https://")
    client = _client(url=f"https://etl:reg-pw-1234@{host}", ca=str(pki.ca))
    try:
        client.probe()
        assert client.fetch(schema_id) is not None
        assert client.url == https_registry.url.rstrip("/")
    finally:
        client.close()
    wrong = _client(url=f"https://etl:wrong-pw-5678@{host}", ca=str(pki.ca))
    try:
        with pytest.raises(RegistryError) as info:
            wrong.probe()
    finally:
        wrong.close()
    assert info.value.status == 401 and "wrong-pw-5678" not in str(info.value)
    with pytest.raises(ConfigError, match=r"deserializer\.avro\.registry\.url"):
        _client(url=f"https://etl:pw@{host}", username="etl", password="other-pw")


def test_https_registry_with_an_untrusted_certificate_fails_naming_it(
    https_registry: SchemaRegistryServer, pki: Pki
) -> None:
    client = _client(
        url=https_registry.url, ca=str(pki.other_ca), username="etl", password="reg-pw-1234"
    )
    try:
        with pytest.raises(RegistryError) as info:
            client.probe()
    finally:
        client.close()
    assert https_registry.url in str(info.value)
    assert "certificate" in str(info.value).lower()
    assert "reg-pw-1234" not in str(info.value)


def test_bearer_token_is_sent_and_checked(pki: Pki) -> None:
    with SchemaRegistryServer(token="tok-b67-5678", tls=_server_tls(pki)) as server:
        good = _client(url=server.url, ca=str(pki.ca), token="tok-b67-5678")
        bad = _client(url=server.url, ca=str(pki.ca), token="wrong-token")
        try:
            good.probe()
            with pytest.raises(RegistryError, match="HTTP 401"):
                bad.probe()
        finally:
            good.close()
            bad.close()


def test_registry_secrets_are_typed_and_checked(tmp_path: Path) -> None:
    config = decode(
        RegistryConfig, {"url": "https://r", "token": "tok-b67-5678"}, "deserializer.avro.registry"
    )
    assert isinstance(config.token, Secret) and "tok-b67-5678" not in repr(config)
    with pytest.raises(ConfigError, match=r"registry\.token: give a bearer token"):
        decode(
            RegistryConfig,
            {"url": "https://r", "token": "t", "username": "u", "password": "p"},
            "deserializer.avro.registry",
        )
    with pytest.raises(ConfigError, match=r"registry\.ca: no such file"):
        decode(
            RegistryConfig,
            {"url": "https://r", "ca": str(tmp_path / "missing.pem")},
            "deserializer.avro.registry",
        )
