"""Decompression and framing of one object: gzip members, zstd frames, NDJSON/lines
framing across piece boundaries, Avro object containers (B25: records are exact)."""

from __future__ import annotations

import gzip
import io
import random

import pytest
import zstandard
from spate_s3._compression import CorruptObjectError, decompressor, detect
from spate_s3._framing import AvroOcfFramer, LineFramer, framer


def pieces(data: bytes, rng: random.Random, most: int = 50) -> list[bytes]:
    out, pos = [], 0
    while pos < len(data):
        step = rng.randint(1, most)
        out.append(data[pos : pos + step])
        pos += step
    return out


def decode_all(codec: str, chunks: list[bytes]) -> bytes:
    d = decompressor(codec)  # type: ignore[arg-type]
    plain = bytearray()
    for chunk in chunks:
        d.push(chunk)
        while (piece := d.pull()) is not None:
            plain += piece
    d.finish()
    return bytes(plain)


def frame_all(name: str, chunks: list[bytes], limit: int = 3) -> list[bytes]:
    fr = framer(name)
    out: list[memoryview] = []
    for chunk in chunks:
        while fr.take(limit, out) == limit:
            pass
        fr.push(chunk)
    while fr.finish(limit, out) == limit:
        pass
    assert all(type(v) is memoryview for v in out)
    return [bytes(v) for v in out]


BODY = b"".join(b'{"n":%d,"pad":"%s"}\n' % (i, b"x" * (i % 17)) for i in range(500))


def test_gzip_members_and_zstd_frames_concatenated_decode_in_any_chunking() -> None:
    rng = random.Random(7)
    gz = gzip.compress(BODY[:3000]) + gzip.compress(BODY[3000:])
    zc = zstandard.ZstdCompressor()
    zs = zc.compress(BODY[:100]) + zc.compress(BODY[100:])
    assert detect(gz) == "gzip" and detect(zs) == "zstd" and detect(BODY) == "none"
    for _ in range(5):
        assert decode_all("gzip", pieces(gz, rng)) == BODY
        assert decode_all("zstd", pieces(zs, rng)) == BODY
        assert decode_all("none", pieces(BODY, rng)) == BODY


@pytest.mark.parametrize("codec", ["gzip", "zstd"])
def test_a_truncated_compressed_object_is_an_error_not_a_short_read(codec: str) -> None:
    data = gzip.compress(BODY) if codec == "gzip" else zstandard.ZstdCompressor().compress(BODY)
    with pytest.raises(CorruptObjectError, match="truncated"):
        decode_all(codec, [data[: len(data) // 2]])


def test_garbage_in_a_gzip_object_is_a_corrupt_object() -> None:
    with pytest.raises(CorruptObjectError, match="gzip"):
        decode_all("gzip", [b"\x1f\x8b\x08\x00garbage-garbage-garbage"])


def test_ndjson_framing_cuts_lines_across_pieces_skips_blanks_and_crlf() -> None:
    data = b'{"a":1}\r\n\n{"b":2}\n   \n{"c":3}'  # no newline at the end
    rng = random.Random(1)
    for _ in range(20):
        got = frame_all("ndjson", pieces(data, rng, 6))
        assert got == [b'{"a":1}', b'{"b":2}', b"   ", b'{"c":3}']


def test_lines_framing_keeps_blank_lines() -> None:
    assert frame_all("lines", [b"a\n\nb\r\n", b"\n"]) == [b"a", b"", b"b", b""]


def test_line_views_point_into_the_piece_and_next_byte_tracks_record_starts() -> None:
    fr = LineFramer(keep_blank=False, start_byte=100)
    piece = b"one\ntwo\nthr"
    fr.push(piece)
    out: list[memoryview] = []
    assert fr.take(1, out) == 1
    assert out[0].obj is piece  # a slice of the downloaded bytes, not a copy
    assert fr.next_byte == 104
    assert fr.take(10, out) == 1
    assert fr.next_byte == 108
    fr.push(b"ee\n")
    assert fr.take(10, out) == 1
    assert bytes(out[-1]) == b"three"
    assert fr.next_byte == 114


AVRO_SCHEMA = {
    "type": "record",
    "name": "Event",
    "namespace": "spate.test",
    "fields": [{"name": "id", "type": "long"}, {"name": "tag", "type": ["null", "string"]}],
}


@pytest.mark.parametrize("codec", ["null", "deflate", "zstandard", "bzip2", "xz"])
def test_avro_container_records_are_the_schemaless_datums(codec: str) -> None:
    import fastavro

    parsed = fastavro.parse_schema(AVRO_SCHEMA)
    records = [{"id": i, "tag": None if i % 3 else f"t{i}"} for i in range(1000)]
    buf = io.BytesIO()
    fastavro.writer(buf, parsed, records, codec=codec, sync_interval=2000)
    rng = random.Random(3)
    datums = frame_all("avro_ocf", pieces(buf.getvalue(), rng, 700), limit=97)
    assert len(datums) == len(records)
    for datum, record in zip(datums, records, strict=True):
        expected = io.BytesIO()
        fastavro.schemaless_writer(expected, parsed, record)
        assert datum == expected.getvalue()


def test_a_truncated_avro_container_is_an_error() -> None:
    import fastavro

    buf = io.BytesIO()
    fastavro.writer(buf, fastavro.parse_schema(AVRO_SCHEMA), [{"id": 1, "tag": None}] * 50)
    data = buf.getvalue()
    with pytest.raises(CorruptObjectError, match="truncated"):
        frame_all("avro_ocf", [data[:-5]])
    with pytest.raises(CorruptObjectError, match="bad magic"):
        frame_all("avro_ocf", [b"{not avro}\n"])
    assert AvroOcfFramer().next_byte is None
