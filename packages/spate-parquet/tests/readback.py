"""Reading back what the Parquet sink wrote, the way a reader would (tests only)."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq


def local_files(root: Path) -> dict[str, bytes]:
    """Every visible file under ``root`` (relative path -> bytes), temporaries excluded."""
    return {
        p.relative_to(root).as_posix(): p.read_bytes()
        for p in sorted(root.rglob("*"))
        if p.is_file() and not p.name.startswith(".")
    }


def s3_files(client: Any, bucket: str, prefix: str = "") -> dict[str, bytes]:
    """Every object under ``prefix`` (key without the prefix -> bytes)."""
    out: dict[str, bytes] = {}
    for page in client.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix):
        for item in page.get("Contents", ()):
            body = client.get_object(Bucket=bucket, Key=item["Key"])["Body"].read()
            out[item["Key"][len(prefix) :]] = body
    return out


def parquet_rows(files: dict[str, bytes], only: list[str] | None = None) -> list[dict[str, Any]]:
    """The rows of the ``.parquet`` files (or of ``only``), in path order."""
    rows: list[dict[str, Any]] = []
    for path in sorted(only if only is not None else files):
        if path.endswith(".parquet"):
            rows.extend(pq.read_table(io.BytesIO(files[path])).to_pylist())
    return rows


def manifest_parts(files: dict[str, bytes], table: str) -> list[str]:
    """The paths the published manifest lists (none when there is no manifest)."""
    data = files.get(f"{table}.parts/_manifest.json")
    if data is None:
        return []
    return [part["path"] for part in json.loads(data)["parts"]]


def table_of(files: dict[str, bytes], paths: list[str]) -> pa.Table:
    return pa.concat_tables([pq.read_table(io.BytesIO(files[p])) for p in sorted(paths)])
