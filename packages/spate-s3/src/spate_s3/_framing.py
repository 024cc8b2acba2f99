"""Framing: cutting one object's plain bytes into records (``memoryview`` slices).

Owns the framers the reader drives, one per object:

* :class:`LineFramer` — ``ndjson`` (one record per non-blank line) and ``lines`` (every
  line, blank ones too). A record is a view into the piece of plain bytes it lies in; a
  line that straddles two pieces is the only copy made. A final line without a newline
  is a record. A trailing ``\\r`` is dropped (CRLF files).
* :class:`AvroOcfFramer` — Avro object container files: the header (schema, codec, sync
  marker) is parsed here, each block is decompressed (null, deflate, zstandard, bzip2,
  xz; snappy when python-snappy is installed) and cut into records with fastavro, each a
  view of the schemaless datum in the block. fastavro is imported lazily:
  ``pip install "spate-s3[avro]"``.

Protocol: :meth:`push` a piece only after :meth:`take` returned fewer records than
asked (the framer consumed everything it could); :meth:`finish` at the end of the
object. :attr:`next_byte` is the plain-byte offset in the object where the next record
starts (``None`` when a reader cannot seek there, as in an Avro container), which is
what lets an uncompressed object resume with a ranged GET instead of a re-read (B25).
"""

from __future__ import annotations

import bz2
import io
import json
import lzma
import zlib
from collections.abc import Callable
from typing import Any, Protocol

from spate.plugins import install_hint

from spate_s3._compression import CorruptObjectError

AVRO_INSTALL_HINT = "framing avro_ocf needs fastavro: " + install_hint(
    "spate-s3", "avro", dist_extra="avro"
)


def require_fastavro() -> None:
    """Raise ``ImportError`` with the install command when fastavro is missing."""
    try:
        import fastavro  # noqa: F401
    except ImportError as exc:
        raise ImportError(AVRO_INSTALL_HINT) from exc


class Framer(Protocol):
    @property
    def next_byte(self) -> int | None: ...

    def push(self, piece: bytes) -> None: ...

    def take(self, limit: int, out: list[memoryview]) -> int:
        """Append at most ``limit`` records to ``out``; return how many were appended."""
        ...

    def finish(self, limit: int, out: list[memoryview]) -> int:
        """The object ended: append what remains (at most ``limit``), like :meth:`take`.

        Called again until it returns fewer than ``limit``; raises
        :class:`CorruptObjectError` for a truncated object.
        """
        ...


class LineFramer:
    """Newline-delimited records; ``keep_blank`` keeps empty lines (``lines`` framing)."""

    def __init__(self, *, keep_blank: bool, start_byte: int = 0) -> None:
        self._keep_blank = keep_blank
        self._data = b""
        self._view = memoryview(b"")
        self._pos = 0
        self._base = start_byte  # plain offset of _data[0] in the object
        self._tail = b""  # bytes of an unfinished line from earlier pieces
        self._next = start_byte

    @property
    def next_byte(self) -> int | None:
        return self._next

    def push(self, piece: bytes) -> None:
        if self._pos < len(self._data):
            raise RuntimeError("push before the previous piece was consumed")
        self._base += len(self._data)
        self._data = piece
        self._view = memoryview(piece)
        self._pos = 0

    def take(self, limit: int, out: list[memoryview]) -> int:
        data, view, pos, keep = self._data, self._view, self._pos, self._keep_blank
        count = 0
        find = data.find
        while count < limit:
            nl = find(b"\n", pos)
            if nl < 0:
                # Keep the unfinished line for the next piece.
                if pos < len(data):
                    self._tail += data[pos:]
                pos = len(data)
                break
            if self._tail:
                line = self._tail + data[pos:nl]
                self._tail = b""
                if line.endswith(b"\r"):
                    line = line[:-1]
                if line or keep:
                    out.append(memoryview(line))
                    count += 1
            else:
                end = nl - 1 if nl > pos and data[nl - 1] == 13 else nl
                if end > pos or keep:
                    out.append(view[pos:end])
                    count += 1
            pos = nl + 1
            self._next = self._base + pos
        self._pos = pos
        return count

    def finish(self, limit: int, out: list[memoryview]) -> int:
        count = self.take(limit, out)
        if count < limit and self._tail:
            line, self._tail = self._tail, b""
            if line.endswith(b"\r"):
                line = line[:-1]
            self._next = self._base + len(self._data)
            if line or self._keep_blank:
                out.append(memoryview(line))
                count += 1
        return count


# ---------------------------------------------------------------- Avro containers

_MAGIC = b"Obj\x01"
_SYNC = 16


def _read_long(buf: bytearray | bytes, pos: int) -> tuple[int, int] | None:
    """A zigzag varint at ``pos``: ``(value, next_pos)``, or ``None`` if incomplete."""
    shift = 0
    acc = 0
    end = len(buf)
    while pos < end:
        b = buf[pos]
        pos += 1
        acc |= (b & 0x7F) << shift
        if not b & 0x80:
            return (acc >> 1) ^ -(acc & 1), pos
        shift += 7
        if shift > 63:
            raise CorruptObjectError("malformed Avro varint")
    return None


