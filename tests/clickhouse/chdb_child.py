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
* ``window`` — under ``effectively_once``, blocks of one row per day into ``PARTITION BY
  toYYYYMMDD(ts)``: with ``non_replicated_deduplication_window = 10`` and two blocks
  before a replay, a block of five days is written, one of six refused before any of it
  is (B345); a block of ten days written and replayed under a window of nine, one block
  before a replay (the rows of both copies counted); with a window of 1,000 and 18,081
  blocks before a replay, a block of one day written and one of two refused (B346); late
  rows of two months, then three, into a side table ``PARTITION BY toYYYYMM(ts)`` with a
  window of two (B347);
* ``twodirs`` — a second sink naming another ``chdb://`` directory fails start-up with a
  message naming both (one engine per process).
"""

from __future__ import annotations

import datetime as dt
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


DAY0 = dt.datetime(2024, 1, 1, 12, tzinfo=dt.UTC)


def _eo_writer(url: str, body: dict[str, Any], window: int, replay_blocks: int, **more: Any) -> Any:
    """An effectively-once sink of ``body`` on ``url`` (``table_options.dedup_window``
    ``window``), started, and its probed writer."""
    body = {"shards": [{"replicas": [url]}], "table_options": {"dedup_window": window}, **body}
    built = build_sink(body, replay_blocks=replay_blocks, **more)
    built.sink.start()
    writer = built.sink._connector.open_writer(0, 0, url)
    writer.probe()
    return built.sink, writer


def _write(pool: Any, writer: Any, stamps: list[dt.datetime], token: str) -> str:
    """One block of a row per stamp (ids from 0) under ``token``: "written" or the refusal."""
    buffer = pool._connector.new_buffer(0)
    for i, stamp in enumerate(stamps):
        buffer.append((i, stamp))
    try:
        writer.write(WriteBatch(buffer, len(stamps), 0, 0, 1, token, 1))
    except SinkError as exc:
        return f"{exc.error_class.name}: {exc}"
    return "written"


def _count(client: Any, table: str) -> list[int]:
    found = client.query(f"SELECT count(), uniqExact(id) FROM {table}").result_rows[0]
    return [int(found[0]), int(found[1])]


def _days(n: int, start: int = 0) -> list[dt.datetime]:
    return [DAY0 + dt.timedelta(days=start + d) for d in range(n)]


def _window(url: str, client: Any) -> dict[str, Any]:
    def table(name: str, key: str, window: int) -> None:
        client.command(
            f"CREATE TABLE {name} (id UInt64, ts DateTime('UTC')) ENGINE = MergeTree "
            f"PARTITION BY {key} ORDER BY id "
            f"SETTINGS non_replicated_deduplication_window = {window}"
        )

    columns = {"columns": ["id", "ts"]}
    # B345: a window of 10 parts, 2 blocks before a replay.
    table("win", "toYYYYMMDD(ts)", 10)
    pool, writer = _eo_writer(url, {"table": "win", **columns}, 10, 2)
    results: list[object] = []
    for days, token in ((5, "p-run-0-1"), (6, "p-run-0-2")):
        results += [_write(pool, writer, _days(days), token), _count(client, "win")[0]]
    writer.close()
    pool.close()
    # The replay of a block of ten daily parts, cut in fours, under a window of nine.
    table("rep", "toYYYYMMDD(ts)", 9)
    body = {"table": "rep", "max_partitions_per_insert_block": 4, **columns}
    pool, writer = _eo_writer(url, body, 9, 1)
    replay = [_write(pool, writer, _days(10), "p-run-0-1") for _ in range(2)]
    replay.append(_count(client, "rep"))
    writer.close()
    pool.close()
    # B346: 18,081 blocks before a replay (a run that never commits) and a window of 1000.
    table("one", "toYYYYMMDD(ts)", 1000)
    pool, writer = _eo_writer(url, {"table": "one", **columns}, 1000, 18_081)
    one = [_write(pool, writer, [DAY0] * 3, "p-run-0-1"), _write(pool, writer, _days(2), "t2")]
    one.append(_count(client, "one"))
    writer.close()
    pool.close()
    # B347: late rows against the side table's own window (two monthly parts a block).
    table("lat", "toYYYYMMDD(ts)", 1000)
    table("lat_side", "toYYYYMM(ts)", 2)
    side = {"table": "lat_side", "shards": [{"replicas": [url]}], **columns}
    body = {"table": "lat", "late_data": {"after": "7d", "to": "side"}, **columns}
    pool, writer = _eo_writer(url, body, 1000, 1, sinks={"side": side})
    now = DAY0 + dt.timedelta(days=400)
    months = [DAY0 + dt.timedelta(days=31 * m) for m in range(3)]
    late = [
        _write(pool, writer, [now, *months[:2]], "p-run-0-1"),
        _write(pool, writer, [now, *months], "p-run-0-2"),
        _count(client, "lat"),
        _count(client, "lat_side"),
    ]
    writer.close()
    pool.close()
    return {"results": results, "replay": replay, "one": one, "late": late}


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
    elif mode == "window":
        result = _window(url, client)
    elif mode == "twodirs":
        result = _twodirs(url, client, f"chdb://{argv[2]}")
    else:
        raise SystemExit(f"unknown mode {mode!r}")
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
