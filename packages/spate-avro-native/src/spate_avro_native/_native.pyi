from collections.abc import Sequence

from typing_extensions import Buffer

ZERO_SIZE_ITEMS: int
"""Items of zero minimum encoded size one datum may hold over all its arrays and maps."""
MAX_DEPTH: int
"""Nesting levels (records, arrays, maps, unions) a datum may have."""

class Program:
    """A writer schema compiled to a flat list of ints (see ``spate_avro._scan``)."""

    def __init__(self, ops: Sequence[int]) -> None: ...

def scan(program: Program, body: Buffer, ends: Buffer, trailer: int) -> list[int]:
    """Indices of the framed datums that are not exactly one well-formed datum."""
