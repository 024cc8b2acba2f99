"""Columnar Avro decoding: a batch of bare datums into polars DataFrames (``spate[columnar]``).

The datums of one source batch are framed as one Avro object container (a header with
the writer schema and the ``null`` codec, then one block holding every datum) and read
by jetliner's Rust reader into Arrow columns, with no Python object per record.

Exactness (B28). A container reader trusts the block: a datum with trailing bytes, or
an empty one, shifts every datum after it, and the reader may decode garbage without an
error. So each datum is followed by a 4-byte sentinel read back as the last column
(``fixed`` field ``__spate_end``): the rows before the first row whose sentinel is wrong
are exactly the datums they claim to be; from that row on, and for the whole batch when
the reader raises, every datum is checked with the reference decoder (fastavro, the row
path's own decode function, which refuses trailing bytes) and only the datums it accepts
are read as columns again. Bad datums come back as ``DeserError`` by batch index, so
the skip/fail policy and the counters are those of the row path.

A top-level union is split by branch index (the datum's first zig-zag varint) into one
frame per branch, each read against its branch's record schema.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import tempfile
import weakref
from collections.abc import Sequence
from operator import attrgetter, itemgetter
from typing import Any

from spate import DeserError, DeserErrorKind

from spate_avro._schema import DecodeFn, is_union, schema_name

ROW_COLUMN = "__spate_row"
"""The column holding each row's index in its source batch."""
END_COLUMN = "__spate_end"
BRANCH_COLUMN = "__spate_branch"
_END = b"\xa5\x5a\xc3\x3c"
_obj = attrgetter("obj")
_nbytes = attrgetter("nbytes")
_SYNC = b"spate-columnar\x00\x01"

DecodedFrames = tuple[list[tuple[str | None, Any]], list[tuple[int, DeserError]]]
"""``(frames, errors)``: ``(branch full name or None, polars DataFrame)`` per branch with
a ``__spate_row`` column, and ``(batch index, DeserError)`` for each bad datum."""


def columnar_available() -> bool:
    """Whether the ``columnar`` extra (polars, jetliner) is installed.

    Looked up, not imported: a row pipeline builds the columnar decoder without using
    it, and importing polars would cost every process start about half a second.
    """
    return all(importlib.util.find_spec(name) is not None for name in ("jetliner", "polars"))


def _zigzag(n: int) -> bytes:
    n = (n << 1) ^ (n >> 63)
    out = bytearray()
    while n & ~0x7F:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def _clean(schema: Any) -> Any:
    """A parsed fastavro schema as plain Avro JSON (fastavro's private keys removed)."""
    if isinstance(schema, dict):
        return {k: _clean(v) for k, v in schema.items() if not k.startswith("__")}
    if isinstance(schema, list):
        return [_clean(v) for v in schema]
    return schema


def _header(record_schema: Any, branch: bool) -> bytes:
    """The container header for a record schema with the sentinel field appended (and,
    for a union branch, the branch index read as a leading ``int`` field)."""
    schema = dict(_clean(record_schema))
    lead = [{"name": BRANCH_COLUMN, "type": "int"}] if branch else []
    schema["fields"] = [
        *lead,
        *schema["fields"],
        {"name": END_COLUMN, "type": {"type": "fixed", "name": "SpateEnd", "size": 4}},
    ]
    text = json.dumps(schema).encode()
    meta = [(b"avro.schema", text), (b"avro.codec", b"null")]
    parts = [b"Obj\x01", _zigzag(len(meta))]
    for key, value in meta:
        parts += [_zigzag(len(key)), key, _zigzag(len(value)), value]
    parts += [_zigzag(0), _SYNC]
    return b"".join(parts)


def _unlink(path: str) -> None:
    with contextlib.suppress(OSError):
        os.unlink(path)


def _shm_dir() -> str | None:
    return "/dev/shm" if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK) else None


