"""Rows a destination refuses at write time, charged to their own records (B245, B247).

A scripted connector that is a ``RowRefusingConnector`` writes every row of a batch but
those a predicate refuses, and ends the write in ``RowsRefused``. The pool, bound to a
``HeldErrors`` as the chain binds it, charges each refused row to its own record (source
batch, index, ack) on the pipeline thread and settles the batch only once every one is
charged; a dead letter refused for now is offered again first; a policy that fails the
record fails the batch; rows whose records are not known fail it too.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
from spate import AckStatus, AckToken, FatalError, Lane, ManualClock, SinkError
from spate.metrics import Meter
from spate.records import ROW_COLUMN, PayloadBatch
from spate.sink import (
    BatchConfig,
    PoolConfig,
    RefusedRow,
    RowError,
    RowRefusingConnector,
    RowsRefused,
    ShardConfig,
    SinkPool,
    WriteBatch,
)
from spate.sink._held import HeldErrors, Origin, RecordCell
from spate.testing import AckRecorder
from spate.testing._frames import ScriptedFrameEndpoints
from spate.testing._scripted import ScriptedEndpoints, ScriptedWriter, _UnboundedBudget

LANE = Lane("t", 0)


class RefusingEndpoints(ScriptedEndpoints):
    """Writes every row but those ``refuse`` names, which end the write in RowsRefused."""

    def __init__(self, clock: ManualClock, refuse: Callable[[object], bool]) -> None:
        super().__init__(clock)
        self.refuse = refuse
        self.refuses_rows = True

    def open_writer(self, shard: int, replica: int, endpoint: str) -> ScriptedWriter:
        return RefusingWriter(self, endpoint)


class RefusingFrameEndpoints(ScriptedFrameEndpoints):
    """The frame-taking scripted connector, refusing at write time as above."""

    def __init__(self, clock: ManualClock, refuse: Callable[[object], bool]) -> None:
        super().__init__(clock)
        self.refuse = refuse
        self.refuses_rows = True

    def open_writer(self, shard: int, replica: int, endpoint: str) -> ScriptedWriter:
        return RefusingWriter(self, endpoint)


class RefusingWriter(ScriptedWriter):
    def write(self, batch: WriteBatch) -> None:
        super().write(batch)
        rows = getattr(batch.buffer, "rows", [])
        refused = tuple(
            RefusedRow(i, f"refused {row!r} [code 469]", (("code", "469"),))
            for i, row in enumerate(rows)
            if self._endpoints.refuse(row)  # type: ignore[attr-defined]
        )
        if refused:
            raise RowsRefused("some rows refused", refused)


class Charges:
    """The chain's side: what each charge got, and a dead-letter sink that may be full."""

    def __init__(self) -> None:
        self.cell = RecordCell()
        self.charged: list[tuple[Origin, SinkError, AckToken]] = []
        self.full = False
        self.fail = False
        self.letters: list[tuple[Origin, AckToken]] = []
        """Dead letters written; each holds its ack under ``("letter", index)``."""

    def report(self, origin: Origin, exc: SinkError, ack: AckToken) -> object | None:
        if self.fail:
            raise FatalError("sink", f"on_record_error is fail: {exc.reason}")
        self.charged.append((origin, exc, ack))
        if self.full:
            return ("letter", origin)
        self._write(origin, ack)
        return None

    def again(self, row: object, origin: Origin, ack: AckToken) -> bool:
        if self.full:
            return False
        self._write(origin, ack)
        return True

    def _write(self, origin: Origin, ack: AckToken) -> None:
        ack.retain(("letter", origin[1]))  # held until the letter is written (B71)
        self.letters.append((origin, ack))

    def written(self) -> None:
        """The dead-letter sink wrote every letter: it releases their acks."""
        for origin, ack in self.letters:
            ack.release(holder=("letter", origin[1]))

    def errors(self) -> HeldErrors:
        return HeldErrors(self.cell, self.report, self.again)


def _pool(
    refuse: Callable[[object], bool],
    refuses_rows: bool = True,
    frames: bool = False,
    max_rows: int = 100,
) -> tuple[SinkPool, RefusingEndpoints | RefusingFrameEndpoints, Charges]:
    clock = ManualClock()
    endpoints: RefusingEndpoints | RefusingFrameEndpoints = (
        RefusingFrameEndpoints(clock, refuse) if frames else RefusingEndpoints(clock, refuse)
    )
    endpoints.refuses_rows = refuses_rows
    assert isinstance(endpoints, RowRefusingConnector)
    pool = SinkPool(
        "sink",
        endpoints,
        shards=[ShardConfig(replicas=("s0",))],
        pipeline="test",
        run_nonce="run1",
        meter=Meter("test"),
        clock=clock,
        budget=_UnboundedBudget(),
        io_threads=0,
        config=PoolConfig(batch=BatchConfig(max_rows=max_rows)),
    )
    charges = Charges()
    assert pool.bind_held_errors(charges.errors()) is refuses_rows
    pool.start()
    return pool, endpoints, charges


def _batch(first: int, count: int) -> PayloadBatch:
    return PayloadBatch(
        LANE,
        list(range(first, first + count)),
        [memoryview(b"v%d" % i) for i in range(first, first + count)],
        [b"k%d" % i for i in range(first, first + count)],
        [0] * count,
        first + count,
    )


