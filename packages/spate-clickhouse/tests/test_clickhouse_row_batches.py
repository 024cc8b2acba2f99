"""A source batch's rows handed to the ClickHouse sink at once (B95, B96).

The chain collects the sink's rows of one batch and the pool checks them per column,
going row by row only when a column check fails. These tests pin that path against the
per-row ``offer`` it replaces: the same written values, the same record errors with the
same reasons and counters, and a refusal in the middle of a batch resumed without loss
or duplication. The sink runs on the real pool and connector; only the replica writer is
a recorder of what each INSERT would send (``buffer.columns``).
"""

from __future__ import annotations

import datetime as dt
from decimal import Decimal
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry
from spate import AckStatus, AckToken, ErrorPolicy, FatalError, Lane, ManualClock
from spate.config import decode
from spate.errors import SinkError
from spate.flow._budget import InflightBudget
from spate.metrics import Meter
from spate.ops import Stalled, compile_chain
from spate.records import PayloadBatch
from spate.sink import PoolConfig, SinkPool, WriteBatch, takes_rows
from spate_clickhouse import ClickHouseSinkConfig
from spate_clickhouse._writer import ClickHouseConnector

LANE = Lane("orders", 0)
UTC = dt.UTC

COLUMNS = [
    {"i8": "Int8"},
    {"n32": "Nullable(Int32)"},
    {"u16": "UInt16"},
    {"f": "Float64"},
    {"s": "String"},
    {"ns": "Nullable(String)"},
    {"lc": "LowCardinality(String)"},
    {"b": "Bool"},
    {"d": "Date"},
    {"t": "DateTime"},
    {"t3": "DateTime64(3)"},
    {"dec": "Decimal(9, 2)"},
    {"e": "Enum8('a' = 1, 'b' = 2)"},
]
WIDTH = len(COLUMNS)


class _Recorder:
    """A replica writer that keeps the rows each INSERT would send."""

    endpoint = "recorder"

    def __init__(self, connector: ClickHouseConnector, written: list[tuple[Any, ...]]) -> None:
        self._connector = connector
        self._written = written

    def probe(self) -> None:
        return None

    def write(self, batch: WriteBatch) -> None:
        buffer: Any = batch.buffer
        encoder = buffer.encoder
        columns = buffer.columns(len(encoder.columns), encoder.binary_columns())
        assert all(len(c) == batch.rows for c in columns)
        self._written.extend(zip(*columns, strict=True))

    def close(self) -> None:
        return None


class _Connector(ClickHouseConnector):
    def __init__(self, config: ClickHouseSinkConfig, batches: bool) -> None:
        super().__init__(config, "ch")
        self.takes_rows = batches
        self.written: list[tuple[Any, ...]] = []

    def open_writer(self, shard: int, replica: int, endpoint: str) -> Any:
        return _Recorder(self, self.written)


def _pool(
    batches: bool,
    *,
    policy: ErrorPolicy = ErrorPolicy.SKIP,
    max_rows: int = 1000,
    max_per_shard: int = 2,
    validate: str = "off",
    meter: Meter | None = None,
    clock: ManualClock | None = None,
) -> tuple[SinkPool, _Connector]:
    config = decode(
        ClickHouseSinkConfig,
        {
            "table": "t",
            "columns": COLUMNS,
            "shards": [{"replicas": ["http://127.0.0.1:1"]}],
            "validate_schema": validate,
            "on_record_error": policy.value,
            "batch": {"max_rows": max_rows, "max_bytes": "1GiB", "linger": "1h"},
            "inflight": {"max_per_shard": max_per_shard},
        },
        "sinks.ch.clickhouse",
    )
    connector = _Connector(config, batches)
    pool = SinkPool(
        "ch",
        connector,
        shards=config.shards,
        pipeline="p",
        run_nonce="run1",
        meter=meter if meter is not None else Meter("p", CollectorRegistry()),
        clock=clock if clock is not None else ManualClock(),
        budget=InflightBudget(1 << 40),
        io_threads=0,
        config=PoolConfig.of(config),
    )
    pool.start()
    assert pool.takes_rows is batches
    return pool, connector


def good_row(n: int) -> tuple[Any, ...]:
    return (
        n % 100,
        None if n % 3 == 0 else n,
        n,
        n / 4,
        f"s{n}",
        None if n % 2 else f"ns{n}",
        "lc",
        n % 2 == 0,
        dt.date(2024, 1, 1) + dt.timedelta(days=n % 300),
        dt.datetime(2024, 1, 1, tzinfo=UTC) + dt.timedelta(seconds=n),
        dt.datetime(2024, 1, 1, tzinfo=UTC) + dt.timedelta(milliseconds=n),
        Decimal(n) / 100,
        "a" if n % 2 else "b",
    )


