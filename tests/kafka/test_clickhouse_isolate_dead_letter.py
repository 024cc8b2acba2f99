"""Rows the server refuses, dead-lettered (B245-B249).

On the real broker and the ClickHouse HTTP front over chDB: a table whose ``CHECK``
constraint refuses a few ids among many, a ClickHouse sink under ``on_record_error:
dead_letter`` and a Kafka dead-letter topic. The sink bisects each refused block; every
good row is written once, every refused row's record is in the dead-letter topic with its
original key and value, the row path's ``spate.error.*`` headers and the server's code
(``spate.error.code``, ``spate.error.code.name``) and message, and the group's offsets
reach the end — on the row path and on the columnar path. A dead-letter sink that fails
its writes keeps the offsets back until it recovers.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import pytest
from spate.ops._deadletter import ROW_COLUMNS

from tests.kafka.test_kafka_dead_letter import (
    _dead_letter_table,
    _dlq_records,
    _query,
    _run,
    _spate,
)
from tests.support.scale import scaled
from tests.support.services import (
    committed_offsets,
    create_topic,
    end_offsets,
    produce_keyed,
    unique_name,
)

pytestmark = pytest.mark.integration

VIOLATED_CONSTRAINT = "469"


def _chains(ctx: Any) -> Any:
    return ctx.chain()


def _table(url: str, bad: set[int]) -> str:
    name = unique_name("refused").replace("-", "_")
    _query(
        url,
        f"CREATE TABLE {name} (id Int64, pad String, CONSTRAINT good CHECK id NOT IN "
        f"({', '.join(map(str, sorted(bad)))})) ENGINE = MergeTree ORDER BY id",
    )
    return name


def _produce(bootstrap: str, topic: str, count: int) -> None:
    create_topic(bootstrap, topic, 2)
    produce_keyed(
        bootstrap, topic, count, value=lambda i: json.dumps({"id": i, "pad": "x"}).encode()
    )


def _config(
    tmp_path: Path,
    *,
    name: str,
    bootstrap: str,
    topic: str,
    group: str,
    url: str,
    table: str,
    dead_letter: dict[str, Any],
    stop_at: str = "end",
) -> Path:
    path = tmp_path / "c.json"
    path.write_text(
        json.dumps(
            {
                "pipeline": {"name": name},
                "checkpoint": {"interval": "200ms", "drain_timeout": "30s"},
                "admin": {"listen": "none"},
                "source": {
                    "kafka": {
                        "brokers": bootstrap,
                        "topic": topic,
                        "group_id": group,
                        "commit_interval": "200ms",
                        "stop_at": stop_at,
                        "consume_batch": 500,
                    }
                },
                "deserializer": {"json": {"framing": "single"}},
                "sink": {
                    "clickhouse": {
                        "table": table,
                        "columns": ["id", "pad"],
                        "shards": [{"replicas": [url]}],
                        "batch": {"max_rows": 1000, "linger": "200ms"},
                        "on_record_error": "dead_letter",
                    }
                },
                "dead_letter": {"sink": dead_letter, "max_ratio": 0.5, "max_consecutive": 5},
            }
        )
    )
    return path


def _ids(url: str, table: str) -> list[int]:
    return sorted(int(x) for x in _query(url, f"SELECT id FROM {table} FORMAT TSV").split())


@pytest.mark.parametrize("path", ["rows", "columns"])
def test_b245_b246_rows_the_server_refuses_reach_the_dead_letter_topic_with_its_code(
    kafka_bootstrap: str,
    clickhouse_url: str,
    tmp_path: Path,
    path: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    count = scaled(20_000, 2_000)
    bad = {count // 7, count // 2, count - 3}
    table = _table(clickhouse_url, bad)
    topic, dlq, group = unique_name("refused"), unique_name("refused-dlq"), unique_name("g")
    _produce(kafka_bootstrap, topic, count)
    create_topic(kafka_bootstrap, dlq, 1)
    dead_letter = {"kafka": {"brokers": kafka_bootstrap, "topic": dlq}}
    config = _config(
        tmp_path,
        name=f"refused-{path}",
        bootstrap=kafka_bootstrap,
        topic=topic,
        group=group,
        url=clickhouse_url,
        table=table,
        dead_letter=dead_letter,
    )
    with caplog.at_level(logging.WARNING, logger="spate.ops.skipped"):
        assert _run(config, _chains if path == "rows" else None)[0] == 0
    assert _ids(clickhouse_url, table) == [i for i in range(count) if i not in bad]
    assert committed_offsets(kafka_bootstrap, group, topic) == end_offsets(kafka_bootstrap, topic)
    letters = _dlq_records(kafka_bootstrap, dlq)
    assert sorted(json.loads(value)["id"] for _key, value, _headers in letters) == sorted(bad)
    for key, value, headers in letters:
        assert key == b"k%d" % json.loads(value)["id"]
        assert headers["spate.error.stage"] == "sink"
        assert headers["spate.error.reason"] == "record_error"
        assert headers["spate.error.code"] == VIOLATED_CONSTRAINT
        assert headers["spate.error.code.name"] == "VIOLATED_CONSTRAINT"
        assert "good" in headers["spate.error.message"]  # the server's message names it
        assert "[code 469 VIOLATED_CONSTRAINT]" in headers["spate.error.message"]
        assert headers["spate.error.source.topic"] == topic
        assert headers["spate.error.pipeline"] == f"refused-{path}"
    if path == "rows":  # `spate dlq inspect` selects them by the server's code (B246)
        inspected = _spate("dlq", "inspect", str(config), "--json", "--filter", "code=469")
        assert inspected.returncode == 0, inspected.stderr
        shown = [json.loads(line) for line in inspected.stdout.splitlines()]
        assert sorted(json.loads(s["value"])["id"] for s in shown) == sorted(bad), shown
    # The first dead letter's log line names its record and the server's code (B246).
    (line,) = [r.getMessage() for r in caplog.records if r.name == "spate.ops.skipped"]
    places = [
        f"{topic}[{h['spate.error.source.partition']}] offset {h['spate.error.source.offset']}:"
        for _key, _value, h in letters
    ]
    assert any(place in line for place in places), line
    assert "[code 469 VIOLATED_CONSTRAINT]" in line, line


@pytest.mark.parametrize("path", ["rows", "columns"])
def test_b247_a_dead_letter_sink_that_fails_keeps_the_offsets_back(
    kafka_bootstrap: str, clickhouse_url: str, chfront: Any, tmp_path: Path, path: str
) -> None:
    """The dead-letter table's front answers 5xx to every insert: the good rows are
    written, but no offset passes a refused row until its dead letter is written; once
    the front recovers the dead letters land and the offsets reach the end."""
    count = scaled(4_000, 1_000)
    first_bad = count // 4
    bad = {first_bad, count // 2}
    table = _table(clickhouse_url, bad)
    topic, group = unique_name("refused-down"), unique_name("g")
    create_topic(kafka_bootstrap, topic, 1)
    produce_keyed(
        kafka_bootstrap,
        topic,
        count,
        value=lambda i: json.dumps({"id": i, "pad": "x"}).encode(),
        partition=0,
    )
    dl_front = chfront()
    dead = unique_name("dead").replace("-", "_")
    _dead_letter_table(dl_front.url, dead)
    dl_front.inject("5xx", only="insert")
    dead_letter = {
        "clickhouse": {
            "table": dead,
            "columns": list(ROW_COLUMNS),
            "shards": [{"replicas": [dl_front.url]}],
            "retry": {"initial": "100ms", "max": "500ms"},
            "breaker": {"open_for": "1s"},
        }
    }
    config = _config(
        tmp_path,
        name=f"refused-down-{path}",
        bootstrap=kafka_bootstrap,
        topic=topic,
        group=group,
        url=clickhouse_url,
        table=table,
        dead_letter=dead_letter,
        stop_at="never",
    )
    held: list[int] = []
    recovered: list[bool] = []

    def caught_up() -> bool:
        committed = committed_offsets(kafka_bootstrap, group, topic).get(0, 0)
        if not recovered:
            # Every good row past the first refused one is written, its dead letter not:
            # the commits stay at or before it (B247), then the front recovers.
            written = len(_ids(clickhouse_url, table)) == count - len(bad)
            held.append(committed)
            if written and len(held) > 10:
                dl_front.recover()
                recovered.append(True)
            return False
        return committed == count

    assert _run(config, _chains if path == "rows" else None, caught_up)[0] == 0
    assert max(held) <= first_bad, held
    offsets = sorted(
        int(x) for x in _query(dl_front.url, f"SELECT source_offset FROM {dead} FORMAT TSV").split()
    )
    assert sorted(set(offsets)) == sorted(bad)
    assert _ids(clickhouse_url, table) == [i for i in range(count) if i not in bad]
