"""Rows -> Parquet bytes that are a pure function of the rows and the encoder settings.

Every writer setting that changes bytes is pinned here (format version, dictionary
encoding, statistics, page index, data page version, the stored Arrow schema), so the
same rows under the same settings always give the same bytes. Two inputs still enter
the bytes and are therefore part of a file's identity: the encoder settings of
:func:`spate_parquet.config.settings_identity` (codec, level, row-group size) and the
pyarrow version, which Parquet records as ``created_by`` in the footer (pyarrow offers no
way to set it). Changing either gives new files under new names; old files stay valid.

A file's name is a pure function of what it holds: the lane (``topic-partition``), the
first and last source position it covers, and a hash of the bytes and the settings —
so a replay writes the same bytes to the same path, and different payloads never
share a name.
"""

from __future__ import annotations

import hashlib
import json
import operator
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.parquet as pq
from spate.records import Lane

from spate_parquet._schema import to_array
from spate_parquet.config import ParquetSinkConfig, settings_identity

_UNSAFE = re.compile(r"[^A-Za-z0-9._=-]")
_NAME = re.compile(
    r"(?:^|/)(?:part-)?(?P<stream>[^/]+)-(?P<partition>\d+)-(?P<first>\d{20})-(?P<last>\d{20})"
    r"-(?P<hash>[0-9a-f]{16})\.parquet$"
)


def safe(text: str) -> str:
    """``text`` usable as one path segment on every object store."""
    return _UNSAFE.sub("_", text) or "_"


@dataclass(frozen=True, slots=True)
class Encoded:
    """One file ready to write."""

    key: str
    data: bytes
    table: pa.Table


@dataclass(frozen=True, slots=True)
class Covered:
    """The source positions one existing file covers, parsed back from its name."""

    stream: str
    partition: int
    directory: str
    first: int
    last: int


class Encoder:
    """Encodes one window's rows; stateless, safe to call from the writer thread."""

    def __init__(self, config: ParquetSinkConfig, schema: pa.Schema | None) -> None:
        self._config = config
        self._schema = schema
        self._codec = None if config.compression == "none" else config.compression
        identity = dict(settings_identity(config))
        identity["created_by"] = f"pyarrow {pa.__version__}"
        self._identity = json.dumps(identity, sort_keys=True).encode()

    def table(self, rows: Sequence[Mapping[str, object]]) -> pa.Table:
        """The rows as an Arrow table (declared schema, or inferred from these rows).

        Column by column (``pa.array`` of one list per column) rather than
        ``Table.from_pylist``: the same table, faster. A window's rows all have one shape,
        so the first row's columns are every row's; with a declared schema a row may
        leave a column out (null), which the ``itemgetter`` fast path notices as a
        ``KeyError`` and the slower ``dict.get`` takes over for that column.
        """
        if not rows:
            return pa.Table.from_pylist([], schema=self._schema)
        schema = self._schema
        if schema is None:
            names = list(rows[0])
            return pa.Table.from_arrays([_column(rows, n, None) for n in names], names=names)
        return pa.Table.from_arrays([_column(rows, f.name, f.type) for f in schema], schema=schema)

    def encode(self, table: pa.Table) -> bytes:
        """The table as Parquet bytes, with every byte-affecting setting pinned."""
        cfg = self._config
        # An Arrow buffer, not a Python file: the encoder then writes without taking the
        # GIL for every page, so the pipeline thread keeps running meanwhile.
        out = pa.BufferOutputStream()
        pq.write_table(
            table,
            out,
            row_group_size=cfg.row_group_size,
            version="2.6",
            use_dictionary=True,
            compression=self._codec,
            compression_level=cfg.compression_level if self._codec else None,
            write_statistics=True,
            data_page_version="1.0",
            store_schema=True,
            write_page_index=False,
            write_page_checksum=False,
            use_content_defined_chunking=False,
        )
        data: bytes = out.getvalue().to_pybytes()
        return data

    def digest(self, data: bytes) -> str:
        """16 hex digits of SHA-256 over the bytes and the encoder settings."""
        digest = hashlib.sha256(self._identity + b"\0")
        digest.update(data)  # no copy of the file's bytes (and the GIL released meanwhile)
        return digest.hexdigest()[:16]

    def file_key(self, prefix: str, lane: Lane, first: int, last: int, data: bytes) -> str:
        """``{prefix}{stream}-{partition}-{first}-{last}-{hash}.parquet``."""
        return (
            f"{prefix}{safe(lane.stream)}-{lane.partition}-{first:020d}-{last:020d}-"
            f"{self.digest(data)}.parquet"
        )


def _column(rows: Sequence[Mapping[str, object]], name: str, kind: pa.DataType | None) -> pa.Array:
    try:
        values = list(map(operator.itemgetter(name), rows))
    except KeyError:
        values = [row.get(name) for row in rows]
    return pa.array(values) if kind is None else to_array(values, kind)


def parse_key(key: str) -> Covered | None:
    """What a file name says it covers, or None for a name this sink did not write."""
    found = _NAME.search(key)
    if found is None:
        return None
    directory = key[: found.start()] + ("/" if found.group(0).startswith("/") else "")
    return Covered(
        found.group("stream"),
        int(found.group("partition")),
        directory,
        int(found.group("first")),
        int(found.group("last")),
    )
