"""Coordinated S3 backfill source for spate (aioboto3)."""

__version__ = "0.1.0"
