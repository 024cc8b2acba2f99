"""Each injected fault reaches clickhouse-connect as a real server or network would deliver it.

The ClickHouse sink classifies errors, retries, opens breakers and fails over (B11, B12) by
what its client raises; these tests pin what that is for every fault mode: an HTTP 5xx with
an exception code, a read timeout, a connection reset, a refused connection. They also show
the ambiguous cases at-least-once delivery must survive: a timed-out or reset insert whose
rows still land.
"""

from __future__ import annotations

import socket
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from clickhouse_connect.driver.exceptions import DatabaseError, OperationalError

from tests.support.chfront_fixtures import ChFront, FrontFactory

pytestmark = pytest.mark.integration


def causes(exc: BaseException) -> list[BaseException]:
    """``exc`` and everything it wraps (causes, contexts, urllib3 reasons and arguments)."""
    seen: list[BaseException] = []
    stack: list[Any] = [exc]
    while stack:
        item = stack.pop()
        if not isinstance(item, BaseException) or any(item is s for s in seen):
            continue
        seen.append(item)
        stack += [item.__cause__, item.__context__, getattr(item, "reason", None), *item.args]
    return seen


def wait_for(predicate: Callable[[], bool], timeout: float = 15.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError("condition not met in time")
        time.sleep(0.05)


@pytest.fixture(scope="module")
def front(chfront_module: FrontFactory) -> ChFront:
    started = chfront_module()
    started.client().command(
        "CREATE TABLE events (id UInt64, note String) ENGINE = MergeTree ORDER BY id"
    )
    return started


@pytest.fixture(autouse=True)
def healthy(front: ChFront) -> Iterator[None]:
    front.recover()
    front.client().command("TRUNCATE TABLE events")
    yield
    front.recover()


def count(front: ChFront) -> int:
    return int(front.client().command("SELECT count() FROM events"))


def insert_one(client: Any, ident: int = 1) -> None:
    client.insert("events", [(ident, "x")], column_names=["id", "note"])


def test_5xx_answers_503_with_an_exception_code_until_recovered(front: ChFront) -> None:
    """B12: a server-side failure is a coded, retryable HTTP error; ping still answers."""
    client = front.client()
    front.inject("5xx", seconds=120)
    with pytest.raises(DatabaseError) as failed:
        insert_one(client)
    assert failed.value.code == 439
    assert "CANNOT_SCHEDULE_TASK" in str(failed.value)
    request = urllib.request.Request(f"{front.url}/", data=b"SELECT 1")
    with pytest.raises(urllib.error.HTTPError) as raw:
        urllib.request.urlopen(request, timeout=10)
    assert raw.value.code == 503
    assert raw.value.headers["X-ClickHouse-Exception-Code"] == "439"
    raw.value.close()
    assert client.ping()
    front.recover()
    insert_one(client)
    assert count(front) == 1


def test_5xx_status_code_count_and_target_are_selectable(front: ChFront) -> None:
    client = front.client()
    before = front.status()["faulted_requests"]
    front.inject("5xx", status=500, code=252, count=2, only="insert")
    assert client.command("SELECT 1") == 1  # queries are not affected
    for _ in range(2):
        with pytest.raises(DatabaseError) as failed:
            insert_one(client)
        assert failed.value.code == 252 and "TOO_MANY_PARTS" in str(failed.value)
    insert_one(client)  # the count is used up
    assert count(front) == 1
    assert front.status()["faulted_requests"] - before == 2


def test_5xx_for_some_seconds_recovers_by_itself(front: ChFront) -> None:
    client = front.client()
    front.inject("5xx", seconds=1)
    with pytest.raises(DatabaseError):
        insert_one(client)

    def accepted() -> bool:
        try:
            insert_one(client)
        except DatabaseError:
            return False
        return True

    wait_for(accepted)
    assert front.status()["fault"]["mode"] == "none"


def test_slow_answer_times_out_the_client_while_the_insert_still_lands(front: ChFront) -> None:
    """The ambiguous write: the client gives up, the server finishes (why B9 tokens matter)."""
    client = front.client(send_receive_timeout=2)
    front.inject("slow", delay=60, only="insert")
    with pytest.raises(OperationalError) as timed_out:
        insert_one(client)
    assert any(type(c).__name__ == "ReadTimeoutError" for c in causes(timed_out.value))
    assert count(front) == 0  # still paused
    front.recover()  # releases the paused request at once
    wait_for(lambda: count(front) == 1)


def test_drop_resets_the_connection_without_an_answer(front: ChFront) -> None:
    client = front.client()
    front.inject("drop", only="insert")
    with pytest.raises(OperationalError) as dropped:
        insert_one(client)
    assert any(isinstance(c, ConnectionResetError) for c in causes(dropped.value))
    front.recover()
    assert count(front) == 0


def test_drop_after_running_loses_the_answer_but_not_the_rows(front: ChFront) -> None:
    """B9: the rows land though the client hears nothing. clickhouse-connect re-sends an insert
    once after a reset, so without a token the rows may land twice; with the batch's dedup
    token every execution after the first is dropped by the server."""
    client = front.client()
    front.inject("drop", when="after", only="insert")
    with pytest.raises(OperationalError) as dropped:
        insert_one(client)
    assert any(isinstance(c, ConnectionResetError) for c in causes(dropped.value))
    front.recover()
    assert count(front) >= 1

    client.command(
        "CREATE TABLE IF NOT EXISTS events_dedup (id UInt64, note String) ENGINE = MergeTree "
        "ORDER BY id SETTINGS non_replicated_deduplication_window = 100"
    )
    before = front.status()["faulted_requests"]
    front.inject("drop", when="after", only="insert")
    with pytest.raises(OperationalError):
        client.insert(
            "events_dedup",
            [(i, "y") for i in range(10)],
            column_names=["id", "note"],
            settings={"insert_deduplication_token": "run-7-shard-0-seq-1"},
        )
    front.recover()
    assert front.status()["faulted_requests"] > before
    assert client.command("SELECT count() FROM events_dedup") == 10


def test_network_faults_also_cut_ping_unless_limited_to_statements(front: ChFront) -> None:
    for when in ("before", "after"):
        front.inject("drop", when=when)
        with pytest.raises(ConnectionResetError):
            urllib.request.urlopen(f"{front.url}/ping", timeout=10)
        front.recover()
    front.inject("drop", only="insert")
    assert front.client().ping()


def test_refuse_closes_the_port_and_recover_listens_again(front: ChFront) -> None:
    """B29 groundwork: an unreachable replica is a refused connection naming the endpoint."""
    client = front.client()
    insert_one(client, 1)
    front.inject("refuse")
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection((front.host, front.port), timeout=2).close()
    with pytest.raises(OperationalError) as refused:
        insert_one(client, 2)
    assert any(isinstance(c, ConnectionRefusedError) for c in causes(refused.value))
    assert str(front.port) in str(refused.value)
    assert not client.ping()
    front.recover()
    assert client.ping()
    insert_one(client, 3)
    assert sorted(client.query("SELECT id FROM events").result_columns[0]) == [1, 3]


def test_refuse_for_some_seconds_listens_again_by_itself(front: ChFront) -> None:
    front.inject("refuse", seconds=1)
    assert not _accepts(front)
    wait_for(lambda: _accepts(front))
    assert front.status()["fault"]["mode"] == "none"
    assert front.client().command("SELECT 1") == 1


def _accepts(front: ChFront) -> bool:
    try:
        socket.create_connection((front.host, front.port), timeout=1).close()
    except OSError:
        return False
    return True


def test_stop_and_start_keep_the_data_dir_even_after_a_kill(chfront: FrontFactory) -> None:
    replica = chfront()
    client = replica.client()
    client.command("CREATE TABLE kept (id UInt64) ENGINE = MergeTree ORDER BY id")
    client.insert("kept", [(i,) for i in range(1000)], column_names=["id"])
    port = replica.port
    replica.stop(kill=True)
    with pytest.raises(OperationalError):
        client.command("SELECT 1")
    replica.start()
    assert replica.port == port
    assert replica.client().command("SELECT count() FROM kept") == 1000
