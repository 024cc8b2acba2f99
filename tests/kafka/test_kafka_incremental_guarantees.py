"""Guarantees that must hold per partition while an incremental rebalance moves some of a
member's partitions (B270, B271, B272, B273, B274, B275; B175, B32, B33, B34, B40, B54, B71, B88).

Under ``cooperative`` and ``consumer`` a second member joins a group whose first member
is mid-run, and takes some of its partitions: only those lanes are drained, committed and
released, the others run on. Each test checks a feature that keeps state per lane:

* a pause (B270): the first member's sink is full, so backpressure pauses every lane; the
  lanes it keeps stay paused while the newcomer reads the moved ones, and resume once the
  sink takes rows again;
* bounded mode (B271): ``stop_at: end`` finishes on both members, with every record read
  once the partitions it was given moved mid-run;
* the dead-letter sink (B272): bad records before and after the move reach it, exactly
  once under effectively-once and at least once otherwise;
* the spool (B273): the first member's spool holds batches of the lanes being revoked
  while its terminal refuses them; they are delivered later or left uncommitted;
* a pause again (B274): a lane revoked while paused and assigned back to the first
  member is fetched again;
* the spool under ``ack: spooled`` (B275): the batches it took custody of (and whose
  offsets were committed) are delivered by it after their lanes moved away.

Throughout, the delivery sampler (tests/support/delivery.py) checks that the group's
committed offsets never pass a record the destinations do not hold — for dead letters,
the table and the dead-letter files together; under ``ack: spooled``, the sinks and the
spools. Every step waits for a condition (an
assignment, a metric, what a destination holds), never for a time.
"""

from __future__ import annotations

import json
from collections import ChainMap, Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from spate.testing import OK

from tests.kafka._members import Member, start_member
from tests.kafka._pipeline import (
    ClickHouseTable,
    revocations_logged,
    start_pipeline,
    stop_pipeline,
    wait_running,
    write_config,
)
from tests.support.delivery import DeliverySampler, PacedProducer, wait_until
from tests.support.kafka_groups import set_consumer_session
from tests.support.matrix import matrix
from tests.support.scale import current_scale, scaled
from tests.support.services import (
    committed_offsets,
    create_topic,
    end_offsets,
    produce_keyed,
    unique_name,
)
from tests.support.spool import spooled_rows

pytestmark = [pytest.mark.integration, pytest.mark.e2e]

INCREMENTAL = ("cooperative", "consumer")
"""Every test runs under both at full scale; at the CI scale the two alternate by test."""
PARTITIONS = 4
CONSUME_BATCH = 100  # start_member's default: records per consume() at most


def _sampler(
    bootstrap: str,
    group: str,
    topic: str,
    positions: Mapping[bytes, tuple[int, int]],
    keys: Callable[[], Iterable[bytes]],
) -> DeliverySampler:
    sampler = DeliverySampler(bootstrap, group, topic, positions, keys)
    sampler.start(every=0.2)
    return sampler


def _check(sampler: DeliverySampler) -> None:
    sampler.stop()
    sampler.sample()
    assert sampler.samples, sampler.errors[:3]
    assert not sampler.violations(), sampler.violations()[:3]


def _split(first: Member, second: Member) -> tuple[frozenset[int], frozenset[int]]:
    """Wait until the newcomer owns some partitions and the first member the others;
    return (kept, moved)."""
    everything = frozenset(range(PARTITIONS))
    wait_until(
        lambda: (
            bool(second.source.assigned_partitions)
            and bool(first.source.assigned_partitions)
            and first.source.assigned_partitions | second.source.assigned_partitions == everything
            and not first.source.assigned_partitions & second.source.assigned_partitions
        ),
        120,
        "the partitions split between the two members",
    )
    return first.source.assigned_partitions, second.source.assigned_partitions


