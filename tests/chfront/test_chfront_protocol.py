"""The front answers like ClickHouse's HTTP interface: auth, errors, settings, sessions, dedup.

Checked over plain HTTP (so statuses and headers are visible) and through clickhouse-connect
(so the sink's client sees what it would see from a server). The dedup tests back B9: a
resent batch with the same ``insert_deduplication_token`` is stored once, and the token
applies to its own request only — a token left behind would silently drop the next insert.
"""

from __future__ import annotations

import base64
import json
import threading
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass

import lz4.frame
import pytest
from clickhouse_connect.driver.exceptions import DatabaseError

from tests.support.chfront_fixtures import ChFront, FrontFactory
from tests.support.scale import scaled

pytestmark = pytest.mark.integration

USER = "spate"
PASSWORD = "s3cret word"


@dataclass
class Answer:
    status: int
    headers: dict[str, str]
    body: bytes


def http(
    front: ChFront,
    body: bytes | None = None,
    *,
    method: str | None = None,
    headers: dict[str, str] | None = None,
    auth: bool = True,
    **params: str,
) -> Answer:
    """One raw HTTP request to the front; never raises for an HTTP error status."""
    query = urllib.parse.urlencode(params)
    request = urllib.request.Request(
        f"{front.url}/?{query}", data=body, method=method or ("POST" if body else "GET")
    )
    if auth:
        token = base64.b64encode(f"{USER}:{PASSWORD}".encode()).decode()
        request.add_header("Authorization", f"Basic {token}")
    for key, value in (headers or {}).items():
        request.add_header(key, value)
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return Answer(response.status, dict(response.headers), response.read())
    except urllib.error.HTTPError as error:
        with error:
            return Answer(error.code, dict(error.headers), error.read())


@pytest.fixture(scope="module")
def front(chfront_module: FrontFactory) -> ChFront:
    return chfront_module(user=USER, password=PASSWORD, display_name="replica-a")


def test_ping_needs_no_credentials(front: ChFront) -> None:
    with urllib.request.urlopen(f"{front.url}/ping", timeout=10) as response:
        assert response.status == 200 and response.read() == b"Ok.\n"


def test_wrong_credentials_fail_with_403_and_code_516(front: ChFront) -> None:
    """B29 groundwork: a bad password is a clear, coded error, not a hang or a retry loop."""
    for headers in (
        {"Authorization": "Basic " + base64.b64encode(b"spate:wrong").decode()},
        {"X-ClickHouse-User": USER, "X-ClickHouse-Key": "wrong"},
        {},  # no credentials at all: the default user does not exist here
    ):
        answer = http(front, b"SELECT 1", auth=False, headers=headers)
        assert answer.status == 403, headers
        assert answer.headers["X-ClickHouse-Exception-Code"] == "516"
        assert answer.body.startswith(b"Code: 516. DB::Exception: ")
        assert b"(AUTHENTICATION_FAILED)" in answer.body
    with pytest.raises(DatabaseError) as refused:
        front.client(password="wrong")
    assert refused.value.code == 516


def test_every_credential_carrier_is_accepted(front: ChFront) -> None:
    assert http(front, b"SELECT 1").body == b"1\n"
    header_auth = http(
        front,
        b"SELECT 2",
        auth=False,
        headers={"X-ClickHouse-User": USER, "X-ClickHouse-Key": PASSWORD},
    )
    assert header_auth.body == b"2\n"
    assert http(front, b"SELECT 3", auth=False, user=USER, password=PASSWORD).body == b"3\n"
    assert front.client().command("SELECT 4") == 4


def test_errors_carry_clickhouse_text_code_and_status(front: ChFront) -> None:
    cases = [
        (b"SELECT * FROM no_such_table", 404, "60", b"(UNKNOWN_TABLE)"),
        (b"SELEC 1", 400, "62", b"(SYNTAX_ERROR)"),
        (b"SELECT throwIf(1)", 500, "395", b"(FUNCTION_THROW_IF_VALUE_IS_NON_ZERO)"),
    ]
    for sql, status, code, name in cases:
        answer = http(front, sql)
        assert answer.status == status, answer.body
        assert answer.headers["X-ClickHouse-Exception-Code"] == code
        assert answer.body.startswith(f"Code: {code}. DB::Exception: ".encode())
        assert name in answer.body and b"(version 26." in answer.body
    unknown_setting = http(front, b"SELECT 1", no_such_setting="1")
    assert (unknown_setting.status, unknown_setting.headers["X-ClickHouse-Exception-Code"]) == (
        404,
        "115",
    )
    with pytest.raises(DatabaseError) as missing:
        front.client().query("SELECT * FROM no_such_table")
    assert missing.value.code == 60


