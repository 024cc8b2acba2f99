"""Root pytest configuration: registers the project's fixture plugins.

Each module under ``tests/support`` owns the fixtures of one service or tool; add a
module here when it is created. Fixtures that need a service fail (never skip) when
the service is not reachable, with the tail of its log.
"""

pytest_plugins = [
    "tests.support.scale",
    "tests.support.services",
    "tests.support.chfront_fixtures",
    "tests.support.schema_registry",
    "tests.support.netfault",
]
