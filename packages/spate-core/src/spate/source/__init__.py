"""Source contract and source-side helpers."""

from spate.source._contract import (
    AssignmentWaitSource,
    BoundedSource,
    DurableCommitSource,
    FetchLagSource,
    Progress,
    ProgressSource,
    Source,
    SourceEvents,
)

__all__ = [
    "AssignmentWaitSource",
    "BoundedSource",
    "DurableCommitSource",
    "FetchLagSource",
    "Progress",
    "ProgressSource",
    "Source",
    "SourceEvents",
]
