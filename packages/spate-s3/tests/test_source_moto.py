"""The source on moto's S3 server: ranged GETs pinned by ETag, gzip and zstd objects,
an object overwritten mid-run, start-up failures naming the endpoint, error mapping and
the source contract suite (B25, B29)."""

from __future__ import annotations

import time
from typing import Any

import aiohttp
import botocore.exceptions as bex
import pytest
from spate.errors import ErrorClass, SourceError
from spate.source import Source
from spate.testing.conformance import SourceConformance
from spate_coordination import MemoryStore
from spate_s3 import ObjectChangedError, S3SourceConfig
from spate_s3._objects import translate_error

from tests.s3.s3kit import (
    Driver,
    coordination,
    free_port,
    ids_of,
    make_source,
    put_ndjson,
    record_line,
    run_to_end,
)
from tests.support.scale import scaled


def s3_config(endpoint: str, bucket: str, prefix: str = "", **extra: Any) -> S3SourceConfig:
    return S3SourceConfig(url=f"s3://{bucket}/{prefix}", endpoint_url=endpoint, **extra)


def test_b25_plain_gzip_and_zstd_objects_all_decode_every_record_once(
    moto_endpoint: str, bucket: tuple[Any, str]
) -> None:
    client, name = bucket
    records = scaled(2000, minimum=100)
    ids = put_ndjson(client, name, "in/", 9, records, compression=("none", "gzip", "zstd"))
    client.put_object(Bucket=name, Key="elsewhere/x.ndjson", Body=b'{"id":"outside"}\n')
    cfg = s3_config(moto_endpoint, name, "in/", split_target_bytes=records * 40, batch_records=500)
    source, _ = make_source(cfg)
    report, rows = run_to_end(source)
    assert report.exit_code == 0, report.reason
    got = ids_of(rows)
    assert sorted(got) == sorted(ids)


def test_b25_an_object_overwritten_mid_run_fails_its_split_with_a_clear_error(
    moto_endpoint: str, bucket: tuple[Any, str]
) -> None:
    client, name = bucket
    total = 20_000
    lines = [record_line(0, r) for r in range(total)]
    client.put_object(Bucket=name, Key="big.ndjson", Body=b"".join(x + b"\n" for x in lines))
    cfg = s3_config(moto_endpoint, name, batch_records=500, prefetch_bytes=65536)
    source, _ = make_source(cfg)
    driver = Driver(source)
    source.start(driver)
    try:
        driver.run(until=500)
        client.put_object(Bucket=name, Key="big.ndjson", Body=b'{"id":"v2"}\n' * total)
        with pytest.raises(SourceError) as info:
            driver.run()
    finally:
        source.close()
    message = str(info.value)
    assert info.value.error_class is ErrorClass.FATAL
    assert f"s3://{name}/big.ndjson" in message and "changed" in message
    assert "quarantined" in message
    # Records handed out before the change are a prefix of version 1 only.
    assert driver.records == lines[: len(driver.records)]
    assert len(driver.records) < total


def test_b25_replanning_an_unchanged_bucket_is_a_no_op_and_a_changed_one_is_refused(
    moto_endpoint: str, bucket: tuple[Any, str]
) -> None:
    client, name = bucket
    put_ndjson(client, name, "p/", 4, 50)
    store = MemoryStore(2.0)
    coord = coordination()
    cfg = s3_config(moto_endpoint, name, "p/", split_target_bytes=2000)
    first, _ = make_source(cfg, store, coord)
    report, rows = run_to_end(first)
    assert report.exit_code == 0 and len(rows) == 200
    # Listing again finds the same objects: the same plan, nothing to redo.
    again, _ = make_source(
        s3_config(moto_endpoint, name, "p/", split_target_bytes=2000, refresh_listing=True),
        store,
        coordination(coord.job),
    )
    report, rows = run_to_end(again)
    assert report.exit_code == 0 and rows == []
    # A new object under the prefix makes a different plan: refused, naming the job.
    client.put_object(Bucket=name, Key="p/late.ndjson", Body=b'{"id":"late"}\n')
    changed, _ = make_source(
        s3_config(moto_endpoint, name, "p/", split_target_bytes=2000, refresh_listing=True),
        store,
        coordination(coord.job),
    )
    report, rows = run_to_end(changed)
    assert report.exit_code == 1
    assert "prefix changed" in report.reason and coord.job in report.reason


def test_b29_a_missing_bucket_fails_start_up_naming_the_endpoint(moto_endpoint: str) -> None:
    source, _ = make_source(s3_config(moto_endpoint, "no-such-bucket"))
    with pytest.raises(SourceError) as info:
        source.start(Driver(source))
    assert info.value.error_class is ErrorClass.FATAL
    assert "NoSuchBucket" in str(info.value) and moto_endpoint in str(info.value)


