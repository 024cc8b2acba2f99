"""Arrow inserts honour the sink's ``compression`` over HTTP (B109).

On the columnar path a batch goes to ClickHouse as one ``INSERT … FORMAT ArrowStream``.
Over HTTP its buffers are compressed with the sink's ``compression`` (``lz4`` by default,
as the row path's native blocks are), and the server reads them back: the rows arrive
whole, and the bytes kept for a retry (B9) are the compressed stream. ``none`` and
``chdb://`` (the engine in this process) send the stream raw.
"""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from spate.config import decode
from spate.sink._writer import WriteBatch
from spate_clickhouse._encoder import ColumnBuffer
from spate_clickhouse._endpoint import parse_endpoint
from spate_clickhouse._frames import arrow_stream
from spate_clickhouse._writer import ClickHouseConnector, ClickHouseShardWriter
from spate_clickhouse.config import ClickHouseSinkConfig

pa = pytest.importorskip("pyarrow")

ROWS = 5_000


def _table() -> Any:
    return pa.table(
        {
            "id": pa.array(range(ROWS), pa.int64()),
            "region": pa.array([f"region-{i % 7}-{'x' * 40}" for i in range(ROWS)]),
        }
    )


def _write(url: str, compression: str, table_name: str) -> bytes:
    """Insert one Arrow batch through the sink's writer; the bytes it kept for a retry."""
    body = {
        "table": table_name,
        "columns": ["id", "region"],
        "shards": [{"replicas": [url]}],
        "compression": compression,
    }
    config = decode(ClickHouseSinkConfig, body, "sink.clickhouse")
    create = f"CREATE TABLE IF NOT EXISTS {table_name} (id Int64, region String) "
    connector = ClickHouseConnector(
        config, "compression", create + "ENGINE = MergeTree ORDER BY id"
    )
    writer = ClickHouseShardWriter(connector, parse_endpoint(url), 0)
    try:
        writer.probe()
        buffer = ColumnBuffer()
        buffer.append_frame(_table())
        batch = WriteBatch(buffer, ROWS, 0, 0, 1, f"tok-{uuid.uuid4().hex}", 1)
        writer.write(batch)
        assert buffer.frames is not None
        return bytes(buffer.frames[0].data)  # type: ignore[attr-defined]
    finally:
        writer.close()


@pytest.mark.parametrize("compression", ["lz4", "zstd"])
def test_b109_arrow_inserts_over_http_are_compressed_and_arrive_whole(
    chfront: Any, compression: str
) -> None:
    front = chfront()
    table_name = f"arrow_{compression}"
    sent = _write(front.url, compression, table_name)
    raw = arrow_stream([_table()])
    assert len(sent) < len(raw) // 2  # the repeated strings compress well
    assert sent == arrow_stream([_table()], compression)
    client = front.client()
    count, ids = client.query(f"SELECT count(), sum(id) FROM {table_name}").result_rows[0]
    assert (count, ids) == (ROWS, sum(range(ROWS)))


def test_b109_none_and_chdb_send_the_stream_raw(chfront: Any, tmp_path: Any) -> None:
    front = chfront()
    raw = arrow_stream([_table()])
    assert _write(front.url, "none", "arrow_none") == raw
    assert _write(f"chdb://{tmp_path / 'engine'}", "lz4", "arrow_chdb") == raw
