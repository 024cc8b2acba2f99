"""Source contract and source-side helpers."""

from spate.source._contract import FetchLagSource, Source, SourceEvents

__all__ = ["FetchLagSource", "Source", "SourceEvents"]
