"""Spool stores: where a spool tier keeps batches durably (ADR 0005; B54, B55, B101).

A :class:`SpoolStore` holds encoded records in batches. The spool tier appends a batch,
makes it durable with :meth:`SpoolStore.sync`, hands the records on, and releases the
batch once the next tier durably accepted all of it; the store may then delete the space.
On start :meth:`SpoolStore.recover` returns every batch left by an earlier run, in order,
for replay. Stores are plugins (entry-point group ``spate.stores``, entry name = the
``store:`` value of a spool); :class:`JsonlStore` (``jsonl``) is built in.

The segment format (version 3), one file ``seg-<n>-<origin>.jsonl`` per segment
(``origin``: a nonce of the run that wrote it, so batch identities never repeat across runs;
the name keeps the ``.jsonl`` of the first formats)::

    spate-spool 3\n                                  segment header: the format version
    <frame><lengths><records>                         one batch

``frame`` is 20 bytes, little-endian: the CRC32 of the rest of the batch (``u32``), the
record count (``u32``), the length of the rest (``u64``: lengths and records) and the
CRC32 of those 16 bytes (``u32``); ``lengths`` is one ``u32`` per record and ``records``
the records back to back. A record is any bytes (the spool tier writes JSON for rows
and one packed record for a run of raw ``bytes`` rows). One join and one CRC32 per
batch, whatever its size; a batch counts only once all of it is in the file, and the
frame's own CRC tells a torn frame from a corrupt one. Format 2 segments (``spate-spool
2``: a ``<crc32, 8 hex digits> <count> <length>`` line, then the records as JSON lines)
left by an earlier version are still read, never written; a segment with neither header
is not read (start-up fails naming it).
``seg-<n>-<origin>.released`` lists the byte
positions of the segment's batches already released (written without fsync: a lost
note only replays a delivered batch once more); the segment and its note are deleted
together once every batch is released. On recovery the newest segment's
tail after its last complete batch (a crash mid-write) is cut; a bad batch anywhere else
is corruption and start-up fails naming the segment and the batch's byte offset, the
newest segment's last batch included when all of it is there (a valid frame, then as
many bytes as it declares) and only its CRC is bad: a torn write cannot leave that, so
the batch was acknowledged and a byte of it changed on the medium.

A spool directory has one owner at a time (B114): :meth:`JsonlStore.recover` takes an
exclusive ``flock`` on the directory and fails start-up naming it while another spool,
in this process or another, holds it; the kernel drops the lock when the owner dies.
Worker processes (``spate run --processes N``) each get their own subdirectory
``<dir>/w<index>`` (:func:`worker_directory`), so a restarted worker recovers only its
own segments. Segments left where no worker of the current layout looks (the top
directory of a single-process run, or ``w<j>`` of a run with more workers) are adopted
by one worker (:func:`adopted_directories`): moved into its directory, under the lock
of the directory they leave, and replayed there under their original identities.

Does not own:
encoding rows (the spool tier does that), acks, or forwarding.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import struct
import sys
import threading
import uuid
import zlib
from array import array
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

from spate._locks import lock_exclusive
from spate.errors import ErrorClass, SinkError

logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True, order=True)
class BatchRef:
    """Where a batch sits in a store: ``(segment, position)``, unique and ordered.

    ``position`` is the batch's byte offset in the segment for the JSONL store. The pair
    is the batch's replay identity.
    """

    segment: int
    position: int
    origin: str = ""
    """The run that wrote the segment (a nonce): with segment and position, an identity
    that never repeats across runs."""

    def __str__(self) -> str:
        return f"{self.segment}:{self.position}"

    @property
    def identity(self) -> str:
        """``<origin>-<segment>-<position>``: names this batch's rows in every run."""
        return f"{self.origin}-{self.segment}-{self.position}"


@dataclass(frozen=True, slots=True)
class StoredBatch:
    """A batch found by :meth:`SpoolStore.recover`: its identity and encoded records."""

    ref: BatchRef
    records: list[bytes]


class SpoolCorruptError(SinkError):
    """A store holds data it cannot read (not a torn tail): start-up must stop."""

    def __init__(self, where: str, reason: str) -> None:
        super().__init__(f"{where}: {reason}", ErrorClass.FATAL)
        self.where = where


