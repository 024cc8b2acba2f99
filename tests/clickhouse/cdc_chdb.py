"""Debezium change events of a random workload into chDB tables of each engine (B379).

Run inside ``tests.clickhouse.chdb_child`` (mode ``cdc``): the events of
:func:`tests.support.debezium_events.workload` become rows through
:class:`spate.cdc.DebeziumRows`, are cut into blocks and written by the writer of a
ClickHouse sink under effectively-once delivery, each with its own deduplication token;
some blocks are written again later with the same token, as a replay after a crash
does. After every write the raw ``sum(_sign)`` of every key is read (collapsing engines);
at the end ``SELECT … FINAL`` and the sign-weighted sums are compared with the source
table.
"""

from __future__ import annotations

import random
from typing import Any

from spate.cdc import DebeziumRows, Engine
from spate.sink import WriteBatch

from tests.clickhouse.sinkkit import build_sink
from tests.support.debezium_events import workload

_ENGINES: dict[str, tuple[str, list[str]]] = {
    "replacing": (
        "ReplacingMergeTree(_version, _is_deleted)",
        ["_version UInt64", "_is_deleted UInt8"],
    ),
    "collapsing": ("CollapsingMergeTree(_sign)", ["_sign Int8"]),
    "versioned_collapsing": (
        "VersionedCollapsingMergeTree(_sign, _version)",
        ["_sign Int8", "_version UInt64"],
    ),
}


def run(url: str, client: Any, engine: str, seed: int) -> dict[str, Any]:
    table = f"items_{engine}"
    clause, extra = _ENGINES[engine]
    columns = ["id Int64", "name Nullable(String)", "n Int64", *extra]
    client.command(
        f"CREATE TABLE {table} ({', '.join(columns)}) ENGINE = {clause} ORDER BY id "
        "SETTINGS non_replicated_deduplication_window = 1000"
    )
    names = [c.split()[0] for c in columns]
    built = build_sink(
        {"table": table, "columns": names, "shards": [{"replicas": [url]}]},
        replay_blocks=0,  # effectively_once: a collapsing table is refused otherwise (B378)
    )
    pool = built.sink
    pool.start()
    connector = pool._connector
    writer = connector.open_writer(0, 0, url)
    rng = random.Random(seed)
    work = workload(seed, 300)
    to_rows = DebeziumRows(engine=_engine(engine))
    blocks: list[list[dict[str, Any]]] = []
    block: list[dict[str, Any]] = []
    for value in work.events:
        block.extend(to_rows(value))
        if block and rng.random() < 0.2:
            blocks.append(block)
            block = []
    if block:
        blocks.append(block)
    replays = 0
    worst = (0, 1)  # the least and greatest raw sum(_sign) of any key after any write

    def write(index: int, attempt: int) -> None:
        nonlocal worst
        buffer = connector.new_buffer(0)
        for row in blocks[index]:
            buffer.append(row)
        writer.write(WriteBatch(buffer, len(blocks[index]), 0, 0, 1, f"cdc-{index}", attempt))
        if engine != "replacing":
            low, high = client.query(
                f"SELECT min(s), max(s) FROM (SELECT sum(_sign) AS s FROM {table} GROUP BY id)"
            ).result_rows[0]
            worst = (min(worst[0], int(low)), max(worst[1], int(high)))

    for index in range(len(blocks)):
        write(index, 1)
        if rng.random() < 0.3:
            write(rng.randint(0, index), 2)
            replays += 1
    writer.close()
    pool.close()
    final = client.query(f"SELECT id, name, n FROM {table} FINAL ORDER BY id").result_rows
    expected = [[r["id"], r["name"], r["n"]] for _, r in sorted(work.table.items())]
    result: dict[str, Any] = {
        "blocks": len(blocks),
        "replays": replays,
        "final_equal": [list(r) for r in final] == expected,
        "final_rows": len(final),
        "source_rows": len(expected),
    }
    if engine != "replacing":
        sums = client.query(
            f"SELECT id, sum(n * _sign) FROM {table} GROUP BY id HAVING sum(_sign) > 0 ORDER BY id"
        ).result_rows
        result["sums_equal"] = [list(r) for r in sums] == [[r[0], r[2]] for r in expected]
        result["sign_range"] = list(worst)
    return result


def _engine(name: str) -> Engine:
    if name == "replacing":
        return "replacing"
    if name == "collapsing":
        return "collapsing"
    return "versioned_collapsing"
