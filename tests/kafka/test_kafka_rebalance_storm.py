"""Rebalance storms and static restarts on the real broker, per group protocol (B175,
B177, B179, B180, B215, B216).

Members join and leave while a paced producer writes: a third member joins, one leaves
with SIGTERM, one is killed with SIGKILL and replaced, one is stopped with SIGSTOP until
the group has given its partitions to the others and then continued. Throughout, the
delivery sampler checks that the group's committed offsets never pass what the
destination holds; at the end every key is there and the final offsets are committed.
The destination is the test kit's file sink (at least once, B179) or a plain
``MergeTree`` on the ClickHouse HTTP front written effectively once, whose raw
``count()`` must equal the records produced (B215). Under the incremental protocols a
member that keeps partitions through a rebalance is never revoked all of them.

A rolling restart of three static members within their session must leave the broker's
group generation as it was (read from the coordinator's own log, B216). Every step waits
for a condition (a member's logged assignment, the broker's view), never for a time.
"""

from __future__ import annotations

import json
import re
import signal
import subprocess
from collections import Counter
from pathlib import Path

import pytest

from tests.kafka._pipeline import (
    PARTITIONS,
    Streaming,
    assignments_logged,
    read_keys,
    start_pipeline,
    stop_pipeline,
    wait_running,
)
from tests.support.delivery import wait_until
from tests.support.kafka_groups import group_generations
from tests.support.matrix import matrix
from tests.support.services import SESSION_TIMEOUT_MS, committed_offsets

PROTOCOLS = ("eager", "cooperative", "consumer")
"""Each storm runs under every protocol at full scale; at the CI scale the storms share
them out so that each protocol runs on every commit."""

pytestmark = [pytest.mark.integration, pytest.mark.e2e]

_MOVE = re.compile(r"partitions (assigned|revoked|lost) topic=\S+ partitions=\[([0-9, ]*)\]")


def _moves(log: Path) -> list[tuple[str, set[int]]]:
    """The source's assignment changes logged in ``log``, in order."""
    text = log.read_text(errors="replace") if log.exists() else ""
    return [
        (kind, {int(p) for p in parts.split(",") if p.strip()})
        for kind, parts in _MOVE.findall(text)
    ]


def _kept_through_every_revocation(log: Path) -> bool:
    """Whether each revocation of the member writing ``log`` left it partitions to read
    (what an incremental protocol gives a member while the group has fewer members than
    partitions). The last revocation, of everything, is the member's own shutdown."""
    moves = _moves(log)
    if moves and moves[-1][0] == "revoked":
        moves.pop()
    owned: set[int] = set()
    for kind, parts in moves:
        if kind == "assigned":
            owned |= parts
        else:
            if kind == "revoked" and not parts < owned:
                return False
            owned -= parts
    return True


def _owned(log: Path) -> set[int]:
    """The partitions the member writing ``log`` owns now, by its logged moves."""
    owned: set[int] = set()
    for kind, parts in _moves(log):
        owned = owned | parts if kind == "assigned" else owned - parts
    return owned


def _storm(run: Streaming, tmp_path: Path, rebalance: str) -> list[Path]:
    """The storm: two members, a third joins, one leaves (SIGTERM), one is killed
    (SIGKILL) and replaced, one is stopped (SIGSTOP) until the group has given its
    partitions to the others, then continued; a last member joins and the producer
    finishes. Every step waits for a condition, never for a time. Returns the logs."""
    logs = [tmp_path / f"p{i}.log" for i in range(6)]
    procs: list[subprocess.Popen[bytes]] = []

    def join(index: int) -> None:
        before = assignments_logged(logs[index])
        procs.append(start_pipeline(run.config, logs[index]))
        wait_running(logs[index], before, timeout=180)

    def produced(share: float) -> None:
        target = int(run.count * share)
        wait_until(lambda: run.producer.produced >= target, 240, f"{target} produced")

    everything = set(range(PARTITIONS))
    try:
        join(0)
        join(1)
        produced(0.15)
        join(2)  # a member joins
        produced(0.3)
        assert stop_pipeline(procs.pop(0)) == 0  # a member leaves
        join(3)
        produced(0.45)
        victim = procs.pop(0)  # kill -9: its partitions wait for its session
        victim.send_signal(signal.SIGKILL)
        victim.wait(30)
        join(4)
        produced(0.6)
        members = logs[2:5]  # procs: the members writing logs 2, 3 and 4
        wait_until(
            lambda: (
                all(_owned(log) for log in members)
                and set().union(*(_owned(log) for log in members)) == everything
            ),
            180,
            "the group settled on the three members",
        )
        stopped = procs[0]  # SIGSTOP past the session, then SIGCONT
        stopped.send_signal(signal.SIGSTOP)
        try:
            # Past the session: the broker gave the stopped member's partitions away.
            wait_until(
                lambda: _owned(logs[3]) | _owned(logs[4]) == everything,
                180,
                "the stopped member's partitions given to the others",
            )
        finally:
            stopped.send_signal(signal.SIGCONT)
        gone = "lost" if rebalance != "eager" else "revoked"
        wait_until(
            lambda: any(kind == gone for kind, _ in _moves(logs[2])),
            120,
            "the stopped member noticed its session was gone",
        )
        join(5)
        run.finish()
    finally:
        codes = [stop_pipeline(p, timeout=120) for p in procs]
    assert codes == [0] * len(codes), [log.read_text()[-2000:] for log in logs]
    run.check_sampler()
    return logs


