"""spate-parquet passes spate's sink conformance suite, on real files and on moto S3.

Local directories (files and manifest mode) and an S3 bucket on an in-process moto
server; rows are read back from the Parquet files themselves (through the manifest in
manifest mode). Promises: B2, B4, B17, B22, B28, B29.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import pytest
from spate.testing.conformance import SinkConformance
from spate_parquet import ParquetSinkFactory

from .readback import local_files, manifest_parts, parquet_rows, s3_files

SCHEMA = {"id": "int64", "name": "string", "amount": "float64"}


class TestParquetLocalFilesConformance(SinkConformance):
    factory = ParquetSinkFactory
    tag = "parquet"

    def config(self) -> Mapping[str, object]:
        return {
            "path": str(self.workdir / "lake"),
            "schema": SCHEMA,
            "max_records": 7,
            "retry": {"initial": "10ms", "max": "100ms"},
        }

    def invalid_configs(self) -> Sequence[tuple[Mapping[str, object], str]]:
        base = dict(self.config())
        return [
            ({**base, "path": ""}, "path"),
            ({**base, "publish": "manifest", "table": ""}, "table"),
            ({**base, "schema": {"id": "int65"}}, "schema"),
            ({**base, "max_records": 0}, "max_records"),
            ({**base, "window": "1h"}, "time_column"),
            ({**base, "compression": "zip"}, "compression"),
            ({**base, "s3": {"access_key_id": "x"}}, "s3.access_key_id"),
        ]

    def rows(self, count: int) -> list[object]:
        return [{"id": i, "name": f"name-{i}", "amount": i * 1.5} for i in range(count)]

    def written(self) -> list[object]:
        return list(parquet_rows(local_files(self.workdir / "lake")))

    def frame(self, rows: Sequence[object]) -> object | None:
        import polars as pl

        dicts = [row for row in rows if isinstance(row, dict)]
        return pl.DataFrame(
            {
                "id": pl.Series([r["id"] for r in dicts], dtype=pl.Int64),
                "name": [r["name"] for r in dicts],
                "amount": pl.Series([r["amount"] for r in dicts], dtype=pl.Float64),
                "__spate_row": pl.Series(range(len(dicts)), dtype=pl.UInt32),
            }
        )

    def bad_rows(self) -> Sequence[object]:
        return [
            {"id": "not a number", "name": "x", "amount": 1.0},
            {"id": 1, "name": 2, "amount": 1.0},
            {"id": 1, "unknown": "x"},
            (1, "too few"),
            "not a row",
        ]

    def unreachable(self) -> tuple[Mapping[str, object], str]:
        blocker = self.workdir / "a-file"
        blocker.write_bytes(b"")
        path = str(blocker / "lake")
        return {**self.config(), "path": path}, path


class TestParquetLocalManifestConformance(TestParquetLocalFilesConformance):
    def config(self) -> Mapping[str, object]:
        return {**super().config(), "publish": "manifest", "table": "events"}

    def written(self) -> list[object]:
        files = local_files(self.workdir / "lake")
        return list(parquet_rows(files, manifest_parts(files, "events")))


@pytest.mark.usefixtures("bucket")
class TestParquetS3ManifestConformance(TestParquetLocalFilesConformance):
    @pytest.fixture(autouse=True)
    def _bucket(self, bucket: tuple[Any, str], moto_endpoint: str) -> None:
        self.client, self.bucket_name = bucket
        self.endpoint = moto_endpoint

    def config(self) -> Mapping[str, object]:
        return {
            "path": f"s3://{self.bucket_name}/lake",
            "publish": "manifest",
            "table": "events",
            "schema": SCHEMA,
            "max_records": 7,
            "s3": {"endpoint_url": self.endpoint, "region": "us-east-1"},
            "retry": {"initial": "10ms", "max": "100ms"},
        }

    def written(self) -> list[object]:
        files = s3_files(self.client, self.bucket_name, "lake/")
        return list(parquet_rows(files, manifest_parts(files, "events")))

    def unreachable(self) -> tuple[Mapping[str, object], str]:
        return {
            **self.config(),
            "s3": {
                "endpoint_url": "http://127.0.0.1:9",
                "region": "us-east-1",
                "request_timeout": "1s",
            },
        }, "127.0.0.1:9"