def test_query_in_url_body_or_both_and_get_is_readonly(front: ChFront) -> None:
    assert http(front, query="SELECT 40 + 2").body == b"42\n"
    http(front, b"CREATE TABLE kv (k UInt32, v String) ENGINE = MergeTree ORDER BY k")
    inserted = http(front, b"1\tone\n2\ttwo\n", query="INSERT INTO kv FORMAT TabSeparated")
    assert inserted.status == 200
    assert json.loads(inserted.headers["X-ClickHouse-Summary"])["written_rows"] == "2"
    values = http(front, b"INSERT INTO kv VALUES (3, 'FORMAT three')")
    assert json.loads(values.headers["X-ClickHouse-Summary"])["written_rows"] == "1"
    rows = http(front, b"SELECT * FROM kv ORDER BY k", default_format="CSV")
    assert rows.body == b'1,"one"\n2,"two"\n3,"FORMAT three"\n'
    assert rows.headers["X-ClickHouse-Format"] == "CSV"
    assert rows.headers["X-ClickHouse-Timezone"]
    assert rows.headers["X-ClickHouse-Server-Display-Name"] == "replica-a"
    readonly = http(front, query="INSERT INTO kv VALUES (4, 'x')", method="GET")
    assert readonly.status == 500 and readonly.headers["X-ClickHouse-Exception-Code"] == "164"
    assert http(front, b"SELECT count() FROM kv").body == b"3\n"


def test_statement_format_clause_wins_and_query_id_is_echoed(front: ChFront) -> None:
    answer = http(front, b"SELECT 1 AS x FORMAT JSONEachRow", query_id="q-123")
    assert answer.body == b'{"x":1}\n'
    assert answer.headers["X-ClickHouse-Format"] == "JSONEachRow"
    assert answer.headers["X-ClickHouse-Query-Id"] == "q-123"


def test_url_settings_apply_to_their_request_only(front: ChFront) -> None:
    default = http(front, b"SELECT getSetting('max_block_size')").body
    assert http(front, b"SELECT getSetting('max_block_size')", max_block_size="1234").body == (
        b"1234\n"
    )
    assert http(front, b"SELECT getSetting('max_block_size')").body == default


def test_set_and_use_persist_within_a_session_only(front: ChFront) -> None:
    http(front, b"CREATE DATABASE IF NOT EXISTS other")
    http(front, b"SET max_threads = 3", session_id="s1")
    http(front, b"USE other", session_id="s1")
    in_session = http(
        front, b"SELECT getSetting('max_threads'), currentDatabase()", session_id="s1"
    )
    assert in_session.body == b"3\tother\n"
    elsewhere = http(front, b"SELECT getSetting('max_threads') = 3, currentDatabase()")
    assert elsewhere.body == b"0\tdefault\n"
    other_session = http(front, b"SELECT currentDatabase()", session_id="s2")
    assert other_session.body == b"default\n"
    assert http(front, b"SELECT currentDatabase()", database="other").body == b"other\n"


def test_response_is_compressed_only_when_asked(front: ChFront) -> None:
    sql = b"SELECT number FROM numbers(1000)"
    plain = http(front, sql)
    compressed = http(front, sql, headers={"Accept-Encoding": "lz4"}, enable_http_compression="1")
    assert compressed.headers["Content-Encoding"] == "lz4"
    assert lz4.frame.decompress(compressed.body) == plain.body
    not_enabled = http(front, sql, headers={"Accept-Encoding": "lz4"})
    assert "Content-Encoding" not in not_enabled.headers and not_enabled.body == plain.body
    native = http(front, sql, compress="1")
    assert native.status == 501 and native.headers["X-ClickHouse-Exception-Code"] == "48"


