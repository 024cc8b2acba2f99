"""The ``out`` object a split's route function emits to.

``out.emit(handle, row)`` only records ``(sink index, row)`` in a list; the chain offers
the rows after the route function returns, in emit order. Keeping the route function's
output as data is what lets a refused row be offered again later without calling the
route function twice for the same record (B8).
"""

from __future__ import annotations

from collections.abc import Mapping

from spate.ops._builder import SinkHandle


class RouteOut:
    """Collects the rows one call of a route function emits."""

    __slots__ = ("_by_name", "buf")

    def __init__(self, index: Mapping[SinkHandle, int]) -> None:
        # Keyed by name: a str hash is cached in C, where the frozen dataclass's generated
        # __hash__ would run Python code for every emitted row.
        self._by_name = {handle.name: i for handle, i in index.items()}
        self.buf: list[tuple[int, object]] = []

    def emit(self, sink: SinkHandle, row: object) -> None:
        """Send ``row`` to ``sink`` (a handle from ``ctx.sink(name)``)."""
        index = self._by_name.get(sink.name) if type(sink) is SinkHandle else None
        if index is None:
            known = ", ".join(repr(name) for name in self._by_name)
            raise ValueError(
                f"out.emit() needs a sink handle from ctx.sink(name) for one of {known}; "
                f"got {sink!r}"
            )
        self.buf.append((index, row))
