"""S3 over HTTPS signed by a private CA: the ``ca:`` key of the S3 source and of the
Parquet sink's ``s3:`` section (B69 for S3-compatible stores).

moto's server runs over TLS with a server certificate made by :func:`make_pki`; a client
that is given the CA reads and writes, one that is not fails naming the endpoint.
"""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from spate.config import decode
from spate.errors import ConfigError, SpateError
from spate_s3 import S3SourceConfig

from tests.s3.s3kit import free_port, ids_of, make_source, put_ndjson, run_to_end
from tests.support.tls import Pki, make_pki

pytestmark = pytest.mark.integration

RECORDS = 20


def _client(url: str, ca: Path) -> Any:
    import boto3
    from botocore.config import Config

    return boto3.client(
        "s3",
        endpoint_url=url,
        region_name="us-east-1",
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
        verify=str(ca),
        config=Config(s3={"addressing_style": "path"}),
    )


@pytest.fixture(scope="module")
def https_s3(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Pki]]:
    """``(https endpoint, PKI)`` of a private moto server speaking TLS."""
    pki = make_pki(tmp_path_factory.mktemp("s3-pki"))
    port = free_port()
    log = tmp_path_factory.mktemp("moto-tls") / "moto.log"
    binary = str(Path(sys.executable).with_name("moto_server"))
    args = ["-H", "127.0.0.1", "-p", str(port), "-c", str(pki.server_cert)]
    with log.open("ab") as out:
        process = subprocess.Popen(
            [binary, *args, "-k", str(pki.server_key)], stdout=out, stderr=out
        )
    try:
        url = f"https://127.0.0.1:{port}"
        client = _client(url, pki.ca)
        deadline = time.monotonic() + 60
        while True:
            try:
                client.list_buckets()
                break
            except Exception:
                assert process.poll() is None, log.read_text()
                assert time.monotonic() < deadline, "moto over TLS did not answer"
                time.sleep(0.2)
        client.create_bucket(Bucket="tls")
        put_ndjson(client, "tls", "data/", 2, RECORDS // 2)
        yield url, pki
    finally:
        process.kill()
        process.wait(10)


def _source(url: str, **keys: Any) -> S3SourceConfig:
    body = {"url": "s3://tls/data/", "endpoint_url": url, "startup_timeout": "10s"}
    return decode(S3SourceConfig, {**body, **keys}, "source.s3")


def test_b69_s3_source_reads_an_https_endpoint_signed_by_its_ca(
    https_s3: tuple[str, Pki], monkeypatch: pytest.MonkeyPatch
) -> None:
    url, pki = https_s3
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    source, _ = make_source(_source(url, ca=str(pki.ca)))
    report, rows = run_to_end(source)
    assert report.exit_code == 0, report.reason
    assert len(set(ids_of(rows))) == RECORDS


def test_b69_s3_source_without_the_ca_fails_naming_the_endpoint(
    https_s3: tuple[str, Pki], monkeypatch: pytest.MonkeyPatch
) -> None:
    url, pki = https_s3
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    source, _ = make_source(_source(url, ca=str(pki.other_ca)))
    with pytest.raises(SpateError) as info:
        run_to_end(source)
    text = str(info.value)
    assert url in text and "certificate" in text.lower(), text


def test_b69_parquet_s3_store_writes_through_an_https_endpoint_signed_by_its_ca(
    https_s3: tuple[str, Pki], monkeypatch: pytest.MonkeyPatch
) -> None:
    from spate_parquet._store import S3Store
    from spate_parquet.config import ParquetSinkConfig

    url, pki = https_s3
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    s3 = {"endpoint_url": url, "region": "us-east-1", "ca": str(pki.ca)}
    config = decode(ParquetSinkConfig, {"path": "s3://tls/lake", "s3": s3}, "parquet")
    store = S3Store(config)
    try:
        store.put("part-0", b"hello")
        assert store.get("part-0") == b"hello"
    finally:
        store.close()


def test_b69_a_ca_that_does_not_exist_or_an_http_endpoint_is_refused(tmp_path: Path) -> None:
    from spate_parquet.config import ParquetSinkConfig

    missing = str(tmp_path / "missing-ca.pem")
    with pytest.raises(ConfigError, match=r"source\.s3\.ca.*no such file"):
        _source("https://h:1", ca=missing)
    ca = tmp_path / "ca.pem"
    ca.write_text("unused", encoding="utf-8")
    with pytest.raises(ConfigError, match=r"source\.s3\.ca.*https://"):
        _source("http://h:1", ca=str(ca))
    with pytest.raises(ConfigError, match=r"parquet\.s3\.ca.*no such file"):
        decode(
            ParquetSinkConfig,
            {"path": "s3://b/p", "s3": {"endpoint_url": "https://h:1", "ca": missing}},
            "parquet",
        )
