"""Source contract and source-side helpers."""

from spate.source._contract import BoundedSource, FetchLagSource, Source, SourceEvents

__all__ = ["BoundedSource", "FetchLagSource", "Source", "SourceEvents"]
