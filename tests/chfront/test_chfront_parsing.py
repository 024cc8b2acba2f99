"""The front's request parsing, body codecs, error mapping and fault bookkeeping, in process.

These pieces decide whether an insert silently loses rows (inline data cut at the wrong
byte, only the first lz4 frame decoded) or a fault looks like a real server's, so they are
checked directly, without starting a front (no chDB is loaded here).
"""

from __future__ import annotations

import gzip
import time
import zlib
from dataclasses import replace

import lz4.frame
import pytest
import zstandard

from tests.support.chfront._codec import choose_response_encoding, decode_body, encode_response
from tests.support.chfront._errors import ClickHouseError, http_status_for
from tests.support.chfront._faults import FaultSpecError, FaultState, parse_fault
from tests.support.chfront._sql import parse_request, set_assignments


def test_insert_data_starts_after_the_newline_following_the_format_name() -> None:
    # A Native block with 10 columns starts with byte 0x0A: only one newline may be skipped.
    data = b"\x0a\x01\x01a\x05UInt8\x07"
    statement = parse_request(b"INSERT INTO db.t (a, b) FORMAT Native\n" + data)
    assert statement.kind == "insert_data"
    assert statement.sql == "INSERT INTO db.t (a, b)"
    assert statement.fmt == "Native"
    assert statement.data is not None and bytes(statement.data) == data


def test_query_parameter_and_body_are_joined_by_a_newline() -> None:
    statement = parse_request(b"INSERT INTO t FORMAT CSV" + b"\n" + b"1,2\n3,4\n")
    assert statement.fmt == "CSV"
    assert statement.data is not None and bytes(statement.data) == b"1,2\n3,4\n"
    crlf = parse_request(b"INSERT INTO t FORMAT TSV  \r\n1\t2\n")
    assert crlf.data is not None and bytes(crlf.data) == b"1\t2\n"


def test_format_inside_literals_identifiers_and_comments_is_not_the_clause() -> None:
    text = (
        b"INSERT INTO t (`format`, \"FORMAT\", x) SETTINGS a = 'FORMAT y', b = 'it\\'s' "
        b'-- FORMAT z\n/* FORMAT w */ FORMAT JSONEachRow\n{"x": 1}\n'
    )
    statement = parse_request(text)
    assert statement.fmt == "JSONEachRow"
    assert statement.sql.endswith("/* FORMAT w */")
    assert statement.data is not None and bytes(statement.data) == b'{"x": 1}\n'


def test_values_insert_and_insert_select() -> None:
    values = parse_request(b"INSERT INTO t (a, s) VALUES (1, 'FORMAT'), (2, 'x')")
    assert values.kind == "insert_data" and values.fmt == "Values"
    assert values.sql == "INSERT INTO t (a, s)"
    assert values.data is not None and bytes(values.data) == b" (1, 'FORMAT'), (2, 'x')"
    select = parse_request(b"INSERT INTO t SELECT number FROM numbers(3)")
    assert select.kind == "query" and select.is_insert and not select.produces_result


def test_query_output_format_and_result_producing_keywords() -> None:
    statement = parse_request(b"SELECT 1 AS format\n FORMAT JSONEachRow;\n")
    assert statement.kind == "query" and statement.fmt == "JSONEachRow"
    assert statement.sql == "SELECT 1 AS format\n FORMAT JSONEachRow"
    assert statement.produces_result
    assert parse_request(b"  -- comment\n show tables").produces_result
    assert not parse_request(b"CREATE TABLE t (a UInt8) ENGINE = Memory").produces_result
    with pytest.raises(ClickHouseError) as empty:
        parse_request(b"  \n-- nothing\n")
    assert empty.value.code == 62 and empty.value.status == 400


def test_set_assignments_split_on_top_level_commas_only() -> None:
    assert set_assignments("SET a = 1, b = 'x, y', c = [1, 2]") == [
        ("a", "1"),
        ("b", "'x, y'"),
        ("c", "[1, 2]"),
    ]
    with pytest.raises(ClickHouseError):
        set_assignments("SET a")


def _lz4_frame(block: bytes) -> bytes:
    compressor = lz4.frame.LZ4FrameCompressor()
    return bytes(compressor.begin(len(block)) + compressor.compress(block) + compressor.flush())


def test_every_concatenated_lz4_frame_is_decoded() -> None:
    blocks = [bytes([i]) * 70_000 for i in range(3)]
    body = b"".join(_lz4_frame(block) for block in blocks)
    # the pitfall: a one-shot decoder stops after the first frame
    assert len(lz4.frame.decompress(body)) == 70_000
    decoded = decode_body(body, "lz4")
    assert decoded.data == b"".join(blocks)
    assert (decoded.encoding, decoded.frames) == ("lz4", 3)


