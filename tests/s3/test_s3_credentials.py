"""The S3 source's explicit keys, temporary credentials and profiles against moto with
authentication on (B29, B67).

moto's server checks request signatures once its first actions (an IAM user, its key and
policy, a role) have passed unauthenticated; temporary credentials come from moto's STS
(``AssumeRole``) and are checked with their session token, so a wrong secret answers
``SignatureDoesNotMatch`` and a wrong session token ``InvalidToken``. (moto does not
accept ``GetSessionToken`` credentials for S3 requests: ``AssumeRole`` is what is tested.)
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from spate.config import decode
from spate.errors import ConfigError, SpateError
from spate_s3 import S3SourceConfig

from tests.s3.s3kit import (
    AuthenticatedS3,
    authenticated_moto,
    ids_of,
    make_source,
    put_ndjson,
    run_to_end,
)

pytestmark = pytest.mark.integration

RECORDS = 20


@pytest.fixture(scope="module")
def authenticated_s3(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[str, AuthenticatedS3]]:
    """``(endpoint, server)`` of a private moto server that checks signatures."""
    with authenticated_moto(tmp_path_factory.mktemp("moto-auth") / "moto.log") as moto:
        s3 = moto.client("s3")
        s3.create_bucket(Bucket="secured")
        put_ndjson(s3, "secured", "data/", 2, RECORDS // 2)
        yield moto.endpoint, moto


def _config(endpoint: str, **keys: Any) -> S3SourceConfig:
    body = {"url": "s3://secured/data/", "endpoint_url": endpoint, "startup_timeout": "10s"}
    return decode(S3SourceConfig, {**body, **keys}, "source.s3")


def test_explicit_keys_read_every_record(authenticated_s3: tuple[str, AuthenticatedS3]) -> None:
    url, moto = authenticated_s3
    config = _config(
        url, access_key_id=moto.access_key_id, secret_access_key=moto.secret_access_key
    )
    assert moto.secret_access_key not in repr(config)
    source, _ = make_source(config)
    report, rows = run_to_end(source)
    assert report.exit_code == 0, report.reason
    assert len(set(ids_of(rows))) == RECORDS


def test_b29_a_wrong_secret_fails_start_naming_the_endpoint_not_the_secret(
    authenticated_s3: tuple[str, AuthenticatedS3],
) -> None:
    url, moto = authenticated_s3
    wrong = "Wr0ng-s3-secret-b67"
    source, _ = make_source(_config(url, access_key_id=moto.access_key_id, secret_access_key=wrong))
    with pytest.raises(SpateError) as info:
        run_to_end(source)
    text = str(info.value)
    assert url in text and "SignatureDoesNotMatch" in text, text
    assert wrong not in text


def test_a_profile_of_the_shared_credentials_file(
    authenticated_s3: tuple[str, AuthenticatedS3], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    url, moto = authenticated_s3
    credentials = tmp_path / "credentials"
    temporary = moto.temporary_credentials()
    credentials.write_text(
        f"[etl]\naws_access_key_id = {moto.access_key_id}\n"
        f"aws_secret_access_key = {moto.secret_access_key}\n"
        f"[etl-temporary]\naws_access_key_id = {temporary['access_key_id']}\n"
        f"aws_secret_access_key = {temporary['secret_access_key']}\n"
        f"aws_session_token = {temporary['session_token']}\n",
        encoding="utf-8",
    )
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(credentials))
    for profile in ("etl", "etl-temporary"):
        source, _ = make_source(_config(url, profile=profile))
        report, rows = run_to_end(source)
        assert report.exit_code == 0, f"{profile}: {report.reason}"
        assert len(set(ids_of(rows))) == RECORDS


def test_b67_temporary_credentials_with_their_session_token_read_every_record(
    authenticated_s3: tuple[str, AuthenticatedS3],
) -> None:
    """Keys and session token from STS AssumeRole; the same keys without the token fail."""
    url, moto = authenticated_s3
    temporary = moto.temporary_credentials()
    config = _config(url, **temporary)
    assert temporary["session_token"] not in repr(config)
    source, _ = make_source(config)
    report, rows = run_to_end(source)
    assert report.exit_code == 0, report.reason
    assert len(set(ids_of(rows))) == RECORDS

    without = {k: v for k, v in temporary.items() if k != "session_token"}
    source, _ = make_source(_config(url, **without))
    with pytest.raises(SpateError, match=r"InvalidClientTokenId|InvalidAccessKeyId|403"):
        run_to_end(source)


def test_b29_a_wrong_session_token_fails_start_naming_the_endpoint_not_the_token(
    authenticated_s3: tuple[str, AuthenticatedS3],
) -> None:
    url, moto = authenticated_s3
    wrong = "Wr0ng-session-token-b67"
    source, _ = make_source(
        _config(url, **(moto.temporary_credentials() | {"session_token": wrong}))
    )
    with pytest.raises(SpateError) as info:
        run_to_end(source)
    text = str(info.value)
    assert url in text and "InvalidToken" in text, text
    assert wrong not in text


def test_contradictory_credentials_are_refused_with_their_path() -> None:
    with pytest.raises(ConfigError, match=r"source\.s3\.access_key_id"):
        _config("http://h:1", access_key_id="AKIA")
    with pytest.raises(ConfigError, match=r"source\.s3\.session_token"):
        _config("http://h:1", session_token="tok")
    with pytest.raises(ConfigError, match=r"source\.s3\.profile"):
        _config("http://h:1", profile="p", access_key_id="a", secret_access_key="s")


def test_b67_the_parquet_s3_store_takes_a_session_token_and_a_profile(
    authenticated_s3: tuple[str, AuthenticatedS3], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The Parquet sink's ``s3:`` section: STS temporary credentials, a profile, and a
    wrong session token that fails naming the endpoint, not the token."""
    from spate_parquet._store import S3Store
    from spate_parquet.config import ParquetSinkConfig

    url, moto = authenticated_s3
    temporary = moto.temporary_credentials()
    credentials = tmp_path / "credentials"
    credentials.write_text(
        f"[lake]\naws_access_key_id = {temporary['access_key_id']}\n"
        f"aws_secret_access_key = {temporary['secret_access_key']}\n"
        f"aws_session_token = {temporary['session_token']}\n",
        encoding="utf-8",
    )
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(credentials))
    base = {"endpoint_url": url, "region": "us-east-1"}
    for keys in (temporary, {"profile": "lake"}):
        config = decode(
            ParquetSinkConfig, {"path": "s3://secured/lake", "s3": base | keys}, "parquet"
        )
        assert temporary["session_token"] not in repr(config)
        store = S3Store(config)
        try:
            store.put("part-0", b"hello")
            assert store.get("part-0") == b"hello"
        finally:
            store.close()
    wrong = "Wr0ng-parquet-token-b67"
    s3 = base | temporary | {"session_token": wrong}
    store = S3Store(decode(ParquetSinkConfig, {"path": "s3://secured/lake", "s3": s3}, "parquet"))
    try:
        with pytest.raises(SpateError) as info:
            store.put("part-1", b"hello")
    finally:
        store.close()
    assert url in str(info.value) and "InvalidToken" in str(info.value), str(info.value)
    assert wrong not in str(info.value)
    with pytest.raises(ConfigError, match=r"parquet\.s3\.session_token"):
        decode(ParquetSinkConfig, {"path": "s3://b/p", "s3": {"session_token": "t"}}, "parquet")