# Values each column may get instead of a good one: some in another form its coercer
# converts (still good), some it refuses (a record error for that row alone).
OTHER_VALUES: dict[int, list[Any]] = {
    0: [128, -129, "12", 3.0, 2.5, True, None, "x"],
    1: [2**31, "7", None, 1.5],
    2: [-1, 65536, 7.0, None, b"1"],
    3: [1, "2.5", None, "nan?", True],
    4: [b"bytes", b"\xff\xfe", None, 5],
    5: [b"\xff", None, 3],
    6: [None, b"lc", 1],
    7: [1, 0, "true", None, 2],
    8: [dt.datetime(2024, 1, 1, tzinfo=UTC), "2024-02-03", dt.date(1969, 1, 1), None, 5],
    9: [dt.datetime(2024, 1, 1), 1_700_000_000, dt.datetime(1960, 1, 1, tzinfo=UTC), None],
    10: [dt.datetime(2024, 1, 1), 1.5, "2024-01-01T00:00:00", dt.date(2024, 1, 1), None],
    11: [Decimal("1.005"), 3, "1.5", Decimal("1e10"), None],
    12: ["c", 1, 3, None],
}


def _rows(draw: st.DrawFn, count: int) -> list[object]:
    rows: list[object] = []
    for n in range(count):
        row = list(good_row(n))
        for column in draw(st.lists(st.integers(0, WIDTH - 1), max_size=2)):
            row[column] = draw(st.sampled_from(OTHER_VALUES[column]))
        shape = draw(st.sampled_from(["tuple", "tuple", "tuple", "list", "dict", "short"]))
        if shape == "list":
            rows.append(row)
        elif shape == "dict":
            names = [next(iter(c)) for c in COLUMNS]
            rows.append(dict(zip(names, row, strict=True)))
        elif shape == "short":
            rows.append(tuple(row[:-1]))
        else:
            rows.append(tuple(row))
    return rows


@st.composite
def row_batches(draw: st.DrawFn) -> list[object]:
    count = draw(st.integers(1, 40))
    if draw(st.booleans()):  # a batch of good rows only: the per-column path
        return [good_row(n) for n in range(count)]
    return _rows(draw, count)


def _per_row(pool: SinkPool, rows: list[object], ack: AckToken) -> list[tuple[int, str]]:
    bad: list[tuple[int, str]] = []
    for position, row in enumerate(rows):
        try:
            assert pool.offer(row, None, LANE, ack) is not None
        except SinkError as exc:
            bad.append((position, exc.reason))
    return bad


def _ack(n: int, status: list[AckStatus] | None = None) -> AckToken:
    held = status if status is not None else []
    return AckToken(LANE, 0, 0, n, n, lambda t: held.append(t.status))


def _record_errors(meter: Meter) -> float:
    """The sink's record errors, all shards."""
    return sum(
        sample.value
        for family in meter.registry.collect()
        for sample in family.samples
        if sample.name == "spate_sink_errors_total" and sample.labels["error_class"] == "record"
    )


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(row_batches())
def test_b95_a_batch_of_rows_is_written_and_refused_exactly_as_row_by_row(
    rows: list[object],
) -> None:
    """B95: same written values, same bad rows with the same reasons, same counters."""
    meter_each = Meter("p", CollectorRegistry())
    meter_batch = Meter("p", CollectorRegistry())
    each, each_connector = _pool(False, meter=meter_each)
    batch, batch_connector = _pool(True, meter=meter_batch)
    ack_each, ack_batch = _ack(len(rows)), _ack(len(rows))
    expected_bad = _per_row(each, rows, ack_each)
    prepared, bad = batch.prepare_rows(rows, [None] * len(rows), LANE)
    assert bad == expected_bad
    assert batch.offer_rows(prepared, LANE, ack_batch) is not None
    ack_each.release()
    ack_batch.release()
    assert each.flush(1e9) and batch.flush(1e9)
    assert batch_connector.written == each_connector.written
    assert len(batch_connector.written) == len(rows) - len(bad)
    assert _record_errors(meter_batch) == _record_errors(meter_each) == len(bad)
    assert each_connector.encoder().binary_columns() == batch_connector.encoder().binary_columns()


