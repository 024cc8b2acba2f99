"""A sealed block cut into inserts the table's partitions allow, late rows set apart
(B240-B244; docs/adr/0022-partition-aware-blocks-and-late-data.md).

:class:`BlockPlanner` turns one sealed block into :class:`Piece` s, each one insert:

- With a partition key the client can compute (:mod:`spate_clickhouse._partition`), the
  block's distinct partitions are numbered in order of first appearance and taken
  ``max_partitions_per_insert_block`` at a time; piece ``i`` of ``n`` holds the rows of
  its partitions in block order, with the dedup token ``{token}:p{i}/{n}`` (B240). A
  block within the limit is one insert with the block's own token, as before.
- With ``late_data``, the rows whose partition ended more than ``after`` before the
  newest row of the block go to the ``late_data`` sink's table, cut the same way, with
  tokens ``{token}:late:p{i}/{n}`` (B242).
- With any other key, :func:`halving` splits an insert the server refuses with
  ``TOO_MANY_PARTS`` (code 252) "Too many partitions for single INSERT block" in
  halves, ``{piece token}:{start}-{stop}``, down to inserts it takes (B241). These are
  the tokens :mod:`spate_clickhouse._isolate` gives the same ranges, split at the same
  middles: when a half is refused for a value of some row after the other half landed,
  the isolation that follows sends the landed half again under the same token, and
  ClickHouse drops it.

Everything is a function of the block's rows and token: under ``effectively_once`` a
replay rebuilds the same block from its intent, hence the same pieces with the same
tokens, and ClickHouse drops the pieces that had landed (B244). The batch is written —
and its acks settle — only when every piece is; a failed piece fails the batch, whose
retry sends the pieces again under the same tokens, so offsets never pass an unwritten
row.

Does not own: the inserts themselves or the isolation of refused rows
(:mod:`spate_clickhouse._writer`, :mod:`spate_clickhouse._isolate`), which run inside
each piece.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from spate.errors import ErrorClass, SinkError

from spate_clickhouse._isolate import Insert, sub_token
from spate_clickhouse._partition import PartitionKey, parse_key, split_terms

if TYPE_CHECKING:
    import pyarrow as pa
    from clickhouse_connect.driver.client import Client
    from spate.metrics import CounterSeries as Counter
    from spate.metrics import Meter

    from spate_clickhouse._types import ChType

logger = logging.getLogger(__name__)

__all__ = [
    "TOO_MANY_PARTITIONS",
    "BlockPlanner",
    "Columns",
    "LateTable",
    "Partitioning",
    "Piece",
    "TooManyPartitions",
    "halving",
    "too_many_partitions",
]

TOO_MANY_PARTS = 252
"""The server's code for both "Too many parts" and "Too many partitions for single INSERT
block" (``ErrorCodes::TOO_MANY_PARTS``; the messages tell them apart)."""
TOO_MANY_PARTITIONS = "Too many partitions for single INSERT block"
"""How the server's message of a block spanning too many partitions begins."""

Columns = Callable[[tuple[str, ...]], Mapping[str, "pa.Array | pa.ChunkedArray"]]
"""The block's columns of these names as Arrow arrays (asked only when needed)."""


def too_many_partitions(code: int | None, message: str) -> bool:
    """Whether a server error is a block spanning too many partitions (B241)."""
    return code == TOO_MANY_PARTS and TOO_MANY_PARTITIONS.lower() in message.lower()


class TooManyPartitions(Exception):
    """An insert the server refused for spanning too many partitions (raised by the
    insert; :func:`halving` splits it)."""

    def __init__(self, error: SinkError) -> None:
        super().__init__(error.reason)
        self.error = error


@dataclass(frozen=True, slots=True)
class Piece:
    """One insert of a block: its rows (indexes into the block, in block order; None for
    the whole block), its dedup token, and whether it goes to the ``late_data`` table."""

    rows: list[int] | None
    token: str
    late: bool = False
    partitions: int = 0
    """The table partitions the piece writes — one part each, and one entry each in the
    table's deduplication window (B345); 0 when the sink cannot compute them."""

    def size(self, block_rows: int) -> int:
        return block_rows if self.rows is None else len(self.rows)


