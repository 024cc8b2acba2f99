"""Reading one split: ranged downloads ahead on the I/O loop, framing on the pipeline thread.

Owns :class:`Position` (where a split is: object ordinal, record index in that object,
the plain-byte offset of that record when it can be sought to, and the record ordinal in
the split — the lane offset) and :class:`SplitReader`.

A reader has two halves:

* a download task on the source's I/O loop: for each object from the start position, it
  issues ranged GETs of ``chunk_bytes`` pinned by the planned ETag and queues the chunks,
  keeping at most ``prefetch_bytes`` downloaded ahead of the consumer;
* :meth:`SplitReader.take`, called by the source on the pipeline thread: it decompresses
  the queued chunks, frames them into records (``memoryview`` slices, never copied) and
  returns one :class:`~spate.records.PayloadBatch` plus the position after it.

Resuming (B25): an uncompressed line-framed object resumes with a ranged GET at the
record's byte offset; a compressed object or an Avro container is read again from its
start and the first ``record`` records are skipped. Either way exactly the committed
records are skipped. A changed object (412 on ``If-Match``) surfaces as
:class:`~spate_s3._objects.ObjectChangedError` from :meth:`take`, after the records read
before it, so a split never mixes two versions of an object.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections import deque
from collections.abc import Mapping
from concurrent.futures import Future
from dataclasses import dataclass

from spate.errors import ErrorClass, SourceError
from spate.records import Lane, PayloadBatch
from spate_coordination import JsonValue

from spate_s3._compression import CorruptObjectError, Decompressor, decompressor, detect
from spate_s3._framing import Framer, framer
from spate_s3._objects import ObjectChangedError, ObjectStore
from spate_s3._plan import SplitObjects
from spate_s3.config import S3SourceConfig

logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Position:
    """The next record of a split (see the module docstring)."""

    object_index: int = 0
    record: int = 0
    byte: int | None = 0
    offset: int = 0

    def to_progress(self) -> dict[str, JsonValue]:
        return {
            "object": self.object_index,
            "record": self.record,
            "byte": self.byte,
            "offset": self.offset,
        }

    @classmethod
    def from_progress(cls, progress: Mapping[str, object] | bytes | None) -> Position:
        """The position stored by :meth:`to_progress` (the start when there is none)."""
        if progress is None or isinstance(progress, bytes):
            return cls()
        obj, rec, byte, off = (progress.get(k) for k in ("object", "record", "byte", "offset"))
        if not (
            isinstance(obj, int)
            and isinstance(rec, int)
            and isinstance(off, int)
            and (byte is None or isinstance(byte, int))
        ):
            raise ValueError(f"malformed S3 split progress {dict(progress)!r}")
        return cls(obj, rec, byte, off)


class SplitReadError(SourceError):
    """Reading a split failed; ``permanent`` when retrying cannot help (a changed or
    corrupt object, access denied) so the split is quarantined at once (B37)."""

    def __init__(self, reason: str, *, permanent: bool) -> None:
        super().__init__(reason, ErrorClass.FATAL if permanent else ErrorClass.RETRYABLE)
        self.permanent = permanent


_DATA, _END, _DONE, _ERROR = range(4)


class SplitReader:
    """Reads one split from a position; ``take`` on the pipeline thread only."""

    def __init__(
        self,
        split: SplitObjects,
        start: Position,
        *,
        store: ObjectStore,
        config: S3SourceConfig,
        loop: asyncio.AbstractEventLoop,
        wake: threading.Event,
    ) -> None:
        if not 0 <= start.object_index <= len(split.objects):
            raise ValueError(f"split {split.split_id}: position {start} is outside the split")
        self.split = split
        self.lane = Lane(split.split_id, 0)
        self._store = store
        self._config = config
        self._loop = loop
        self._wake = wake
        self._queue: deque[tuple[int, int, int, bytes | BaseException | None]] = deque()
        self._lock = threading.Lock()
        self._buffered = 0
        self._space = asyncio.Event()
        self._future: Future[None] | None = None
        self._stopped = False
        # Consumer state (pipeline thread).
        self.start = start
        self._object = start.object_index
        self._record = start.record
        self._offset = start.offset
        self._skip = 0
        self._resume_byte = start.byte or 0
        if start.record and not start.byte:
            # A compressed object or an Avro container: read it again and skip.
            self._skip, self._record = start.record, 0
        self._decomp: Decompressor | None = None
        self._framer: Framer | None = None
        self._plain = True
        self._ending = False
        self._drained = False
        self._pending_error: SplitReadError | None = None
        self.exhausted = False

    # -- download half (I/O loop)

    def start_download(self) -> None:
        self._future = asyncio.run_coroutine_threadsafe(self._download(), self._loop)

    def stop(self) -> None:
        """Stop downloading (any thread); queued data is dropped."""
        self._stopped = True
        if self._future is not None:
            self._future.cancel()
        self._queue.clear()

    def _put(self, item: tuple[int, int, int, bytes | BaseException | None]) -> None:
        self._queue.append(item)
        self._wake.set()

    async def _wait_for_space(self) -> None:
        while True:
            with self._lock:
                if self._buffered < self._config.prefetch_bytes:
                    return
                self._space.clear()
            await self._space.wait()

    async def _download(self) -> None:
        objects = self.split.objects
        chunk = self._config.chunk_bytes
        try:
            for index in range(self.start.object_index, len(objects)):
                obj = objects[index]
                pos = self._resume_byte if index == self.start.object_index else 0
                while pos < obj.size:
                    await self._wait_for_space()
                    end = min(pos + chunk, obj.size)
                    data = await self._store.read(obj, pos, end)
                    if self._stopped:
                        return
                    with self._lock:
                        self._buffered += len(data)
                    self._put((_DATA, index, pos, data))
                    pos = end
                self._put((_END, index, obj.size, None))
            self._put((_DONE, 0, 0, None))
        except asyncio.CancelledError:
            raise
        except BaseException as exc:  # surfaced to the pipeline thread by take()
            if not self._stopped:
                self._put((_ERROR, 0, 0, exc))

    def _release_space(self, size: int) -> None:
        with self._lock:
            self._buffered -= size
            wake = self._buffered < self._config.prefetch_bytes
        if wake:
            self._loop.call_soon_threadsafe(self._space.set)

    # -- consumer half (pipeline thread)

    @property
    def position(self) -> Position:
        """Where the next record handed out will come from."""
        if self._framer is None:
            byte: int | None = 0 if self._record == 0 else None
        else:
            byte = self._framer.next_byte if self._plain else None
        return Position(self._object, self._record, byte, self._offset)

    def _begin_object(self, index: int, first: bytes, at: int) -> None:
        if index != self._object:
            raise RuntimeError(f"split {self.split.split_id}: object {index} out of order")
        codec = self._config.compression
        if at > 0:
            codec = "none"  # only uncompressed objects are resumed mid-way
        elif codec == "auto":
            codec = detect(first[:4])
        self._plain = codec == "none" and self._config.framing != "avro_ocf"
        self._decomp = decompressor(codec)
        self._framer = framer(self._config.framing, start_byte=at)
        self._ending = False
        self._drained = False
        logger.debug(
            "split %s: reading %s (%s)",
            self.split.split_id,
            self.split.objects[index].key,
            codec,
        )

    def _describe(self, index: int) -> str:
        obj = self.split.objects[min(index, len(self.split.objects) - 1)]
        return self.split.location.describe(obj.key)

    def take(self, limit: int) -> tuple[PayloadBatch, Position] | None:
        """Up to ``limit`` records that are ready, and the position after them.

        Never waits for the network. Raises :class:`SplitReadError` once the records
        before a failure were handed out.
        """
        out: list[memoryview] = []
        if self._pending_error is None:
            try:
                self._fill(limit, out)
            except CorruptObjectError as exc:
                self._pending_error = SplitReadError(
                    f"{self._describe(self._object)}: {exc}", permanent=True
                )
        if not out:
            if self._pending_error is not None:
                raise self._pending_error
            return None
        first = self._offset
        self._offset += len(out)
        batch = PayloadBatch(
            lane=self.lane,
            offsets=list(range(first, self._offset)),
            payloads=out,
            keys=[None] * len(out),
            timestamps=[0] * len(out),
            next_offset=self._offset,
        )
        return batch, self.position

    def _fill(self, limit: int, out: list[memoryview]) -> None:
        while len(out) < limit and not self.exhausted and self._pending_error is None:
            fr = self._framer
            if fr is None:
                if not self._next_item():
                    return
                continue
            final = self._ending and self._drained
            skipping = self._skip > 0
            want = self._skip if skipping else limit - len(out)
            target: list[memoryview] = [] if skipping else out
            got = (fr.finish if final else fr.take)(want, target)
            self._record += got
            if skipping:
                self._skip -= got
            if got == want:
                if skipping:
                    continue
                return
            # The framer used up what it was given.
            if final:
                if self._skip:
                    raise CorruptObjectError(
                        f"holds {self._record} records, fewer than the "
                        f"{self._record + self._skip} already committed"
                    )
                self._end_object()
                continue
            assert self._decomp is not None
            piece = self._decomp.pull()
            if piece is not None:
                fr.push(piece)
                continue
            if self._ending:
                self._decomp.finish()
                self._drained = True
                continue
            if not self._next_item():
                return

    def _end_object(self) -> None:
        self._object += 1
        self._record = 0
        self._framer = None
        self._decomp = None
        self._ending = False
        self._drained = False

    def _next_item(self) -> bool:
        """Apply the next queued download item; False when nothing is queued."""
        if not self._queue:
            return False
        kind, index, at, payload = self._queue.popleft()
        if kind == _DATA:
            assert isinstance(payload, bytes)
            self._release_space(len(payload))
            if self._framer is None:
                self._begin_object(index, payload, at)
            assert self._decomp is not None
            self._decomp.push(payload)
            return True
        if kind == _END:
            if self._framer is None:
                # Nothing was downloaded for it: empty, or resumed at its very end.
                if self._skip:
                    raise CorruptObjectError(
                        f"is empty but {self._skip} of its records were already committed"
                    )
                self._end_object()
            else:
                self._ending = True
            return True
        if kind == _DONE:
            self.exhausted = True
            return False
        assert isinstance(payload, BaseException)
        self._pending_error = self._read_error(payload)
        return False

    def _read_error(self, exc: BaseException) -> SplitReadError:
        if isinstance(exc, ObjectChangedError):
            return SplitReadError(exc.reason, permanent=True)
        if isinstance(exc, SourceError):
            # A fatal class (access denied, an invalid range) does not heal by retrying.
            return SplitReadError(exc.reason, permanent=exc.error_class is ErrorClass.FATAL)
        return SplitReadError(
            f"reading {self._describe(self._object)} failed: {exc!r}", permanent=False
        )