@dataclass
class _Pair:
    """A topic of records produced up front, the first member of its group (all
    partitions, started by :meth:`start`), the newcomer (:meth:`join`) and the sampler,
    whose destination is what both members' sinks took."""

    bootstrap: str
    rebalance: str
    topic: str
    group: str
    positions: dict[bytes, tuple[int, int]]
    first: Member
    second: Member | None = None
    sampler: DeliverySampler | None = None
    custody: tuple[Path, ...] = ()
    """Spool directories under ``ack: spooled``: a committed record may be held there."""

    @classmethod
    def start(
        cls,
        bootstrap: str,
        prefix: str,
        rebalance: str,
        custody: tuple[Path, ...] = (),
        **first: Any,
    ) -> _Pair:
        topic, group = unique_name(f"{prefix}-{rebalance}"), unique_name("g")
        create_topic(bootstrap, topic, PARTITIONS)
        positions = produce_keyed(
            bootstrap, topic, scaled(20_000, minimum=2_000), value=lambda i: b"k%d" % i
        )
        member = start_member(bootstrap, topic, group, rebalance=rebalance, client_id="a", **first)
        pair = cls(bootstrap, rebalance, topic, group, positions, member, custody=custody)
        pair.sampler = _sampler(bootstrap, group, topic, positions, pair.held)
        wait_until(
            lambda: len(member.source.assigned_partitions) == PARTITIONS,
            120,
            "all partitions for the first member",
        )
        return pair

    def members(self) -> list[Member]:
        return [self.first] if self.second is None else [self.first, self.second]

    def delivered(self) -> set[bytes]:
        return set().union(*(m.delivered() for m in self.members()))

    def held(self) -> set[bytes]:
        """What the sampler counts as held: the spools in ``custody`` first (a batch only
        leaves one for a sink), then what the sinks took."""
        spooled = {bytes(row) for root in self.custody for row in spooled_rows(root)}  # type: ignore[call-overload]
        return spooled | self.delivered()

    def join(self, **second: Any) -> Member:
        """Start the newcomer (its sink not held)."""
        self.second = start_member(
            self.bootstrap,
            self.topic,
            self.group,
            rebalance=self.rebalance,
            held=False,
            client_id="z",
            **second,
        )
        return self.second

    def split(self, **second: Any) -> tuple[Member, Member, frozenset[int], frozenset[int]]:
        """Start the newcomer and wait for the split; return both members, the
        partitions the first kept and those that moved."""
        newcomer = self.join(**second)
        kept, moved = _split(self.first, newcomer)
        return self.first, newcomer, kept, moved

    def produce_more(self) -> dict[bytes, tuple[int, int]]:
        """Produce further records (new keys) and add them to ``positions``."""
        before = len(self.positions)
        later = produce_keyed(
            self.bootstrap,
            self.topic,
            scaled(4_000, minimum=400),
            key=lambda i: b"k%d" % (before + i),
            value=lambda i: b"k%d" % (before + i),
        )
        self.positions.update(later)
        return later

    def of(self, partitions: frozenset[int]) -> set[bytes]:
        return {k for k, (p, _) in self.positions.items() if p in partitions}

    def finish(self) -> None:
        """Every record delivered, then the end offsets committed."""
        wait_until(lambda: self.delivered() >= set(self.positions), 120, "every record")
        ends = end_offsets(self.bootstrap, self.topic)
        wait_until(
            lambda: committed_offsets(self.bootstrap, self.group, self.topic) == ends,
            60,
            "final commits",
        )

    def stop(self) -> list[str]:
        """Stop both members; their final states. Then check the sampler."""
        states = [m.stop().state for m in self.members() if m.thread.is_alive()]
        assert self.sampler is not None
        _check(self.sampler)
        return states


