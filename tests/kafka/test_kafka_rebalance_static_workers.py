"""Static membership under ``spate run --processes 2`` on the real broker (B178, B217).

One parent runs two workers of a pipeline whose source sets ``instance_id``; they write at
least once into a plain ``MergeTree`` on the ClickHouse HTTP front while a paced producer
writes. The broker's description of the group must list one member per worker, each with
its own ``group.instance.id`` (``<instance_id>-<worker index>``). Then the whole set is
restarted — SIGTERM to the parent, which drains both workers, and a new parent on the
same file — within the session: the coordinator's log (``__consumer_offsets``) must show
no new generation, each worker gets back the partitions it had, and every key arrives
with the delivery sampler never seeing a commit ahead of the table.
"""

from __future__ import annotations

import json
import re
import signal
import subprocess
from pathlib import Path

import pytest

from tests.kafka._pipeline import PARTITIONS, SPATE, Streaming
from tests.support.delivery import wait_until
from tests.support.kafka_groups import group_generations
from tests.support.matrix import matrix

pytestmark = [pytest.mark.integration, pytest.mark.e2e]

_ASSIGNED = re.compile(r"partitions assigned topic=\S+ partitions=\[([0-9, ]*)\]")


def _members(bootstrap: str, group: str) -> dict[str, set[int]]:
    """``group.instance.id`` -> assigned partitions of every member the broker lists."""
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap})
    description = admin.describe_consumer_groups([group])[group].result(30)
    return {
        str(member.group_instance_id): {
            tp.partition for tp in (member.assignment.topic_partitions if member.assignment else [])
        }
        for member in description.members
    }


def _assignments(log: Path) -> list[set[int]]:
    text = log.read_text(errors="replace") if log.exists() else ""
    return [{int(p) for p in parts.split(",") if p.strip()} for parts in _ASSIGNED.findall(text)]


def _parent(config: Path, log: Path) -> subprocess.Popen[bytes]:
    with log.open("ab") as out:
        return subprocess.Popen(
            [str(SPATE), "run", str(config), "--processes", "2"], stdout=out, stderr=out
        )


@matrix("rebalance", ["cooperative", "consumer"], ci="consumer")
def test_b217_each_worker_is_its_own_static_member_and_a_restart_keeps_the_generation(
    kafka_bootstrap: str, clickhouse_url: str, tmp_path: Path, rebalance: str
) -> None:
    run = Streaming.start(
        kafka_bootstrap,
        tmp_path,
        f"static-workers-{rebalance}",
        session_timeout_ms=60_000,
        rebalance=rebalance,
        clickhouse=clickhouse_url,
    )
    config = json.loads(run.config.read_text())
    config["source"]["kafka"]["instance_id"] = "node"
    run.config.write_text(json.dumps(config))
    first, second = tmp_path / "first.log", tmp_path / "second.log"
    parent = _parent(run.config, first)
    try:
        every = set(range(PARTITIONS))

        def settled_members() -> bool:
            members = _members(kafka_bootstrap, run.group)
            return sorted(members) == ["node-0", "node-1"] and all(
                len(parts) == PARTITIONS // 2 for parts in members.values()
            )

        wait_until(settled_members, 180, "node-0 and node-1 with three partitions each")
        wait_until(lambda: run.producer.produced >= run.count // 3, 240, "a third of the records")
        settled = group_generations(kafka_bootstrap, run.group)
        assert settled, "the coordinator recorded no generation of the group"
        held = _members(kafka_bootstrap, run.group)
        parent.send_signal(signal.SIGTERM)
        assert parent.wait(120) == 0, first.read_text(errors="replace")[-3000:]
        parent = _parent(run.config, second)
        wait_until(
            lambda: set().union(*_assignments(second)) == every,
            180,
            "the restarted workers to own every partition again",
        )
        assert sorted(map(sorted, _assignments(second))) == sorted(map(sorted, held.values()))
        assert _members(kafka_bootstrap, run.group) == held
        run.finish()
        text = second.read_text(errors="replace")
        assert "partitions revoked" not in text and "partitions lost" not in text, text[-3000:]
        generations = group_generations(kafka_bootstrap, run.group)
        parent.send_signal(signal.SIGTERM)
        assert parent.wait(120) == 0, second.read_text(errors="replace")[-3000:]
    finally:
        if parent.poll() is None:
            parent.kill()
            parent.wait()
    assert set(generations[len(settled) :]) <= {settled[-1]}, (
        f"the group rebalanced: generations {settled} then {generations[len(settled) :]}"
    )
    run.check_sampler()
    assert run.table is not None
    assert set(run.table.keys()) >= set(run.producer.positions)