def test_b29_an_empty_prefix_fails_start_up(moto_endpoint: str, bucket: tuple[Any, str]) -> None:
    _, name = bucket
    source, _ = make_source(s3_config(moto_endpoint, name, "nothing/"))
    with pytest.raises(SourceError, match="no objects under this prefix"):
        source.start(Driver(source))


def test_b29_an_unreachable_endpoint_fails_start_up_naming_it() -> None:
    endpoint = f"http://127.0.0.1:{free_port()}"
    source, _ = make_source(s3_config(endpoint, "b", request_timeout=1.0, startup_timeout=20.0))
    started = time.monotonic()
    with pytest.raises(SourceError) as info:
        source.start(Driver(source))
    assert endpoint in str(info.value)
    assert time.monotonic() - started < 20


def _client_error(code: str, status: int) -> bex.ClientError:
    return bex.ClientError(
        {"Error": {"Code": code, "Message": code}, "ResponseMetadata": {"HTTPStatusCode": status}},
        "GetObject",
    )


@pytest.mark.parametrize(
    ("exc", "expected"),
    [
        (_client_error("PreconditionFailed", 412), "changed"),
        (_client_error("NoSuchKey", 404), "changed"),
        (_client_error("SlowDown", 503), ErrorClass.RETRYABLE),
        (_client_error("InternalError", 500), ErrorClass.RETRYABLE),
        (_client_error("AccessDenied", 403), ErrorClass.FATAL),
        (_client_error("NoSuchBucket", 404), ErrorClass.FATAL),
        (_client_error("InvalidRange", 416), ErrorClass.FATAL),
        (bex.NoCredentialsError(), ErrorClass.FATAL),
        (bex.PartialCredentialsError(provider="env", cred_var="AWS_SECRET"), ErrorClass.FATAL),
        (bex.NoRegionError(), ErrorClass.FATAL),
        (bex.EndpointConnectionError(endpoint_url="http://x"), ErrorClass.RETRYABLE),
        (bex.ConnectTimeoutError(endpoint_url="http://x"), ErrorClass.RETRYABLE),
        (bex.ReadTimeoutError(endpoint_url="http://x"), ErrorClass.RETRYABLE),
        (bex.ConnectionClosedError(endpoint_url="http://x"), ErrorClass.RETRYABLE),
        (bex.ParamValidationError(report="bad"), ErrorClass.FATAL),
        (bex.ResponseStreamingError(error="reset"), ErrorClass.RETRYABLE),
        (aiohttp.ClientPayloadError("cut"), ErrorClass.RETRYABLE),
        (aiohttp.ServerDisconnectedError(), ErrorClass.RETRYABLE),
        (TimeoutError(), ErrorClass.RETRYABLE),
        (ConnectionResetError(), ErrorClass.RETRYABLE),
        (RuntimeError("bug"), ErrorClass.FATAL),
    ],
)
def test_every_client_exception_maps_to_one_error_class(
    exc: BaseException, expected: object
) -> None:
    error = translate_error(exc, "GET s3://b/k", "http://endpoint")
    if expected == "changed":
        assert isinstance(error, ObjectChangedError)
    else:
        assert not isinstance(error, ObjectChangedError)
        assert error.error_class is expected
    assert "GET s3://b/k" in error.reason


class TestS3SourceOnMotoConformance(SourceConformance):
    """The source conformance suite on moto; one split (lanes are splits, partition 0)."""

    partitions = 1
    records = 30
    poll_timeout = 0.2

    @pytest.fixture(autouse=True)
    def _setup(self, moto_endpoint: str, bucket: tuple[Any, str]) -> None:
        self.client, self.name = bucket
        self.endpoint = moto_endpoint
        self.store = MemoryStore(2.0)
        self.job = coordination().job

    def produce(self, partitions: int, records: int) -> dict[int, list[bytes]]:
        lines = [record_line(0, r) for r in range(records)]
        half = records // 2
        self.client.put_object(
            Bucket=self.name, Key="a.ndjson", Body=b"".join(x + b"\n" for x in lines[:half])
        )
        self.client.put_object(
            Bucket=self.name, Key="b.ndjson", Body=b"".join(x + b"\n" for x in lines[half:])
        )
        return {0: lines}

    def open_source(self) -> Source:
        cfg = s3_config(self.endpoint, self.name, batch_records=7)
        source, _ = make_source(cfg, self.store, coordination(self.job))
        return source