def test_b95_good_rows_keep_their_columns_and_are_not_pivoted_again() -> None:
    pool, connector = _pool(True)
    rows = [good_row(n) for n in range(50)]
    prepared, bad = pool.prepare_rows(rows, [None] * 50, LANE)  # type: ignore[arg-type]
    assert bad == []
    ((_, block),) = prepared.parts
    assert block.columns[4] == [f"s{n}" for n in range(50)]
    assert block.nbytes > 0
    ack = _ack(50)
    assert pool.offer_rows(prepared, LANE, ack) is not None
    ack.release()
    assert pool.flush(1e9)
    assert connector.written == [connector.encoder().encode(row)[0] for row in rows]


def test_b20_full_checks_the_first_row_of_the_first_batch_fatally() -> None:
    """B20: under ``validate_schema: full`` the first row is checked as a whole, fatally,
    on the batch path too; later bad values are one record's error (B28)."""
    pool, _ = _pool(True, validate="full")
    bad = list(good_row(1))
    bad[0] = 500
    with pytest.raises(SinkError, match="first row does not fit") as raised:
        pool.prepare_rows([tuple(bad), good_row(2)], [None, None], LANE)
    assert raised.value.error_class.value == "fatal"
    _, refused = pool.prepare_rows([tuple(bad), good_row(2)], [None, None], LANE)
    assert [position for position, _ in refused] == [0]


def _by_number(rows: list[tuple[Any, ...]]) -> list[tuple[Any, ...]]:
    return sorted(rows, key=lambda row: row[2])  # u16 is the row's number


def _written(connector: _Connector, rows: list[object]) -> list[tuple[Any, ...]]:
    """``rows`` in written form, each once."""
    return _by_number([connector.encoder().encode(row)[0] for row in rows])


def _chain_batch(count: int) -> PayloadBatch:
    views = [memoryview(str(n).encode()) for n in range(count)]
    return PayloadBatch(LANE, list(range(count)), views, [None] * count, [0] * count, count)


def _chain(pool: SinkPool, rows: list[object], meter: Meter, deser: Any = None) -> Any:
    def chains(ctx: Any) -> Any:
        return ctx.chain().map(lambda payload: rows[int(payload)]).sink()

    return compile_chain(chains, deserializer=deser, sinks={"ch": pool}, meter=meter, pipeline="p")


def _ops(meter: Meter, name: str, **labels: str) -> float:
    value = meter.registry.get_sample_value(
        name, {"pipeline": "p", "component": "chain", "component_type": "operators", **labels}
    )
    return 0.0 if value is None else value


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(row_batches())
def test_b95_the_chain_writes_the_same_rows_and_counts_the_same_drops(
    rows: list[object],
) -> None:
    """B95: a chain over the batching sink and one over a row-by-row sink agree."""
    outcomes = []
    for batches in (False, True):
        meter = Meter("p", CollectorRegistry())
        pool, connector = _pool(batches, meter=meter)
        processor = _chain(pool, rows, meter)
        assert processor.rt.batched == (batches,)
        status: list[AckStatus] = []
        ack = _ack(len(rows), status)
        assert processor.process(_chain_batch(len(rows)), ack) is None
        ack.release()
        assert pool.flush(1e9)
        outcomes.append(
            (
                connector.written,
                _ops(meter, "spate_operator_dropped_total", reason="record_error"),
                _ops(meter, "spate_operator_records_out_total", sink="ch"),
                _record_errors(meter),
                status,
            )
        )
    assert outcomes[0] == outcomes[1]


def test_b95_a_bad_row_under_fail_fails_the_batch_naming_its_record() -> None:
    pool, _ = _pool(True, policy=ErrorPolicy.FAIL)
    rows: list[object] = [good_row(n) for n in range(5)]
    bad = list(good_row(3))
    bad[2] = -1
    rows[3] = tuple(bad)
    processor = _chain(pool, rows, Meter("p", CollectorRegistry()))
    with pytest.raises(FatalError, match=r"orders\[0\] offset 3.*column u16"):
        processor.process(_chain_batch(5), _ack(5))


def _drain(processor: Any, batch: PayloadBatch, ack: AckToken, pool: SinkPool) -> list[Stalled]:
    stalls: list[Stalled] = []
    resume = None
    for _ in range(100):
        result = processor.process(batch, ack, resume)
        if result is None:
            return stalls
        stalls.append(result)
        pool.pump()
        resume = result.cursor
    raise AssertionError("the batch never finished")


