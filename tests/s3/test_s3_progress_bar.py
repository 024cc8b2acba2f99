"""``spate run`` of an S3 backfill on a terminal draws a progress bar in bytes of the
job's planned bytes, read from the coordination store (moto S3, nats-server)."""

from __future__ import annotations

import re
import uuid
from pathlib import Path

import pytest

from tests.s3.s3kit import AWS_ENV, put_ndjson, s3_client
from tests.support.terminal import run_on_a_terminal

pytestmark = pytest.mark.integration


def test_an_s3_backfill_on_a_terminal_shows_bytes_of_the_planned_job(
    tmp_path: Path, s3_endpoint: str, nats_url: str
) -> None:
    client = s3_client(s3_endpoint)
    bucket = f"bar-{uuid.uuid4().hex[:10]}"
    client.create_bucket(Bucket=bucket)
    put_ndjson(client, bucket, "events/", objects=12, records=400, compression=("none", "gzip"))
    planned = sum(o["Size"] for o in client.list_objects_v2(Bucket=bucket)["Contents"])
    config = tmp_path / "backfill.yaml"
    config.write_text(
        "pipeline: {name: s3bar}\n"
        "admin: {listen: none}\n"
        "source:\n"
        f"  s3: {{url: 's3://{bucket}/events/', endpoint_url: '{s3_endpoint}',"
        " framing: ndjson, split_target_bytes: 16KiB}\n"
        "sink: {capture: {}}\n"
        "coordination:\n"
        f"  store: {{nats: {{servers: ['{nats_url}']}}}}\n"
        f"  job: bar-{uuid.uuid4().hex[:10]}\n"
        "  instance_id: only\n",
        encoding="utf-8",
    )
    code, output = run_on_a_terminal(config, AWS_ENV)
    assert code == 0, output[-3000:]
    assert "bytes" in output and "━" in output, output[-3000:]  # rich's bar, in bytes
    # Against the job's planned bytes, ending at all of them.
    assert re.search(rf"\b\d+/{planned}\b", output), output[-3000:]
    assert f"{planned}/{planned}" in output and "100%" in output, output[-3000:]
    assert "pipeline s3bar completed" in output
    assert "delivered=4800" in output
