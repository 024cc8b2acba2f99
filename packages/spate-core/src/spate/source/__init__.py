"""Source contract and source-side helpers."""

from spate.source._contract import Source, SourceEvents

__all__ = ["Source", "SourceEvents"]
