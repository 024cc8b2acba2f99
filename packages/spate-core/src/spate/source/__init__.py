"""Source contract and source-side helpers."""

from spate.source._contract import (
    BoundedSource,
    FetchLagSource,
    Progress,
    ProgressSource,
    Source,
    SourceEvents,
)

__all__ = [
    "BoundedSource",
    "FetchLagSource",
    "Progress",
    "ProgressSource",
    "Source",
    "SourceEvents",
]