@runtime_checkable
class SpoolStore(Protocol):
    """A durable, ordered store of batches of encoded records.

    Called by the spool tier: :meth:`recover` once before anything else, then
    :meth:`append` and :meth:`sync` on the spool's writer thread (one at a time, in
    order); :meth:`release` from sink worker threads and :meth:`collect` from the
    pipeline thread. Implementations must be thread-safe.
    """

    def recover(self) -> list[StoredBatch]:
        """Open the store; return every batch left by earlier runs, oldest first.

        Cuts an incomplete batch at the tail (a crash mid-write); raises
        :class:`SpoolCorruptError` naming the place for anything else unreadable.
        """
        ...

    def append(self, records: Sequence[bytes]) -> BatchRef:
        """Write one batch (not yet durable); a record is any bytes (JSON text, or a packed
        run of raw rows with newlines, NULs and bytes that are not UTF-8). Raises
        ``SinkError`` when the write fails (a full disk); the batch is then not in the
        store."""
        ...

    def sync(self) -> None:
        """Make every appended batch durable (fsync). Raises ``SinkError`` on failure."""
        ...

    def release(self, ref: BatchRef) -> None:
        """The next tier durably holds all of ``ref``; its space may be reclaimed."""
        ...

    def collect(self) -> None:
        """Reclaim the space of released batches now, the open segment included."""
        ...

    def held_bytes(self) -> int:
        """Bytes the store holds (appended and not yet reclaimed)."""
        ...

    def segments(self) -> int:
        """Units of storage currently held (files for the JSONL store)."""
        ...

    def close(self) -> None:
        """Close files; held batches stay for the next run."""
        ...


MAGIC = b"spate-spool 3\n"
"""The first line of a segment in format version 3 (the one written)."""

MAGIC_V2 = b"spate-spool 2\n"
"""The first line of a segment in format version 2 (read only)."""

_FRAME = struct.Struct("<IIQI")
"""A format-3 batch frame: CRC32 of the rest, record count, length of the rest, CRC32
of the frame's first 16 bytes."""

_SIZES = struct.Struct("<IQ")
_CRC = struct.Struct("<I")

_U32 = next(code for code in "ILH" if array(code).itemsize == 4)
"""The ``array`` type code of an unsigned 32-bit integer (reading lengths back)."""
"""The ``array`` type code of an unsigned 32-bit integer."""

_SWAP = sys.byteorder != "little"


def pack_lengths(lengths: Iterable[int], count: int) -> bytes:
    """The ``count`` ``lengths`` as little-endian ``u32`` values in one allocation of the
    exact size (``struct.error`` for a length past 4 GiB)."""
    return struct.pack(f"<{count}I", *lengths)


def unpack_lengths(data: bytes | memoryview) -> array[int]:
    """Inverse of :func:`pack_lengths`."""
    lengths = array(_U32)
    lengths.frombytes(data)
    if _SWAP:  # pragma: no cover - big-endian machines
        lengths.byteswap()
    return lengths


_GATHER = 64
"""Batches of at most this many records are written from the records themselves (one
``writev``); larger ones (JSON records, one per row) are joined once."""


def frame_batch(records: Sequence[bytes]) -> list[bytes]:
    """One format-3 batch as the parts to write: the frame with the records' lengths,
    then the records (a few) or their join (many).

    One CRC32 over the batch and no copy of a record, whatever its size, for a batch of
    a few records (a packed run)."""
    try:
        lengths = pack_lengths(map(len, records), len(records))
    except struct.error as exc:
        raise SinkError("spool: a record over 4 GiB cannot be spooled", ErrorClass.FATAL) from exc
    body = list(records) if len(records) <= _GATHER else [b"".join(records)]
    sizes = _SIZES.pack(len(records), len(lengths) + sum(map(len, body)))
    crc = zlib.crc32(lengths, zlib.crc32(sizes))
    for part in body:
        crc = zlib.crc32(part, crc)
    frame = _CRC.pack(crc) + sizes
    return [frame + _CRC.pack(zlib.crc32(frame)) + lengths, *body]


