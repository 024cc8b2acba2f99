"""Custody where features meet: a model-based test over randomly stacked pipelines.

A hypothesis ``RuleBasedStateMachine`` builds, per example, one pipeline from the
project's own parts — an in-process :func:`~spate.testing.memory_source` with several
partitions, the JSON deserializer, the ClickHouse sink on chDB (embedded, in this
process) at least once or effectively once, optionally behind a
:class:`~spate.sink.MemoryTier`, a :class:`~spate.sink.SpoolTier` over a
:class:`~spate.sink.JsonlStore`, or in a :class:`~spate.sink.TeeSink` with a second,
capturing branch; a dead-letter sink; ``skip``, ``fail`` or ``dead_letter`` for bad
records; a byte budget (``backpressure.max_inflight_bytes``) and ``max_pending_batches``
drawn small — and then drives it step by step on a :class:`~spate.testing.ManualClock`:

* records are appended, good ones and bad ones of every kind (a payload that is not
  JSON, JSON that is not an object, a value of the wrong JSON type for its column, a
  value out of its column's range);
* the pipeline thread takes loop turns (``PipelineRuntime.step``), time moves on (ticks,
  commits, lingers), the sink's background writer does its work (``SinkPool.pump``);
* a partition is revoked and assigned again;
* the process is killed with ``kill -9``: a fresh source, sinks and runtime are built
  over the same tables, spool directory and committed offsets, and the old ones are
  abandoned without a drain (the spool's writer is stopped as a kill would stop it);
* with a spool, several worker processes share its ``dir`` (``spate run --processes``:
  ``<dir>/w<i>`` each, built as the configuration builds them, B114): one worker is
  killed and restarted while its siblings run on, or all are and the run starts again
  with another number of workers, so segments no worker of the new layout reads are
  adopted;
* the destination refuses the next writes with a retriable error, before the insert or
  after it landed (its answer lost), then accepts again;
* the source's asynchronous commits reach the broker late, are refused (B35) or land
  unanswered before a kill (a :class:`LateCommitSource`, as the Kafka source's commits).

The sinks write on the pipeline thread (``io_threads=0``), so a full sink refuses rows
until a tick or a pump writes (the refused writes), and every outcome is a function of
the steps: a failure replays.

After every step the state is checked against a reference model (B1, B2, B28, B58, B71,
B89): nothing is committed ahead of what is in the destination (every good record below a
committed offset is in the table, and in the tee's other branch); a bad record is never
in the table and, committed past under ``dead_letter``, is in the dead-letter sink under
its own partition and offset; nothing but a bad record is ever dead-lettered or named by a
failure; under effectively-once no row is in the table twice, and a block intent is
deleted only below the broker's committed offset (B89); under ``ack: spooled`` a committed
record may be in an unreleased spool batch instead of the table; spate never logs an
exception it could only log (a worker thread's, a callback's). The ``settle`` rule (and
the end of every example) checks progress: within a number of loop turns bounded by the
records in play — never by wall-clock time — every record is committed and every good
one is in the destination, or, under ``fail``, the run failed naming a bad record.

Settings: ``SPATE_TEST_SCALE`` scales the example count and steps per example
(tests/support/scale.py). ``SPATE_CUSTODY_FOCUS`` narrows the drawn pipelines to one
meeting of features — ``tee`` (a tee with a full branch), ``memory`` (a memory tier),
``eo`` (effectively-once replay of several partitions on a small budget), ``spool``,
``workers`` (two or three workers on one spool, ``ack: spooled``), ``commits``
(effectively-once with commits acknowledged late or refused) —
and ``SPATE_CUSTODY_EXAMPLES`` overrides the example count; ``SPATE_CUSTODY_SHRINK=1``
shrinks a failure to its smallest example (on by default at full scale).
"""

from __future__ import annotations

import dataclasses
import itertools
import logging
import os
import re
import shutil
import tempfile
import threading
import uuid
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import spate.sink._pool as pool_module
from hypothesis import HealthCheck, Phase, settings, target
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)
from spate import ErrorClass, ErrorPolicy, ManualClock, Pipeline, SinkError
from spate.config import decode
from spate.config.models import BackpressureConfig, CheckpointConfig, DeadLetterSettings
from spate.flow import InflightBudget
from spate.metrics import Meter
from spate.pipeline import PipelineRuntime, ShutdownHandle
from spate.plugins import BuildContext
from spate.plugins._tiers import build_tiers
from spate.records import Lane
from spate.sink import (
    MemoryTier,
    MemoryTierConfig,
    RecordPosition,
    Sink,
    SpoolConfig,
    SpoolTier,
    TeeSink,
)
from spate.testing import CaptureScript, capture_sink
from spate.testing._memory_source import MemorySource, MemorySourceHandle
from spate_clickhouse import ClickHouseSinkConfig, ClickHouseSinkFactory
from spate_json import SingleJsonDeserializer

from tests.support.crash import died
from tests.support.scale import current_scale, scaled
from tests.support.spool import spooled_rows

STREAM = "custody"

# -- settings ---------------------------------------------------------------------------

FOCI = ("tee", "memory", "eo", "spool", "workers", "commits")
FOCUS = os.environ.get("SPATE_CUSTODY_FOCUS", "")
if FOCUS and FOCUS not in FOCI:
    raise RuntimeError(f"SPATE_CUSTODY_FOCUS must be one of {', '.join(FOCI)}, got {FOCUS!r}")