@dataclass(frozen=True, slots=True)
class BlockPlanner:
    """How blocks of one sink are cut: the table's key, the limit, the late horizon."""

    key: PartitionKey | None
    limit: int
    """``max_partitions_per_insert_block``; 0: no limit (one insert per block)."""
    late_after: float | None = None
    """``late_data.after`` in seconds; None without ``late_data``."""

    def pieces(self, token: str, rows: int, columns: Columns) -> list[Piece]:
        """The inserts of a block of ``rows`` rows whose token is ``token``. Worker
        thread; reads only the key's columns."""
        key = self.key
        if key is None or rows == 0:
            return [Piece(None, token)]
        arrays = columns(key.columns)
        late = self._late(key, arrays)
        if late is None:
            ids, count = key.ids(arrays)
            return self._cut(None, ids, count, token) or [Piece(None, token, False, count)]
        on_time, late_rows = late
        pieces: list[Piece] = []
        for chosen, prefix, is_late in (
            (on_time, token, False),
            (late_rows, f"{token}:late", True),
        ):
            if not chosen:
                continue
            taken = {name: _take(array, chosen) for name, array in arrays.items()}
            ids, count = key.ids(taken)
            cut = self._cut(chosen, ids, count, prefix) or [Piece(chosen, prefix, False, count)]
            pieces.extend(Piece(p.rows, p.token, is_late, p.partitions) for p in cut)
        return pieces

    def _late(
        self, key: PartitionKey, arrays: Mapping[str, pa.Array | pa.ChunkedArray]
    ) -> tuple[list[int], list[int]] | None:
        """``(on-time rows, late rows)`` when some row is late, else None (B242)."""
        import pyarrow.compute as pc

        term = key.time_term
        if self.late_after is None or term is None:
            return None
        ends, seconds = term.spans(arrays[term.column])
        newest = pc.max(seconds).as_py()
        if newest is None:
            return None
        horizon = newest - int(self.late_after)
        late = pc.fill_null(pc.less_equal(ends, horizon), False)
        if not pc.any(late).as_py():
            return None
        late_rows = pc.indices_nonzero(late).to_pylist()
        on_time = pc.indices_nonzero(pc.invert(late)).to_pylist()
        return on_time, late_rows

    def _cut(
        self, base: list[int] | None, ids: pa.Array, count: int, token: str
    ) -> list[Piece] | None:
        """Pieces of at most ``limit`` partitions each, or None when one insert holds them."""
        import pyarrow as pa
        import pyarrow.compute as pc

        if self.limit <= 0 or count <= self.limit:
            return None
        n = math.ceil(count / self.limit)
        groups = pc.divide(ids, pa.scalar(self.limit, pa.int64()))
        pieces: list[Piece] = []
        for i in range(n):
            positions = pc.indices_nonzero(pc.equal(groups, i)).to_pylist()
            rows = positions if base is None else [base[p] for p in positions]
            taken = min(self.limit, count - i * self.limit)
            pieces.append(Piece(rows, f"{token}:p{i}/{n}", False, taken))
        return pieces


def _take(array: pa.Array | pa.ChunkedArray, rows: list[int]) -> pa.Array | pa.ChunkedArray:
    return array.take(rows)


def halving(insert: Insert, token: str, split: Callable[[], None]) -> Insert:
    """``insert`` that splits a range the server refuses for spanning too many partitions
    in halves, recursively (B241): rows ``[a, b)`` of the piece whose token is ``token``
    go as ``{token}:{a}-{b}`` (:func:`sub_token`, as isolation names the same range).
    ``split`` is called once per split (a metric). A single
    row still refused raises the server's error."""

    def run(start: int, stop: int, range_token: str) -> None:
        try:
            insert(start, stop, range_token)
        except TooManyPartitions as exc:
            if stop - start <= 1:
                raise exc.error from None
            middle = (start + stop) // 2
            split()
            run(start, middle, sub_token(token, start, middle))
            run(middle, stop, sub_token(token, middle, stop))

    return run


_KEY_SQL = (
    "SELECT partition_key, timezone(), engine FROM system.tables "
    "WHERE database = {db:String} AND name = {table:String}"
)


@dataclass(frozen=True, slots=True)
class LateTable:
    """Where late rows go: the ``late_data`` sink's table, on this sink's servers."""

    sink: str
    database: str
    table: str
    settings: Callable[[str], dict[str, object]]
    """The target sink's insert settings for a token (its own passthrough settings)."""

    @property
    def qualified(self) -> str:
        return f"{self.database}.{self.table}" if self.database else self.table


