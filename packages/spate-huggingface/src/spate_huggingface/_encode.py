"""Replaceable file encoders: a window's rows (of one partition) -> the bytes of one file.

:class:`FileEncoder` is the seam: ``encode(rows)`` gives the file's bytes, ``digest``
the 16 hex digits its name carries (a hash of the bytes *and* the encoder settings, as
spate-parquet names its files), ``extension`` the ``{ext}`` of the path template. Built
in: Parquet through spate-parquet's pinned writer (so the same rows give the same bytes
and the same name, and a retried or replayed commit rewrites the same file instead of
adding one), JSON lines and CSV. A program may hand :class:`~spate_huggingface.
HuggingFaceSink` any other object with these three members.
"""

from __future__ import annotations

import base64
import csv
import datetime as dt
import decimal
import hashlib
import io
import json
import uuid
from collections.abc import Mapping, Sequence
from typing import Protocol

import pyarrow as pa
from spate_parquet import Encoder, ParquetSinkConfig

from spate_huggingface.config import EncoderConfig

Row = Mapping[str, object]


class FileEncoder(Protocol):
    """Encodes the rows of one file; stateless, called from the sink's writer thread."""

    extension: str

    def encode(self, rows: Sequence[Row]) -> bytes:
        """The file's bytes; the rows all have the same columns."""
        ...

    def digest(self, data: bytes) -> str:
        """16 hex digits over ``data`` and the encoder settings (the file's ``{hash}``)."""
        ...


def _digest(identity: Mapping[str, object], data: bytes) -> str:
    settings = json.dumps(dict(identity), sort_keys=True).encode()
    return hashlib.sha256(settings + b"\0" + data).hexdigest()[:16]


class ParquetFileEncoder:
    """Parquet with every byte-affecting setting pinned (spate-parquet's encoder)."""

    extension = "parquet"

    def __init__(self, config: EncoderConfig, schema: pa.Schema | None = None) -> None:
        settings = ParquetSinkConfig(
            path="hub",
            compression=config.compression,
            compression_level=config.level,
            row_group_size=config.row_group_size,
        )
        self._encoder = Encoder(settings, schema)

    def encode(self, rows: Sequence[Row]) -> bytes:
        return self._encoder.encode(self._encoder.table(rows))

    def digest(self, data: bytes) -> str:
        return self._encoder.digest(data)


def plain(value: object) -> object:
    """A value JSON and CSV can hold: times as ISO 8601, decimals as text, bytes as base64."""
    if isinstance(value, dt.datetime | dt.date | dt.time):
        return value.isoformat()
    if isinstance(value, decimal.Decimal | uuid.UUID):
        return str(value)
    if isinstance(value, bytes | bytearray | memoryview):
        return base64.b64encode(bytes(value)).decode("ascii")
    if isinstance(value, Mapping):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [plain(v) for v in value]
    return value


class JsonLinesEncoder:
    """One JSON object a line, keys in the row's order, UTF-8."""

    extension = "jsonl"

    def encode(self, rows: Sequence[Row]) -> bytes:
        lines = [
            json.dumps({k: plain(v) for k, v in row.items()}, ensure_ascii=False, default=str)
            for row in rows
        ]
        return ("\n".join(lines) + "\n").encode() if lines else b""

    def digest(self, data: bytes) -> str:
        return _digest({"format": "jsonl"}, data)


class CsvEncoder:
    """A header line of the columns, then one line a row (RFC 4180 quoting, ``\\n`` ends)."""

    extension = "csv"

    def encode(self, rows: Sequence[Row]) -> bytes:
        out = io.StringIO()
        columns = list(rows[0]) if rows else []
        writer = csv.writer(out, lineterminator="\n")
        writer.writerow(columns)
        for row in rows:
            writer.writerow(["" if row.get(c) is None else _cell(row.get(c)) for c in columns])
        return out.getvalue().encode()

    def digest(self, data: bytes) -> str:
        return _digest({"format": "csv"}, data)


def _cell(value: object) -> object:
    converted = plain(value)
    if isinstance(converted, dict | list):
        return json.dumps(converted, ensure_ascii=False, default=str)
    return converted


def build_encoder(config: EncoderConfig, schema: pa.Schema | None = None) -> FileEncoder:
    """The built-in encoder ``config`` names."""
    if config.format == "jsonl":
        return JsonLinesEncoder()
    if config.format == "csv":
        return CsvEncoder()
    return ParquetFileEncoder(config, schema)