def test_concatenated_zstd_frames_and_gzip_members_are_decoded() -> None:
    blocks = [b"alpha" * 1000, b"beta" * 2000, b"gamma"]
    zstd_body = b"".join(zstandard.ZstdCompressor().compress(block) for block in blocks)
    decoded = decode_body(zstd_body, "zstd")
    assert decoded.data == b"".join(blocks) and decoded.frames == 3
    gzip_body = b"".join(gzip.compress(block) for block in blocks)
    assert decode_body(gzip_body, "gzip").data == b"".join(blocks)
    assert decode_body(zlib.compress(b"x" * 10), "deflate").data == b"x" * 10
    assert decode_body(b"plain", None).data == b"plain"


def test_broken_or_unknown_body_encodings_fail_like_clickhouse() -> None:
    frame = _lz4_frame(b"y" * 10_000)
    with pytest.raises(ClickHouseError) as truncated:
        decode_body(frame[:-7], "lz4")
    assert truncated.value.code == 271 and truncated.value.name == "CANNOT_DECOMPRESS"
    with pytest.raises(ClickHouseError) as unknown:
        decode_body(b"...", "snappy")
    assert unknown.value.code == 89


def test_response_encoding_choice_and_round_trip() -> None:
    assert choose_response_encoding("lz4,zstd,gzip,deflate") == "gzip"
    assert choose_response_encoding("lz4") == "lz4"
    assert choose_response_encoding("zstd;q=1.0, lz4") == "zstd"
    assert choose_response_encoding("br") is None
    assert choose_response_encoding(None) is None
    data = b"result " * 1000
    assert lz4.frame.decompress(encode_response(data, "lz4")) == data
    assert zstandard.ZstdDecompressor().decompress(encode_response(data, "zstd")) == data
    assert gzip.decompress(encode_response(data, "gzip")) == data


def test_engine_errors_parse_and_map_to_the_servers_http_status() -> None:
    error = ClickHouseError.from_engine(
        "Streaming insert finish failed: Code: 60. DB::Exception: Table default.x does not "
        "exist. (UNKNOWN_TABLE)"
    )
    assert (error.code, error.name, error.status) == (60, "UNKNOWN_TABLE", 404)
    assert error.body("26.9.2.1") == (
        b"Code: 60. DB::Exception: Table default.x does not exist. (UNKNOWN_TABLE) "
        b"(version 26.9.2.1 (official build))\n"
    )
    assert http_status_for("SYNTAX_ERROR") == 400
    assert http_status_for("AUTHENTICATION_FAILED") == 403
    assert http_status_for("REQUIRED_PASSWORD") == 401
    assert http_status_for("CANNOT_SCHEDULE_TASK") == 503
    assert http_status_for("TOO_MANY_PARTS") == 500
    odd = ClickHouseError.from_engine("std::bad_alloc")
    assert (odd.code, odd.status) == (1001, 500)


def test_fault_specs_are_validated() -> None:
    with pytest.raises(FaultSpecError, match="mode"):
        parse_fault({"mode": "explode"})
    with pytest.raises(FaultSpecError, match="5xx"):
        parse_fault({"mode": "5xx", "status": "404"})
    with pytest.raises(FaultSpecError, match="number"):
        parse_fault({"mode": "slow", "delay": "soon"})
    with pytest.raises(FaultSpecError, match="refuse"):
        parse_fault({"mode": "refuse", "only": "insert"})
    fault = parse_fault({"mode": "5xx", "status": "500", "code": "252", "only": "insert"})
    assert (fault.status, fault.code, fault.only) == (500, 252, "insert")


def test_fault_counts_down_only_matching_requests_then_clears() -> None:
    state = FaultState()
    state.set(parse_fault({"mode": "5xx", "count": "2", "only": "insert"}))
    assert state.take("query") is None
    assert state.take("ping") is None
    assert state.take("insert") is not None
    assert state.take("insert") is not None
    assert state.take("insert") is None
    assert state.current.mode == "none"
    assert state.affected == 2


def test_fault_with_seconds_expires_and_recover_releases_slow_requests() -> None:
    state = FaultState()
    state.set(parse_fault({"mode": "drop", "seconds": "600"}))
    assert state.take("ping") is not None
    state.set(replace(parse_fault({"mode": "drop"}), deadline=time.monotonic() - 1))
    assert state.take("ping") is None
    assert state.current.mode == "none"
    state.set(parse_fault({"mode": "slow", "delay": "60"}))
    taken = state.take("query")
    assert taken is not None
    _, release = taken
    assert not release.is_set()
    assert state.clear() is not None
    assert release.wait(0)