class Partitioning:
    """One sink's partition-aware cutting: the planner learnt at start, the late table,
    and their metrics. Shared by the sink's writers (one per replica)."""

    def __init__(self, name: str, limit: int, late_after: float | None, late: LateTable | None):
        self.name = name
        self.planner = BlockPlanner(None, limit, late_after)
        self.late = late
        self.expression = ""
        """The table's ``PARTITION BY`` as the server reported it ('' before the probe)."""
        self.engine = ""
        """The table's engine as the server reported it ('' before the probe)."""
        self.late_key: PartitionKey | None = None
        self.late_expression: str | None = None
        """The ``late_data`` table's ``PARTITION BY`` ('' for none; None until learnt by
        :meth:`learn_late`) and its key when the client can compute it (B347)."""
        self._split: Counter | None = None
        self._late_rows: Counter | None = None
        self._warned = False

    def bind_meter(self, meter: Meter, component_type: str) -> None:
        """Count extra inserts and late rows in ``meter``."""
        from spate.metrics import names

        self._split = meter.counter(
            names.SINK_PARTITION_INSERTS, component=self.name, component_type=component_type
        )
        if self.late is not None:
            self._late_rows = meter.counter(
                names.SINK_LATE_ROWS,
                component=self.name,
                component_type=component_type,
                table=self.late.qualified,
            )

    def learn(self, client: Client, database: str, table: str, types: Mapping[str, ChType]) -> None:
        """Read the table's partition key (B240). Probe (start-up), blocks. ``types``:
        the sink's columns. Raises a fatal ``SinkError`` naming ``late_data`` when it
        needs a time-based key the table does not have (B242)."""
        if not database:
            database = str(client.command("SELECT currentDatabase()"))
        rows = client.query(_KEY_SQL, parameters={"db": database, "table": table}).result_rows
        if not rows:
            return
        expression, timezone = str(rows[0][0]), str(rows[0][1])
        key = parse_key(expression, types, timezone)
        self.expression = expression
        self.engine = str(rows[0][2])
        self.planner = BlockPlanner(key, self.planner.limit, self.planner.late_after)
        if self.planner.late_after is not None and (key is None or key.time_term is None):
            raise SinkError(
                f"sink {self.name}: {self.name}.late_data needs a table partitioned by time "
                f"(toYYYYMM, toYYYYMMDD, toDate or toStartOfHour of a column the sink "
                f"writes, or such a column itself); {database}.{table} is partitioned by "
                f"{expression or 'nothing'!r}",
                ErrorClass.FATAL,
            )
        logger.info(
            "sink %s: %s.%s is partitioned by %s (%s)",
            self.name,
            database,
            table,
            expression or "nothing",
            "computed per row" if key is not None else "blocks split when refused",
            extra={"component": self.name},
        )

    def learn_late(self, client: Client, database: str, types: Mapping[str, ChType]) -> None:
        """Read the ``late_data`` table's partition key (B347); ``database`` is this
        sink's, for a late table that names none. Blocks."""
        late = self.late
        if late is None:
            return
        database = late.database or database
        if not database:
            database = str(client.command("SELECT currentDatabase()"))
        found = client.query(_KEY_SQL, parameters={"db": database, "table": late.table})
        rows = found.result_rows
        expression, timezone = (str(rows[0][0]), str(rows[0][1])) if rows else ("", "UTC")
        partitioned = bool(split_terms(expression))  # ``tuple()``: no partitions
        self.late_key = parse_key(expression, types, timezone) if partitioned else None
        self.late_expression = expression if partitioned else ""

    def late_parts(self, pieces: list[Piece], columns: Columns) -> int | None:
        """The parts a block's late pieces write into the ``late_data`` table — one per
        piece into a table without partitions, else each piece's partitions under that
        table's own key; None when that key cannot be computed (B347). Needs
        :meth:`learn_late` first."""
        late = [p for p in pieces if p.late]
        if not late or not self.late_expression:
            return len(late)
        key = self.late_key
        if key is None:
            return None
        arrays = columns(key.columns)
        try:
            return sum(
                key.ids({n: _take(arrays[n], p.rows or []) for n in key.columns})[1] for p in late
            )
        except (TypeError, ValueError, ArithmeticError, NotImplementedError):
            return None

    def pieces(self, token: str, rows: int, columns: Columns) -> list[Piece]:
        """The inserts of one block (see :class:`BlockPlanner`). Worker thread."""
        try:
            pieces = self.planner.pieces(token, rows, columns)
        except (TypeError, ValueError, ArithmeticError, NotImplementedError) as exc:
            # Values the key's functions cannot read (pyarrow's errors are ValueErrors and
            # TypeErrors): the block goes whole, split in halves if the server refuses it.
            if not self._warned:
                self._warned = True
                logger.warning(
                    "sink %s: cannot compute the partitions of a block (%s); such blocks "
                    "are sent whole and split when refused",
                    self.name,
                    exc,
                    extra={"component": self.name},
                )
            return [Piece(None, token)]
        if len(pieces) > 1 and self._split is not None:
            self._split.inc(len(pieces) - 1)
        return pieces

    def halving(self, insert: Insert, token: str) -> Insert:
        """``insert`` split in halves when refused for too many partitions (B241)."""
        return halving(insert, token, self._count_split)

    def _count_split(self) -> None:
        if self._split is not None:
            self._split.inc()

    def written(self, pieces: list[Piece], rows: int) -> None:
        """Count the late rows of a block once every piece is written."""
        if self._late_rows is None:
            return
        late = sum(p.size(rows) for p in pieces if p.late)
        if late:
            self._late_rows.inc(late)
