"""The spool keeps each row's source offset in its segments, and reads the segments of
before (B421, B423).

Each record kind — a packed run, a JSON record, a frame record — carries its rows'
offsets behind a flag (or an ``"o"`` member); a record written before offsets were kept
has neither and reads back with no offsets.
"""

from __future__ import annotations

import polars as pl
from spate.records import Lane
from spate.sink.tiers._spool import _Batch, _load
from spate.sink.tiers._spool_codec import (
    OFFSETS,
    decode_positioned_frame,
    decode_records,
    decode_runs,
    encode_batch,
    encode_frame,
    encode_record,
    pack_run,
)

LANE = Lane("orders", 1)

# Written by the codec of before offsets were kept (a packed run with keys; a JSON row).
OLD_RUN = (
    b"\x01\x01\x02\x00\x00\x00\x01\x00\x00\x00\x00\x00\x00\x00\x06\x00\x00\x00orders"
    b"\x02\x00\x00\x00\x03\x00\x00\x00\xff\xff\xff\xff\x01\x00\x00\x00a1b22k"
)
OLD_JSON = b'{"s":"orders","p":1,"k":"k","r":{"id":7}}'


def test_b423_records_written_before_offsets_were_kept_read_back_without_offsets() -> None:
    """An old segment's records read as before, with no offsets (B423)."""
    runs = list(decode_runs([OLD_RUN, OLD_JSON]))
    assert runs == [
        ([b"a1", b"b22"], [None, b"k"], LANE, None),
        ([{"id": 7}], [b"k"], LANE, None),
    ]
    assert list(decode_records([OLD_RUN])) == [([b"a1", b"b22"], [None, b"k"], LANE)]
    # Without offsets the codec still writes exactly the old bytes.
    assert pack_run([b"a1", b"b22"], [None, b"k"], LANE) == OLD_RUN
    assert encode_record({"id": 7}, b"k", LANE) == OLD_JSON


def test_b423_an_old_segment_replays_with_unknown_offsets_next_to_new_ones() -> None:
    """A replayed batch mixing old records and new ones keeps -1 for the old rows' offsets
    and the spooled offsets for the new (B421, B423)."""
    batch = _Batch()
    new = pack_run([b"c"], [None], LANE, [41])
    _load(batch, [OLD_RUN, new])
    assert batch.rows == [b"a1", b"b22", b"c"]
    assert batch.offsets == [-1, -1, 41]


def test_b421_every_record_kind_keeps_its_rows_offsets() -> None:
    """Packed runs, JSON records and frame records round-trip their rows' offsets (B421)."""
    rows: list[object] = [b"x", b"yy", {"id": 1}, b"z"]
    keys: list[bytes | None] = [None, b"k", None, None]
    other = Lane("orders", 2)
    records = encode_batch(rows, keys, [(0, LANE), (3, other)], {}, [10, 11, 12, 99])
    got = list(decode_runs(records))
    assert all(offsets is not None for *_, offsets in got)
    flat = [
        (row, lane, offset) for r, _, lane, o in got for row, offset in zip(r, o or [], strict=True)
    ]
    assert flat == [
        (b"x", LANE, 10),
        (b"yy", LANE, 11),
        ({"id": 1}, LANE, 12),
        (b"z", other, 99),
    ]
    frame = pl.DataFrame({"id": [1, 2, 3]})
    for keys_of in (None, [b"a", None, b"c"]):
        payload = encode_frame(frame, keys_of, LANE, [5, 6, 7])
        assert payload[1] & OFFSETS
        decoded, got_keys, lane, offsets = decode_positioned_frame(payload)
        assert (got_keys, lane, offsets) == (keys_of, LANE, [5, 6, 7])
        assert decoded.equals(frame)  # type: ignore[attr-defined]
        plain = decode_positioned_frame(encode_frame(frame, keys_of, LANE))
        assert plain[3] is None


def test_b349_under_skip_a_holder_keeps_positions_not_records() -> None:
    """A policy without dead letters binds ``positions_only``: what a holder keeps of the
    source batch is its lane and offsets, no payload or key, made once per source batch;
    under ``dead_letter`` it is the batch itself (B349)."""
    from spate.records import PayloadBatch
    from spate.sink._held import HeldErrors, RecordCell

    source = PayloadBatch(LANE, [7, 8, 9], [memoryview(b"x")] * 3, [b"k"] * 3, [0] * 3, 10)
    cell = RecordCell()
    cell.batch, cell.index = source, 1
    skip = HeldErrors(cell, lambda *_: None, lambda *_: True, positions_only=True)
    kept = skip.kept()
    assert kept is not None and kept is not source
    assert (kept.lane, kept.offsets, kept.first_offset, kept.next_offset) == (
        LANE,
        [7, 8, 9],
        7,
        10,
    )
    assert kept.payloads == [] and kept.keys == []
    assert skip.kept() is kept  # one per source batch
    letters = HeldErrors(cell, lambda *_: None, lambda *_: True)
    assert letters.kept() is source
