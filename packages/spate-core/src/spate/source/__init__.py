"""Source contract and source-side helpers."""

from spate.source._contract import BoundedSource, Source, SourceEvents

__all__ = ["BoundedSource", "Source", "SourceEvents"]
