"""What a spool directory holds, read as recovery would, without taking its lock.

Tests that check custody under ``ack: spooled`` count a committed record as held when it
is in the destination *or* in a batch some spool still keeps (B54): the source's ack
resolved once the batch was fsynced there.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

from spate.sink.tiers._spool_codec import decode_records
from spate.sink.tiers._store import _parse_name, _read_batches, _read_released


def spooled_rows(root: Path) -> Iterator[object]:
    """The rows of the batches not noted released in any spool segment under ``root``
    (every worker's directory included)."""
    for path in root.rglob("seg-*.jsonl"):
        try:
            data = path.read_bytes()
        except FileNotFoundError:  # released and deleted meanwhile
            continue
        number, origin = _parse_name(path.name)
        batches, _end = _read_batches(data, str(path), number, origin, last=True)
        released = _read_released(str(path))
        for batch in batches:
            if batch.ref.position in released:
                continue
            for rows, _keys, _lane in decode_records(batch.records):
                yield from rows
