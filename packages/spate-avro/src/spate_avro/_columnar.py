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
frame per branch, each read against its branch's record schema with the index read back
as a leading column and checked like the sentinel.

Per batch, the Python work is a few C-level passes, none per record: the payloads (a
Kafka batch's whole ``bytes``, no view made per record, or views) are joined once (each
datum followed by its sentinel) into a pyarrow ``large_binary`` array over that one
buffer; the branch split, the gather of each branch's datums and the
row indices are pyarrow kernels; each branch's block goes to one open scratch file in
one write (jetliner reads only from a path); the alignment checks are vectorized
comparisons on the decoded columns.

The datum scan (B110). jetliner reserves memory for the item count an array or map block
declares: a corrupt datum declaring billions of items makes the allocation fail and the
process aborts, with no exception to catch. So before the read, a compiled scanner
(``spate_avro_native``, Rust; the schema compiled by ``spate_avro._scan``) walks every
datum of the batch against the writer schema and returns the datums that are not exactly
one well-formed datum, among them every block count whose items cannot fit in the bytes
left. None of them is ever handed to jetliner: they are record errors (the reference
decoder's error when it refuses the datum too, else a malformed-datum error), and the
batch goes through the exact path from the first of them. The scan runs only for schemas
that hold an array or a map or are recursive (nothing else can make jetliner reserve a
count), at about 0.1 µs per datum with the GIL released.

Recovery from an abort (B98), the backstop behind the scan for a reader failure the scan
does not foresee. A datum that aborts the process inside jetliner (see
``spate_avro._scratch``; with the scan on, none is known) leaves its batch file behind;
the next decoder of the same schema adopts it and keeps the datums it held as
suspects. While suspects exist, each batch's datums are checked against them (one
C-level set operation); a batch holding one is decoded as the bad-datum fallback does,
every datum checked with the reference decoder first, so the datum that aborted is the
record error the row path gives. Suspects are dropped once seen. Each container says
which read wrote it (the batch, the datums the reference accepted, or one datum alone):
if the datums the reference accepted abort too, the next process reads them one at a
time, and a datum that aborts alone is refused from then on. One abort per delivery of a
poison datum is the cost; nothing is paid per record while no suspect is held.
"""

from __future__ import annotations

import array
import functools
import importlib.util
import itertools
import json
import logging
import os
import struct
import weakref
from collections.abc import Sequence
from operator import attrgetter
from typing import Any

from spate import DeserError, DeserErrorKind
from spate.records import ROW_COLUMN

from spate_avro._scan import compile_schema, may_abort, scan_enabled, unbounded_for_fastavro
from spate_avro._schema import DecodeFn, is_union, schema_name
from spate_avro._scratch import Leftover, ScratchFile, dead_leftovers, scratch_dir, split
from spate_avro._scratch import write_at_start as _write_all

logger = logging.getLogger(__name__)

END_COLUMN = "__spate_end"
BRANCH_COLUMN = "__spate_branch"
_END = b"\xa5\x5a\xc3\x3c"
_nbytes = attrgetter("nbytes")
_SYNC = b"spate-columnar\x00\x01"
_STAGES = 3
"""What a container holds: 0 a batch, 1 the datums the reference decoder accepted, 2 one
datum alone (written in the header, read back from a dead process's leftover)."""
_QUIET_BATCHES = 1000
"""Suspects not seen again within this many batches are dropped."""

DecodedFrames = tuple[list[tuple[str | None, Any]], list[tuple[int, DeserError]]]
"""``(frames, errors)``: ``(branch full name or None, polars DataFrame)`` per branch with
a ``__spate_row`` column, and ``(batch index, DeserError)`` for each bad datum."""


COLUMNAR_MODULES = {
    "jetliner": "jetliner",
    "polars": "polars",
    "spate_avro_native": "spate-avro-native",
}
"""The modules the columnar Avro path imports, and the distribution of each."""


def columnar_unavailable() -> str | None:
    """Why batches cannot be decoded as columns (what is missing and how to install it
    from a checkout), or None when they can."""
    missing = [
        dist
        for module, dist in COLUMNAR_MODULES.items()
        if importlib.util.find_spec(module) is None
    ]
    if not missing:
        return None
    return (
        f"columnar Avro decoding is not available: {', '.join(missing)} not installed "
        "(spate-avro's columnar extra; spate-avro-native is a Rust extension, so building it "
        "needs cargo, https://rustup.rs); spate is not on the public package index yet, so "
        "from a spate checkout: pip install ./packages/spate-avro-native "
        '"./packages/spate-avro[columnar]"'
    )


def columnar_available() -> bool:
    """Whether the ``columnar`` extra (polars, jetliner) is installed.

    Looked up, not imported: a row pipeline builds the columnar decoder without using
    it, and importing polars would cost every process start about half a second.
    """
    return all(
        importlib.util.find_spec(name) is not None
        for name in ("jetliner", "polars", "spate_avro_native")
    )


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


def _header(record_schema: Any, branch: bool, stage: int) -> bytes:
    """The container header for a record schema with the sentinel field appended (and,
    for a union branch, the branch index read as a leading ``int`` field); ``stage``
    says which read writes it (see ``_STAGES``)."""
    schema = dict(_clean(record_schema))
    lead = [{"name": BRANCH_COLUMN, "type": "int"}] if branch else []
    schema["fields"] = [
        *lead,
        *schema["fields"],
        {"name": END_COLUMN, "type": {"type": "fixed", "name": "SpateEnd", "size": 4}},
    ]
    text = json.dumps(schema).encode()
    meta = [(b"avro.schema", text), (b"avro.codec", b"null"), (b"spate.stage", b"%d" % stage)]
    parts = [b"Obj\x01", _zigzag(len(meta))]
    for key, value in meta:
        parts += [_zigzag(len(key)), key, _zigzag(len(value)), value]
    parts += [_zigzag(0), _SYNC]
    return b"".join(parts)


def _varint(data: bytes, pos: int) -> tuple[int, int]:
    """The zig-zag varint at ``pos`` and the position after it."""
    value = shift = 0
    while pos < len(data) and shift < 70:
        byte = data[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        shift += 7
        if not byte & 0x80:
            return (value >> 1) ^ -(value & 1), pos
    raise ValueError("truncated varint")


@functools.cache
def _end_series() -> Any:
    import polars as pl

    return pl.Series([_END], dtype=pl.Binary)


def _pack(payloads: Sequence[bytes | memoryview], prefix: int) -> Any:
    """The batch framed in one buffer, each datum (after ``prefix`` bytes) followed by the
    sentinel: a pyarrow ``large_binary`` array whose element ``i`` is payload ``i``'s
    datum and sentinel. One join of the payloads (``bytes`` or views) and C loops; no
    Python turn per record."""
    import pyarrow as pa
    import pyarrow.compute as pc

    count = len(payloads)
    body = _END.join([*payloads, b""])
    offsets = _offsets(array.array("q", list(map(len, payloads))), count)
    if offsets[count].as_py() != len(body):  # views of items wider than a byte
        offsets = _offsets(array.array("q", list(map(_nbytes, payloads))), count)
    framed = pa.LargeBinaryArray.from_buffers(
        pa.large_binary(), count, [None, offsets.buffers()[1], pa.py_buffer(body)]
    )
    if not prefix:
        return framed
    # An explicit stop: pyarrow 26 refuses ``binary_slice(..., start)`` without one.
    return pc.binary_slice(framed, prefix, len(body))


def _offsets(sizes: array.array[int], count: int) -> Any:
    """Where each framed datum starts (and the last one ends): datum sizes plus the
    sentinel's, summed."""
    import pyarrow as pa
    import pyarrow.compute as pc

    framed = pc.add(pa.Array.from_buffers(pa.int64(), count, [None, pa.py_buffer(sizes)]), 4)
    return pa.concat_arrays([_zero_offset(), pc.cumulative_sum(framed)])


@functools.cache
def _zero_offset() -> Any:
    import pyarrow as pa

    return pa.array([0], pa.int64())


def _body(framed: Any) -> memoryview:
    """The bytes of a ``large_binary`` array's elements (contiguous in its data buffer)."""
    _, offsets, data = framed.buffers()
    first = struct.unpack_from("q", offsets, 8 * framed.offset)[0]
    last = struct.unpack_from("q", offsets, 8 * (framed.offset + len(framed)))[0]
    return memoryview(data)[first:last]


def _ends(framed: Any) -> memoryview:
    """The offsets of a ``large_binary`` array's elements (``len + 1`` int64)."""
    offsets = framed.buffers()[1]
    return memoryview(offsets)[8 * framed.offset : 8 * (framed.offset + len(framed) + 1)]


def _ends_of(datums: Sequence[Any]) -> bytes:
    """The offsets of ``datums`` framed each with the sentinel."""
    sizes = (len(datum) + len(_END) for datum in datums)
    return array.array("q", itertools.accumulate(sizes, initial=0)).tobytes()


class _RecordReader:
    """Reads datums of one record schema into a DataFrame through a container file."""

    def __init__(
        self,
        record_schema: Any,
        check: DecodeFn,
        start: int,
        branch: int | None,
        directory: str,
        named: dict[str, Any] | None = None,
    ) -> None:
        self._read: Any = None
        """jetliner's reader, imported by the first read (the row path never needs it)."""
        program = compile_schema(record_schema, branch is not None, named)
        self._program: Any = program if scan_enabled() and may_abort(program) else None
        """The scanner program (B110) while it is a list of ints; the first read compiles
        it into the scanner's own ``Program``. None: no scan."""
        self._scan: Any = None
        self.ask_reference = not unbounded_for_fastavro(program)
        """Whether a datum the scan refuses may be handed to the reference decoder for
        its error (not when fastavro could read it without bound)."""
        self._branch = branch
        """The union branch index the datums start with (read back and checked), or None."""
        self._headers = [_header(record_schema, branch is not None, s) for s in range(_STAGES)]
        self._check = check
        self._start = start
        self._suspects: list[set[bytes]] = [set() for _ in range(_STAGES)]
        """Datums of a dead process's leftover, by the stage that left them (B98)."""
        self._suspecting = False
        self._quiet = 0
        file = self._file = ScratchFile(directory)
        # Closed and removed on close, when collected, or at interpreter exit; emptied
        # after each read, so a killed process leaves an empty file, or the batch it was
        # reading when it died (recovered by the next decoder of this schema).
        self._finalizer = weakref.finalize(self, file.close)

    def close(self) -> None:
        self._finalizer()

    def adopt(self, leftover: Leftover) -> bool:
        """Take the datums of a dead process's leftover as suspects if it was written by a
        reader of this schema; whether it was."""
        content = leftover.content
        for stage, header in enumerate(self._headers):
            if not content.startswith(header):
                continue
            datums = None
            try:
                count, pos = _varint(content, len(header))
                size, pos = _varint(content, pos)
                if content[pos + size : pos + size + len(_SYNC)] == _SYNC:
                    datums = split(content[pos : pos + size], leftover.ends, count, _END)
            except ValueError:
                pass
            if datums is None:
                logger.warning("a columnar Avro scratch file could not be split; deleted")
            else:
                logger.warning(
                    "the columnar Avro reader died on a batch of %d datums (stage %d); "
                    "they are checked with the reference decoder when they come again",
                    len(datums),
                    stage,
                )
                self._suspects[stage].update(datums)
                self._suspecting = True
            return True
        return False

    def _block(self, body: Any, count: int, ends: Any, stage: int = 0) -> Any:
        """Read ``count`` datums whose framed bytes (each datum, then the sentinel) are
        ``body`` and end at the offsets ``ends``: one container block, written with one
        call to the open file (after the offsets, to their own file)."""
        block = b"".join((self._headers[stage], _zigzag(count), _zigzag(len(body)), body, _SYNC))
        file = self._file
        _write_all(file.ends_fd, ends)
        if self._read is None:
            import jetliner  # the columnar extra

            self._read = jetliner.read_avro
        try:
            _write_all(file.fd, block)
            return self._read(file.path, glob=False)
        finally:
            os.ftruncate(file.fd, 0)

    def _frame(self, datums: Sequence[Any], stage: int) -> Any:
        return self._block(_END.join([*datums, b""]), len(datums), _ends_of(datums), stage)

    def _suspected(self, framed: Any) -> list[bytes] | None:
        """The batch's datums if it holds a suspect (B98); None otherwise."""
        datums = [element[: -len(_END)] for element in framed.to_pylist()]
        if any(not suspects.isdisjoint(datums) for suspects in self._suspects):
            self._quiet = 0
            return datums
        self._quiet += 1
        if self._quiet >= _QUIET_BATCHES:
            self._drop(None)
        return None

    def _drop(self, datums: list[bytes] | None) -> None:
        """Forget suspects once seen (all of them when ``datums`` is None)."""
        for suspects in self._suspects:
            if datums is None:
                suspects.clear()
            else:
                suspects.difference_update(datums)
        self._suspecting = any(self._suspects)

    def read(self, framed: Any, rows: Any, errors: list[tuple[int, DeserError]]) -> Any:
        """DataFrame of the datums in ``framed`` with ``__spate_row`` = ``rows``.

        ``framed`` is a pyarrow ``large_binary`` array, each element a datum (prefix
        already stripped) followed by the sentinel; ``rows`` the polars ``UInt32`` Series
        of their batch indices. Bad datums are appended to ``errors`` and left out of the
        frame.
        """
        count = len(framed)
        if not count:
            return None
        refused = self._refused(framed)
        if self._suspecting:
            datums = self._suspected(framed)
            if datums is not None:
                return self._exact(framed, rows, 0, errors, datums, refused)
        if refused:
            return self._exact(framed, rows, min(refused), errors, None, refused)
        try:
            df = self._block(_body(framed), count, _ends(framed))
            first_bad = self._aligned(df)
        except (KeyboardInterrupt, SystemExit):
            raise
        except BaseException:  # the reader refused the block (a Rust panic is a BaseException)
            df, first_bad = None, 0
        if df is not None and first_bad == count:
            df.insert_column(df.width, rows)
            return df
        return self._exact(framed, rows, first_bad, errors)

    def _refused(self, framed: Any) -> frozenset[int]:
        """The positions in ``framed`` of the datums the scan refuses (B110)."""
        if self._program is None:
            return frozenset()
        if self._scan is None:
            from spate_avro_native import Program, scan  # the columnar extra

            self._program, self._scan = Program(self._program), scan
        return frozenset(self._scan(self._program, _body(framed), _ends(framed), len(_END)))

    def _exact(
        self,
        framed: Any,
        rows: Any,
        first_bad: int,
        errors: list[tuple[int, DeserError]],
        datums: list[bytes] | None = None,
        refused_by_scan: frozenset[int] = frozenset(),
    ) -> Any:
        """From ``first_bad`` on, check every datum with the reference decoder, then read
        only the datums it accepts (a suspect that aborted a read of the accepted datums
        alone, a suspect that aborted alone not at all) and the scan did not refuse."""
        import polars as pl

        if datums is None:
            datums = [element[: -len(_END)] for element in framed.to_pylist()]
        indices = rows.to_list()
        kept_datums = datums[:first_bad]
        kept_rows = indices[:first_bad]
        check, start = self._check, self._start
        _, alone, refused = self._suspects
        lone: list[bytes] = []
        lone_rows: list[int] = []
        at = first_bad
        for datum, row in zip(datums[first_bad:], indices[first_bad:], strict=True):
            at += 1
            if datum in refused:
                errors.append((row, _aborted()))
                continue
            if not self.ask_reference and at - 1 in refused_by_scan:
                errors.append((row, _not_one_datum()))
                continue
            try:
                check(datum, start)
            except DeserError as exc:
                errors.append((row, exc))
                continue
            except Exception as exc:
                errors.append((row, _malformed(exc)))
                continue
            if at - 1 in refused_by_scan:  # the lenient reference accepts it
                errors.append((row, _not_one_datum()))
                continue
            if self._branch is not None and _branch_index(datum) != self._branch:
                errors.append((row, _unsupported_branch()))  # index 128 or more
                continue
            if datum in alone:
                lone.append(datum)
                lone_rows.append(row)
                continue
            kept_datums.append(datum)
            kept_rows.append(row)
        if self._suspecting:
            self._drop(datums)
        if lone:  # each read alone first: one that aborts is refused by the next process
            lone, lone_rows = self._strict(lone, lone_rows, errors)
            kept_datums += lone
            kept_rows += lone_rows
        if not kept_datums:
            return None
        try:
            df = self._frame(kept_datums, 1)
        except (KeyboardInterrupt, SystemExit):
            raise
        except BaseException:  # a datum the lenient reference accepts, the reader refuses
            kept_datums, kept_rows = self._strict(kept_datums, kept_rows, errors)
            if not kept_datums:
                return None
            df = self._frame(kept_datums, 1)
        if self._aligned(df) != len(kept_datums):  # pragma: no cover - checked datums
            raise RuntimeError("datums the reference decoder accepts did not read back aligned")
        df.insert_column(df.width, pl.Series(ROW_COLUMN, kept_rows, dtype=pl.UInt32))
        return df.sort(ROW_COLUMN) if lone else df

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
                self._frame([datum], 2)
            except (KeyboardInterrupt, SystemExit):
                raise
            except BaseException as exc:
                errors.append((row, _malformed(exc)))
                continue
            kept.append(datum)
            kept_rows.append(row)
        return kept, kept_rows

    def _aligned(self, df: Any) -> int:
        """Drop the helper columns; return how many leading rows ended on the sentinel
        and, in a union, started with this branch's index (vectorized comparisons)."""
        wrong = df.drop_in_place(END_COLUMN) != _end_series()
        if self._branch is not None:
            wrong |= df.drop_in_place(BRANCH_COLUMN) != self._branch
        if not wrong.any():
            return int(wrong.len())
        return int(wrong.arg_true()[0])


def _branch_index(datum: bytes) -> int:
    """The union branch index a datum starts with (a zig-zag varint)."""
    value = shift = 0
    for byte in datum:
        value |= (byte & 0x7F) << shift
        shift += 7
        if not byte & 0x80:
            break
    return (value >> 1) ^ -(value & 1)


def _unsupported_branch() -> DeserError:
    return DeserError(
        "a union branch index of 128 or more is not supported on the columnar path",
        DeserErrorKind.MALFORMED,
    )


def _no_branch() -> DeserError:
    return DeserError(
        "malformed Avro payload (no union branch read on the columnar path starts it)",
        DeserErrorKind.MALFORMED,
    )


def _not_one_datum() -> DeserError:
    return DeserError(
        "malformed Avro payload (not exactly one canonical datum of the writer schema: "
        "refused by the datum scan)",
        DeserErrorKind.MALFORMED,
    )


def _aborted() -> DeserError:
    return DeserError(
        "malformed Avro payload (reading it alone aborted the columnar reader in an "
        "earlier process)",
        DeserErrorKind.MALFORMED,
    )


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

        directory = scratch_dir()
        expanded = expand_schema(writer)
        named = writer.get("__named_schemas") if isinstance(writer, dict) else None
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
                self._readers.append(_RecordReader(branch, check, 0, i, directory, named))
                self._names.append(schema_name(branch))
        else:
            if not isinstance(expanded, dict) or expanded.get("type") != "record":
                raise ValueError("columnar decoding needs a record schema or a union of records")
            self._readers.append(_RecordReader(expanded, check, 0, None, directory, named))
            self._names.append(None)
        self._adopt(directory)

    def _adopt(self, directory: str) -> None:
        """Take over the leftovers of dead processes written by readers of this schema."""
        with dead_leftovers(directory) as leftovers:
            for leftover, flags in leftovers:
                flags[0] = any(reader.adopt(leftover) for reader in self._readers)

    def close(self) -> None:
        for reader in self._readers:
            reader.close()

    def decode(self, payloads: Sequence[bytes | memoryview], prefix: int = 0) -> DecodedFrames:
        """Frames and errors for ``payloads`` (each datum after ``prefix`` bytes)."""
        import polars as pl

        errors: list[tuple[int, DeserError]] = []
        frames: list[tuple[str | None, Any]] = []
        if not payloads:
            return frames, errors
        framed = _pack(payloads, prefix)
        if not self._union:
            rows = pl.int_range(0, len(framed), dtype=pl.UInt32, eager=True).alias(ROW_COLUMN)
            df = self._readers[0].read(framed, rows, errors)
            if df is not None:
                frames.append((None, df))
            errors.sort(key=_first)
            return frames, errors
        for index, picked, rows in self._split(framed, payloads, prefix, errors):
            df = self._readers[index].read(picked, rows, errors)
            if df is not None:
                frames.append((self._names[index], df))
        errors.sort(key=_first)
        return frames, errors

    def _split(
        self,
        framed: Any,
        payloads: Sequence[bytes | memoryview],
        prefix: int,
        errors: list[tuple[int, DeserError]],
    ) -> list[tuple[int, Any, Any]]:
        """``(branch, its framed datums, their batch indices)`` per branch, by the first
        byte of the branch index, all vectorized; any other first byte (an empty datum's
        is the sentinel's) goes to the reference decoder."""
        import polars as pl
        import pyarrow as pa
        import pyarrow.compute as pc

        count = len(framed)
        # Every framed datum holds at least the sentinel: its first bytes are ``count`` bytes.
        firsts = pc.binary_slice(framed, 0, 1)
        heads = pa.Array.from_buffers(pa.uint8(), count, [None, pa.py_buffer(_body(firsts))])
        groups: list[tuple[int, Any, Any]] = []
        placed = 0
        # A branch index is one zig-zag varint; its first byte is 2 * index for the first
        # 128 branches (two bytes from index 64 on: the branch column read back tells).
        branches = min(len(self._readers), 128)
        for index in range(branches):
            picked = pc.indices_nonzero(pc.equal(heads, 2 * index))
            if not len(picked):
                continue
            placed += len(picked)
            rows = pl.Series(ROW_COLUMN, picked.cast(pa.uint32()))
            groups.append((index, framed if len(picked) == count else framed.take(picked), rows))
        if placed != count:
            known = pc.and_(pc.less(heads, 2 * branches), pc.equal(pc.bit_wise_and(heads, 1), 0))
            for row in pc.indices_nonzero(pc.invert(known)).to_pylist():
                errors.append((row, self._refuse(bytes(payloads[row])[prefix:])))
        return groups

    def _refuse(self, datum: Any) -> DeserError:
        """Why the reference decoder refuses a datum no branch reader takes (not asked
        when it could read a corrupt datum of this schema without bound, B110)."""
        if not all(reader.ask_reference for reader in self._readers):
            return _no_branch()
        try:
            self._check(datum, 0)
        except DeserError as exc:
            return exc
        except Exception as exc:
            return _malformed(exc)
        return _unsupported_branch()


def _first(item: tuple[int, DeserError]) -> int:
    return item[0]