def _unframe_batch(data: bytes, offset: int) -> tuple[list[bytes], int] | str:
    """The records of the format-3 batch at ``offset`` and where it ends, or why not.

    The reason starts with ``torn`` when the batch runs past the end of ``data``."""
    if len(data) - offset < _FRAME.size:
        return "torn batch header"
    crc, count, length, head_crc = _FRAME.unpack_from(data, offset)
    start = offset + _FRAME.size
    if zlib.crc32(data[offset : start - 4]) != head_crc:
        return "bad batch header"
    end = start + length
    if end > len(data):
        return "torn batch"
    view = memoryview(data)
    if zlib.crc32(view[start:end], zlib.crc32(view[offset + 4 : start - 4])) != crc:
        return "bad CRC"
    body = start + 4 * count
    if body > end:
        return f"batch header says {count} records in {length} bytes"
    lengths = unpack_lengths(view[start:body])
    if sum(lengths) != end - body:
        return f"batch header says {length} bytes, its records hold {sum(lengths) + body - start}"
    records = []
    for size in lengths:
        records.append(data[body : body + size])
        body += size
    return records, end


def _unframe_v2(data: bytes, offset: int) -> tuple[list[bytes], int] | str:
    """The records of the format-2 batch at ``offset`` and where it ends, or why not."""
    newline = data.find(b"\n", offset, offset + 64)
    if newline < 0:
        return "torn batch header" if len(data) - offset < 64 else "bad batch header"
    header = data[offset:newline].split(b" ")
    try:
        crc, count, length = int(header[0], 16), int(header[1]), int(header[2])
    except (ValueError, IndexError):
        return "bad batch header"
    if len(header) != 3 or len(header[0]) != 8 or count < 0 or length < 0:
        return "bad batch header"
    end = newline + 1 + length
    if end > len(data):
        return "torn batch"
    body = data[newline + 1 : end]
    if zlib.crc32(body, zlib.crc32(data[offset + 9 : newline + 1])) != crc:
        return "bad CRC"
    records = body.split(b"\n")
    if records.pop() != b"" or len(records) != count:
        return f"batch header says {count} records, found {len(records)}"
    return records, end


@dataclass(slots=True)
class _Segment:
    number: int
    path: str
    origin: str
    size: int = 0
    batches: set[int] = field(default_factory=set)
    """Positions of batches not yet released."""
    appended: int = 0


