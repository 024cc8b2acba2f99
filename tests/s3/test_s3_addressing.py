"""Path-style and virtual-hosted addressing of the S3 source and the Parquet sink, on moto.

``path_style: true`` asks ``http://localhost:<port>/<bucket>/<key>``; ``path_style: false``
asks ``http://<bucket>.localhost:<port>/<key>``, and moto's server takes the bucket from
the ``Host`` header. Virtual-hosted addressing needs a DNS name per bucket, which this
machine does not resolve: the test stands in for the DNS with a resolver that sends
``*.localhost`` to 127.0.0.1 and records every name the client asked for — so it proves
which addressing each setting sends and that moto answers it, not a real DNS set-up.
"""

from __future__ import annotations

import socket
from collections.abc import Iterator
from typing import Any

import pytest
from spate.config import decode
from spate_s3 import S3SourceConfig

from tests.s3.s3kit import MotoServer, ids_of, make_source, put_ndjson, run_to_end, s3_client

pytestmark = pytest.mark.integration

RECORDS = 10


@pytest.fixture(scope="module")
def moto() -> Iterator[MotoServer]:
    server = MotoServer()
    server.start()
    try:
        s3 = s3_client(server.url)
        s3.create_bucket(Bucket="hosted")
        put_ndjson(s3, "hosted", "data/", 2, RECORDS // 2)
        yield server
    finally:
        server.stop()


@pytest.fixture
def asked(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Host names the S3 client resolves; ``*.localhost`` resolves to 127.0.0.1."""
    names: list[str] = []
    real = socket.getaddrinfo

    def resolve(host: Any, *args: Any, **kwargs: Any) -> Any:
        name = host.decode() if isinstance(host, bytes) else str(host)
        names.append(name)
        if name.endswith(".localhost"):
            return real("127.0.0.1", *args, **kwargs)
        return real(host, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", resolve)
    return names


@pytest.mark.parametrize(("path_style", "host"), [(True, "localhost"), (False, "hosted.localhost")])
def test_path_style_and_virtual_hosted_addressing_read_every_record(
    moto: MotoServer, asked: list[str], path_style: bool, host: str
) -> None:
    config = decode(
        S3SourceConfig,
        {
            "url": "s3://hosted/data/",
            "endpoint_url": f"http://localhost:{moto.port}",
            "path_style": path_style,
            "startup_timeout": "10s",
        },
        "source.s3",
    )
    source, _ = make_source(config)
    report, rows = run_to_end(source)
    assert report.exit_code == 0, report.reason
    assert len(set(ids_of(rows))) == RECORDS
    assert host in asked, asked
    assert ("hosted.localhost" in asked) is not path_style, asked


@pytest.mark.parametrize(("path_style", "host"), [(True, "localhost"), (False, "hosted.localhost")])
def test_the_parquet_s3_store_follows_path_style_too(
    moto: MotoServer, asked: list[str], path_style: bool, host: str
) -> None:
    from spate_parquet._store import S3Store
    from spate_parquet.config import ParquetSinkConfig

    s3 = {
        "endpoint_url": f"http://localhost:{moto.port}",
        "region": "us-east-1",
        "path_style": path_style,
    }
    config = decode(ParquetSinkConfig, {"path": "s3://hosted/lake", "s3": s3}, "parquet")
    store = S3Store(config)
    try:
        store.put(f"part-{path_style}", b"hello")
        assert store.get(f"part-{path_style}") == b"hello"
    finally:
        store.close()
    assert host in asked, asked
    assert ("hosted.localhost" in asked) is not path_style, asked