@matrix("rebalance", INCREMENTAL, ci="cooperative")
def test_b270_kept_lanes_stay_paused_and_moved_lanes_are_released(
    kafka_bootstrap: str, rebalance: str
) -> None:
    """B270 (B32, B7, B175): the first member's sink is full, so every lane is paused. A
    second member joins: the lanes the first keeps stay paused while the sink is full (at
    most one refused poll of them, when the revocation dropped the refused batch), the
    moved ones are read by the newcomer, and once the sink takes rows again the kept
    lanes resume; every record is delivered, the end offsets committed, and no commit
    ever passes the delivered records."""
    pair = _Pair.start(kafka_bootstrap, "pause", rebalance)
    states: list[str] = []
    try:
        wait_until(pair.first.held, 120, "the full sink to pause the source")
        polled = {p: pair.first.polled(p) for p in range(PARTITIONS)}
        first, second, kept, moved = pair.split()
        # The newcomer reads every record of the moved partitions ...
        wait_until(lambda: second.delivered() >= pair.of(moved), 120, "the moved partitions read")
        # ... while the kept lanes stayed paused behind the full sink. When the batch the
        # sink refused was a moved lane's, the revocation dropped it and the kept lanes
        # were offered one poll (the sink might have room after the write-out, B40):
        # refused, they were paused again: at most one consume() of records per revocation.
        assert first.held()
        assert first.source.assigned_partitions == kept
        revocations = first.metric(
            "spate_source_rebalances_total",
            component="source",
            component_type="source",
            event="revoked",
        )
        assert revocations >= 1
        assert sum(first.polled(p) - polled[p] for p in kept) <= CONSUME_BATCH * revocations
        assert not first.delivered()
        first.script.always(OK)
        pair.finish()
        ends = end_offsets(kafka_bootstrap, pair.topic)
        assert all(first.polled(p) > polled[p] for p in kept if polled[p] < ends[p])
    finally:
        states = pair.stop()
    assert states == ["completed", "completed"]


@matrix("rebalance", INCREMENTAL, ci="consumer")
def test_b271_bounded_run_finishes_when_partitions_move_mid_run(
    kafka_bootstrap: str, rebalance: str
) -> None:
    """B271 (B33, B34, B175): two bounded members (``stop_at: end``); the first is held
    mid-run when the second joins and takes some of its partitions. The second reads them
    to their end offsets, completes and leaves while the first is still held; its
    partitions come back to the first, which counts them read (committed at their end
    offsets) and completes once its own are. Every record is delivered, the committed
    offsets are the end offsets, and no commit ever passes the delivered records."""
    pair = _Pair.start(kafka_bootstrap, "bounded", rebalance, bounded=True)
    ends = end_offsets(kafka_bootstrap, pair.topic)
    everything = frozenset(range(PARTITIONS))
    try:
        wait_until(pair.first.held, 120, "the first member held mid-run")
        first, second = pair.first, pair.join(bounded=True)
        # The newcomer may read its partitions and leave before the split is seen: what
        # moved is what it delivered.
        reports = [second.join(180)]
        moved = frozenset(p for k, (p, _) in pair.positions.items() if k in second.delivered())
        assert moved and moved != everything, moved
        assert first.thread.is_alive() and first.held()
        wait_until(lambda: first.source.assigned_partitions == everything, 120, "all back")
        first.script.always(OK)
        reports.insert(0, first.join(180))
    finally:
        pair.stop()
    assert [r.state for r in reports] == ["completed", "completed"], [r.summary() for r in reports]
    assert second.delivered() >= pair.of(moved)
    assert pair.delivered() == set(pair.positions)
    assert committed_offsets(kafka_bootstrap, pair.group, pair.topic) == ends


@matrix("rebalance", INCREMENTAL, ci="cooperative")
def test_b274_a_lane_revoked_while_paused_and_assigned_back_is_fetched_again(
    kafka_bootstrap: str, rebalance: str
) -> None:
    """B274 (B32, B175): the first member's sink is full when a second member joins and
    takes some partitions, which librdkafka had paused for the first; the second reads
    them and leaves, so they come back to the first while its sink is still full. Records
    produced into them afterwards are read and delivered by the first once its sink takes
    rows: a pause never outlives the ownership it was made under, also when only some
    partitions move."""
    pair = _Pair.start(kafka_bootstrap, "back", rebalance)
    everything = frozenset(range(PARTITIONS))
    try:
        wait_until(pair.first.held, 120, "the full sink to pause the source")
        first, second, _kept, moved = pair.split()
        wait_until(lambda: second.delivered() >= pair.of(moved), 120, "the moved partitions read")
        assert second.stop().state == "completed"
        wait_until(lambda: first.source.assigned_partitions == everything, 120, "all back")
        later = pair.produce_more()
        assert first.held() and not first.delivered()
        first.script.always(OK)
        pair.finish()
        returned = {k for k, (p, _) in later.items() if p in moved}
        assert returned and first.delivered() >= returned
    finally:
        states = pair.stop()
    assert states == ["completed"]


