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
import json
import os
import tempfile
from collections.abc import Sequence
from typing import Any

from spate import DeserError, DeserErrorKind

from spate_avro._schema import DecodeFn, is_union, schema_name

ROW_COLUMN = "__spate_row"
"""The column holding each row's index in its source batch."""
END_COLUMN = "__spate_end"
_END = b"\xa5\x5a\xc3\x3c"
_SYNC = b"spate-columnar\x00\x01"

DecodedFrames = tuple[list[tuple[str | None, Any]], list[tuple[int, DeserError]]]
"""``(frames, errors)``: ``(branch full name or None, polars DataFrame)`` per branch with
a ``__spate_row`` column, and ``(batch index, DeserError)`` for each bad datum."""


def columnar_available() -> bool:
    """Whether the ``columnar`` extra (polars, jetliner) is importable."""
    try:
        import jetliner  # noqa: F401
        import polars  # noqa: F401
    except ImportError:
        return False
    return True


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


def _header(record_schema: Any) -> bytes:
    """The container header for a record schema with the sentinel field appended."""
    schema = dict(_clean(record_schema))
    schema["fields"] = [
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


def _shm_dir() -> str | None:
    return "/dev/shm" if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK) else None


class _RecordReader:
    """Reads datums of one record schema into a DataFrame through a container file."""

    def __init__(self, record_schema: Any, check: DecodeFn, start: int) -> None:
        import jetliner  # the columnar extra; imported here so the row path never needs it

        self._read = jetliner.read_avro
        self._header = _header(record_schema)
        self._check = check
        self._start = start
        fd, self._path = tempfile.mkstemp(prefix="spate-avro-", suffix=".avro", dir=_shm_dir())
        os.close(fd)

    def close(self) -> None:
        with contextlib.suppress(OSError):
            os.unlink(self._path)

    def _frame(self, datums: Sequence[Any]) -> Any:
        body = _END.join(datums) + _END
        with open(self._path, "wb") as out:
            out.write(self._header)
            out.write(_zigzag(len(datums)))
            out.write(_zigzag(len(body)))
            out.write(body)
            out.write(_SYNC)
        return self._read(self._path)

    def read(
        self, datums: Sequence[Any], rows: Sequence[int], errors: list[tuple[int, DeserError]]
    ) -> Any:
        """DataFrame of ``datums`` (prefix already stripped) with ``__spate_row`` = ``rows``.

        Bad datums are appended to ``errors`` and left out of the frame.
        """
        import polars as pl

        if not datums:
            return None
        try:
            df = self._frame(datums)
            good = df.select(pl.col(END_COLUMN) == pl.lit(_END, dtype=pl.Binary)).to_series()
            first_bad = len(datums) if good.all() else int(good.arg_min() or 0)
        except (KeyboardInterrupt, SystemExit):
            raise
        except BaseException:  # the reader refused the block (a Rust panic is a BaseException)
            df, first_bad = None, 0
        if df is not None and first_bad == len(datums):
            return df.drop(END_COLUMN).with_columns(pl.Series(ROW_COLUMN, rows, dtype=pl.UInt32))
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
        df = self._frame(kept_datums)
        return df.drop(END_COLUMN).with_columns(pl.Series(ROW_COLUMN, kept_rows, dtype=pl.UInt32))


def _malformed(exc: BaseException) -> DeserError:
    detail = f"{type(exc).__name__}: {exc}"[:200]
    return DeserError(f"malformed Avro payload ({detail})", DeserErrorKind.MALFORMED)


class ColumnarAvroDecoder:
    """Decodes raw Avro datums (a record schema or a top-level union of records) to frames.

    ``check(data, start)`` is the row path's decode function for the same schema: the
    reference that finds bad datums exactly.
    """

    def __init__(self, writer: Any, check: DecodeFn) -> None:
        from fastavro.schema import expand_schema

        from spate_avro._schema import build_decoder

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
                self._readers.append(_RecordReader(branch, build_decoder(branch), 0))
                self._names.append(schema_name(branch))
        else:
            if not isinstance(expanded, dict) or expanded.get("type") != "record":
                raise ValueError("columnar decoding needs a record schema or a union of records")
            self._readers.append(_RecordReader(expanded, check, 0))
            self._names.append(None)

    def close(self) -> None:
        for reader in self._readers:
            reader.close()

    def decode(self, payloads: Sequence[memoryview], prefix: int = 0) -> DecodedFrames:
        """Frames and errors for ``payloads`` (each datum after ``prefix`` bytes)."""
        errors: list[tuple[int, DeserError]] = []
        datums: list[Any] = []
        for view in payloads:
            data = view.obj
            if type(data) is not bytes or len(data) != view.nbytes:
                data = bytes(view)
            datums.append(data[prefix:] if prefix else data)
        frames: list[tuple[str | None, Any]] = []
        if not self._union:
            df = self._readers[0].read(datums, range(len(datums)), errors)
            if df is not None:
                frames.append((None, df))
            errors.sort(key=_first)
            return frames, errors
        count = len(self._readers)
        groups: list[tuple[list[Any], list[int]]] = [([], []) for _ in range(count)]
        check = self._check
        for row, datum in enumerate(datums):
            first = datum[0] if datum else 0x80
            if first < 0x80 and (first >> 1) ^ -(first & 1) < count and not first & 1:
                group = groups[first >> 1]
                group[0].append(datum[1:])
                group[1].append(row)
                continue
            try:  # a long or bad branch index: the reference decoder says what is wrong
                check(datum, 0)
            except DeserError as exc:
                errors.append((row, exc))
                continue
            except Exception as exc:
                errors.append((row, _malformed(exc)))
                continue
            errors.append((row, DeserError("unsupported union index encoding")))
        for reader, name, (group_datums, rows) in zip(
            self._readers, self._names, groups, strict=True
        ):
            df = reader.read(group_datums, rows, errors)
            if df is not None:
                frames.append((name, df))
        errors.sort(key=_first)
        return frames, errors


def _first(item: tuple[int, DeserError]) -> int:
    return item[0]
