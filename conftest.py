"""Root pytest configuration: registers the project's fixture plugins.

Each module under ``tests/support`` owns the fixtures of one service or tool; add a
module here when it is created. Fixtures that need a service fail (never skip) when
the service is not reachable, with the tail of its log.

A test that asks for a service's address, directly or through another fixture, is
marked ``integration``, so ``make test-unit`` (``-m "not integration ..."``) runs exactly
the tests that need no service. A test that picks a service at run time
(``request.getfixturevalue``) carries the mark on that parameter itself.
"""

from __future__ import annotations

import pytest

pytest_plugins = [
    "tests.support.scale",
    "tests.support.services",
    "tests.support.chfront_fixtures",
    "tests.support.schema_registry",
    "tests.support.netfault",
    "tests.support.cdc",
]

SERVICE_FIXTURES = frozenset(
    {"kafka_bootstrap", "nats_url", "s3_endpoint", "clickhouse_url", "cdc_services"}
)
"""The fixtures of ``tests.support.services``: each needs a service running."""


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if SERVICE_FIXTURES.intersection(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.integration)