class _RecordReader:
    """Reads datums of one record schema into a DataFrame through a container file."""

    def __init__(self, record_schema: Any, check: DecodeFn, start: int, branch: bool) -> None:
        self._read: Any = None
        """jetliner's reader, imported by the first :meth:`read` (the row path never needs it)."""
        self._branch = branch
        self._header = _header(record_schema, branch)
        self._check = check
        self._start = start
        fd, self._path = tempfile.mkstemp(prefix="spate-avro-", suffix=".avro", dir=_shm_dir())
        os.close(fd)
        # Removed on close, when collected, or at interpreter exit; emptied after each
        # read, so a killed process leaves an empty file at most.
        self._finalizer = weakref.finalize(self, _unlink, self._path)

    def close(self) -> None:
        self._finalizer()

    def _frame(self, datums: Sequence[Any]) -> Any:
        body = _END.join(datums) + _END
        with open(self._path, "wb") as out:
            out.write(self._header)
            out.write(_zigzag(len(datums)))
            out.write(_zigzag(len(body)))
            out.write(body)
            out.write(_SYNC)
        try:
            return self._read(self._path, glob=False)
        finally:
            os.truncate(self._path, 0)

    def read(
        self, datums: Sequence[Any], rows: Sequence[int], errors: list[tuple[int, DeserError]]
    ) -> Any:
        """DataFrame of ``datums`` (prefix already stripped) with ``__spate_row`` = ``rows``.

        Bad datums are appended to ``errors`` and left out of the frame.
        """
        import polars as pl

        if self._read is None:
            import jetliner  # the columnar extra

            self._read = jetliner.read_avro
        if not datums:
            return None
        try:
            df = self._frame(datums)
            first_bad = self._aligned(df)
        except (KeyboardInterrupt, SystemExit):
            raise
        except BaseException:  # the reader refused the block (a Rust panic is a BaseException)
            df, first_bad = None, 0
        if df is not None and first_bad == len(datums):
            df.insert_column(df.width, pl.Series(ROW_COLUMN, rows, dtype=pl.UInt32))
            return df
        # Check the rest with the reference decoder, then read only the datums it accepts.
        kept_datums = list(datums[:first_bad])
        kept_rows = list(rows[:first_bad])
        check, start = self._check, self._start
        for datum, row in zip(datums[first_bad:], rows[first_bad:], strict=True):
            try:
                check(datum, start)
            except DeserError as exc:
                errors.append((row, exc))
                continue
            except Exception as exc:
                errors.append((row, _malformed(exc)))
                continue
            kept_datums.append(datum)
            kept_rows.append(row)
        if not kept_datums:
            return None
        try:
            df = self._frame(kept_datums)
        except (KeyboardInterrupt, SystemExit):
            raise
        except BaseException:  # a datum the lenient reference accepts, the reader refuses
            kept_datums, kept_rows = self._strict(kept_datums, kept_rows, errors)
            if not kept_datums:
                return None
            df = self._frame(kept_datums)
        if self._aligned(df) != len(kept_datums):  # pragma: no cover - checked datums
            raise RuntimeError("datums the reference decoder accepts did not read back aligned")
        df.insert_column(df.width, pl.Series(ROW_COLUMN, kept_rows, dtype=pl.UInt32))
        return df

    def _strict(
        self, datums: Sequence[Any], rows: Sequence[int], errors: list[tuple[int, DeserError]]
    ) -> tuple[list[Any], list[int]]:
        """The datums the reader takes one by one; the others (not canonical Avro, such as
        a boolean byte other than 0 or 1, which the reference decoder reads leniently)
        are record errors for those records alone (B28)."""
        kept: list[Any] = []
        kept_rows: list[int] = []
        for datum, row in zip(datums, rows, strict=True):
            try:
                self._frame([datum])
            except (KeyboardInterrupt, SystemExit):
                raise
            except BaseException as exc:
                errors.append((row, _malformed(exc)))
                continue
            kept.append(datum)
            kept_rows.append(row)
        return kept, kept_rows

    def _aligned(self, df: Any) -> int:
        """Drop the helper columns; return how many leading rows ended on the sentinel."""
        ends = df.drop_in_place(END_COLUMN)
        if self._branch:
            df.drop_in_place(BRANCH_COLUMN)
        if ends.n_unique() == 1 and ends[0] == _END:
            return int(ends.len())
        return next(i for i, end in enumerate(ends.to_list()) if end != _END)


def _malformed(exc: BaseException) -> DeserError:
    detail = f"{type(exc).__name__}: {exc}"[:200]
    return DeserError(f"malformed Avro payload ({detail})", DeserErrorKind.MALFORMED)


