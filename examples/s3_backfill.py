"""Backfill NDJSON objects from S3 (or an S3-compatible store) with one instance.

Reads every object under ``S3_URL`` (plain, gzip or zstd NDJSON), decodes each line as
JSON, keeps the order events' key fields and appends them to a JSON-lines file. The run
is bounded: it ends once every object is read and every record is written, with exit
code 0 (1 if a split failed, e.g. an object was overwritten while it was read).

    S3_URL=s3://my-bucket/events/ python examples/s3_backfill.py

Against MinIO or moto, ``--seed N`` first uploads N demo objects (creating the bucket):

    S3_URL=s3://spate-demo/events/ S3_ENDPOINT_URL=http://127.0.0.1:9000 \\
        AWS_ACCESS_KEY_ID=minio AWS_SECRET_ACCESS_KEY=minio123 \\
        python examples/s3_backfill.py --seed 20

Needs ``pip install "spate[s3,json]"``.
"""

from __future__ import annotations

import argparse
import contextlib
import gzip
import json
import logging
import os
import sys
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from spate import Pipeline, load_config

HERE = Path(__file__).resolve().parent
CONFIG = HERE / "s3_backfill.yaml"


def seed(url: str, endpoint: str | None, objects: int, per_object: int = 1000) -> int:
    """Upload ``objects`` NDJSON objects of order events under ``url``; the record count."""
    import boto3
    import zstandard
    from botocore.config import Config

    parts = urlsplit(url)
    bucket, prefix = parts.netloc, parts.path.lstrip("/")
    client = boto3.client(
        "s3",
        endpoint_url=endpoint or None,
        config=Config(s3={"addressing_style": "path"}) if endpoint else None,
    )
    with contextlib.suppress(client.exceptions.BucketAlreadyOwnedByYou):
        client.create_bucket(Bucket=bucket)
    for i in range(objects):
        lines = [
            json.dumps({"order": f"o-{i}-{j}", "kind": "payment", "cents": 100 + j % 900})
            for j in range(per_object)
        ]
        body = ("\n".join(lines) + "\n").encode()
        suffix = ("", ".gz", ".zst")[i % 3]
        if suffix == ".gz":
            body = gzip.compress(body)
        elif suffix == ".zst":
            body = zstandard.ZstdCompressor().compress(body)
        client.put_object(Bucket=bucket, Key=f"{prefix}part-{i:05d}.ndjson{suffix}", Body=body)
    return objects * per_object


def chains(ctx: Any) -> Any:
    # Keep a few fields of each decoded event; the file sink writes each dict as a line.
    return ctx.chain().map(lambda ev: {"order": ev["order"], "cents": ev["cents"]}).sink()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--config", default=str(CONFIG), help="pipeline YAML")
    parser.add_argument("--seed", type=int, default=0, help="upload N demo objects first")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s %(message)s")
    config = load_config(args.config)
    if args.seed:
        url = os.environ.get("S3_URL", "s3://spate-demo/events/")
        count = seed(url, os.environ.get("S3_ENDPOINT_URL"), args.seed)
        print(f"seeded {args.seed} objects ({count} records) under {url}")
    report = Pipeline.from_config(config).chains(chains).run()
    print(f"{report.state}: {report.records_in} records read, {report.records_delivered} written")
    if report.exit_code:
        print(report.reason, file=sys.stderr)
    return report.exit_code


if __name__ == "__main__":
    raise SystemExit(main())
