"""The ClickHouse sink with a misbehaving network between it and a replica's HTTP front.

A fault proxy sits in front of one front process (one simulated replica over chDB); the
sink's replica URL is the proxy's. Unlike the faults the front injects itself
(``tests/clickhouse/test_clickhouse_sink_faults.py``: 503s, a hanging server, a refused
port, a dropped connection), these happen on the wire: a replica that accepts and never
answers, an answer cut off after the server ran the insert, an answer cut mid-way.
Each test checks the rows the server holds with ``count()``: the retries the faults
cause never leave a duplicate behind when the table has a deduplication window (B9).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from spate_clickhouse._client import connect
from spate_clickhouse._endpoint import parse_endpoint
from spate_clickhouse.config import ClickHouseSinkConfig

from tests.clickhouse.sinkkit import BuiltSink, Driver, GaugeWatcher, build_sink
from tests.support.chfront_fixtures import ChFront
from tests.support.delivery import wait_until
from tests.support.netfault import FaultProxy, Matcher, peer_sockets
from tests.support.scale import current_scale, scaled

pytestmark = [pytest.mark.integration, pytest.mark.e2e]

FAST_RETRY = {"initial": "50ms", "max": "500ms", "multiplier": 2.0, "jitter": 0.2}
DEDUP = "non_replicated_deduplication_window = 1000"


@pytest.fixture(scope="module")
def fronts(chfront_module: Callable[..., ChFront]) -> list[ChFront]:
    """Two replicas of one shard."""
    return [chfront_module(), chfront_module()]


@pytest.fixture
def proxy(fronts: list[ChFront]) -> Iterator[FaultProxy]:
    """A fault proxy in front of replica 0."""
    with FaultProxy(f"{fronts[0].host}:{fronts[0].port}") as started:
        yield started


def url(proxy: FaultProxy) -> str:
    return f"http://{proxy.address}"


def inserts() -> Matcher:
    """Matches the chunk that starts the sink's INSERT request: its request line carries
    the deduplication settings (the statement itself travels compressed in the body)."""

    def match(chunk: bytes) -> bool:
        return chunk.startswith(b"POST ") and b"insert_deduplicate=" in chunk.split(b"\r\n", 1)[0]

    return match


def table(fronts: list[ChFront], name: str, settings: str = DEDUP) -> list[Any]:
    extra = f" SETTINGS {settings}" if settings else ""
    clients = [f.client() for f in fronts]
    for client in clients:
        client.command(
            f"CREATE TABLE {name} (id UInt64, key String) ENGINE = MergeTree ORDER BY id{extra}"
        )
    return clients


def sink(table: str, replicas: list[str], **extra: Any) -> BuiltSink:
    body: dict[str, Any] = {
        "table": table,
        "columns": ["id", "key"],
        "shards": [{"replicas": replicas}],
        "batch": {"max_rows": 1_000, "linger": "100ms"},
        "retry": FAST_RETRY,
        "breaker": {"failure_threshold": 1, "open_for": "500ms"},
        "timeouts": {"connect": "1s", "send_receive": "2s"},
    }
    body.update(extra)
    built = build_sink(body)
    built.sink.start()
    return built


def rows(count: int) -> tuple[list[tuple[int, str]], list[bytes]]:
    keys = [f"k{i}".encode() for i in range(count)]
    return [(i, keys[i].decode()) for i in range(count)], keys


def counts(clients: list[Any], name: str) -> tuple[int, int]:
    """Rows held by these replicas together, and distinct ids among them."""
    total, ids = 0, set()
    for client in clients:
        result = client.query(f"SELECT id FROM {name}").result_rows
        total += len(result)
        ids.update(int(r[0]) for r in result)
    return total, len(ids)


def test_b11_a_blackholed_replica_opens_its_breaker_and_the_sibling_takes_the_writes(
    fronts: list[ChFront], proxy: FaultProxy
) -> None:
    """B11, B12: replica 0 accepts connections and never answers for a while (a blackhole
    on the wire, not a refused port). Its requests time out, its breaker opens, replica 1
    takes the writes; every row lands once."""
    outage = max(4.0, 30.0 * current_scale())
    clients = table(fronts, "bh")
    built = sink("bh", [url(proxy), fronts[1].url])
    breaker = GaugeWatcher(built, "spate_sink_breaker_open", shard="0", replica=url(proxy))
    count = scaled(100_000, minimum=10_000)
    data, keys = rows(count)
    driver = Driver(built.sink)
    proxy.blackhole()
    steps = 10
    size = count // steps
    for start in range(0, count, size):
        driver.offer_all(data[start : start + size], keys[start : start + size])
        time.sleep(outage / steps)
    proxy.heal()
    assert driver.finish()
    assert breaker.stop() == 1.0
    assert driver.all_delivered
    built.sink.close()
    assert counts(clients, "bh") == (count, count)
    assert proxy.stats.swallowed > 0
    assert built.metric("spate_sink_errors_total", shard="0", error_class="retryable") > 0


@pytest.mark.parametrize(("settings", "copies"), [(DEDUP, 1), ("", 3)])
def test_b9_a_reset_after_the_insert_ran_is_retried_with_its_token_and_not_duplicated(
    fronts: list[ChFront], proxy: FaultProxy, settings: str, copies: int
) -> None:
    """B9: the insert reaches the server and runs; the connection is reset before the
    client reads the answer, twice (clickhouse-connect resends a remotely closed insert
    once itself, the sink's retry does the second). Every resend carries the same
    deduplication token: with a deduplication window one copy stays; without one, the
    three copies show the insert really ran each time."""
    name = f"reset{copies}"
    (client,) = table([fronts[0]], name, settings)
    built = sink(name, [url(proxy)], batch={"max_rows": 5_000, "linger": "5s"})
    proxy.cut(inserts, when="reply", count=2)
    data, keys = rows(5_000)
    driver = Driver(built.sink, batch_rows=5_000)
    driver.offer_all(data, keys)
    assert driver.finish()
    assert driver.all_delivered
    built.sink.close()
    assert proxy.stats.cuts == 2
    assert counts([client], name) == (5_000 * copies, 5_000)
    assert built.metric("spate_sink_retries_total", shard="0") >= 1


def test_b9_an_answer_cut_mid_way_is_retried_without_a_duplicate(
    fronts: list[ChFront], proxy: FaultProxy
) -> None:
    """B9, B12: the server runs the insert and starts answering; the connection closes
    after the first bytes of the answer (a truncated response). The client cannot know
    whether the insert landed, retries with the same token, and one copy stays."""
    (client,) = table([fronts[0]], "cut")
    built = sink("cut", [url(proxy)], batch={"max_rows": 5_000, "linger": "5s"})
    proxy.cut(inserts, when="reply", after=20, how="close", count=2)
    data, keys = rows(5_000)
    driver = Driver(built.sink, batch_rows=5_000)
    driver.offer_all(data, keys)
    assert driver.finish()
    assert driver.all_delivered
    built.sink.close()
    assert proxy.stats.cuts == 2
    assert counts([client], "cut") == (5_000, 5_000)


def test_b12_a_half_open_pooled_connection_times_out_and_the_retry_lands_once(
    fronts: list[ChFront], proxy: FaultProxy
) -> None:
    """B9, B12: after a first batch, the pooled keep-alive connection goes half-open (the
    server's side is gone, the client is not told). The next insert written into it is
    never answered; the request times out and the retry, on a new connection, lands.
    The half-open write never reached the server, so the rows are there once."""
    (client,) = table([fronts[0]], "half")
    built = sink("half", [url(proxy)], batch={"max_rows": 2_000, "linger": "5s"})
    data, keys = rows(4_000)
    driver = Driver(built.sink, batch_rows=2_000)
    driver.offer_all(data[:2_000], keys[:2_000])
    assert driver.finish()
    proxy.half_open()
    driver.offer_all(data[2_000:], keys[2_000:])
    assert driver.finish()
    assert driver.all_delivered
    built.sink.close()
    assert proxy.stats.swallowed > 0  # the second insert went into the half-open connection
    assert counts([client], "half") == (4_000, 4_000)
    assert built.metric("spate_sink_retries_total", shard="0") >= 1


POOL_SIZE = 8
"""Connections clickhouse-connect's pool keeps per client (its ``maxsize``): one that comes
back to a full pool is closed."""


def test_b106_sockets_to_a_replica_stay_within_the_pool_over_repeated_blackholes(
    fronts: list[ChFront], proxy: FaultProxy
) -> None:
    """B106, B12: ten times, the replica is blackholed while both writer threads have
    an insert in flight (as in the soak: the timeout is longer than the outage), then
    healed: the hung connections are reset, the inserts resent on new ones. After every
    heal the sink's open sockets to the replica are at most the pool's size — what one
    blackhole opened is reused by the next, not left open beside it (a socket left
    behind by each would pass the bound by the fifth) — and every row lands once."""
    rounds = 10
    (client,) = table([fronts[0]], "bhsockets")
    built = sink(
        "bhsockets",
        [url(proxy)],
        breaker={"failure_threshold": 5, "open_for": "500ms"},
        timeouts={"connect": "5s", "send_receive": "120s"},
    )
    per_round = scaled(20_000, minimum=4_000)
    data, keys = rows(per_round * rounds)
    driver = Driver(built.sink)
    open_after: list[int] = []
    for n in range(rounds):
        swallowed = proxy.stats.swallowed
        proxy.blackhole()
        # Three batches while cut off (two hang, one waits: the sink holds them), the rest
        # of the round after the heal.
        first, hung, last = n * per_round, n * per_round + 3_000, (n + 1) * per_round
        driver.offer_all(data[first:hung], keys[first:hung])
        wait_until(
            lambda seen=swallowed: proxy.stats.swallowed > seen, 60, "an insert in the blackhole"
        )
        time.sleep(0.5)  # the other writer thread's batch goes in as well
        proxy.heal()
        driver.offer_all(data[hung:last], keys[hung:last])
        assert driver.finish()
        open_after.append(peer_sockets(os.getpid())[proxy.port])
    assert driver.all_delivered
    built.sink.close()
    assert counts([client], "bhsockets") == (per_round * rounds, per_round * rounds)
    assert proxy.stats.resets >= rounds, vars(proxy.stats)  # every heal reset a hung insert
    assert max(open_after) <= POOL_SIZE, open_after


def test_b106_a_pool_the_client_replaces_closes_its_connections(proxy: FaultProxy) -> None:
    """B106: every ``max_connection_age`` (10 minutes) clickhouse-connect replaces a
    client's pools. A replaced pool that something still refers to (as happened after
    faults in the soak) must not keep its idle connections open beside the new pool's."""
    client = connect(parse_endpoint(url(proxy)), ClickHouseSinkConfig(table="replaced"))
    client.command("SELECT 1")
    held = client.http.connection_from_url(url(proxy))  # outlives the replacement
    assert peer_sockets(os.getpid())[proxy.port] == 1
    client.http.clear()  # what the client does at max_connection_age
    assert peer_sockets(os.getpid())[proxy.port] == 0, "the replaced pool kept its connection"
    client.command("SELECT 1")
    assert peer_sockets(os.getpid())[proxy.port] == 1
    client.close()
    assert held.pool is None  # closed
