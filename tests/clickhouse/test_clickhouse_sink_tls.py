"""ClickHouse over HTTPS: CA verification, ``verify: false``, mutual TLS, passwords (B69).

Runs against the HTTP front in its TLS mode, with certificates made by the test
(``tests.support.tls``). An untrusted server certificate, a missing client certificate
and a wrong password each fail at start-up naming the replica (B29).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from spate.errors import ConfigError, ErrorClass, SinkError

from tests.clickhouse.sinkkit import Driver, build_sink
from tests.support.chfront_fixtures import ChFront
from tests.support.tls import Pki, make_pki

pytestmark = pytest.mark.integration

PASSWORD = "tls-pass-1234"


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("pki"))


@pytest.fixture(scope="module")
def https_front(chfront_module: Callable[..., ChFront], pki: Pki) -> ChFront:
    front = chfront_module(user="writer", password=PASSWORD, tls=pki)
    front.client().command("CREATE TABLE t (id UInt64) ENGINE = MergeTree ORDER BY id")
    return front


@pytest.fixture(scope="module")
def mutual_front(chfront_module: Callable[..., ChFront], pki: Pki) -> ChFront:
    front = chfront_module(user="writer", password=PASSWORD, tls=pki, mutual=True)
    front.client().command("CREATE TABLE t (id UInt64) ENGINE = MergeTree ORDER BY id")
    return front


def _body(front: ChFront, tls: dict[str, Any], password: str = PASSWORD) -> dict[str, Any]:
    return {
        "table": "t",
        "columns": ["id"],
        "shards": [{"replicas": [front.url]}],
        "user": "writer",
        "password": password,
        "tls": tls,
    }


def _writes(body: dict[str, Any], rows: int = 50) -> None:
    built = build_sink(body)
    try:
        built.sink.start()
        driver = Driver(built.sink)
        driver.offer_all([(i,) for i in range(rows)])
        assert driver.finish() and driver.all_delivered
    finally:
        built.sink.close()


def _start_fails(body: dict[str, Any]) -> SinkError:
    built = build_sink(body)
    try:
        with pytest.raises(SinkError) as info:
            built.sink.start()
    finally:
        built.sink.close()
    return info.value


def test_b69_https_with_the_ca_writes(https_front: ChFront, pki: Pki) -> None:
    before = int(https_front.client().command("SELECT count() FROM t"))
    _writes(_body(https_front, {"ca": str(pki.ca)}))
    assert int(https_front.client().command("SELECT count() FROM t")) == before + 50


def test_b69_an_untrusted_server_certificate_fails_start_naming_the_replica(
    https_front: ChFront, pki: Pki
) -> None:
    error = _start_fails(_body(https_front, {"ca": str(pki.other_ca)}))
    assert https_front.url in str(error)
    assert "certificate" in str(error).lower()


def test_b69_verify_false_connects_and_says_so_loudly(
    https_front: ChFront, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, logger="spate_clickhouse"):
        _writes(_body(https_front, {"verify": False}))
    assert any(
        "verification is OFF" in r.getMessage() and r.levelno == logging.WARNING
        for r in caplog.records
    )


def test_b69_wrong_password_over_https_is_fatal_at_start(https_front: ChFront, pki: Pki) -> None:
    error = _start_fails(_body(https_front, {"ca": str(pki.ca)}, password="wrong-9876"))
    assert error.error_class is ErrorClass.FATAL and "516" in str(error)
    assert "wrong-9876" not in str(error)


def test_b69_mutual_tls_writes_with_the_client_certificate(mutual_front: ChFront, pki: Pki) -> None:
    tls = {"ca": str(pki.ca), "cert": str(pki.client_cert), "key": str(pki.client_key)}
    _writes(_body(mutual_front, tls))


def test_b69_mutual_tls_without_a_client_certificate_fails_start(
    mutual_front: ChFront, pki: Pki
) -> None:
    error = _start_fails(_body(mutual_front, {"ca": str(pki.ca)}))
    assert mutual_front.url in str(error)


def test_b69_tls_files_are_checked_by_validate(tmp_path: Path, pki: Pki) -> None:
    with pytest.raises(ConfigError, match=r"tls\.cert: cert and key"):
        build_sink(
            {"table": "t", "columns": ["id"], "shards": [{"replicas": ["https://h:8443"]}]}
            | {"tls": {"cert": str(pki.client_cert)}}
        )
    with pytest.raises(ConfigError, match=r"tls\.ca: no such file"):
        build_sink(
            {"table": "t", "columns": ["id"], "shards": [{"replicas": ["https://h:8443"]}]}
            | {"tls": {"ca": str(tmp_path / "missing.pem")}}
        )