class JsonlStore:
    """The built-in store: segment files, one length-framed, CRC32-checked batch after
    another (format 3; format-2 segments are still read)."""

    def __init__(
        self,
        directory: str,
        *,
        segment_bytes: int = 64 * 1024 * 1024,
        nonce: str | None = None,
        adopt: Sequence[str] = (),
    ) -> None:
        """``nonce`` names the segments this run writes (default: a random one);
        ``adopt`` lists spool directories whose segments :meth:`recover` moves into
        ``directory`` when no running spool holds them (B114)."""
        if segment_bytes < 1:
            raise ValueError("segment_bytes must be positive")
        self.directory = directory
        self.adopt = tuple(adopt)
        self._owner: int | None = None
        """The descriptor holding the directory's lock, from recover() to close()."""
        self.nonce = nonce if nonce else uuid.uuid4().hex[:12]
        self.segment_bytes = segment_bytes
        self._lock = threading.Lock()
        # Keyed by number and origin: an adopted directory numbers its segments from 1
        # too, so a number alone names two segments after an adoption (B114).
        self._segments: dict[tuple[int, str], _Segment] = {}
        self._current: _Segment | None = None
        self._file: int | None = None
        self._next_number = 1
        self._dirty = False

    # -- recovery ------------------------------------------------------------------------

    def recover(self) -> list[StoredBatch]:
        os.makedirs(self.directory, exist_ok=True)
        self._own()
        try:
            return self._recover()
        except BaseException:
            os.close(self._owner)  # type: ignore[arg-type]
            self._owner = None
            raise

    def _recover(self) -> list[StoredBatch]:
        for other in self.adopt:
            self._adopt(other)
        names = sorted(
            n for n in os.listdir(self.directory) if n.startswith("seg-") and n.endswith(".jsonl")
        )
        # Each run writes its segments one after another: only the newest of each run
        # (origin) can end in a torn write, whichever runs' segments share the directory.
        newest = {_parse_name(name)[1]: name for name in names}
        found: list[StoredBatch] = []
        with self._lock:
            for name in names:
                number, origin = _parse_name(name)
                path = os.path.join(self.directory, name)
                last = newest[origin] == name
                batches, size = self._read_segment(path, number, origin, last=last)
                done = _read_released(path)
                batches = [b for b in batches if b.ref.position not in done]
                if not batches:
                    _unlink(path)
                    _unlink(_released_path(path))
                    continue
                seg = _Segment(number, path, origin, size, {b.ref.position for b in batches})
                seg.appended = len(batches)
                self._segments[number, origin] = seg
                found.extend(batches)
                self._next_number = max(self._next_number, number + 1)
            for name in os.listdir(self.directory):
                if name.startswith("seg-") and name.endswith(".released"):
                    segment = os.path.join(self.directory, name[: -len(".released")] + ".jsonl")
                    if not os.path.exists(segment):
                        _unlink(os.path.join(self.directory, name))  # its segment is gone
            if names:
                self._next_number = max(self._next_number, _parse_name(names[-1])[0] + 1)
                _fsync_dir(self.directory)
        return found

    def _own(self) -> None:
        """Lock the directory for this store, or fail naming it (B114)."""
        if self._owner is not None:
            return
        try:
            fd = lock_exclusive(self.directory)
        except OSError as exc:
            raise SinkError(
                f"spool {self.directory}: cannot lock the directory: {exc.strerror or exc}",
                ErrorClass.FATAL,
            ) from exc
        if fd is None:
            raise SinkError(
                f"spool directory {self.directory} is in use by another running spool (in "
                "another process, or another spool of this one); give each spool its own dir",
                ErrorClass.FATAL,
            )
        self._owner = fd

    def _adopt(self, other: str) -> None:
        """Move the segments of the spool directory ``other`` into this one, unless a
        running spool holds ``other`` (B114)."""
        try:
            fd = lock_exclusive(other)
        except FileNotFoundError:
            return
        except OSError as exc:
            raise SinkError(
                f"spool {self.directory}: cannot lock {other} to adopt its segments: "
                f"{exc.strerror or exc}",
                ErrorClass.FATAL,
            ) from exc
        if fd is None:
            logger.info(
                "spool %s: %s is held by a running spool; left to it", self.directory, other
            )
            return
        try:
            names = [n for n in sorted(os.listdir(other)) if n.startswith("seg-")]
            for name in names:
                target = os.path.join(self.directory, name)
                if os.path.exists(target):
                    raise SinkError(
                        f"spool {self.directory}: cannot adopt {os.path.join(other, name)}: "
                        f"{target} exists",
                        ErrorClass.FATAL,
                    )
                os.rename(os.path.join(other, name), target)
            if names:
                _fsync_dir(self.directory)
                _fsync_dir(other)
                logger.warning(
                    "spool %s: adopted %d file(s) of %s, left by a run with another number "
                    "of worker processes",
                    self.directory,
                    len(names),
                    other,
                )
        finally:
            os.close(fd)

    def _read_segment(
        self, path: str, number: int, origin: str, *, last: bool
    ) -> tuple[list[StoredBatch], int]:
        with open(path, "rb") as fh:
            data = fh.read()
        batches, good_end = _read_batches(data, path, number, origin, last=last)
        if good_end < len(data):
            logger.warning(
                "spool segment %s: cut a torn tail of %d bytes at byte %d",
                path,
                len(data) - good_end,
                good_end,
            )
            with open(path, "r+b") as fh:
                fh.truncate(good_end)
                os.fsync(fh.fileno())
        return batches, good_end

    # -- writing -------------------------------------------------------------------------

    def append(self, records: Sequence[bytes]) -> BatchRef:
        parts = frame_batch(records)
        size = sum(map(len, parts))
        with self._lock:
            seg = self._current
            try:
                if seg is not None and seg.size > 0 and seg.size + size > self.segment_bytes:
                    self._rotate()
                    seg = None
            except OSError as exc:
                raise SinkError(
                    f"spool {self.directory}: closing a segment failed: {exc.strerror or exc}",
                    ErrorClass.FATAL,
                ) from exc
            if seg is None:
                seg = self._open_segment()
            if seg.size == 0:
                parts.insert(0, MAGIC)
                size += len(MAGIC)
            position = seg.size
            fd = self._file
            assert fd is not None
            try:
                _write_all(fd, parts, size)
            except OSError as exc:
                # Cut what part of the batch reached the file so no torn batch stays.
                try:
                    os.ftruncate(fd, position)
                except OSError:
                    logger.warning("spool %s: could not cut a failed write", seg.path)
                raise SinkError(
                    f"spool {self.directory}: writing a batch of {len(records)} records "
                    f"failed: {exc.strerror or exc}",
                    ErrorClass.RETRYABLE,
                ) from exc
            if position == 0:
                position = len(MAGIC)  # the batch starts after the segment header
            seg.size += size
            seg.batches.add(position)
            seg.appended += 1
            self._dirty = True
            return BatchRef(seg.number, position, seg.origin)

    def sync(self) -> None:
        """fsync the open segment without holding the store's lock (on a duplicate of its
        descriptor, which a rotation meanwhile cannot close): ``held_bytes`` and
        ``release`` answer while the disk works."""
        with self._lock:
            if not self._dirty or self._file is None:
                return
            fd = os.dup(self._file)
            self._dirty = False  # an append from now on sets it again
        try:
            os.fsync(fd)
        except OSError as exc:
            with self._lock:
                self._dirty = True
            raise SinkError(
                f"spool {self.directory}: fsync failed: {exc.strerror or exc}",
                ErrorClass.FATAL,
            ) from exc
        finally:
            os.close(fd)

    def _open_segment(self) -> _Segment:
        number = self._next_number
        self._next_number += 1
        path = os.path.join(self.directory, f"seg-{number:012d}-{self.nonce}.jsonl")
        try:
            self._file = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
            _fsync_dir(self.directory)
        except OSError as exc:
            raise SinkError(
                f"spool {self.directory}: cannot create segment {path}: {exc.strerror or exc}",
                ErrorClass.RETRYABLE,
            ) from exc
        seg = _Segment(number, path, self.nonce)
        self._segments[number, self.nonce] = seg
        self._current = seg
        return seg

    def _rotate(self) -> None:
        """Close the open segment (durably) and reclaim it if already released."""
        seg = self._current
        if seg is None or self._file is None:
            return
        if self._dirty:
            os.fsync(self._file)
            self._dirty = False
        os.close(self._file)
        self._file = None
        self._current = None
        self._reclaim(seg)

    def _reclaim(self, seg: _Segment) -> None:
        if seg.batches or seg is self._current:
            return
        _unlink(seg.path)
        _unlink(_released_path(seg.path))
        _fsync_dir(self.directory)
        del self._segments[seg.number, seg.origin]

    # -- releasing -----------------------------------------------------------------------

    def release(self, ref: BatchRef) -> None:
        with self._lock:
            seg = self._segments.get((ref.segment, ref.origin))
            if seg is None or ref.position not in seg.batches:
                raise RuntimeError(f"spool {self.directory}: batch {ref} released twice")
            seg.batches.discard(ref.position)
            if seg.batches or seg is self._current:
                # Noted (not fsynced) so a restart does not replay it; losing the note
                # only replays a delivered batch once more (at-least-once).
                with open(_released_path(seg.path), "ab") as fh:
                    fh.write(b"%d\n" % ref.position)
            else:
                self._reclaim(seg)

    def collect(self) -> None:
        with self._lock:
            seg = self._current
            if seg is not None and not seg.batches:
                self._rotate()

    def held_bytes(self) -> int:
        with self._lock:
            return sum(s.size for s in self._segments.values())

    def segments(self) -> int:
        with self._lock:
            return len(self._segments)

    def close(self) -> None:
        """Close the open segment and give up the directory's lock."""
        with self._lock:
            if self._file is not None:
                try:
                    self._rotate()
                except OSError:
                    logger.warning("spool %s: closing the segment failed", self.directory)
            if self._owner is not None:
                os.close(self._owner)
                self._owner = None


