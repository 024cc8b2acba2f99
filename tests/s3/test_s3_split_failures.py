"""Read failures of an S3 split, on moto's S3 server and the real nats-server (B37, B38).

The source reads moto through :class:`~tests.s3.faultproxy.S3FaultProxy`, which breaks
or throttles chosen ranged GETs; progress and split states live in NATS JetStream KV.

* B37: transient failures spread over a long object never add up — the retry budget
  counts failures in a row and is whole again once a record is read — so five broken
  downloads over one object, each recovered, deliver every record, and the run ends 0;
  throttling (``503 SlowDown``) is transient in the same way.
* B38: a split that fails for good is quarantined, which is its own state: it is not
  completed, it keeps its committed progress, the run ends 1 naming it, a later run
  without ``retry_quarantined`` does not read it, and a later run with it reads exactly
  the records after the committed position.
"""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from spate_s3 import S3SourceConfig

from tests.s3.faultproxy import S3FaultProxy
from tests.s3.s3kit import (
    ids_of,
    make_source,
    nats_coordination,
    put_ndjson,
    run_to_end,
    s3_client,
    split_states,
)

pytestmark = [pytest.mark.integration]

RECORDS = 30_000  # about 1.2 MB of NDJSON: some twenty ranged GETs of 64 KiB


@pytest.fixture
def one_object(s3_endpoint: str) -> tuple[str, set[str]]:
    """A fresh bucket holding one uncompressed NDJSON object of ``RECORDS`` records."""
    client: Any = s3_client(s3_endpoint)
    bucket = f"fail-{uuid.uuid4().hex[:12]}"
    client.create_bucket(Bucket=bucket)
    ids = put_ndjson(client, bucket, "data/", 1, RECORDS)
    return bucket, ids


def source_config(endpoint: str, bucket: str) -> S3SourceConfig:
    return S3SourceConfig(
        url=f"s3://{bucket}/data/",
        endpoint_url=endpoint,
        batch_records=500,
        prefetch_bytes=65536,
        retry_backoff=0.05,
        split_attempts=3,
    )


def test_b37_five_transient_failures_spread_over_one_object_each_recover_and_every_record_arrives(
    s3_endpoint: str, nats_url: str, one_object: tuple[str, set[str]]
) -> None:
    bucket, ids = one_object
    with S3FaultProxy(s3_endpoint) as proxy:
        # Every third download is cut mid-way, five times: more than split_attempts in
        # all, never two in a row without a record read in between.
        proxy.decide = lambda n, key: "cut" if n % 3 == 0 and n <= 15 else None
        source, _ = make_source(source_config(proxy.url, bucket), coord=nats_coordination(nats_url))
        report, rows = run_to_end(source)
    assert [fault for _, _, fault in proxy.faults] == ["cut"] * 5, proxy.faults
    assert report.exit_code == 0, report.reason
    got = ids_of(rows)
    # Each retry starts at the last record handed out: every record once, none lost.
    assert sorted(got) == sorted(ids)
    assert len(got) == RECORDS


def test_b37_throttled_downloads_503_slowdown_are_retried_and_every_record_arrives_once(
    s3_endpoint: str, nats_url: str, one_object: tuple[str, set[str]]
) -> None:
    """B37: S3 throttles (``503 SlowDown``) every other ranged GET among the first twenty;
    throttling is transient, so the split is never quarantined: the run ends 0 with every
    record once."""
    bucket, ids = one_object
    with S3FaultProxy(s3_endpoint) as proxy:
        proxy.decide = lambda n, key: "slowdown" if n % 2 == 0 and n <= 20 else None
        source, _ = make_source(source_config(proxy.url, bucket), coord=nats_coordination(nats_url))
        report, rows = run_to_end(source)
    assert [fault for _, _, fault in proxy.faults] == ["slowdown"] * 10, proxy.faults
    assert report.exit_code == 0, report.reason
    got = ids_of(rows)
    assert sorted(got) == sorted(ids)
    assert len(got) == RECORDS


def test_b38_a_quarantined_split_is_not_completed_and_a_later_run_retries_it_from_its_progress(
    s3_endpoint: str, nats_url: str, one_object: tuple[str, set[str]]
) -> None:
    from spate_coordination import SplitStatus

    bucket, ids = one_object
    job = f"quarantine-{uuid.uuid4().hex[:8]}"
    denied = [True]
    with S3FaultProxy(s3_endpoint) as proxy:
        # Access to the object is lost after a few downloads: no retry can fix that.
        proxy.decide = lambda n, key: "deny" if denied[0] and n > 4 else None
        cfg = source_config(proxy.url, bucket)
        first, _ = make_source(cfg, coord=nats_coordination(nats_url, job))
        report, first_rows = run_to_end(first)
        assert report.exit_code == 1
        assert "quarantined" in report.reason and "AccessDenied" in report.reason
        (state,) = split_states(nats_coordination(nats_url, job)).values()
        assert state.status is SplitStatus.QUARANTINED, state
        assert state.owner is None and "AccessDenied" in state.reason
        assert isinstance(state.progress, dict)
        committed = state.progress["offset"]
        assert isinstance(committed, int)
        # What was delivered before the failure is committed; the rest is still to read.
        assert 0 < committed <= len(first_rows) < RECORDS

        # Access is back. A later run that is not told to retry leaves the split alone
        # and fails again, naming it.
        denied[0] = False
        again, _ = make_source(cfg, coord=nats_coordination(nats_url, job))
        report, rows = run_to_end(again)
        assert report.exit_code == 1 and "quarantined" in report.reason, report.reason
        assert rows == []
        (state,) = split_states(nats_coordination(nats_url, job)).values()
        assert state.status is SplitStatus.QUARANTINED

        # Told to retry, a run reads the split from its committed position to the end.
        retry, _ = make_source(cfg, coord=nats_coordination(nats_url, job, retry_quarantined=True))
        report, retry_rows = run_to_end(retry)
    assert report.exit_code == 0, report.reason
    (state,) = split_states(nats_coordination(nats_url, job)).values()
    assert state.status is SplitStatus.COMPLETED
    expected = [f"0:{r}" for r in range(RECORDS)]
    assert ids_of(retry_rows) == expected[committed:]
    assert set(ids_of(first_rows)) | set(ids_of(retry_rows)) == ids
