"""Fixtures: a private moto S3 server per test module and a fresh bucket per test, or a
fresh bucket on the services' moto server (``lake``)."""

import uuid
from typing import Any

import pytest

from tests.s3.moto_fixtures import bucket, moto_endpoint
from tests.s3.s3kit import s3_client

__all__ = ["bucket", "lake", "moto_endpoint"]


@pytest.fixture
def lake(s3_endpoint: str) -> tuple[Any, str, str]:
    """A fresh bucket on the services' moto server: (boto3 client, bucket, endpoint)."""
    client = s3_client(s3_endpoint)
    name = f"lake-{uuid.uuid4().hex[:12]}"
    client.create_bucket(Bucket=name)
    return client, name, s3_endpoint