_WORKER_DIR = re.compile(r"w(\d+)")


def worker_directory(root: str, worker: tuple[int, int] | None) -> str:
    """The directory a spool configured with ``dir: root`` uses: ``root`` itself, or
    ``root/w<index>`` in worker ``index`` of ``count`` (``worker``) (B114)."""
    return root if worker is None else os.path.join(root, f"w{worker[0]}")


def adopted_directories(root: str, worker: tuple[int, int] | None) -> list[str]:
    """The spool directories under ``root`` whose segments this process takes over, as
    no process of the current layout uses them (B114).

    A single process (``worker`` None) adopts every ``root/w<j>``. Worker ``i`` of ``n``
    adopts ``root/w<j>`` for every ``j >= n`` with ``j % n == i``, and worker 0 also the
    segments in ``root`` itself.
    """
    try:
        names = sorted(os.listdir(root))
    except FileNotFoundError:
        return []
    found = [(int(m[1]), n) for n in names if (m := _WORKER_DIR.fullmatch(n))]
    if worker is None:
        return [os.path.join(root, n) for _, n in found]
    index, count = worker
    adopt = [root] if index == 0 else []
    adopt += [os.path.join(root, n) for j, n in found if j >= count and j % count == index]
    return adopt


def _read_batches(
    data: bytes, path: str, number: int, origin: str, *, last: bool
) -> tuple[list[StoredBatch], int]:
    """Complete batches of a segment (format 3 or 2) and where they end.

    ``last``: the newest segment, whose tail after its last complete batch is torn (a
    crash mid-write), not corrupt."""
    if data.startswith(MAGIC):
        unframe = _unframe_batch
        offset = len(MAGIC)
    elif data.startswith(MAGIC_V2):
        unframe = _unframe_v2
        offset = len(MAGIC_V2)
    elif last and (MAGIC.startswith(data) or MAGIC_V2.startswith(data)):
        return [], 0  # a crash while the header was written
    else:
        raise _unknown_format(path)
    batches: list[StoredBatch] = []
    while offset < len(data):
        read = unframe(data, offset)
        if isinstance(read, str):
            # The newest segment may end in a batch cut short by a crash (or followed
            # by zeros a file system left for it): cut it. Anything else is corruption,
            # a complete batch with a bad CRC included: a torn write cannot leave a
            # valid frame followed by a body of the declared length, so that batch was
            # fsynced and acknowledged, and a byte of it changed on the medium.
            if last and (read.startswith("torn") or not data[offset:].strip(b"\x00")):
                break
            raise SpoolCorruptError(
                f"spool segment {path} at byte {offset}", f"corrupt batch ({read})"
            )
        records, end = read
        batches.append(StoredBatch(BatchRef(number, offset, origin), records))
        offset = end
    return batches, offset