def _block_codec(name: str) -> Callable[[bytes], bytes]:
    if name == "null":
        return bytes
    if name == "deflate":
        return lambda data: zlib.decompress(data, -15)
    if name == "bzip2":
        return bz2.decompress
    if name == "xz":
        return lzma.decompress
    if name == "zstandard":
        import zstandard

        def zstd(data: bytes) -> bytes:
            out: bytes = zstandard.ZstdDecompressor().decompressobj().decompress(data)
            return out

        return zstd
    if name == "snappy":
        try:
            import snappy  # type: ignore[import-not-found]
        except ImportError:
            raise CorruptObjectError(
                "the Avro container uses the snappy codec: pip install python-snappy"
            ) from None

        def unsnappy(data: bytes) -> bytes:
            out: bytes = snappy.decompress(data[:-4])  # the last 4 bytes are a CRC32
            return out

        return unsnappy
    raise CorruptObjectError(f"unsupported Avro codec {name!r}")


class AvroOcfFramer:
    """Records of an Avro object container file: each a schemaless datum (bytes of one
    record in the writer's schema, as the Avro deserializer's ``raw`` mode reads them)."""

    def __init__(self) -> None:
        require_fastavro()
        self._buf = bytearray()
        self._pos = 0
        self._schema: Any = None
        self._codec: Callable[[bytes], bytes] | None = None
        self._sync = b""
        self._records: list[memoryview] = []
        self._index = 0
        self.writer_schema: dict[str, Any] | None = None

    @property
    def next_byte(self) -> int | None:
        return None

    def push(self, piece: bytes) -> None:
        if self._pos > 1024 * 1024 and self._pos > len(self._buf) // 2:
            del self._buf[: self._pos]
            self._pos = 0
        self._buf += piece

    def _parse_header(self) -> bool:
        buf, pos = self._buf, self._pos
        if len(buf) - pos < 4:
            return False
        if bytes(buf[pos : pos + 4]) != _MAGIC:
            raise CorruptObjectError("not an Avro object container file (bad magic)")
        pos += 4
        meta: dict[str, bytes] = {}
        while True:
            got = _read_long(buf, pos)
            if got is None:
                return False
            count, pos = got
            if count == 0:
                break
            if count < 0:
                got = _read_long(buf, pos)  # byte size of the block, unused
                if got is None:
                    return False
                pos = got[1]
                count = -count
            for _ in range(count):
                fields: list[bytes] = []
                for _ in range(2):
                    got = _read_long(buf, pos)
                    if got is None:
                        return False
                    size, pos = got
                    if len(buf) < pos + size:
                        return False
                    fields.append(bytes(buf[pos : pos + size]))
                    pos += size
                meta[fields[0].decode()] = fields[1]
        if len(buf) < pos + _SYNC:
            return False
        self._sync = bytes(buf[pos : pos + _SYNC])
        pos += _SYNC
        import fastavro

        if "avro.schema" not in meta:
            raise CorruptObjectError("the Avro container header has no avro.schema")
        self.writer_schema = json.loads(meta["avro.schema"])
        self._schema = fastavro.parse_schema(self.writer_schema)
        self._codec = _block_codec(meta.get("avro.codec", b"null").decode() or "null")
        self._pos = pos
        return True

    def _next_block(self) -> bool:
        buf, pos = self._buf, self._pos
        got = _read_long(buf, pos)
        if got is None:
            return False
        count, pos = got
        got = _read_long(buf, pos)
        if got is None:
            return False
        size, pos = got
        if count < 0 or size < 0:
            raise CorruptObjectError("malformed Avro block header")
        if len(buf) < pos + size + _SYNC:
            return False
        raw = bytes(buf[pos : pos + size])
        pos += size
        if bytes(buf[pos : pos + _SYNC]) != self._sync:
            raise CorruptObjectError("Avro block sync marker mismatch (corrupt container)")
        self._pos = pos + _SYNC
        assert self._codec is not None
        try:
            block = self._codec(raw)
        except (zlib.error, OSError, ValueError, lzma.LZMAError) as exc:
            raise CorruptObjectError(f"cannot decompress an Avro block: {exc}") from None
        self._records = self._cut(block, count)
        self._index = 0
        return True

    def _cut(self, block: bytes, count: int) -> list[memoryview]:
        from fastavro import schemaless_reader

        stream = io.BytesIO(block)
        view = memoryview(block)
        records: list[memoryview] = []
        start = 0
        schema = self._schema
        try:
            for _ in range(count):
                schemaless_reader(stream, schema, None)
                end = stream.tell()
                records.append(view[start:end])
                start = end
        except Exception as exc:
            raise CorruptObjectError(f"cannot read an Avro record: {exc!r}") from None
        if start != len(block):
            raise CorruptObjectError("an Avro block holds more bytes than its records")
        return records

    def take(self, limit: int, out: list[memoryview]) -> int:
        count = 0
        while count < limit:
            if self._index < len(self._records):
                n = min(limit - count, len(self._records) - self._index)
                out.extend(self._records[self._index : self._index + n])
                self._index += n
                count += n
                continue
            if self._codec is None:
                if not self._parse_header():
                    break
                continue
            if self._pos >= len(self._buf) or not self._next_block():
                break
        return count

    def finish(self, limit: int, out: list[memoryview]) -> int:
        count = self.take(limit, out)
        if count < limit and (self._codec is None or self._pos < len(self._buf)):
            if self._codec is None and not self._buf:
                raise CorruptObjectError("empty object is not an Avro container")
            raise CorruptObjectError("the Avro container is truncated")
        return count


def framer(name: str, *, start_byte: int = 0) -> Framer:
    """A framer for ``ndjson``, ``lines`` or ``avro_ocf``."""
    if name == "ndjson":
        return LineFramer(keep_blank=False, start_byte=start_byte)
    if name == "lines":
        return LineFramer(keep_blank=True, start_byte=start_byte)
    if name == "avro_ocf":
        if start_byte:
            raise ValueError("an Avro container cannot be read from the middle")
        return AvroOcfFramer()
    raise ValueError(f"unknown framing {name!r}")
