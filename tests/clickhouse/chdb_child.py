"""Runs the ClickHouse sink against a ``chdb://`` replica in a process of its own.

chDB hosts one engine (one data directory) per process, so tests that write through a
``chdb://`` URL run this module as a child: ``python -m tests.clickhouse.chdb_child MODE DIR
[COUNT]``. The last line printed is a JSON result the test asserts on.

Modes:

* ``alltypes`` — COUNT rows of every supported type through the sink; read back and
  compared with what was sent;
* ``dedup`` — one batch written, then the same batch again with the same dedup token (a
  retry): the table keeps one copy; a new token adds a copy (B9);
* ``schema`` — a configured column missing from the table fails start-up (B20);
* ``isolate`` — three rows a ``CHECK`` constraint refuses among 1,000 are isolated and
  skipped, the others written (B190);
* ``partitions`` — COUNT rows, a tenth over two years, into ``PARTITION BY
  toYYYYMMDD(ts)``: the naive insert's error code, then the sink with ``late_data`` to a
  side table; the rows of each table and the late rows counted (B240, B242);
* ``cdc`` — Debezium change events of a random workload (ENGINE SEED) written with
  replays into a replacing or collapsing table (B379, :mod:`tests.clickhouse.cdc_chdb`);
* ``twodirs`` — a second sink naming another ``chdb://`` directory fails start-up with a
  message naming both (one engine per process).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import clickhouse_connect
from spate.errors import SinkError
from spate.sink import WriteBatch

from tests.clickhouse.sinkkit import Driver, build_sink, straggling_rows
from tests.support.chfront import alltypes


def _alltypes(url: str, client: Any, count: int) -> dict[str, Any]:
    client.command(alltypes.create_table_sql("alltypes_sink"))
    built = build_sink(
        {
            "table": "alltypes_sink",
            "columns": list(alltypes.NAMES),
            "shards": [{"replicas": [url]}],
            "validate_schema": "full",
            "batch": {"max_rows": count // 3 + 1},
        }
    )
    built.sink.start()
    sent = alltypes.rows(count)
    driver = Driver(built.sink)
    driver.offer_all(sent)
    driver.finish()
    built.sink.close()
    back = client.query(f"SELECT {', '.join(alltypes.NAMES)} FROM alltypes_sink ORDER BY id")
    got = [alltypes.normalise(r) for r in back.result_rows]
    return {
        "rows": len(got),
        "equal": got == [alltypes.normalise(r) for r in sent],
        "delivered": driver.all_delivered,
    }


def _dedup(url: str, client: Any) -> dict[str, Any]:
    client.command(
        "CREATE TABLE dedup (id UInt64, s String) ENGINE = MergeTree ORDER BY id "
        "SETTINGS non_replicated_deduplication_window = 100"
    )
    built = build_sink({"table": "dedup", "columns": ["id", "s"], "shards": [{"replicas": [url]}]})
    pool = built.sink
    pool.start()
    connector = pool._connector  # the sink's own connector, as the pool's workers use it
    writer = connector.open_writer(0, 0, url)
    buffer = connector.new_buffer(0)
    for i in range(500):
        buffer.append((i, f"row {i}"))
    counts = []
    for attempt, token in ((1, "p-run-0-1"), (2, "p-run-0-1"), (1, "p-run-0-2")):
        writer.write(WriteBatch(buffer, 500, 0, 0, 1, token, attempt))
        counts.append(client.query("SELECT count() FROM dedup").result_rows[0][0])
    writer.close()
    pool.close()
    return {"counts": counts}


def _schema(url: str, client: Any) -> dict[str, Any]:
    client.command("CREATE TABLE narrow (id UInt64) ENGINE = MergeTree ORDER BY id")
    built = build_sink(
        {"table": "narrow", "columns": ["id", "extra"], "shards": [{"replicas": [url]}]}
    )
    try:
        built.sink.start()
    except SinkError as exc:
        return {"error": exc.reason, "class": exc.error_class.value}
    finally:
        built.sink.close()
    return {"error": None}


def _twodirs(url: str, client: Any, other: str) -> dict[str, Any]:
    client.command("CREATE TABLE one (id UInt64) ENGINE = MergeTree ORDER BY id")
    first = build_sink({"table": "one", "columns": ["id"], "shards": [{"replicas": [url]}]})
    first.sink.start()
    second = build_sink({"table": "one", "columns": ["id"], "shards": [{"replicas": [other]}]})
    try:
        second.sink.start()
    except SinkError as exc:
        return {"error": exc.reason, "class": exc.error_class.value}
    finally:
        second.sink.close()
        first.sink.close()
    return {"error": None}


def _isolate(url: str, client: Any) -> dict[str, Any]:
    client.command(
        "CREATE TABLE iso (id UInt64, v Int64, CONSTRAINT positive CHECK v >= 0) "
        "ENGINE = MergeTree ORDER BY id"
    )
    built = build_sink(
        {
            "table": "iso",
            "columns": ["id", "v"],
            "shards": [{"replicas": [url]}],
            "batch": {"max_rows": 1000, "linger": "1h"},
            "on_record_error": "skip",
        }
    )
    built.sink.start()
    driver = Driver(built.sink)
    driver.offer_all([(i, -1 if i in (0, 500, 999) else i) for i in range(1000)])
    driver.finish()
    built.sink.close()
    rows = client.query("SELECT count() FROM iso").result_rows[0][0]
    rejected = built.metric("spate_sink_server_rejected_rows_total", code="469", policy="skip")
    return {"rows": int(rows), "rejected": int(rejected)}


def _partitions(url: str, client: Any, count: int) -> dict[str, Any]:
    for table, key in (("days", "toYYYYMMDD(ts)"), ("days_late", "tuple()")):
        client.command(
            f"CREATE TABLE {table} (id UInt64, ts DateTime64(3, 'UTC')) ENGINE = MergeTree "
            f"PARTITION BY {key} ORDER BY id"
        )
    rows = straggling_rows(count)
    naive = None
    try:
        client.insert("days", rows, column_names=["id", "ts"])
    except Exception as exc:
        naive = getattr(exc, "code", None) or str(exc)[:200]

    def body(table: str, **extra: Any) -> dict[str, Any]:
        return {
            "table": table,
            "columns": ["id", "ts"],
            "shards": [{"replicas": [url]}],
            "batch": {"max_rows": count, "linger": "1h"},
            **extra,
        }

    built = build_sink(
        body("days", late_data={"after": "7d", "to": "side"}), sinks={"side": body("days_late")}
    )
    built.sink.start()
    driver = Driver(built.sink, batch_rows=count)
    driver.offer_all(rows)
    driver.finish()
    built.sink.close()
    counts = {
        table: int(client.query(f"SELECT count() FROM {table}").result_rows[0][0])
        for table in ("days", "days_late")
    }
    late = built.metric("spate_sink_late_rows_total", table="days_late")
    return {"naive": naive, "delivered": driver.all_delivered, **counts, "late": int(late)}


def run_child(*args: str) -> dict[str, Any]:
    """Run this module with ``args`` (``MODE DIR …``) in a child; its JSON result."""
    repo = Path(__file__).resolve().parents[2]
    out = subprocess.run(
        [sys.executable, "-m", "tests.clickhouse.chdb_child", *args],
        cwd=repo,
        env=dict(os.environ, PYTHONPATH=str(repo)),
        capture_output=True,
        text=True,
        timeout=300,
    )
    if out.returncode != 0:
        raise AssertionError(out.stderr[-3000:])
    result: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
    return result


def main(argv: list[str]) -> int:
    mode, directory = argv[0], argv[1]
    url = f"chdb://{directory}"
    client = clickhouse_connect.get_client(interface="chdb", path=directory)
    if mode == "alltypes":
        result = _alltypes(url, client, int(argv[2]))
    elif mode == "dedup":
        result = _dedup(url, client)
    elif mode == "schema":
        result = _schema(url, client)
    elif mode == "isolate":
        result = _isolate(url, client)
    elif mode == "partitions":
        result = _partitions(url, client, int(argv[2]))
    elif mode == "cdc":
        from tests.clickhouse import cdc_chdb

        result = cdc_chdb.run(url, client, argv[2], int(argv[3]))
    elif mode == "twodirs":
        result = _twodirs(url, client, f"chdb://{argv[2]}")
    else:
        raise SystemExit(f"unknown mode {mode!r}")
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
