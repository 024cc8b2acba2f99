"""Fakes for the columnar path: a frame-taking connector and a frame deserializer.

For connector authors and the framework's own tests that drive the real frame processor
(:func:`spate.ops.compile_chain` with frame chains) and the real
:class:`~spate.sink.SinkPool` without a destination:

* :class:`IntFrameDeserializer` decodes payloads ``b"<n>"`` into one polars frame with
  an ``n`` column (and the ``__spate_row`` column every frame carries); ``b"x"`` is a
  deserializer record error;
* :class:`ScriptedFrameEndpoints` are :class:`~spate.testing.ScriptedEndpoints` whose
  connector takes frames (a :class:`~spate.sink.FrameConnector`): ``prepare_frame``
  makes an Arrow table, refusing by position the rows whose ``bad`` column is true or
  whose ``n`` equals :attr:`ScriptedFrameEndpoints.bad`; its buffers are
  :class:`ArrowTableBuffer` s, and every write attempt records its rows as tuples.

polars and pyarrow (``spate[columnar]``) are imported when a frame is first made.
"""

from __future__ import annotations

from typing import Any

from spate._clock import Clock
from spate.errors import DeserError, ErrorPolicy
from spate.records import ROW_COLUMN
from spate.testing._scripted import ScriptedEndpoints


class ArrowTableBuffer:
    """A pool buffer holding the Arrow tables appended to it (a ``FrameBuffer``)."""

    def __init__(self) -> None:
        self.tables: list[Any] = []

    @property
    def rows(self) -> list[tuple[Any, ...]]:
        """Every row of the tables, as a tuple of its values in column order."""
        return [tuple(r.values()) for t in self.tables for r in t.to_pylist()]

    def append(self, row: object) -> int:
        raise AssertionError("the columnar path appends frames")

    def append_frame(self, table: Any) -> int:
        self.tables.append(table)
        return int(table.nbytes)

    def __len__(self) -> int:
        return sum(len(t) for t in self.tables)


class ScriptedFrameEndpoints(ScriptedEndpoints):
    """Scripted endpoints whose connector takes frames; see the module docstring."""

    takes_frames = True

    def __init__(self, clock: Clock, *, bad: int | None = None, takes_rows: bool = False) -> None:
        super().__init__(clock, takes_rows=takes_rows)
        self.bad = bad
        """A value of the ``n`` column refused as a record error (None: none is)."""

    def new_buffer(self, shard: int) -> Any:
        return ArrowTableBuffer()

    def prepare_frame(self, df: Any) -> tuple[Any, list[tuple[int, str]]]:
        """The frame as an Arrow table without its bad rows, and those rows' positions."""
        import polars as pl

        mask = pl.repeat(False, df.height, eager=True)
        reasons = "bad value"
        if "bad" in df.columns:
            mask = mask | df.get_column("bad")
            df = df.drop("bad")
        if self.bad is not None and "n" in df.columns:
            mask = mask | (df.get_column("n") == self.bad)
            reasons = f"{self.bad} is refused"
        bad = [(i, reasons) for i in mask.arg_true().to_list()]
        kept = df.filter(~mask)
        if ROW_COLUMN in kept.columns:
            kept = kept.drop(ROW_COLUMN)
        return kept.to_arrow(), bad

    def take_rows(self, table: Any, rows: list[int]) -> Any:
        import pyarrow as pa

        return table.take(pa.array(rows))

    def _rows(self, buffer: object) -> tuple[object, ...]:
        if isinstance(buffer, ArrowTableBuffer):
            return tuple(buffer.rows)
        return super()._rows(buffer)


class IntFrameDeserializer:
    """Decodes payloads ``b"<n>"`` into one frame with column ``n``; ``b"x"`` is a
    record error (``on_error: skip``)."""

    columnar = True
    takes_bytes = False
    on_error = ErrorPolicy.SKIP

    def deserialize_batch(self, payloads: list[memoryview]) -> Any:
        import polars as pl

        good, rows, errors = [], [], []
        for i, p in enumerate(payloads):
            if bytes(p) == b"x":
                errors.append((i, DeserError("not a number")))
            else:
                good.append(int(bytes(p)))
                rows.append(i)
        df = pl.DataFrame({"n": good, ROW_COLUMN: pl.Series(rows, dtype=pl.UInt32)})
        return [(None, df)], errors