def _letters(paths: Iterable[Path], at: Mapping[tuple[int, int], bytes]) -> Counter[bytes]:
    """The records in the dead-letter files, by the identity produced at their position."""
    found: Counter[bytes] = Counter()
    for path in paths:
        if not path.exists():
            continue
        for line in path.read_bytes().split(b"\n"):
            try:
                row = json.loads(line)
            except ValueError:
                continue  # a torn tail, or an empty line
            position = (int(row["source_partition"]), int(row["source_offset"]))
            found[at.get(position, b"?%d/%d" % position)] += 1
    return found


@pytest.mark.parametrize("delivery", ["at_least_once", "effectively_once"])
@matrix("rebalance", INCREMENTAL, ci="cooperative")
def test_b272_dead_letters_before_and_after_a_move(
    kafka_bootstrap: str, clickhouse_url: str, tmp_path: Path, rebalance: str, delivery: str
) -> None:
    """B272 (B71, B88, B175): JSON records into a plain ``MergeTree``, every tenth one not
    JSON (dead-lettered into a file per member). A second member joins while records
    flow, and more come after the move. Every good record is in the table and every bad
    one in a dead-letter file — exactly once each under effectively-once, at least once
    otherwise — and no commit ever passes a record in neither place."""
    topic, group = unique_name(f"dlq-{rebalance}"), unique_name("g")
    create_topic(kafka_bootstrap, topic, PARTITIONS)
    count = scaled(20_000, minimum=3_000)
    before = count * 3 // 5

    def value(i: int) -> bytes:
        return b"{not json k%d" % i if i % 10 == 3 else b'{"k":"k%d"}' % i

    bad = {b"k%d" % i for i in range(count) if i % 10 == 3}
    table = ClickHouseTable.create(clickhouse_url, f"dlq_{rebalance}")
    if rebalance == "consumer":
        set_consumer_session(kafka_bootstrap, group, 6000)
    base = json.loads(
        write_config(
            tmp_path / "base.json",
            bootstrap=kafka_bootstrap,
            topic=topic,
            group=group,
            out=tmp_path / "unused",
            bounded=False,
            rebalance=rebalance,
            table=table,
            delivery=delivery,
        ).read_text()
    )
    base["deserializer"] = {"json": {"framing": "single", "on_error": "dead_letter"}}
    dlqs = [tmp_path / f"dlq{i}.jsonl" for i in range(2)]
    configs = []
    for i, dlq in enumerate(dlqs):
        base["dead_letter"] = {
            "sink": {"file": {"path": str(dlq), "max_rows": 100}},
            "format": "row",
            "max_consecutive": 0,
            "max_ratio": 1.0,
        }
        configs.append(tmp_path / f"c{i}.json")
        configs[i].write_text(json.dumps(base))
    producer = PacedProducer(
        kafka_bootstrap,
        topic,
        ((b"k%d" % i, b"k%d" % i, value(i)) for i in range(before)),
        before,
        seconds=10 * max(current_scale(), 0.5),
    )
    later: dict[bytes, tuple[int, int]] = {}
    positions = ChainMap(later, producer.positions)

    def held() -> set[bytes]:
        at = {where: key for key, where in positions.items()}
        return set(table.keys()) | set(_letters(dlqs, at))

    sampler = _sampler(kafka_bootstrap, group, topic, positions, held)
    logs = [tmp_path / f"p{i}.log" for i in range(2)]
    procs = []
    try:
        procs.append(start_pipeline(configs[0], logs[0]))
        wait_running(logs[0], 0)
        producer.start()
        wait_until(lambda: dlqs[0].exists() and dlqs[0].stat().st_size, 120, "a dead letter")
        procs.append(start_pipeline(configs[1], logs[1]))
        wait_running(logs[1], 0)  # the newcomer has partitions: some moved while flowing
        wait_until(lambda: revocations_logged(logs[0]) > 0, 60, "the first member's revocation")
        producer.finish()
        # After the move: both members read new records, good and bad.
        later.update(
            produce_keyed(
                kafka_bootstrap,
                topic,
                count - before,
                key=lambda i: b"k%d" % (before + i),
                value=lambda i: value(before + i),
            )
        )
        at = {where: key for key, where in positions.items()}
        wait_until(
            lambda: set(table.keys()) | set(_letters(dlqs, at)) >= set(positions),
            180,
            "every record in the table or a dead-letter file",
        )
        ends = end_offsets(kafka_bootstrap, topic)
        wait_until(
            lambda: committed_offsets(kafka_bootstrap, group, topic) == ends, 60, "final commits"
        )
        # Bad records produced after the move, dead-lettered by each member.
        after = [set(_letters([dlq], at)) & set(later) & bad for dlq in dlqs]
    finally:
        codes = [stop_pipeline(proc, timeout=120) for proc in procs]
    assert codes == [0, 0], [log.read_text()[-2000:] for log in logs]
    _check(sampler)
    assert all(after), "a member dead-lettered nothing after the move"
    letters = _letters(dlqs, at)
    assert set(letters) == bad
    rows = Counter(table.keys())
    assert set(rows) == set(positions) - bad
    if delivery == "effectively_once":
        assert set(letters.values()) == {1}, [k for k, n in letters.items() if n > 1][:5]
        assert set(rows.values()) == {1}, [k for k, n in rows.items() if n > 1][:5]


