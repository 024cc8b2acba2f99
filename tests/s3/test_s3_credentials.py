"""The S3 source's explicit keys and profiles against moto with authentication on
(B29, B67). (moto does not accept STS session credentials for S3 requests, so
``session_token`` is only checked for its configuration rules here.)

moto's server checks request signatures once ``INITIAL_NO_AUTH_ACTION_COUNT`` actions
have passed unauthenticated: the test creates an IAM user with an access key and an
S3 policy in those, and from then on a wrong secret answers ``SignatureDoesNotMatch``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from spate.config import decode
from spate.errors import ConfigError, SpateError
from spate_s3 import S3SourceConfig

from tests.s3.s3kit import _wait_http, free_port, ids_of, make_source, put_ndjson, run_to_end

pytestmark = pytest.mark.integration

RECORDS = 20


@pytest.fixture(scope="module")
def authenticated_s3(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Any]]:
    """``(endpoint, access key)`` of a private moto server that checks signatures."""
    import boto3
    from botocore.config import Config

    port = free_port()
    log = tmp_path_factory.mktemp("moto-auth") / "moto.log"
    env = {**os.environ, "INITIAL_NO_AUTH_ACTION_COUNT": "3"}
    binary = str(Path(sys.executable).with_name("moto_server"))
    with log.open("ab") as out:
        process = subprocess.Popen(
            [binary, "-H", "127.0.0.1", "-p", str(port)], stdout=out, stderr=out, env=env
        )
    try:
        url = f"http://127.0.0.1:{port}"
        _wait_http(url + "/moto-api/")
        iam = boto3.client("iam", endpoint_url=url, region_name="us-east-1")
        iam.create_user(UserName="etl")
        key = iam.create_access_key(UserName="etl")["AccessKey"]
        allow = {"Effect": "Allow", "Action": "s3:*", "Resource": "*"}
        policy = {"Version": "2012-10-17", "Statement": [allow]}
        iam.put_user_policy(UserName="etl", PolicyName="s3", PolicyDocument=json.dumps(policy))
        s3 = boto3.client(
            "s3",
            endpoint_url=url,
            region_name="us-east-1",
            aws_access_key_id=key["AccessKeyId"],
            aws_secret_access_key=key["SecretAccessKey"],
            config=Config(s3={"addressing_style": "path"}),
        )
        s3.create_bucket(Bucket="secured")
        put_ndjson(s3, "secured", "data/", 2, RECORDS // 2)
        yield url, key
    finally:
        process.kill()
        process.wait(10)


def _config(endpoint: str, **keys: Any) -> S3SourceConfig:
    body = {"url": "s3://secured/data/", "endpoint_url": endpoint, "startup_timeout": "10s"}
    return decode(S3SourceConfig, {**body, **keys}, "source.s3")


def test_explicit_keys_read_every_record(authenticated_s3: tuple[str, Any]) -> None:
    url, key = authenticated_s3
    config = _config(
        url, access_key_id=key["AccessKeyId"], secret_access_key=key["SecretAccessKey"]
    )
    assert key["SecretAccessKey"] not in repr(config)
    source, _ = make_source(config)
    report, rows = run_to_end(source)
    assert report.exit_code == 0, report.reason
    assert len(set(ids_of(rows))) == RECORDS


def test_b29_a_wrong_secret_fails_start_naming_the_endpoint_not_the_secret(
    authenticated_s3: tuple[str, Any],
) -> None:
    url, key = authenticated_s3
    wrong = "Wr0ng-s3-secret-b67"
    source, _ = make_source(_config(url, access_key_id=key["AccessKeyId"], secret_access_key=wrong))
    with pytest.raises(SpateError) as info:
        run_to_end(source)
    text = str(info.value)
    assert url in text and "SignatureDoesNotMatch" in text, text
    assert wrong not in text


def test_a_profile_of_the_shared_credentials_file(
    authenticated_s3: tuple[str, Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    url, key = authenticated_s3
    credentials = tmp_path / "credentials"
    credentials.write_text(
        f"[etl]\naws_access_key_id = {key['AccessKeyId']}\n"
        f"aws_secret_access_key = {key['SecretAccessKey']}\n",
        encoding="utf-8",
    )
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(credentials))
    source, _ = make_source(_config(url, profile="etl"))
    report, rows = run_to_end(source)
    assert report.exit_code == 0, report.reason
    assert len(set(ids_of(rows))) == RECORDS


def test_contradictory_credentials_are_refused_with_their_path() -> None:
    with pytest.raises(ConfigError, match=r"source\.s3\.access_key_id"):
        _config("http://h:1", access_key_id="AKIA")
    with pytest.raises(ConfigError, match=r"source\.s3\.session_token"):
        _config("http://h:1", session_token="tok")
    with pytest.raises(ConfigError, match=r"source\.s3\.profile"):
        _config("http://h:1", profile="p", access_key_id="a", secret_access_key="s")