EXAMPLES = int(os.environ.get("SPATE_CUSTODY_EXAMPLES", "0")) or scaled(300, minimum=12)
STEPS = scaled(60, minimum=30)
SHRINK = os.environ.get("SPATE_CUSTODY_SHRINK", "1" if current_scale() >= 1 else "0") == "1"
PART_EXAMPLES = 25
"""Examples per test item at most: the full count (300 examples of up to 60 steps) runs as
twelve items of 25, each well inside the suite's per-test timeout on a loaded machine (50
took 487 s of the 900 with the load average near 20 on two cores)."""
PARTS = -(-EXAMPLES // PART_EXAMPLES)

FORGET_EVERY = 4
"""Blocks between two deletions of committed intents when commits come late (B89)."""

MAX_RECORDS = 240
"""Records appended per example at most (each rule appends a few)."""

# -- records ----------------------------------------------------------------------------

GOOD = "good"
BAD_KINDS: dict[str, bytes | None] = {
    # kind -> the payload's `v` as JSON text, or None for a payload given in full below
    "out_of_range_high": b"300",
    "out_of_range_low": b"-129",
    "wrong_type_string": b'"abc"',
    "wrong_type_array": b"[1, 2]",
    "wrong_type_object": b'{"x": 1}',
    "wrong_type_float": b"1.5",
    "null": b"null",
    "not_json": None,
    "not_an_object": None,
}
"""Bad records: a value the Int8 column ``v`` cannot take, or a payload the deserializer
cannot decode into an object (counted by the deserializer's policy)."""

KINDS = (GOOD, *BAD_KINDS)
DESER_KINDS = ("not_json", "not_an_object")


@dataclass(frozen=True, slots=True)
class Rec:
    partition: int
    offset: int
    kind: str
    payload: bytes

    @property
    def good(self) -> bool:
        return self.kind == GOOD

    @property
    def id(self) -> int:
        return record_id(self.partition, self.offset)


def record_id(partition: int, offset: int) -> int:
    return partition * 1_000_000 + offset


def payload_of(partition: int, offset: int, kind: str, value: int) -> bytes:
    ident = record_id(partition, offset)
    if kind == "not_json":
        return b'{"id": %d, "v": ' % ident  # cut short
    if kind == "not_an_object":
        return b"[%d, %d]" % (ident, value)
    v = b"%d" % value if kind == GOOD else BAD_KINDS[kind]
    assert v is not None
    return b'{"id": %d, "p": %d, "o": %d, "v": %s}' % (ident, partition, offset, v)


# -- chDB -------------------------------------------------------------------------------

_ENGINE_LOCK = threading.Lock()
_ENGINE: dict[str, str] = {}
_names = itertools.count()


def engine_url() -> str:
    """The ``chdb://`` URL of this process's engine. chDB hosts one engine per process:
    when another test opened one here already, its directory is used (the tables of
    this test have names of their own)."""
    import clickhouse_connect

    with _ENGINE_LOCK:
        url = _ENGINE.get("url")
        if url is None:
            path = tempfile.mkdtemp(prefix="spate-custody-")
            try:
                clickhouse_connect.get_client(interface="chdb", path=path).close()
            except Exception as exc:
                opened = re.search(r"already initialized with path '([^']+)'", str(exc))
                if opened is None:
                    raise
                path = opened.group(1)
            url = f"chdb://{path}"
            _ENGINE["url"] = url
        return url


def chdb_client(url: str) -> Any:
    import clickhouse_connect

    return clickhouse_connect.get_client(interface="chdb", path=url[len("chdb://") :])


# -- the broker's commits ---------------------------------------------------------------


class LateCommitSource(MemorySource):
    """A memory source whose asynchronous commits are acknowledged late, or refused, as
    the Kafka source's are (B35, B89): ``commit(sync=False)`` only stores the positions;
    :meth:`send` hands them to the broker (Kafka's ``commit_interval``) and
    :meth:`answer` brings the broker's answer — taken (the broker's committed offset
    moves, and :meth:`durable_commits` says so) or refused (the position is sent again
    with the next commit unless a newer one was handed over since). A synchronous commit
    (revocation, drain) is taken before it returns. The broker's committed offsets — where
    a restart or a new owner begins — are the memory source's ``committed``."""

    def __init__(self, stream: str, partitions: int, *, batch_size: int) -> None:
        super().__init__(stream, partitions, bounded=False, batch_size=batch_size)
        self.pending: dict[Lane, int] = {}
        self.inflight: dict[Lane, int] = {}
        self.durable: dict[Lane, int] = {}

    def commit(self, offsets: Mapping[Lane, int], *, sync: bool) -> None:
        if not sync:
            self.pending.update(offsets)
            return
        for lane in offsets:
            # Sent before this commit, so answered before it returns; superseded by it.
            self.pending.pop(lane, None)
            self.inflight.pop(lane, None)
        super().commit(offsets, sync=True)
        self.durable.update(offsets)

    def send(self) -> None:
        """The commit cadence: stored positions of owned lanes go to the broker."""
        owned = set(self._owned)
        self.inflight.update({lane: o for lane, o in self.pending.items() if lane in owned})
        self.pending.clear()

    def answer(self, *, taken: bool) -> None:
        """The broker answers every commit in flight: taken, or refused (B35)."""
        inflight, self.inflight = self.inflight, {}
        if taken:
            super().commit(inflight, sync=False)
            self.durable.update(inflight)
            return
        for lane, offset in inflight.items():
            if lane in self._owned:
                self.pending.setdefault(lane, offset)

    def landed_unanswered(self) -> None:
        """A kill -9 after the broker took the commits in flight, before their answer
        came back: the broker moved, the dead process never knew."""
        super().commit(self.inflight, sync=False)
        self.inflight = {}

    def durable_commits(self) -> dict[Lane, int]:
        """``DurableCommitSource``: what the broker acknowledged, per owned lane (B89)."""
        return {lane: o for lane, o in self.durable.items() if lane in self._owned}


# -- refused writes ---------------------------------------------------------------------


@dataclass
class Refusals:
    """Faults the destination injects into the next writes (shared by every process and
    shard of an example): ``refuse`` writes fail with a retriable error before anything
    lands; ``lose`` writes land and then fail as if the answer was lost (a timeout after
    the insert), so the pool writes the same block again."""

    refuse: int = 0
    lose: int = 0


class RefusingWriter:
    """A ClickHouse shard writer whose writes fail while :class:`Refusals` says so;
    everything else is the real writer's (intents included, B88)."""

    def __init__(self, writer: Any, refusals: Refusals) -> None:
        self._writer = writer
        self._refusals = refusals

    def write(self, batch: Any) -> None:
        refusals = self._refusals
        if refusals.refuse > 0:
            refusals.refuse -= 1
            raise SinkError("custody: the destination refused the write", ErrorClass.RETRYABLE)
        self._writer.write(batch)
        if refusals.lose > 0:
            refusals.lose -= 1
            raise SinkError("custody: the write's answer was lost", ErrorClass.RETRYABLE)

    def probe(self) -> None:
        self._writer.probe()

    def close(self) -> None:
        self._writer.close()

    def record_intent(self, *args: Any) -> None:
        self._writer.record_intent(*args)

    def load_intents(self, *args: Any) -> Any:
        return self._writer.load_intents(*args)

    def forget_intents(self, *args: Any) -> None:
        self._writer.forget_intents(*args)

    def claim_lane(self, *args: Any) -> int:
        return int(self._writer.claim_lane(*args))

    def owns_lane(self, *args: Any) -> bool:
        return bool(self._writer.owns_lane(*args))


def refused_by(sink: Any, refusals: Refusals) -> None:
    """Make ``sink`` (a ClickHouse sink, before it starts) open refusing writers."""
    connector = sink._connector
    open_writer = connector.open_writer
    connector.open_writer = lambda *args: RefusingWriter(open_writer(*args), refusals)


# -- what the spool directories hold ----------------------------------------------------

ROW_ID = re.compile(rb'"id":\s*(\d+)')


def row_id(row: object) -> int | None:
    """The ``id`` of a spooled row: a mapping, the columns in order, or the payload."""
    if isinstance(row, dict):
        value = row.get("id")
        return value if isinstance(value, int) else None
    if isinstance(row, (tuple, list)) and row and isinstance(row[0], int):
        return row[0]
    if isinstance(row, (bytes, bytearray)):
        found = ROW_ID.search(row)
        return int(found.group(1)) if found else None
    return None


def spooled_ids(root: Path) -> set[int]:
    """Ids of the rows in batches not noted released in any spool segment under
    ``root`` (every worker's directory), read as recovery would without locking."""
    return {i for i in map(row_id, spooled_rows(root)) if i is not None}


# -- errors logged ----------------------------------------------------------------------


class ErrorLog(logging.Handler):
    """Keeps the exceptions spate could only log (at ERROR, with a traceback): one raised
    in a callback or on a worker thread — a batch released twice, a resolver that raised
    — is a defect the checks below may not see at once."""

    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        if record.exc_info and record.exc_info[1] is not None:
            self.messages.append(f"{record.name}: {record.getMessage()}: {record.exc_info[1]!r}")


# -- one process of the pipeline --------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Shape:
    """What one example stacks (drawn once; every process of the example builds it)."""

    wrapper: str  # "none", "memory", "tee", "spool"
    eo: bool
    policy: ErrorPolicy
    partitions: int
    budget: int
    max_pending: int
    sink_rows: int
    inflight: int
    copy_capacity: int
    tier_records: int
    checkpoint: float
    eager_writer: bool
    """The sink's writer writes every sealed batch after each loop turn (as I/O threads
    do); otherwise only on ticks and when the ``writer_writes`` rule says so."""
    workers: int = 0
    """Worker processes sharing the spool's ``dir`` at the start (``spate run --processes``,
    each in ``<dir>/w<i>``, B114); 0: one process spooling in ``dir`` itself."""
    spool_ack: str = "terminal"
    late_commits: bool = False
    """The source's asynchronous commits are acknowledged late or refused (B35, B89)."""


@dataclass
class Process:
    """One run of the pipeline (one worker): its components and the runtime driven step
    by step."""

    runtime: PipelineRuntime
    source: MemorySource
    source_handle: Any
    clickhouse: list[Any]
    spools: list[SpoolTier]
    copy: CaptureScript | None
    dead_letters: CaptureScript
    budget: InflightBudget
    worker: tuple[int, int] | None = None
    failed: str | None = None


@dataclass
class World:
    """What outlives a process: the tables, the spool directory, the committed offsets,
    and what the capturing sinks (dead letters, the tee's other branch) durably hold."""

    url: str
    table: str
    state_table: str
    spool_dir: Path
    committed: dict[int, int] = field(default_factory=dict)
    copies: list[CaptureScript] = field(default_factory=list)
    dead_letters: list[CaptureScript] = field(default_factory=list)
    refusals: Refusals = field(default_factory=Refusals)


def owned_partitions(shape: Shape, worker: tuple[int, int] | None) -> list[int]:
    """The partitions a worker owns: ``p % count == index`` (the group's assignment once
    every worker is up); a single process owns them all."""
    if worker is None:
        return list(range(shape.partitions))
    index, count = worker
    return [p for p in range(shape.partitions) if p % count == index]


def build_process(
    world: World,
    shape: Shape,
    data: dict[int, list[bytes]],
    batch: int,
    clock: ManualClock,
    worker: tuple[int, int] | None = None,
) -> Process:
    name = f"custody{next(_names)}"
    meter = Meter(name)
    budget = InflightBudget(shape.budget)
    position = RecordPosition() if shape.eo else None
    nonce = uuid.uuid4().hex[:12]

    def context(component: str) -> BuildContext:
        return BuildContext(
            pipeline="custody",  # the same in every process: intents are found again
            component=component,
            meter=meter,
            clock=clock,
            run_nonce=nonce,
            budget=budget,
            io_threads=0,
            delivery="effectively_once" if shape.eo else "at_least_once",
            position=position,
            worker=worker,
        )

    def clickhouse(component: str) -> Any:
        body = {
            "table": world.table,
            "columns": ["id", "p", "o", "v"],
            "shards": [{"replicas": [world.url]}],
            "batch": {"max_rows": shape.sink_rows, "linger": "1h"},
            "inflight": {"max_per_shard": shape.inflight},
            "on_record_error": shape.policy.value,
            "state_table": world.state_table,
        }
        config = decode(ClickHouseSinkConfig, body, f"sinks.{component}.clickhouse")
        sink = ClickHouseSinkFactory.build(config, context(component))
        refused_by(sink, world.refusals)
        return sink

    ch = clickhouse("events")
    top: Sink = ch
    spools: list[SpoolTier] = []
    copy_script: CaptureScript | None = None
    if shape.wrapper == "memory":
        top = MemoryTier(
            "memory",
            MemoryTierConfig(max_records=shape.tier_records, every=3 * shape.checkpoint),
            ch,
            meter=meter,
            clock=clock,
        )
    elif shape.wrapper == "tee":
        copy, copy_script = capture_sink(
            "copy", max_rows=shape.sink_rows, capacity=shape.copy_capacity, clock=clock
        )
        top = TeeSink("tee", [ch, copy], clock=clock, meter=meter)
        world.copies.append(copy_script)
    elif shape.wrapper == "spool":
        # Built as a tiered sink's configuration builds it: under ``--processes`` the
        # store is ``<dir>/w<i>`` and adopts what no worker of this layout reads (B114).
        config = SpoolConfig(
            dir=str(world.spool_dir),
            ack="spooled" if shape.spool_ack == "spooled" else "terminal",
            max_records=shape.tier_records,
            segment_bytes=2048,
        )
        spool = build_tiers([("spool", config)], ch, context("events"))
        assert isinstance(spool, SpoolTier)
        spools.append(spool)
        top = spool
    dead_letter, dl_script = capture_sink("dead_letter", max_rows=shape.sink_rows, clock=clock)
    world.dead_letters.append(dl_script)
    mine = owned_partitions(shape, worker)
    count = max(shape.partitions, 1)
    source = (
        LateCommitSource(STREAM, count, batch_size=batch)
        if shape.late_commits
        else MemorySource(STREAM, count, bounded=False, batch_size=batch)
    )
    source._lanes = {lane: d for lane, d in source._lanes.items() if lane.partition in mine}
    if any(data.get(p) for p in mine):
        source._load({p: data[p] for p in mine if data.get(p)}, None, None)
    for partition, offset in world.committed.items():
        if partition in mine:
            source._committed[Lane(STREAM, partition)] = offset
    handle = MemorySourceHandle(source)
    checkpoint = CheckpointConfig(
        interval=shape.checkpoint,
        max_pending_batches=shape.max_pending,
        drain_timeout=30.0,
        stalled_fail_after=1e9,
    )
    backpressure = BackpressureConfig(max_inflight_bytes=shape.budget)
    deserializer = SingleJsonDeserializer.create(
        on_error=shape.policy, objects_only=True, convert=None
    )
    pipeline = Pipeline(
        name,
        source,
        {"events": top},
        deserializer=deserializer,
        checkpoint=checkpoint,
        backpressure=backpressure,
        clock=clock,
        meter=meter,
        run_nonce=nonce,
        budget=budget,
        handle_signals=False,
        dead_letter=dead_letter,
        dead_letter_settings=DeadLetterSettings(format="row", max_consecutive=0, max_ratio=1.0),
        position=position,
    )
    # The runtime is driven turn by turn here, as Pipeline.run() drives it in a loop.
    wake = threading.Event()
    runtime = PipelineRuntime(
        name=name,
        source=source,
        sinks=pipeline._runtime_sinks(),
        processor=pipeline._build_processor(),
        checkpoint=checkpoint,
        backpressure=backpressure,
        clock=clock,
        meter=meter,
        budget=budget,
        shutdown=ShutdownHandle(wake),
        wake=wake,
    )
    runtime.start()
    return Process(runtime, source, handle, [ch], spools, copy_script, dl_script, budget, worker)


def kill(process: Process, *, landed: bool = False) -> None:
    """``kill -9``: nothing of the process runs any more; nothing is drained or closed.

    The spool's writer thread is stopped (what it had not written is lost, as in a kill);
    the sinks write only when called (``io_threads=0``), so they simply stop. The kernel
    closes the dead process's open segment and the spool directory's lock (B114). With
    ``landed`` the broker took the commits in flight, unanswered."""
    for spool in process.spools:
        spool._writer.stop()
        died(spool)
    if landed and isinstance(process.source, LateCommitSource):
        process.source.landed_unanswered()


# -- the machine ------------------------------------------------------------------------

WHERE = re.compile(rf"{STREAM}\[(\d+)\] offset (\d+)")


def normalised(shape: Shape) -> Shape:
    """Effectively-once needs ClickHouse sinks straight after the chain (B90): no tier or
    tee in front of them. Only a spool is shared by worker processes."""
    if shape.eo and shape.wrapper != "none":
        shape = dataclasses.replace(shape, wrapper="none")
    if shape.wrapper != "spool":
        shape = dataclasses.replace(shape, workers=0, spool_ack="terminal")
    return shape


def shapes() -> st.SearchStrategy[Shape]:
    """The pipelines drawn; ``SPATE_CUSTODY_FOCUS`` narrows them to one meeting of
    features (what that meeting needs to show, drawn more often)."""
    wrapper = st.sampled_from(["none", "memory", "tee", "spool"])
    eo = st.booleans()
    policy = st.sampled_from([ErrorPolicy.SKIP, ErrorPolicy.FAIL, ErrorPolicy.DEAD_LETTER])
    eager = st.booleans()
    partitions = st.integers(1, 3)
    budget = st.sampled_from([1024, 4096, 16384, 256 * 1024 * 1024])
    max_pending = st.sampled_from([1, 2, 4, 1024])
    workers = st.sampled_from([0, 1, 2, 3])
    late = st.booleans()
    spool_ack = st.sampled_from(["terminal", "spooled"])
    if FOCUS in ("tee", "memory", "spool"):
        wrapper, eo = st.just(FOCUS), st.just(False)
    elif FOCUS == "workers":
        wrapper, eo = st.just("spool"), st.just(False)
        partitions, workers = st.integers(2, 3), st.integers(2, 3)
        spool_ack = st.just("spooled")
    elif FOCUS in ("eo", "commits"):
        wrapper, eo = st.just("none"), st.just(True)
        partitions, budget = st.integers(2, 3), st.sampled_from([1024, 4096, 16384])
        max_pending = st.sampled_from([1, 2])
        policy = st.sampled_from([ErrorPolicy.SKIP, ErrorPolicy.DEAD_LETTER])
        eager = st.just(True)
        if FOCUS == "commits":
            late = st.just(True)
            budget, max_pending = st.sampled_from([4096, 256 * 1024 * 1024]), st.just(1024)
    return st.builds(
        Shape,
        wrapper=wrapper,
        eo=eo,
        policy=policy,
        partitions=partitions,
        budget=budget,
        max_pending=max_pending,
        sink_rows=st.integers(2, 12) | st.integers(13, 40),
        inflight=st.integers(1, 2),
        copy_capacity=st.integers(1, 20),
        tier_records=st.integers(1, 30),
        checkpoint=st.sampled_from([0.5, 1.0, 5.0]),
        eager_writer=eager,
        workers=workers,
        spool_ack=spool_ack,
        late_commits=late,
    ).map(normalised)


class CustodyMachine(RuleBasedStateMachine):
    """Stacks custody features at random and checks them against a reference model."""

    def __init__(self) -> None:
        super().__init__()
        self.clock = ManualClock()
        self.records: dict[int, list[Rec]] = {}
        self.world: World | None = None
        self.shape: Shape | None = None
        self.processes: list[Process] = []
        """The running workers of the current layout (one unless the spool is shared)."""
        self.client: Any = None
        self.replays: Counter[int] = Counter()
        """Per partition: revocations and restarts (a dead letter may be written again)."""
        self.failures: list[str] = []
        self.replayable = 0
        """The most rows written ahead of the commit at a kill (hypothesis targets it)."""
        self.forget_every: int | None = None
        self.errors = ErrorLog()
        logging.getLogger("spate").addHandler(self.errors)
        self.intents: dict[tuple[int, int, int, int], int] = {}
        """Block intents last seen in the state table: (partition, first offset, first
        index, epoch) -> last offset."""

    # -- set-up ---------------------------------------------------------------------

    @initialize(shape=shapes(), batch=st.integers(1, 16))
    def build(self, shape: Shape, batch: int) -> None:
        url = engine_url()
        n = next(_names)
        world = World(
            url=url,
            table=f"custody_events_{n}",
            state_table=f"custody_intents_{n}",
            spool_dir=Path(tempfile.mkdtemp(prefix="spate-custody-spool-")),
        )
        self.client = chdb_client(url)
        self.client.command(
            f"CREATE TABLE {world.table} (id UInt64, p UInt32, o UInt64, v Int8) "
            "ENGINE = MergeTree ORDER BY id SETTINGS non_replicated_deduplication_window = 1000"
        )
        self.world, self.shape = world, shape
        self.records = {p: [] for p in range(shape.partitions)}
        if shape.eo and shape.late_commits:
            # The sink deletes committed intents every few hundred blocks; the few blocks
            # of an example must be deleted as commits pass to show when that happens.
            self.forget_every = pool_module._FORGET_EVERY
            pool_module._FORGET_EVERY = FORGET_EVERY
        self.start_layout(shape.workers, batch)

    def start_layout(self, workers: int, batch: int) -> None:
        """Start ``workers`` worker processes (``spate run --processes``), or one process
        when 0, over the same tables, spool directory and committed offsets."""
        assert self.world is not None and self.shape is not None
        layout: list[tuple[int, int] | None] = (
            [(i, workers) for i in range(workers)] if workers else [None]
        )
        self.processes = [
            build_process(self.world, self.shape, self.payloads(), batch, self.clock, worker)
            for worker in layout
        ]

    def payloads(self) -> dict[int, list[bytes]]:
        return {p: [r.payload for r in recs] for p, recs in self.records.items()}

    def teardown(self) -> None:
        # Guide the search to kills that leave written rows ahead of the commit, which
        # the next process replays (hypothesis's targeting phase climbs this score).
        target(self.replayable, label="rows written ahead of the commit at a kill")
        try:
            if self.running():
                self.settle_all()
                self.custody_holds()  # a failure in the last turns is checked too
        finally:
            logging.getLogger("spate").removeHandler(self.errors)
            if self.forget_every is not None:
                pool_module._FORGET_EVERY = self.forget_every
            for process in self.processes:
                kill(process)
            if self.world is not None and self.client is not None:
                self.client.command(f"DROP TABLE IF EXISTS {self.world.table}")
                self.client.command(f"DROP TABLE IF EXISTS {self.world.state_table}")
                shutil.rmtree(self.world.spool_dir, ignore_errors=True)

    # -- rules ----------------------------------------------------------------------

    def running(self) -> bool:
        return bool(self.processes) and all(p.failed is None for p in self.processes)

    def owner(self, partition: int) -> Process:
        """The worker that owns ``partition``."""
        for process in self.processes:
            if Lane(STREAM, partition) in process.source._lanes:
                return process
        raise AssertionError(f"no worker owns partition {partition}")

    @precondition(lambda self: self.running() and self.total() < MAX_RECORDS)
    @rule(
        partition=st.integers(0, 2),
        kinds=st.lists(st.just(GOOD) | st.sampled_from(KINDS), min_size=1, max_size=12),
        value=st.integers(-128, 127),
    )
    def append(self, partition: int, kinds: list[str], value: int) -> None:
        assert self.shape is not None
        self.add(partition % self.shape.partitions, kinds, value)

    @precondition(lambda self: self.running() and self.total() < MAX_RECORDS)
    @rule(count=st.integers(1, 20), value=st.integers(-128, 127))
    def append_everywhere(self, count: int, value: int) -> None:
        """Good records into every partition (several lanes fill at once)."""
        assert self.shape is not None
        for partition in range(self.shape.partitions):
            self.add(partition, [GOOD] * count, value)

    def add(self, partition: int, kinds: list[str], value: int) -> None:
        assert self.shape is not None
        recs = self.records[partition]
        new = []
        for kind in kinds:
            if self.shape.wrapper == "spool" and kind not in DESER_KINDS and kind != GOOD:
                # A row the spool took and the next tier refuses fails its spooled batch
                # as a whole (B102): not a per-record outcome this model follows.
                kind = "not_json"
            offset = len(recs)
            rec = Rec(partition, offset, kind, payload_of(partition, offset, kind, value))
            recs.append(rec)
            new.append(rec)
        self.owner(partition).source_handle.append(partition, [r.payload for r in new])

    @precondition(lambda self: self.running())
    @rule(turns=st.integers(1, 6))
    def loop(self, turns: int) -> None:
        for _ in range(turns):
            if not self.turn():
                return

    @precondition(lambda self: self.running())
    @rule(seconds=st.sampled_from([0.1, 0.5, 1.0, 5.0]))
    def time_passes(self, seconds: float) -> None:
        self.clock.advance(seconds)
        self.turn()

    @precondition(lambda self: self.running())
    @rule()
    def writer_writes(self) -> None:
        """The sink's background writer writes what is sealed (as an I/O thread would)."""
        for process in self.processes:
            for sink in process.clickhouse:
                sink.pump()

    @precondition(lambda self: self.running())
    @rule(refuse=st.integers(0, 6), lose=st.integers(0, 1))
    def destination_refuses(self, refuse: int, lose: int) -> None:
        """The next writes fail with a retriable error, whenever they come (a tick, the
        writer, a replay; part way through what is sealed): ``refuse`` before anything
        lands, then ``lose`` after the insert landed (its answer lost). The writer
        retries on its backoff and the destination accepts again."""
        assert self.world is not None
        self.world.refusals.refuse += refuse
        self.world.refusals.lose += lose

    @precondition(lambda self: self.running() and self.late_commits())
    @rule()
    def broker_receives_commits(self) -> None:
        """The source's commit cadence sends the positions it stored."""
        for process in self.processes:
            assert isinstance(process.source, LateCommitSource)
            process.source.send()

    @precondition(lambda self: self.running() and self.late_commits())
    @rule(taken=st.booleans())
    def broker_answers(self, taken: bool) -> None:
        """The broker answers the commits in flight: taken or refused (B35)."""
        for process in self.processes:
            assert isinstance(process.source, LateCommitSource)
            process.source.answer(taken=taken)
        self.turn()

    def late_commits(self) -> bool:
        return self.shape is not None and self.shape.late_commits

    @precondition(lambda self: self.running())
    @rule(partition=st.integers(0, 2))
    def revoke_and_assign(self, partition: int) -> None:
        assert self.shape is not None
        partition %= self.shape.partitions
        self.replays[partition] += 1
        self.owner(partition).source_handle.rebalance(revoke=[partition], assign=[partition])
        self.turn()

    @precondition(lambda self: bool(self.processes))
    @rule(
        batch=st.integers(1, 4) | st.integers(5, 16),
        which=st.integers(0, 2),
        landed=st.booleans(),
    )
    def kill_9(self, batch: int, which: int, landed: bool) -> None:
        """One process dies; it starts again (the same worker of the same layout) over
        the same tables and directories while its siblings run on. ``landed``: the
        broker had taken its commits in flight without answering."""
        assert self.world is not None and self.shape is not None
        self.note_replayable()
        index = which % len(self.processes)
        dead = self.processes[index]
        kill(dead, landed=landed)
        self.record_commits()
        for lane in dead.source._lanes:
            self.replays[lane.partition] += 1
        self.processes[index] = build_process(
            self.world, self.shape, self.payloads(), batch, self.clock, dead.worker
        )

    @precondition(lambda self: self.running())
    @rule(batch=st.integers(1, 4) | st.integers(5, 16), which=st.integers(0, 2))
    def kill_9_after_a_write(self, batch: int, which: int) -> None:
        """A process dies just after its writer wrote, before the next commit: it
        replays what was written (the window effectively-once covers)."""
        self.writer_writes()
        self.kill_9(batch, which, False)

    @precondition(lambda self: bool(self.processes) and self.shape_spools())
    @rule(batch=st.integers(1, 16), workers=st.integers(0, 3), landed=st.booleans())
    def restart_with_other_workers(self, batch: int, workers: int, landed: bool) -> None:
        """Every worker is killed and the run starts again with another number of worker
        processes sharing the spool's ``dir`` (0: one process in ``dir`` itself): the
        segments no worker of the new layout reads are adopted by one of them (B114)."""
        assert self.world is not None and self.shape is not None
        self.note_replayable()
        for process in self.processes:
            kill(process, landed=landed)
        self.record_commits()
        for p in range(self.shape.partitions):
            self.replays[p] += 1
        self.processes = []
        self.start_layout(workers, batch)

    def shape_spools(self) -> bool:
        return self.shape is not None and self.shape.wrapper == "spool"

    def note_replayable(self) -> None:
        assert self.world is not None
        self.record_commits()
        ids = self.table_ids()
        committed = self.world.committed
        ahead = sum(
            1 for p, recs in self.records.items() for r in recs[committed.get(p, 0) :] if ids[r.id]
        )
        self.replayable = max(self.replayable, ahead)

    @precondition(lambda self: self.running())
    @rule()
    def settle(self) -> None:
        self.settle_all()

    # -- driving --------------------------------------------------------------------

    def turn(self) -> bool:
        """One loop turn of every worker's pipeline thread; False once a run failed."""
        for process in self.processes:
            if process.failed is not None:
                return False
            runtime = process.runtime
            try:
                runtime.step()
            except Exception as exc:  # as Pipeline.run() treats an error escaping a turn
                runtime.fail(f"unexpected error: {exc}")
            if self.shape is not None and self.shape.eager_writer:
                for sink in process.clickhouse:
                    sink.pump()
            failure = runtime.failure
            if failure is not None:
                process.failed = failure
                self.failures.append(failure)
                return False
        self.record_commits()
        return True

    def record_commits(self) -> None:
        """The broker's committed offsets (where a restart begins) per partition."""
        assert self.world is not None
        for process in self.processes:
            for lane, offset in process.source_handle.committed.items():
                self.world.committed[lane.partition] = offset

    def total(self) -> int:
        return sum(len(r) for r in self.records.values())

    def settle_all(self) -> None:
        """Progress (no wedge): within a bound of loop turns set by the records in play,
        everything is committed and written, or (``fail``) the run fails on a bad record.
        The destination accepts every write and the broker every commit meanwhile."""
        assert self.processes and self.shape is not None and self.world is not None
        # The destination accepts again: what the writer retries lands once its backoff
        # (and an open breaker's cool-down) has passed.
        self.world.refusals.refuse = self.world.refusals.lose = 0
        batch_turns = sum(len(r) for r in self.records.values()) + 1
        bound = 200 + 20 * batch_turns
        interval = max(self.shape.checkpoint, 2.0)
        for turn in range(bound):
            if self.done():
                break
            if not self.turn():
                return  # the failure is checked by the invariants
            if turn % 4 == 3:
                self.clock.advance(interval / 2)
                for process in self.processes:
                    if isinstance(process.source, LateCommitSource):
                        process.source.send()
                        process.source.answer(taken=True)
        else:
            raise AssertionError(
                f"no progress in {bound} loop turns (a wedge): committed "
                f"{dict(sorted(self.world_committed().items()))} of "
                f"{ {p: len(r) for p, r in self.records.items()} }; paused lanes "
                f"{sorted(str(lane) for p in self.processes for lane in p.runtime.paused)}; "
                f"budget {[(p.budget.used, p.budget.limit) for p in self.processes]} bytes"
            )
        self.check_complete()

    def world_committed(self) -> dict[int, int]:
        assert self.world is not None
        return self.world.committed

    def done(self) -> bool:
        committed = self.world_committed()
        if not all(committed.get(p, 0) >= len(recs) for p, recs in self.records.items()):
            return False
        # Under ``ack: spooled`` the commit passes rows still in the spool: done once
        # every good record also reached the table.
        if self.shape is not None and self.shape.spool_ack == "spooled":
            ids = self.table_ids()
            return all(ids[r.id] for recs in self.records.values() for r in recs if r.good)
        return True

    # -- the reference model --------------------------------------------------------

    def table_ids(self) -> Counter[int]:
        assert self.world is not None
        rows = self.client.query(f"SELECT id FROM {self.world.table}").result_rows
        return Counter(int(r[0]) for r in rows)

    def dead_lettered(self) -> Counter[tuple[int, int]]:
        assert self.world is not None
        found: Counter[tuple[int, int]] = Counter()
        for script in self.world.dead_letters:
            for row in list(script.rows):
                assert isinstance(row, dict)
                partition, offset = int(row["source_partition"]), int(row["source_offset"])
                rec = self.record_at(partition, offset)
                assert (
                    rec is not None and rec.payload.decode("utf-8", "replace") == row["payload"]
                ), f"a dead letter names {STREAM}[{partition}] offset {offset} but not its payload"
                found[partition, offset] += 1
        return found

    def copied_ids(self) -> set[int]:
        assert self.world is not None
        ids = set()
        for script in self.world.copies:
            for row in list(script.rows):
                if isinstance(row, dict) and isinstance(row.get("id"), int):
                    ids.add(row["id"])
        return ids

    def record_at(self, partition: int, offset: int) -> Rec | None:
        recs = self.records.get(partition, [])
        return recs[offset] if 0 <= offset < len(recs) else None

    @invariant()
    def custody_holds(self) -> None:
        if not self.processes or self.shape is None:
            return
        shape = self.shape
        ids = self.table_ids()
        # Under ``ack: spooled`` a commit may pass rows that are durably in a spool
        # segment (any worker's directory) and not yet in the table.
        spooled = (
            spooled_ids(self.world.spool_dir)
            if self.world is not None and shape.spool_ack == "spooled"
            else set()
        )
        good_ids = {r.id for recs in self.records.values() for r in recs if r.good}
        # Only good records reach the table (a bad value is refused, never stored wrong).
        stray = sorted(set(ids) - good_ids)
        assert not stray, f"rows in the table that are no good record's: {stray[:5]}"
        if shape.eo:
            twice = sorted(i for i, n in ids.items() if n > 1)
            assert not twice, f"effectively-once wrote rows twice: ids {twice[:5]}"
        letters = self.dead_lettered()
        for (partition, offset), count in letters.items():
            rec = self.record_at(partition, offset)
            assert rec is not None
            assert not rec.good, (
                f"the good record at {STREAM}[{partition}] offset {offset} was dead-lettered "
                "(another record's error charged to it)"
            )
            assert count <= 1 + self.replays[partition], (
                f"the bad record at {STREAM}[{partition}] offset {offset} was dead-lettered "
                f"{count} times"
            )
        copied = self.copied_ids() if shape.wrapper == "tee" else set()
        for partition, offset in self.world_committed().items():
            for rec in self.records[partition][:offset]:
                where = f"{STREAM}[{partition}] offset {rec.offset}"
                if rec.good:
                    assert ids[rec.id] or rec.id in spooled, (
                        f"committed past the good record at {where} (commit {offset}) "
                        "but it is not in the table"
                        + (" nor in a spool segment" if shape.spool_ack == "spooled" else "")
                    )
                    if shape.wrapper == "tee":
                        assert rec.id in copied, (
                            f"committed past the good record at {where} but the tee's "
                            "other branch does not have it"
                        )
                elif shape.policy is ErrorPolicy.FAIL:
                    raise AssertionError(
                        f"committed past the bad record at {where} under on_record_error: fail"
                    )
                elif shape.policy is ErrorPolicy.DEAD_LETTER:
                    assert letters[partition, rec.offset], (
                        f"committed past the bad record at {where} but it is not dead-lettered"
                    )
        for failure in self.failures:
            self.check_failure(failure)
        assert not self.errors.messages, f"spate logged an exception: {self.errors.messages[0]}"
        if shape.eo:
            self.check_intents()

    def check_intents(self) -> None:
        """A block intent is deleted only once the broker durably committed past its
        last row (B89): one deleted earlier is missing from a replay after a kill -9, and
        its rows are cut again under other tokens."""
        assert self.world is not None
        rows = self.client.query(
            "SELECT partition, first_offset, first_index, epoch, last_offset "
            f"FROM {self.world.state_table} FINAL WHERE first_offset >= 0"
        ).result_rows
        now = {(int(r[0]), int(r[1]), int(r[2]), int(r[3])): int(r[4]) for r in rows}
        committed = self.world_committed()
        for key, last in self.intents.items():
            if key in now:
                continue
            partition, first = key[0], key[1]
            durable = committed.get(partition, 0)
            assert last < durable, (
                f"the intent of the block {STREAM}[{partition}] offsets {first}..{last} was "
                f"deleted while the broker's committed offset is {durable}"
            )
        self.intents = now

    def check_failure(self, failure: str) -> None:
        assert self.shape is not None
        assert self.shape.policy is ErrorPolicy.FAIL, (
            f"the run failed under on_record_error: {self.shape.policy.value}: {failure}"
        )
        where = WHERE.search(failure)
        assert where is not None, f"the failure names no record: {failure}"
        partition, offset = int(where.group(1)), int(where.group(2))
        rec = self.record_at(partition, offset)
        assert rec is not None and not rec.good, (
            f"the failure names the good record at {STREAM}[{partition}] offset {offset} "
            f"(another record's error charged to it): {failure}"
        )

    def check_complete(self) -> None:
        """Every good record is in the destination (and the tee's other branch)."""
        assert self.shape is not None
        ids = self.table_ids()
        missing = [r for recs in self.records.values() for r in recs if r.good and not ids[r.id]]
        assert not missing, (
            f"{len(missing)} good records never reached the table, first at "
            f"{STREAM}[{missing[0].partition}] offset {missing[0].offset}"
        )
        if self.shape.wrapper == "tee":
            copied = self.copied_ids()
            lost = [
                r for recs in self.records.values() for r in recs if r.good and r.id not in copied
            ]
            assert not lost, f"{len(lost)} good records never reached the tee's other branch"
        if self.shape.policy is ErrorPolicy.DEAD_LETTER:
            letters = self.dead_lettered()
            unaccounted = [
                r
                for recs in self.records.values()
                for r in recs
                if not r.good and not letters[r.partition, r.offset]
            ]
            assert not unaccounted, (
                f"{len(unaccounted)} bad records never dead-lettered, first at "
                f"{STREAM}[{unaccounted[0].partition}] offset {unaccounted[0].offset}"
            )


@pytest.mark.parametrize("part", range(PARTS))
def test_custody_model_holds_where_features_meet(part: int) -> None:
    """B1, B2, B28, B35, B58, B71, B89, B114: custody across stacked tiers, tee,
    effectively-once, policies, budget, revocations, refused writes, late and refused
    commits, workers sharing a spool and kill -9, checked after every step.

    The example count is shared among :data:`PARTS` items (each draws its own random
    examples), so no item runs into the per-test timeout at the full count."""
    run_state_machine_as_test(
        CustodyMachine,
        settings=settings(
            max_examples=-(-EXAMPLES // PARTS),
            stateful_step_count=STEPS,
            deadline=None,
            suppress_health_check=list(HealthCheck),
            phases=[Phase.explicit, Phase.reuse, Phase.generate, Phase.target]
            + ([Phase.shrink] if SHRINK else []),
        ),
    )
