"""Source contract and source-side helpers."""

from spate.source._contract import (
    BoundedSource,
    DurableCommitSource,
    FetchLagSource,
    Progress,
    ProgressSource,
    Source,
    SourceEvents,
)

__all__ = [
    "BoundedSource",
    "DurableCommitSource",
    "FetchLagSource",
    "Progress",
    "ProgressSource",
    "Source",
    "SourceEvents",
]
