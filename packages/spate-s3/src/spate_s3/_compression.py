"""Streaming decompression of one object: none, gzip (zlib) and zstd (zstandard).

Owns :class:`Decompressor` — compressed chunks go in with :meth:`~Decompressor.push`,
bounded pieces of plain bytes come out of :meth:`~Decompressor.pull` — and
:func:`detect`, which recognises gzip and zstd by their magic bytes for
``compression: auto``. Concatenated gzip members and zstd frames (what ``cat a.gz b.gz``
or a parallel compressor produce) are read through; a stream that ends inside a member
or frame is an error, never a silently short object.

Output is bounded: input is fed in slices of :data:`_FEED` bytes and gzip output is
capped per call, so a highly compressed chunk never turns into one huge buffer.
"""

from __future__ import annotations

import zlib
from collections import deque
from typing import Literal, Protocol

Codec = Literal["none", "gzip", "zstd"]

GZIP_MAGIC = b"\x1f\x8b"
ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"

_FEED = 1024 * 1024
"""Compressed bytes handed to the decompressor at a time."""
_MAX_OUT = 4 * 1024 * 1024
"""Cap on one gzip output piece."""


class CorruptObjectError(ValueError):
    """The object's bytes cannot be decoded as the configured compression or framing."""


def detect(head: bytes) -> Codec:
    """``gzip`` or ``zstd`` when ``head`` starts with their magic bytes, else ``none``."""
    if head.startswith(GZIP_MAGIC):
        return "gzip"
    if head.startswith(ZSTD_MAGIC):
        return "zstd"
    return "none"


class Decompressor(Protocol):
    def push(self, data: bytes) -> None:
        """Queue a compressed chunk (call only after :meth:`pull` returned ``None``)."""
        ...

    def pull(self) -> bytes | None:
        """The next piece of plain bytes, or ``None`` when more input is needed."""
        ...

    def finish(self) -> None:
        """The object ended: raise :class:`CorruptObjectError` if a stream is truncated."""
        ...


class _Plain:
    def __init__(self) -> None:
        self._chunks: deque[bytes] = deque()

    def push(self, data: bytes) -> None:
        self._chunks.append(data)

    def pull(self) -> bytes | None:
        return self._chunks.popleft() if self._chunks else None

    def finish(self) -> None:
        return None


class _Gzip:
    """gzip members, one after another (RFC 1952 allows several in one file)."""

    def __init__(self) -> None:
        self._d = zlib.decompressobj(16 + zlib.MAX_WBITS)
        self._input: deque[memoryview] = deque()
        self._started = False

    def push(self, data: bytes) -> None:
        view = memoryview(data)
        for start in range(0, len(view), _FEED):
            self._input.append(view[start : start + _FEED])

    def pull(self) -> bytes | None:
        while True:
            d = self._d
            if d.eof:
                # A member ended; bytes after it start the next one (zero padding is not).
                rest = d.unused_data
                if rest and not rest.strip(b"\0"):
                    rest = b""
                if not rest and not self._input:
                    return None
                self._d = zlib.decompressobj(16 + zlib.MAX_WBITS)
                data: bytes | memoryview = rest if rest else self._input.popleft()
            elif d.unconsumed_tail:
                data = d.unconsumed_tail
            elif self._input:
                data = self._input.popleft()
            else:
                return None
            try:
                out = self._d.decompress(data, _MAX_OUT)
            except zlib.error as exc:
                raise CorruptObjectError(f"invalid gzip data: {exc}") from None
            self._started = True
            if out:
                return out

    def finish(self) -> None:
        if self._started and not self._d.eof:
            raise CorruptObjectError("the gzip stream ends inside a member (truncated object)")


class _Zstd:
    """zstd frames, one after another."""

    def __init__(self) -> None:
        import zstandard

        self._new = zstandard.ZstdDecompressor().decompressobj
        self._error = zstandard.ZstdError
        self._d = self._new()
        self._input: deque[memoryview | bytes] = deque()
        self._started = False

    def push(self, data: bytes) -> None:
        view = memoryview(data)
        for start in range(0, len(view), _FEED):
            self._input.append(view[start : start + _FEED])

    def pull(self) -> bytes | None:
        while self._input:
            data = self._input.popleft()
            if self._d.eof:
                self._d = self._new()
                self._started = False
            try:
                out: bytes = self._d.decompress(data)
            except self._error as exc:
                raise CorruptObjectError(f"invalid zstd data: {exc}") from None
            self._started = True
            if self._d.eof and self._d.unused_data:
                # Another frame follows in the same input: read it next.
                self._input.appendleft(self._d.unused_data)
            if out:
                return out
        return None

    def finish(self) -> None:
        if self._started and not self._d.eof:
            raise CorruptObjectError("the zstd stream ends inside a frame (truncated object)")


def decompressor(codec: Codec) -> Decompressor:
    """A fresh decompressor for one object."""
    if codec == "gzip":
        return _Gzip()
    if codec == "zstd":
        return _Zstd()
    return _Plain()
