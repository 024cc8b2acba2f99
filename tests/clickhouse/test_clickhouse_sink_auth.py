"""Credentials: a wrong password fails start-up naming the replica, never the password (B29).

Its own module: the front it needs runs with a user and password, and the other modules
already keep four fronts up.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from spate.errors import ErrorClass, SinkError

from tests.clickhouse.sinkkit import Driver, build_sink
from tests.support.chfront_fixtures import ChFront

pytestmark = pytest.mark.integration


def test_b29_wrong_credentials_fail_start_naming_the_replica(
    chfront: Callable[..., ChFront],
) -> None:
    guarded = chfront(user="writer", password="s3cret")
    guarded.client().command("CREATE TABLE t (id UInt64) ENGINE = MergeTree ORDER BY id")
    body: dict[str, Any] = {
        "table": "t",
        "columns": ["id"],
        "shards": [{"replicas": [guarded.url]}],
    }
    built = build_sink({**body, "user": "writer", "password": "wrong"})
    with pytest.raises(SinkError) as info:
        built.sink.start()
    assert info.value.error_class is ErrorClass.FATAL
    assert guarded.url in info.value.reason and "516" in info.value.reason
    assert "wrong" not in info.value.reason
    built.sink.close()
    ok = build_sink({**body, "user": "writer", "password": "s3cret"})
    ok.sink.start()
    driver = Driver(ok.sink)
    driver.offer_all([(i,) for i in range(100)])
    assert driver.finish() and driver.all_delivered
    ok.sink.close()


def test_b67_each_replica_authenticates_with_the_credentials_in_its_url(
    chfront: Callable[..., ChFront],
) -> None:
    """Per-replica credentials: two servers with different users and passwords, each
    replica URL carrying its own; the sink-wide user and password (wrong for both) apply
    only to replicas without credentials in their URL."""
    fronts = [
        chfront(user="alice", password="alice-pw-1"),
        chfront(user="bob", password="bob-pw-2"),
    ]
    for front in fronts:
        front.client().command("CREATE TABLE t (id UInt64) ENGINE = MergeTree ORDER BY id")
    urls = [
        fronts[0].url.replace("http://", "http://alice:alice-pw-1@"),
        fronts[1].url.replace("http://", "http://bob:bob-pw-2@"),
    ]
    built = build_sink(
        {
            "table": "t",
            "columns": ["id"],
            "shards": [{"replicas": [urls[0]]}, {"replicas": [urls[1]]}],
            "router": "distributed",
            "sharding_key": "id",
            "user": "nobody",
            "password": "wrong-for-both",
        }
    )
    built.sink.start()
    driver = Driver(built.sink)
    driver.offer_all([(i,) for i in range(200)])
    assert driver.finish() and driver.all_delivered
    built.sink.close()
    counts = [front.client().command("SELECT count() FROM t") for front in fronts]
    assert sum(counts) == 200 and all(counts), counts