@matrix("rebalance", PROTOCOLS, ci=("eager", "cooperative"))
def test_b179_rebalance_storm_loses_nothing_and_never_commits_ahead(
    kafka_bootstrap: str, tmp_path: Path, rebalance: str
) -> None:
    """B179 (B175, B177, B1, B15): join, leave, kill -9 and a stop past the session,
    under each protocol: every key arrives and no commit ever passes the file."""
    run = Streaming.start(
        kafka_bootstrap,
        tmp_path,
        f"storm-{rebalance}",
        session_timeout_ms=SESSION_TIMEOUT_MS,
        rebalance=rebalance,
    )
    logs = _storm(run, tmp_path, rebalance)
    assert set(read_keys(run.out)) >= set(run.producer.positions)
    if rebalance != "eager":
        # Members 3 and 4 ran through the stop, a join and a loss: never left empty.
        assert _kept_through_every_revocation(logs[3]), _moves(logs[3])
        assert _kept_through_every_revocation(logs[4]), _moves(logs[4])


@matrix("rebalance", PROTOCOLS, ci="consumer")
def test_b215_rebalance_storm_under_effectively_once_writes_every_record_once(
    kafka_bootstrap: str, clickhouse_url: str, tmp_path: Path, rebalance: str
) -> None:
    """B215 (B179, B88, B177): the same storm writing effectively once into a plain
    ``MergeTree`` on the ClickHouse HTTP front: the sampler never sees a commit ahead of
    the table, and the raw ``count()`` equals the records produced."""
    run = Streaming.start(
        kafka_bootstrap,
        tmp_path,
        f"eo-storm-{rebalance}",
        session_timeout_ms=SESSION_TIMEOUT_MS,
        rebalance=rebalance,
        clickhouse=clickhouse_url,
        delivery="effectively_once",
    )
    _storm(run, tmp_path, rebalance)
    assert run.table is not None
    assert run.table.counts() == (run.count, run.count)


@matrix("rebalance", PROTOCOLS, ci="cooperative")
def test_b180_b216_rolling_restart_of_static_members_keeps_the_generation(
    kafka_bootstrap: str, clickhouse_url: str, tmp_path: Path, rebalance: str
) -> None:
    """B180, B216 (B178): three static members (``instance_id``) writing at least once
    into a plain ``MergeTree``, restarted one after the other within their session: the
    broker's group generation (its own log, ``__consumer_offsets``) does not change, the
    members that stay see no assignment change, every key arrives, and a row is written
    twice only at or after the commit made before its owner's restart."""
    run = Streaming.start(
        kafka_bootstrap,
        tmp_path,
        f"static-{rebalance}",
        session_timeout_ms=60_000,
        rebalance=rebalance,
        clickhouse=clickhouse_url,
    )
    assert run.table is not None
    config = json.loads(run.config.read_text())
    procs: list[subprocess.Popen[bytes]] = []
    logs = [tmp_path / f"p{i}.log" for i in range(3)]
    configs = []
    for i in range(3):
        config["source"]["kafka"]["instance_id"] = f"member-{i}"
        configs.append(tmp_path / f"c{i}.json")
        configs[i].write_text(json.dumps(config))
    commits_before: list[dict[int, int]] = []
    try:
        for i in range(3):
            procs.append(start_pipeline(configs[i], logs[i]))
        for log in logs:
            wait_running(log, 0, timeout=180)
        wait_until(
            lambda: (
                [len(_owned(log)) for log in logs] == [2, 2, 2]
                and set().union(*(_owned(log) for log in logs)) == set(range(PARTITIONS))
            ),
            180,
            "two partitions for each member",
        )
        owners = {p: i for i, log in enumerate(logs) for p in _owned(log)}
        settled = group_generations(kafka_bootstrap, run.group)
        assert settled, "the coordinator recorded no generation of the group"
        for i in range(3):
            target = min(run.count, run.producer.produced + run.count // 10)
            wait_until(lambda t=target: run.producer.produced >= t, 240, f"{target} produced")
            others = [len(_moves(logs[j])) for j in range(3) if j != i]
            commits_before.append(committed_offsets(kafka_bootstrap, run.group, run.topic))
            assert stop_pipeline(procs[i]) == 0
            before = assignments_logged(logs[i])
            procs[i] = start_pipeline(configs[i], logs[i])
            wait_running(logs[i], before, timeout=180)
            assert [len(_moves(logs[j])) for j in range(3) if j != i] == others, (
                "a member that stayed saw its assignment change"
            )
            assert _owned(logs[i]) == {p for p, o in owners.items() if o == i}
        run.finish()
        generations = group_generations(kafka_bootstrap, run.group)
    finally:
        codes = [stop_pipeline(p, timeout=120) for p in procs]
    assert codes == [0, 0, 0]
    assert set(generations[len(settled) :]) <= {settled[-1]}, (
        f"the group rebalanced: generations {settled} then {generations[len(settled) :]}"
    )
    run.check_sampler()
    positions = run.producer.positions
    counts = Counter(run.table.keys())
    assert set(counts) >= set(positions)
    for key, seen in counts.items():
        if seen > 1:
            partition, offset = positions[key]
            since = commits_before[owners[partition]].get(partition, 0)
            assert offset >= since, (
                f"{key!r} at {partition}/{offset} written twice below the commit ({since}) "
                "made before its owner's restart"
            )
