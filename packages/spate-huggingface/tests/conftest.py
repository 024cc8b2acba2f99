"""Fixtures: a Hub test server (the documented commit API on loopback) per test."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.support.hub import HubServer

from .harness import REPO, TOKEN


@pytest.fixture
def hub() -> Iterator[HubServer]:
    with HubServer(token=TOKEN) as server:
        server.create_repo(REPO)
        yield server
