"""The coordinated-backfill job fixtures, shared by the S3 end-to-end modules."""

from tests.s3.test_s3_coordinated_backfill import job, reap

__all__ = ["job", "reap"]
