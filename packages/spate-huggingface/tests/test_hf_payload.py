"""The commit payload and the file encoders (B78), and their validation (B17).

The body is decoded the way the Hub reads it: NDJSON, a header line, then one line
per file with its content in base64; files are read back with pyarrow (Parquet) or
the standard library (JSON lines, CSV).
"""

from __future__ import annotations

import base64
import csv
import datetime as dt
import io
import json

import pyarrow.parquet as pq
import pytest
from spate.config import decode
from spate.errors import ConfigError
from spate_huggingface import (
    CommitFile,
    EncoderConfig,
    HuggingFaceSinkConfig,
    build_encoder,
    commit_payload,
)

ROWS = [
    {"station": "a", "reading": 1.5, "at": dt.datetime(2026, 12, 1, 10, 0, tzinfo=dt.UTC)},
    {"station": "b", "reading": None, "at": dt.datetime(2026, 12, 1, 10, 5, tzinfo=dt.UTC)},
]


def test_b78_commit_body_is_a_header_line_then_one_base64_file_line_each() -> None:
    data = build_encoder(EncoderConfig()).encode(ROWS)
    payload = commit_payload(
        "spate: 2 rows",
        "two readings",
        [CommitFile("data/x.parquet", data), CommitFile("data/y.txt", b"\x00\xffbin")],
    )
    assert payload.endswith(b"\n")
    lines = [json.loads(line) for line in payload.splitlines()]
    assert lines[0] == {
        "key": "header",
        "value": {"summary": "spate: 2 rows", "description": "two readings"},
    }
    assert [line["key"] for line in lines[1:]] == ["file", "file"]
    first = lines[1]["value"]
    assert set(first) == {"content", "path", "encoding"}
    assert first["path"] == "data/x.parquet" and first["encoding"] == "base64"
    table = pq.read_table(io.BytesIO(base64.b64decode(first["content"])))
    assert table.to_pylist() == ROWS
    assert base64.b64decode(lines[2]["value"]["content"]) == b"\x00\xffbin"


@pytest.mark.parametrize(
    ("encoder", "codec"),
    [({}, "UNCOMPRESSED"), ({"compression": "zstd", "level": 9}, "ZSTD")],
)
def test_b78_parquet_is_uncompressed_by_default_and_zstd_on_request(
    encoder: dict[str, object], codec: str
) -> None:
    config = decode(EncoderConfig, encoder, "encoder")
    data = build_encoder(config).encode(ROWS)
    meta = pq.ParquetFile(io.BytesIO(data)).metadata
    assert meta.row_group(0).column(0).compression == codec
    assert pq.read_table(io.BytesIO(data)).to_pylist() == ROWS


def test_b78_jsonl_and_csv_files_hold_every_row() -> None:
    jsonl = build_encoder(EncoderConfig(format="jsonl"))
    assert jsonl.extension == "jsonl"
    lines = [json.loads(line) for line in jsonl.encode(ROWS).decode().splitlines()]
    assert lines == [
        {"station": "a", "reading": 1.5, "at": "2026-12-01T10:00:00+00:00"},
        {"station": "b", "reading": None, "at": "2026-12-01T10:05:00+00:00"},
    ]
    table = build_encoder(EncoderConfig(format="csv"))
    assert table.extension == "csv"
    read = list(csv.DictReader(io.StringIO(table.encode(ROWS).decode())))
    assert read == [
        {"station": "a", "reading": "1.5", "at": "2026-12-01T10:00:00+00:00"},
        {"station": "b", "reading": "", "at": "2026-12-01T10:05:00+00:00"},
    ]


def test_b78_a_file_name_hash_follows_the_bytes_and_the_encoder_settings() -> None:
    plain = build_encoder(EncoderConfig())
    zstd = build_encoder(EncoderConfig(compression="zstd", level=3))
    data = plain.encode(ROWS)
    assert plain.encode(ROWS) == data  # the same rows give the same bytes
    assert plain.digest(data) == build_encoder(EncoderConfig()).digest(data)
    assert plain.digest(data) != zstd.digest(data)
    assert plain.digest(data) != plain.digest(plain.encode(ROWS[:1]))


BASE = {"repo": "spate/readings"}


@pytest.mark.parametrize(
    ("overrides", "path"),
    [
        ({"encoder": {"compression": "zstd", "level": 0}}, "encoder.level"),
        ({"encoder": {"compression": "zstd", "level": 23}}, "encoder.level"),
        ({"encoder": {"level": 3}}, "encoder.level"),
        ({"encoder": {"compression": "gzip"}}, "encoder.compression"),
        ({"encoder": {"format": "jsonl", "compression": "zstd"}}, "encoder.compression"),
        ({"encoder": {"format": "xml"}}, "encoder.format"),
        ({"repo": "no-owner"}, "repo"),
        ({"path_template": "data/{start:%Y}/part.parquet"}, "path_template"),
        ({"path_template": "../x/{hash}.{ext}"}, "path_template"),
        ({"path_template": "data/{}/{hash}"}, "path_template"),
        ({"window_time": "record"}, "time_column"),
        ({"window": "0s"}, "window"),
        ({"retry": {"initial": "0s"}}, "retry.initial"),
        ({"endpoint": "huggingface.co"}, "endpoint"),
    ],
)
def test_b17_bad_settings_are_refused_with_their_dotted_path(
    overrides: dict[str, object], path: str
) -> None:
    with pytest.raises(ConfigError) as err:
        decode(HuggingFaceSinkConfig, {**BASE, **overrides}, "sinks.hub.huggingface")
    assert err.value.path == f"sinks.hub.huggingface.{path}"


@pytest.mark.parametrize("level", [1, 22])
def test_b17_zstd_levels_1_to_22_are_accepted(level: int) -> None:
    config = decode(
        HuggingFaceSinkConfig,
        {**BASE, "encoder": {"compression": "zstd", "level": level}},
        "sinks.hub.huggingface",
    )
    assert config.encoder.level == level
