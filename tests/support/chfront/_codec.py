"""HTTP body codecs of the front: request ``Content-Encoding`` and response compression.

Request bodies may be compressed with lz4, zstd, gzip or deflate. clickhouse-connect
compresses every insert block separately, so an lz4 or zstd body is a sequence of
*concatenated frames*: every frame is decoded, never just the first (decoding one frame
silently kept 65,536 of 100,000 rows in an earlier attempt). ``decode_body`` also reports
how many frames it saw, so tests can prove a body really was multi-block.

Responses are compressed only when the request asked for it the way ClickHouse requires
(``enable_http_compression=1`` and an ``Accept-Encoding`` the server supports).
"""

from __future__ import annotations

import gzip
import zlib
from dataclasses import dataclass

import lz4.frame
import zstandard

from ._errors import CANNOT_DECOMPRESS, UNKNOWN_COMPRESSION_METHOD, ClickHouseError

# Response encodings in the order the server prefers them when a client accepts several.
RESPONSE_ENCODINGS = ("gzip", "deflate", "zstd", "lz4")


@dataclass(frozen=True, slots=True)
class DecodedBody:
    data: bytes
    encoding: str
    frames: int


def _lz4_frames(raw: bytes) -> tuple[bytes, int]:
    parts: list[bytes] = []
    rest = raw
    while rest:
        decoder = lz4.frame.LZ4FrameDecompressor()
        parts.append(decoder.decompress(rest))
        if not decoder.eof:
            raise ClickHouseError.own(CANNOT_DECOMPRESS, "Truncated LZ4 frame in request body")
        rest = decoder.unused_data
    return b"".join(parts), len(parts)


def _zstd_frames(raw: bytes) -> tuple[bytes, int]:
    parts: list[bytes] = []
    rest = raw
    context = zstandard.ZstdDecompressor()
    while rest:
        decoder = context.decompressobj()
        parts.append(decoder.decompress(rest))
        if not decoder.eof:
            raise ClickHouseError.own(CANNOT_DECOMPRESS, "Truncated zstd frame in request body")
        rest = decoder.unused_data
    return b"".join(parts), len(parts)


def decode_body(raw: bytes, content_encoding: str | None) -> DecodedBody:
    """Decompress a request body according to its ``Content-Encoding`` header."""
    encoding = (content_encoding or "").strip().lower()
    if encoding in ("", "identity"):
        return DecodedBody(raw, "none", 1 if raw else 0)
    try:
        if encoding == "lz4":
            data, frames = _lz4_frames(raw)
        elif encoding == "zstd":
            data, frames = _zstd_frames(raw)
        elif encoding in ("gzip", "x-gzip"):
            data, frames = gzip.decompress(raw), 1
        elif encoding == "deflate":
            data, frames = zlib.decompress(raw), 1
        else:
            raise ClickHouseError.own(
                UNKNOWN_COMPRESSION_METHOD, f"Unknown HTTP compression method: {encoding}"
            )
    except ClickHouseError:
        raise
    except (RuntimeError, zstandard.ZstdError, OSError, EOFError, zlib.error) as exc:
        raise ClickHouseError.own(
            CANNOT_DECOMPRESS, f"Cannot decompress {encoding} request body: {exc}"
        ) from exc
    return DecodedBody(data, encoding, frames)


def choose_response_encoding(accept_encoding: str | None) -> str | None:
    """The response encoding for an ``Accept-Encoding`` header, or None for identity."""
    if not accept_encoding:
        return None
    offered = {part.split(";")[0].strip().lower() for part in accept_encoding.split(",")}
    for encoding in RESPONSE_ENCODINGS:
        if encoding in offered:
            return encoding
    return None


def encode_response(data: bytes, encoding: str) -> bytes:
    """Compress a whole response body (one frame or member)."""
    if encoding == "gzip":
        return gzip.compress(data, compresslevel=1)
    if encoding == "deflate":
        return zlib.compress(data, 1)
    if encoding == "zstd":
        return zstandard.ZstdCompressor(level=1).compress(data)
    if encoding == "lz4":
        return bytes(lz4.frame.compress(data))
    raise ValueError(f"unsupported response encoding {encoding!r}")