def read_records(path: str) -> list[bytes]:
    """The records of every complete batch of the segment at ``path``, read-only.

    For inspection (and tests) while a spool runs: a batch still being written is left
    out, and nothing on disk is cut or changed, unlike recovery. Corruption before the
    last complete batch still raises :class:`SpoolCorruptError`.
    """
    with open(path, "rb") as fh:
        data = fh.read()
    number, origin = _parse_name(os.path.basename(path))
    batches = _read_batches(data, path, number, origin, last=True)[0]
    return [record for batch in batches for record in batch.records]


def _unknown_format(path: str) -> SpoolCorruptError:
    """A segment that starts with neither the format-3 nor the format-2 header."""
    return SpoolCorruptError(
        f"spool segment {path} at byte 0", "no `spate-spool 3` (or `spate-spool 2`) header"
    )


def _parse_name(name: str) -> tuple[int, str]:
    """``seg-<number>-<origin>.jsonl`` → ``(number, origin)``."""
    stem = name[len("seg-") : -len(".jsonl")]
    number, _, origin = stem.partition("-")
    return int(number), origin


def _released_path(segment: str) -> str:
    return segment[: -len(".jsonl")] + ".released"


def _read_released(segment: str) -> set[int]:
    """Positions noted as released for ``segment`` (a torn last line is ignored)."""
    try:
        with open(_released_path(segment), "rb") as fh:
            lines = fh.read().split(b"\n")
    except FileNotFoundError:
        return set()
    return {int(line) for line in lines[:-1] if line.isdigit()}


def _unlink(path: str) -> None:
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)


def _write_all(fd: int, parts: list[bytes], size: int) -> None:
    """Write ``parts`` (``size`` bytes in all) in one ``writev`` unless it falls short."""
    written = os.writev(fd, parts)
    if written == size:
        return
    view = memoryview(b"".join(parts))[written:]
    while view:
        written = os.write(fd, view)
        view = view[written:]


def _fsync_dir(directory: str) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