def _offer(pool: SinkPool, charges: Charges, source: PayloadBatch, ack: AckToken) -> None:
    charges.cell.batch = source
    for index, offset in enumerate(source.offsets):
        charges.cell.index = index
        pool.offer(offset, source.keys[index], LANE, ack)
    ack.release()


def test_b245_a_refused_row_is_charged_to_its_own_record_and_ack() -> None:
    pool, endpoints, charges = _pool(lambda row: row in (3, 12))
    acks = AckRecorder(LANE)
    first, second = _batch(0, 10), _batch(10, 10)
    ack1, ack2 = acks.new(10), acks.new(10)
    _offer(pool, charges, first, ack1)
    _offer(pool, charges, second, ack2)
    pool.tick()
    assert endpoints.rows() == list(range(20))  # the scripted writer records the attempt
    charged = [(origin[0], origin[1], exc.reason, ack) for origin, exc, ack in charges.charged]
    assert charged == [
        (first, 3, "refused 3 [code 469]", ack1),
        (second, 2, "refused 12 [code 469]", ack2),
    ]
    assert all(isinstance(exc, RowError) for _, exc, _ in charges.charged)
    assert charges.charged[0][1].fields == (("code", "469"),)  # type: ignore[attr-defined]
    # The batch is settled; the acks wait for the dead letters the sink holds (B71).
    assert acks.status == {}
    charges.written()
    assert acks.status == {1: AckStatus.DELIVERED, 2: AckStatus.DELIVERED}


def test_b245_a_full_dead_letter_sink_holds_the_batch_until_it_takes_the_letter() -> None:
    pool, _endpoints, charges = _pool(lambda row: row in (1, 2))
    acks = AckRecorder(LANE)
    ack = acks.new(5)
    _offer(pool, charges, _batch(0, 5), ack)
    charges.full = True
    pool.tick()
    assert len(charges.charged) == 1  # the first letter waits; the second is not charged
    assert ack.status is AckStatus.PENDING
    assert pool.pending_rows() == 0
    assert pool.flush(pool_deadline(pool)) is False  # the batch is not settled yet
    assert ack.status is AckStatus.PENDING
    charges.full = False
    pool.tick()
    assert [origin[1] for origin, _ in charges.letters] == [1, 2]
    charges.written()
    assert acks.status == {1: AckStatus.DELIVERED}
    assert pool.flush(pool_deadline(pool)) is True


def test_b245_a_frame_cut_into_batches_charges_each_refused_row_to_its_record() -> None:
    """The columnar path: the frame's rows name their records (record 3 was dropped by
    the chain); the frame is cut at ``max_rows`` into three batches and each refused
    row is charged to its own record, whatever batch it ended in."""
    pl = pytest.importorskip("polars")
    pool, endpoints, charges = _pool(lambda row: row[0] in (50, 90), frames=True, max_rows=4)  # type: ignore[index]
    acks = AckRecorder(LANE)
    source = _batch(0, 10)
    records = [0, 1, 2, 4, 5, 6, 7, 8, 9]
    df = pl.DataFrame({"n": [r * 10 for r in records], ROW_COLUMN: records})
    ack = acks.new(10)
    charges.cell.batch = source
    prepared, bad = pool.prepare_frame(df)
    assert bad == []
    pool.offer_frame(prepared, None, LANE, ack)
    ack.release()
    pool.tick()
    assert [len(w.rows) for w in endpoints.written] == [4, 4, 1]
    assert [(origin[0], origin[1], held) for origin, _exc, held in charges.charged] == [
        (source, 5, ack),
        (source, 9, ack),
    ]
    charges.written()
    assert acks.status == {1: AckStatus.DELIVERED}


def pool_deadline(pool: SinkPool) -> float:
    return pool._clock.monotonic() + 0.05


def test_b247_a_policy_that_fails_the_record_fails_the_batch() -> None:
    pool, _endpoints, charges = _pool(lambda row: row == 4)
    acks = AckRecorder(LANE)
    ack = acks.new(6)
    _offer(pool, charges, _batch(0, 6), ack)
    charges.fail = True
    with pytest.raises(FatalError, match="on_record_error is fail"):
        pool.tick()
    assert acks.status == {1: AckStatus.FAILED}


def test_b247_rows_whose_records_are_not_known_fail_their_batch() -> None:
    pool, _endpoints, charges = _pool(lambda row: row == 2)
    acks = AckRecorder(LANE)
    ack = acks.new(4)
    for row in range(4):  # offered without a record (outside a chain)
        pool.offer(row, None, LANE, ack)
    ack.release()
    pool.tick()
    assert charges.charged == []
    assert acks.status == {1: AckStatus.FAILED}


def test_b249_a_connector_that_does_not_refuse_rows_keeps_no_records() -> None:
    """Without ``refuses_rows`` the pool binds nothing and its batches keep no records;
    a ``RowsRefused`` from such a writer fails its batch (nothing can be charged)."""
    pool, _endpoints, charges = _pool(lambda row: row == 1, refuses_rows=False)
    acks = AckRecorder(LANE)
    ack = acks.new(3)
    _offer(pool, charges, _batch(0, 3), ack)
    assert pool.pending_rows() == 3
    assert pool._admission.errors is None
    pool.tick()
    assert charges.charged == []
    assert acks.status == {1: AckStatus.FAILED}