@matrix("rebalance", INCREMENTAL, ci="consumer")
def test_b273_spooled_batches_of_a_revoked_lane_are_never_committed_ahead(
    kafka_bootstrap: str, tmp_path: Path, rebalance: str
) -> None:
    """B273 (B54, B40, B15, B175): the first member spools (``ack: terminal``) in front of
    a sink that refuses every write, so its spool holds batches of every lane when a
    second member joins and takes some partitions. The revoked lanes' spooled batches are
    not committed (the newcomer reads them again from the last commit); once the sink
    takes rows the first member's spool hands every batch on and empties. Every record is
    delivered, the end offsets committed, and no commit ever passes the delivered
    records."""
    spools = [tmp_path / "spool-a", tmp_path / "spool-z"]
    pair = _Pair.start(kafka_bootstrap, "spool", rebalance, spool=spools[0])
    states: list[str] = []
    try:
        wait_until(
            lambda: all(pair.first.polled(p) > 0 for p in range(PARTITIONS)),
            120,
            "batches of every lane spooled",
        )
        first, second, _kept, moved = pair.split(spool=spools[1])
        wait_until(
            lambda: second.delivered() >= pair.of(moved), 120, "the moved partitions read again"
        )
        assert not first.delivered()  # the first member's sink took nothing so far
        first.script.always(OK)
        pair.finish()
    finally:
        states = pair.stop()
    assert states == ["completed", "completed"]
    assert [sorted(p.name for p in s.rglob("seg-*")) for s in spools] == [[], []]


@matrix("rebalance", INCREMENTAL, ci="consumer")
def test_b275_a_spool_delivers_the_revoked_lanes_batches_it_took_custody_of(
    kafka_bootstrap: str, tmp_path: Path, rebalance: str
) -> None:
    """B275 (B54, B40, B175): under ``ack: spooled`` the first member's spool takes custody
    of batches its terminal refuses, so their offsets are committed. A second member joins
    and takes some partitions, reading on from those commits; the first member's spool,
    no longer owning those lanes, still hands their batches on once the terminal takes
    them, and empties. Every record is delivered, the end offsets committed, and no commit
    ever passes a record that is neither delivered nor in a spool."""
    spools = (tmp_path / "spool-a", tmp_path / "spool-z")
    pair = _Pair.start(
        kafka_bootstrap, "custody", rebalance, custody=spools, spool=spools[0], ack="spooled"
    )
    states: list[str] = []
    try:
        wait_until(
            lambda: all(pair.first.polled(p) > 0 for p in range(PARTITIONS)),
            120,
            "batches of every lane spooled",
        )
        first, second, _kept, moved = pair.split(spool=spools[1], ack="spooled")
        later = pair.produce_more()
        wait_until(
            lambda: second.delivered() >= {k for k, (p, _) in later.items() if p in moved},
            120,
            "the newcomer reading on after the move",
        )
        assert not first.delivered()  # the first member's terminal took nothing so far
        first.script.always(OK)
        pair.finish()
        spooled_moved = pair.of(moved) - second.delivered()
        assert first.delivered() >= spooled_moved
    finally:
        states = pair.stop()
    assert states == ["completed", "completed"]
    assert [sorted(p.name for p in s.rglob("seg-*")) for s in spools] == [[], []]