def test_same_dedup_token_keeps_one_copy_and_does_not_leak(front: ChFront) -> None:
    """B9: a retried batch (same token) is stored once; the next insert without a token and
    an insert with another token both land in full."""
    client = front.client()
    client.command(
        "CREATE TABLE dedup (id UInt64, payload String) ENGINE = MergeTree ORDER BY id "
        "SETTINGS non_replicated_deduplication_window = 100"
    )
    rows = [(i, f"payload-{i}") for i in range(scaled(20_000, minimum=2_000))]
    token = {"insert_deduplication_token": "pipeline-run1-0-7"}
    client.insert("dedup", rows, settings=token)
    assert front.status()["last_insert"]["deduplication_token"] == "pipeline-run1-0-7"
    client.insert("dedup", rows, settings=token)
    assert client.command("SELECT count() FROM dedup") == len(rows)

    client.insert("dedup", rows)
    assert front.status()["last_insert"]["deduplication_token"] is None
    assert client.command("SELECT count() FROM dedup") == 2 * len(rows)

    client.insert("dedup", rows, settings={"insert_deduplication_token": "pipeline-run1-0-8"})
    assert client.command("SELECT count() FROM dedup") == 3 * len(rows)
    assert client.command("SELECT uniqExact(id) FROM dedup") == len(rows)


def test_concurrent_requests_keep_their_own_settings(front: ChFront) -> None:
    """B9 under concurrency: sink workers write in parallel; each request's token applies to
    that request alone, so every batch sent twice is stored once and no other batch is lost."""
    setup = front.client()
    setup.command(
        "CREATE TABLE parallel (worker UInt8, seq UInt32, n UInt32) ENGINE = MergeTree "
        "ORDER BY (worker, seq) SETTINGS non_replicated_deduplication_window = 1000"
    )
    batches, rows_per_batch, workers = 8, scaled(5_000, minimum=500), 4
    failures: list[BaseException] = []

    def work(worker: int) -> None:
        try:
            client = front.client()
            for seq in range(batches):
                rows = [(worker, seq, n) for n in range(rows_per_batch)]
                token = {"insert_deduplication_token": f"w{worker}-s{seq}"}
                client.insert("parallel", rows, settings=token)
                client.insert("parallel", rows, settings=token)  # the retry of the same batch
                client.command("SELECT 1", settings={"max_threads": 1 + seq % 3})
        except BaseException as exc:  # surfaced in the main thread below
            failures.append(exc)

    threads = [threading.Thread(target=work, args=(w,)) for w in range(workers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=300)
    assert not failures, failures
    assert setup.command("SELECT count() FROM parallel") == workers * batches * rows_per_batch
    per_batch = setup.query(
        "SELECT worker, seq, count() FROM parallel GROUP BY worker, seq ORDER BY worker, seq"
    ).result_rows
    assert per_batch == [(w, s, rows_per_batch) for w in range(workers) for s in range(batches)]


def test_raw_insert_of_preencoded_blocks_with_and_without_compression(front: ChFront) -> None:
    """The statement travels in the body (uncompressed) or in the ``query`` parameter
    (compressed body); either way every row of the pre-encoded data lands."""
    client = front.client()
    client.command("CREATE TABLE raw_rows (id UInt32, name String) ENGINE = MergeTree ORDER BY id")
    count = scaled(10_000, minimum=1_000)
    csv = "".join(f'{i},"name {i}"\n' for i in range(count)).encode()
    summary = client.raw_insert("raw_rows", ["id", "name"], csv, fmt="CSV")
    assert summary.written_rows == count
    compressed = lz4.frame.compress(csv[: len(csv) // 2]) + lz4.frame.compress(csv[len(csv) // 2 :])
    summary = client.raw_insert(
        "raw_rows", ["id", "name"], compressed, fmt="CSV", compression="lz4"
    )
    assert summary.written_rows == count
    assert front.status()["last_insert"]["frames"] == 2
    assert client.command("SELECT count(), uniqExact(id) FROM raw_rows") == [
        str(2 * count),
        str(count),
    ]
