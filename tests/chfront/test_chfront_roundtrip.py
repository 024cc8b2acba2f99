"""Round trips through the ClickHouse HTTP front with clickhouse-connect, for every column type.

The front is what the ClickHouse sink proves its HTTP write path on (B9, B11, B12, B20), so
first it must itself be proven: a multi-block insert of every type the sink supports, with
each request compression clickhouse-connect offers, lands with the exact row count and the
exact values — compared both with the rows that were sent and with the same insert made
through clickhouse-connect's ``chdb://`` backend (the engine without any HTTP in between).
"""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from typing import Any

import pytest

from tests.support.chfront import alltypes
from tests.support.chfront_fixtures import REPO_ROOT, ChFront, FrontFactory
from tests.support.scale import scaled

pytestmark = pytest.mark.integration

ROWS = scaled(200_000, minimum=6_000)
# Several blocks (and so several lz4/zstd frames) at every scale.
BLOCK_ROWS = max(1_000, ROWS // 6)

_REFERENCE = """
import hashlib, json, sys
import clickhouse_connect
from tests.support.chfront import alltypes

path, count, block = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
client = clickhouse_connect.get_client(dsn="chdb://" + path)
client.command(alltypes.create_table_sql("reference"))
context = client.create_insert_context(table="reference", column_names=list(alltypes.NAMES))
context.req_block_size = block
context.data = alltypes.rows(count)
summary = client.insert(context=context)
tsv = client.raw_query("SELECT * FROM reference ORDER BY id", fmt="TabSeparated")
print(json.dumps({
    "written_rows": summary.written_rows,
    "count": client.command("SELECT count() FROM reference"),
    "sha256": hashlib.sha256(tsv).hexdigest(),
}))
"""


@pytest.fixture(scope="module")
def front(chfront_module: FrontFactory) -> ChFront:
    return chfront_module()


@pytest.fixture(scope="module")
def sent_rows() -> list[tuple[Any, ...]]:
    return alltypes.rows(ROWS)


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The same insert through the ``chdb://`` backend, in its own process (one engine
    path per process), summarised as row counts and a digest of the stored table."""
    path = tmp_path_factory.mktemp("chdb-reference")
    done = subprocess.run(
        [sys.executable, "-c", _REFERENCE, str(path), str(ROWS), str(BLOCK_ROWS)],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["written_rows"] == ROWS and result["count"] == ROWS
    return result


@pytest.mark.parametrize("compression", ["lz4", "zstd", "gzip", "none"])
def test_every_type_round_trips_multi_block_with_each_compression(
    front: ChFront,
    sent_rows: list[tuple[Any, ...]],
    reference: dict[str, Any],
    compression: str,
) -> None:
    """B20/B9 groundwork: what the sink writes over HTTP is stored exactly as chdb:// stores it."""
    client = front.client(compress=False if compression == "none" else compression)
    table = f"every_type_{compression}"
    client.command(alltypes.create_table_sql(table))
    context = client.create_insert_context(table=table, column_names=list(alltypes.NAMES))
    context.req_block_size = BLOCK_ROWS
    context.data = sent_rows

    summary = client.insert(context=context)

    assert summary.written_rows == ROWS
    last = front.status()["last_insert"]
    assert last["written_rows"] == ROWS
    assert last["encoding"] == compression
    if compression in ("lz4", "zstd"):
        # one frame per block: every frame was decoded, not just the first
        assert last["frames"] == -(-ROWS // BLOCK_ROWS)
    assert client.command(f"SELECT count() FROM {table}") == ROWS

    back = client.query(f"SELECT * FROM {table} ORDER BY id").result_rows
    assert len(back) == ROWS
    expected = [alltypes.normalise(row) for row in sent_rows]
    got = [alltypes.normalise(row) for row in back]
    mismatched = [i for i, (e, g) in enumerate(zip(expected, got, strict=True)) if e != g]
    assert not mismatched, (
        f"{len(mismatched)} rows differ, first id {mismatched[0]}:\n"
        f"sent {expected[mismatched[0]]}\nread {got[mismatched[0]]}"
    )

    tsv = client.raw_query(f"SELECT * FROM {table} ORDER BY id", fmt="TabSeparated")
    assert hashlib.sha256(tsv).hexdigest() == reference["sha256"]


def test_response_compression_follows_accept_encoding(front: ChFront) -> None:
    """Query results come back compressed as asked and decode to the same rows."""
    expected = [(n, str(n)) for n in range(scaled(50_000, minimum=5_000))]
    for compression in ("lz4", "zstd", "gzip", False):
        client = front.client(compress=compression)
        rows = client.query(
            f"SELECT number, toString(number) FROM numbers({len(expected)})"
        ).result_rows
        assert rows == expected, compression
