"""Pytest fixtures of a private moto S3 server and a fresh bucket per test.

moto runs inside the test process (``ThreadedMotoServer``) on a free loopback port, one
per test module, so tests that overwrite or delete objects never disturb others. A
package's ``conftest.py`` re-exports them (``from tests.s3.moto_fixtures import ...``).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from tests.s3.s3kit import MotoServer, s3_client


@pytest.fixture(scope="module")
def moto_endpoint() -> Iterator[str]:
    server = MotoServer(threaded=True)
    server.start()
    try:
        yield server.url
    finally:
        server.stop()


@pytest.fixture
def bucket(moto_endpoint: str) -> tuple[Any, str]:
    """A fresh bucket on the module's moto server and a boto3 client for it."""
    client = s3_client(moto_endpoint)
    name = f"b-{uuid.uuid4().hex[:12]}"
    client.create_bucket(Bucket=name)
    return client, name
