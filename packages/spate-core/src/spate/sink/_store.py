"""Spool stores: where a spool tier keeps batches durably (ADR 0005; B54, B55).

A :class:`SpoolStore` holds encoded records in batches. The spool tier appends a batch,
makes it durable with :meth:`SpoolStore.sync`, hands the records on, and releases the
batch once the next tier durably accepted all of it; the store may then delete the space.
On start :meth:`SpoolStore.recover` returns every batch left by an earlier run, in order,
for replay. Stores are plugins (entry-point group ``spate.stores``, entry name = the
``store:`` value of a spool); :class:`JsonlStore` (``jsonl``) is built in.

The JSONL segment format, one file ``seg-<n>-<origin>.jsonl`` per segment (``origin``:
a nonce of the run that wrote it, so batch identities never repeat across runs)::

    <crc32 of payload, 8 hex digits> <payload>\\n     one record (payload: one JSON value)
    <crc32 of payload, 8 hex digits> #<count>\\n      end of a batch of <count> records

A batch counts only once its end line is complete. ``seg-<n>-<origin>.released`` lists the byte
positions of the segment's batches already released (written without fsync: a lost
note only replays a delivered batch once more); the segment and its note are deleted
together once every batch is released. On recovery the newest segment's
tail after its last complete batch (a crash mid-write) is cut; a bad line anywhere else
is corruption and start-up fails naming the segment and byte offset. Does not own:
encoding rows (the spool tier does that), acks, or forwarding.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
import uuid
import zlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

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
    :meth:`append` and :meth:`sync` on the pipeline thread; :meth:`release` from sink
    worker threads. Implementations must be thread-safe.
    """

    def recover(self) -> list[StoredBatch]:
        """Open the store; return every batch left by earlier runs, oldest first.

        Cuts an incomplete batch at the tail (a crash mid-write); raises
        :class:`SpoolCorruptError` naming the place for anything else unreadable.
        """
        ...

    def append(self, records: Sequence[bytes]) -> BatchRef:
        """Write one batch (not yet durable). Raises ``SinkError`` when the write fails
        (a full disk); the batch is then not in the store."""
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


_END = b"#"


def frame(payload: bytes) -> bytes:
    """One framed line: ``<crc32 hex> <payload>\\n`` (payload must hold no newline)."""
    return b"%08x %s\n" % (zlib.crc32(payload), payload)


