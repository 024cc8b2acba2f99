"""Rebalance storms on the real broker under each group protocol (B175, B177, B179).

Members join and leave while a paced producer writes: a third member joins, one leaves
with SIGTERM, one is killed with SIGKILL and replaced, one is stopped with SIGSTOP until
its session expired and then continued. Throughout, the delivery sampler checks that the
group's committed offsets never pass what the file sink holds; at the end every key is
in the file and the final offsets are committed. Under the incremental protocols a
member that keeps partitions through a rebalance is never revoked all of them.
"""

from __future__ import annotations

import json
import re
import signal
import subprocess
import time
from collections import Counter
from pathlib import Path

import pytest

from tests.kafka._pipeline import (
    Streaming,
    assignments_logged,
    read_keys,
    start_pipeline,
    stop_pipeline,
    wait_running,
)
from tests.support.delivery import wait_until
from tests.support.services import SESSION_TIMEOUT_MS, committed_offsets

pytestmark = [pytest.mark.integration, pytest.mark.e2e]

BROKER_SESSION_S = 6.0
"""``group.consumer.session.timeout.ms`` of the test broker (the consumer protocol)."""


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


@pytest.mark.parametrize("rebalance", ["eager", "cooperative", "consumer"])
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
    logs = [tmp_path / f"p{i}.log" for i in range(6)]
    procs: list[subprocess.Popen[bytes]] = []

    def join(index: int) -> None:
        before = assignments_logged(logs[index])
        procs.append(start_pipeline(run.config, logs[index]))
        wait_running(logs[index], before, timeout=180)

    def produced(share: float) -> None:
        target = int(run.count * share)
        wait_until(lambda: run.producer.produced >= target, 240, f"{target} produced")

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
        stopped = procs[0]  # SIGSTOP past the session, then SIGCONT
        stopped.send_signal(signal.SIGSTOP)
        try:
            session = BROKER_SESSION_S if rebalance == "consumer" else SESSION_TIMEOUT_MS / 1000
            time.sleep(session * 2)  # a fault injected for a duration, not a wait on a state
        finally:
            stopped.send_signal(signal.SIGCONT)
        gone = "lost" if rebalance != "eager" else "revoked"
        wait_until(
            lambda: any(kind == gone for kind, _ in _moves(logs[2])),
            120,
            "the stopped member noticed its session was gone",
        )
        join(5)
        positions = run.finish()
    finally:
        codes = [stop_pipeline(p, timeout=120) for p in procs]
    assert codes == [0] * len(codes), [log.read_text()[-2000:] for log in logs]
    run.check_sampler()
    assert set(read_keys(run.out)) >= set(positions)
    if rebalance != "eager":
        # Members 3 and 4 ran through the stop, a join and a loss: never left empty.
        assert _kept_through_every_revocation(logs[3]), _moves(logs[3])
        assert _kept_through_every_revocation(logs[4]), _moves(logs[4])


def test_b180_rolling_restart_of_static_members_moves_no_partition(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    """B180 (B178): three static members (``instance_id``) restarted one after the other
    within their session: the members that stay see no assignment change at all (no
    rebalance), every key arrives, and a key is written twice only at or after the
    commit made before its member's restart."""
    run = Streaming.start(
        kafka_bootstrap, tmp_path, "static", session_timeout_ms=60_000, rebalance="cooperative"
    )
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
            lambda: sum(len(p) for log in logs for k, p in _moves(log) if k == "assigned") >= 6,
            120,
            "all six partitions owned",
        )
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
        positions = run.finish()
    finally:
        codes = [stop_pipeline(p, timeout=120) for p in procs]
    assert codes == [0, 0, 0]
    run.check_sampler()
    counts = Counter(read_keys(run.out))
    assert set(counts) >= set(positions)
    for key, seen in counts.items():
        if seen > 1:
            partition, offset = positions[key]
            assert any(offset >= c.get(partition, 0) for c in commits_before), (
                f"{key!r} at {partition}/{offset} written twice below every commit"
            )