class ColumnarAvroDecoder:
    """Decodes raw Avro datums (a record schema or a top-level union of records) to frames.

    ``check(data, start)`` is the row path's decode function for the same schema: the
    reference that finds bad datums exactly (called on the datum after any prefix).
    """

    def __init__(self, writer: Any, check: DecodeFn) -> None:
        from fastavro.schema import expand_schema

        expanded = expand_schema(writer)
        self._union = is_union(expanded)
        self._check = check
        self._readers: list[_RecordReader] = []
        self._names: list[str | None] = []
        if self._union:
            for i, branch in enumerate(expanded):
                if not isinstance(branch, dict) or branch.get("type") != "record":
                    raise ValueError(
                        f"columnar decoding needs record branches; branch {i} is "
                        f"{schema_name(branch)}"
                    )
                self._readers.append(_RecordReader(branch, check, 0, True))
                self._names.append(schema_name(branch))
        else:
            if not isinstance(expanded, dict) or expanded.get("type") != "record":
                raise ValueError("columnar decoding needs a record schema or a union of records")
            self._readers.append(_RecordReader(expanded, check, 0, False))
            self._names.append(None)

    def close(self) -> None:
        for reader in self._readers:
            reader.close()

    def decode(self, payloads: Sequence[memoryview], prefix: int = 0) -> DecodedFrames:
        """Frames and errors for ``payloads`` (each datum after ``prefix`` bytes)."""
        errors: list[tuple[int, DeserError]] = []
        datums: list[Any] = list(map(_obj, payloads))
        # Whole-object views (each Kafka message's value) give their bytes without a copy;
        # a view that is a slice of a larger buffer is longer as its object. Both sums
        # are C loops (``len`` of a byte view is its size): no Python turn per record.
        if set(map(type, datums)) != {bytes} or sum(map(len, datums)) != sum(
            map(_nbytes, payloads)
        ):
            datums = [bytes(v) for v in payloads]  # views that are slices of larger buffers
        if prefix:
            datums = [d[prefix:] for d in datums]
        frames: list[tuple[str | None, Any]] = []
        if not self._union:
            df = self._readers[0].read(datums, range(len(datums)), errors)
            if df is not None:
                frames.append((None, df))
            errors.sort(key=_first)
            return frames, errors
        for index, rows in self._split(datums, errors):
            picked = [datums[rows[0]]] if len(rows) == 1 else list(itemgetter(*rows)(datums))
            df = self._readers[index].read(picked, rows, errors)
            if df is not None:
                frames.append((self._names[index], df))
        errors.sort(key=_first)
        return frames, errors

    def _split(
        self, datums: list[Any], errors: list[tuple[int, DeserError]]
    ) -> list[tuple[int, list[int]]]:
        """Row indices per branch, by the first byte (a one-byte zig-zag branch index);
        any other first byte (or an empty datum) goes to the reference decoder."""
        import pyarrow as pa
        import pyarrow.compute as pc

        count = len(self._readers)
        if all(datums):
            heads = bytes(map(itemgetter(0), datums))
        else:
            heads = bytes(d[0] if d else 0xFF for d in datums)
        arr = pa.Array.from_buffers(pa.uint8(), len(heads), [None, pa.py_buffer(heads)])
        groups: list[tuple[int, list[int]]] = []
        known = None
        for index in range(count):
            mask = pc.equal(arr, 2 * index)
            known = mask if known is None else pc.or_(known, mask)
            rows = pc.indices_nonzero(mask).to_pylist()
            if rows:
                groups.append((index, rows))
        if known is not None and not pc.all(known).as_py():
            for row in pc.indices_nonzero(pc.invert(known)).to_pylist():
                errors.append((row, self._refuse(datums[row])))
        return groups

    def _refuse(self, datum: Any) -> DeserError:
        """Why the reference decoder refuses a datum whose branch index is not one byte."""
        try:
            self._check(datum, 0)
        except DeserError as exc:
            return exc
        except Exception as exc:
            return _malformed(exc)
        return DeserError(
            "a union branch index longer than one byte is not supported on the columnar path"
        )


def _first(item: tuple[int, DeserError]) -> int:
    return item[0]
