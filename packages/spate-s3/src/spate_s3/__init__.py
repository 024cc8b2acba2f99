"""Coordinated S3 backfill source for spate (aioboto3, spate-coordination).

``source: {s3: {url: s3://bucket/prefix, ...}}`` reads every object under a prefix once
(at least once per record), shared across instances of a coordination job: objects are
packed into splits deterministically, splits are assigned through spate-coordination,
read with ranged GETs pinned by ETag, decompressed (gzip, zstd), framed (NDJSON, lines,
Avro object container files) into ``memoryview`` records, and their progress is
committed after the sinks acknowledged them (B24, B25). ``file://`` directories work
the same way without S3.

Entry point: ``s3 = "spate_s3:S3SourceFactory"`` in ``spate.sources``.
"""

from spate_s3._factory import S3SourceFactory, default_coordination
from spate_s3._objects import ObjectChangedError, ObjectInfo
from spate_s3._plan import PACKING_VERSION, SplitObjects, plan_splits
from spate_s3._reader import Position
from spate_s3._source import S3Source
from spate_s3.config import Location, S3SourceConfig, parse_url

__version__ = "0.1.0"

__all__ = [
    "PACKING_VERSION",
    "Location",
    "ObjectChangedError",
    "ObjectInfo",
    "Position",
    "S3Source",
    "S3SourceConfig",
    "S3SourceFactory",
    "SplitObjects",
    "__version__",
    "default_coordination",
    "parse_url",
    "plan_splits",
]
