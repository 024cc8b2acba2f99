"""Fixtures: a private moto S3 server per test module and a fresh bucket per test."""

from tests.s3.moto_fixtures import bucket, moto_endpoint

__all__ = ["bucket", "moto_endpoint"]