def _unframe(line: bytes) -> bytes | None:
    """The payload of a complete framed line (without its newline), or None if bad."""
    if len(line) < 9 or line[8:9] != b" ":
        return None
    payload = line[9:]
    try:
        crc = int(line[:8], 16)
    except ValueError:
        return None
    return payload if zlib.crc32(payload) == crc else None


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
    """The built-in store: JSON-lines segment files with per-line CRC32 framing."""

    def __init__(
        self, directory: str, *, segment_bytes: int = 64 * 1024 * 1024, nonce: str | None = None
    ) -> None:
        """``nonce`` names the segments this run writes (default: a random one)."""
        if segment_bytes < 1:
            raise ValueError("segment_bytes must be positive")
        self.directory = directory
        self.nonce = nonce if nonce else uuid.uuid4().hex[:12]
        self.segment_bytes = segment_bytes
        self._lock = threading.Lock()
        self._segments: dict[int, _Segment] = {}
        self._current: _Segment | None = None
        self._file: int | None = None
        self._next_number = 1
        self._dirty = False

    # -- recovery ------------------------------------------------------------------------

    def recover(self) -> list[StoredBatch]:
        os.makedirs(self.directory, exist_ok=True)
        names = sorted(
            n for n in os.listdir(self.directory) if n.startswith("seg-") and n.endswith(".jsonl")
        )
        found: list[StoredBatch] = []
        with self._lock:
            for i, name in enumerate(names):
                number, origin = _parse_name(name)
                path = os.path.join(self.directory, name)
                batches, size = self._read_segment(path, number, origin, last=i == len(names) - 1)
                done = _read_released(path)
                batches = [b for b in batches if b.ref.position not in done]
                if not batches:
                    _unlink(path)
                    _unlink(_released_path(path))
                    continue
                seg = _Segment(number, path, origin, size, {b.ref.position for b in batches})
                seg.appended = len(batches)
                self._segments[number] = seg
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

    def _read_segment(
        self, path: str, number: int, origin: str, *, last: bool
    ) -> tuple[list[StoredBatch], int]:
        with open(path, "rb") as fh:
            data = fh.read()
        batches: list[StoredBatch] = []
        records: list[bytes] = []
        batch_start = 0
        offset = 0
        good_end = 0
        while offset < len(data):
            newline = data.find(b"\n", offset)
            line = data[offset:] if newline < 0 else data[offset:newline]
            payload = None if newline < 0 else _unframe(line)
            if payload is None:
                rest = data[offset:] if newline < 0 else data[newline + 1 :]
                if last and (newline < 0 or not rest.strip(b"\x00")):
                    break  # torn tail: the crash hit the last line of the newest segment
                raise SpoolCorruptError(
                    f"spool segment {path} at byte {offset}", "corrupt record (bad frame or CRC)"
                )
            if payload.startswith(_END):
                if payload[1:] != str(len(records)).encode():
                    raise SpoolCorruptError(
                        f"spool segment {path} at byte {offset}",
                        f"batch end says {payload[1:]!r} records, found {len(records)}",
                    )
                batches.append(StoredBatch(BatchRef(number, batch_start, origin), records))
                records = []
                good_end = newline + 1
                batch_start = good_end
            else:
                records.append(payload)
            offset = newline + 1
        if good_end < len(data):
            logger.warning(
                "spool segment %s: cut a torn tail of %d bytes at byte %d (%d incomplete records)",
                path,
                len(data) - good_end,
                good_end,
                len(records),
            )
            with open(path, "r+b") as fh:
                fh.truncate(good_end)
                os.fsync(fh.fileno())
        return batches, good_end

    # -- writing -------------------------------------------------------------------------

    def append(self, records: Sequence[bytes]) -> BatchRef:
        chunks = [frame(r) for r in records]
        chunks.append(frame(b"#%d" % len(records)))
        data = b"".join(chunks)
        with self._lock:
            seg = self._current
            try:
                if seg is not None and seg.size > 0 and seg.size + len(data) > self.segment_bytes:
                    self._rotate()
                    seg = None
            except OSError as exc:
                raise SinkError(
                    f"spool {self.directory}: closing a segment failed: {exc.strerror or exc}",
                    ErrorClass.FATAL,
                ) from exc
            if seg is None:
                seg = self._open_segment()
            position = seg.size
            fd = self._file
            assert fd is not None
            try:
                _write_all(fd, data)
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
            seg.size += len(data)
            seg.batches.add(position)
            seg.appended += 1
            self._dirty = True
            return BatchRef(seg.number, position, seg.origin)

    def sync(self) -> None:
        with self._lock:
            if not self._dirty or self._file is None:
                return
            try:
                os.fsync(self._file)
            except OSError as exc:
                raise SinkError(
                    f"spool {self.directory}: fsync failed: {exc.strerror or exc}",
                    ErrorClass.FATAL,
                ) from exc
            self._dirty = False

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
        self._segments[number] = seg
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
        del self._segments[seg.number]

    # -- releasing -----------------------------------------------------------------------

    def release(self, ref: BatchRef) -> None:
        with self._lock:
            seg = self._segments.get(ref.segment)
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
        with self._lock:
            if self._file is not None:
                try:
                    self._rotate()
                except OSError:
                    logger.warning("spool %s: closing the segment failed", self.directory)


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


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        view = view[written:]


def _fsync_dir(directory: str) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