def test_b96_a_refused_batch_resumes_without_loss_or_duplication() -> None:
    """B96: the sink refuses a batch's rows while its queue is full; the resume offers
    the same prepared rows once, and every row is written exactly once."""
    pool, connector = _pool(True, max_rows=4, max_per_shard=1)
    rows: list[object] = [good_row(n) for n in range(40)]
    processor = _chain(pool, rows, Meter("p", CollectorRegistry()))
    status: list[AckStatus] = []
    stalls: list[Stalled] = []
    for first in range(0, 40, 8):
        batch = PayloadBatch(
            LANE,
            list(range(first, first + 8)),
            [memoryview(str(n).encode()) for n in range(first, first + 8)],
            [None] * 8,
            [0] * 8,
            first + 8,
        )
        ack = AckToken(LANE, 0, first, first + 8, 8, lambda t: status.append(t.status))
        stalls += _drain(processor, batch, ack, pool)
        ack.release()
    assert pool.flush(1e9)
    assert stalls and all(s.reason == "sink_full" and s.sink == "ch" for s in stalls)
    assert _by_number(connector.written) == _written(connector, rows)
    assert status == [AckStatus.DELIVERED] * 5


class _NotReadyOnce:
    """Decodes ``b"n"`` to ``n``; record 5 is not ready the first time."""

    many = False

    def __init__(self) -> None:
        self.waited = False

    def deserialize(self, payload: memoryview) -> object:
        from spate.errors import DeserError, DeserErrorKind

        n = int(bytes(payload))
        if n == 5 and not self.waited:
            self.waited = True
            raise DeserError("registry unreachable", DeserErrorKind.NOT_READY)
        return n


def test_b96_rows_before_a_not_ready_record_are_offered_once_even_when_refused() -> None:
    """B96: the loop stalls at a record that is not ready; the rows before it go to the
    sink first (refused, held, offered again), then the batch resumes at that record."""
    pool, connector = _pool(True, max_rows=2, max_per_shard=1)
    rows: list[object] = [good_row(n) for n in range(10)]
    first = [good_row(100 + n) for n in range(3)]
    meter = Meter("p", CollectorRegistry())
    warm = _chain(pool, first, meter)
    warm_ack = _ack(3)
    assert warm.process(_chain_batch(3), warm_ack) is None  # fills the queue
    warm_ack.release()
    processor = _chain(pool, rows, meter, deser=_NotReadyOnce())
    status: list[AckStatus] = []
    ack = _ack(10, status)
    stalls = _drain(processor, _chain_batch(10), ack, pool)
    ack.release()
    assert pool.flush(1e9)
    assert [s.reason for s in stalls[:2]] == ["sink_full", "not_ready"]
    assert _by_number(connector.written) == _written(connector, [*rows, *first])
    assert status == [AckStatus.DELIVERED]


def test_b95_sinks_without_the_batch_methods_keep_per_row_offers() -> None:
    from spate.testing import scripted_pool

    scripted, _ = scripted_pool()
    assert not takes_rows(scripted)
    eo_less, _ = _pool(False)
    assert not takes_rows(eo_less)
    batching, _ = _pool(True)
    assert takes_rows(batching)


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(row_batches())
def test_b95_a_split_hands_each_sink_its_rows_as_row_by_row_sinks_get_them(
    rows: list[object],
) -> None:
    """B95: a split to two batching sinks (and one row-by-row sink beside them) stores
    in each what a split to row-by-row sinks stores, with the same drops."""

    def chains(ctx: Any) -> Any:
        even, odd, every = ctx.sink("even"), ctx.sink("odd"), ctx.sink("every")

        def route(n: int, out: Any) -> None:
            out.emit(even if n % 2 == 0 else odd, rows[n])
            if n % 3 == 0:
                out.emit(every, rows[n])

        return ctx.chain().map(int).split().route(route)

    outcomes = []
    for batches in (False, True):
        meter = Meter("p", CollectorRegistry())
        pools = {
            "even": _pool(batches, meter=meter),
            "odd": _pool(batches, meter=meter),
            "every": _pool(False, meter=meter),
        }
        processor = compile_chain(
            chains,
            deserializer=None,
            sinks={name: pool for name, (pool, _) in pools.items()},
            meter=meter,
            pipeline="p",
        )
        assert processor.rt.batched == (batches, batches, False)
        status: list[AckStatus] = []
        ack = _ack(len(rows), status)
        assert processor.process(_chain_batch(len(rows)), ack) is None
        ack.release()
        for pool, _ in pools.values():
            assert pool.flush(1e9)
        outcomes.append(
            (
                {name: connector.written for name, (_, connector) in pools.items()},
                _ops(meter, "spate_operator_dropped_total", reason="record_error"),
                [_ops(meter, "spate_operator_records_out_total", sink=name) for name in pools],
                status,
            )
        )
    assert outcomes[0] == outcomes[1]
