"""A payload batch built lazily reads exactly like one built eagerly (B97).

A source that holds whole ``bytes`` payloads (Kafka) hands them over as
``PayloadBatch.values`` and leaves views, offsets, keys and timestamps to be read on
first access. Hypothesis builds both kinds from the same records: every field, the
length, the first and last offset and the byte count must match, each field is read from
the source at most once and not at all until asked, and the views span the very
``bytes`` objects of ``values`` (no copy).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable

from hypothesis import given, settings
from hypothesis import strategies as st
from spate.records import Lane, PayloadBatch

LANE = Lane("t", 3)

records = st.lists(
    st.tuples(
        st.integers(1, 3),  # gap to the previous offset
        st.binary(max_size=8),
        st.one_of(st.none(), st.binary(max_size=4)),
        st.integers(0, 2**41),
    ),
    max_size=12,
)


def counting(reads: Counter[str], name: str, column: list[object]) -> Callable[[], list[object]]:
    def read() -> list[object]:
        reads[name] += 1
        return list(column)

    return read


@settings(max_examples=200, deadline=None)
@given(rows=records, start=st.integers(0, 100), order=st.permutations(range(8)))
def test_lazy_batch_reads_like_an_eager_one_b97(
    rows: list[tuple[int, bytes, bytes | None, int]], start: int, order: list[int]
) -> None:
    offsets: list[int] = []
    position = start
    for gap, *_ in rows:
        position += gap
        offsets.append(position)
    values = [value for _, value, _, _ in rows]
    keys = [key for _, _, key, _ in rows]
    timestamps = [ts for *_, ts in rows]
    next_offset = offsets[-1] + 1 if offsets else start
    eager = PayloadBatch(
        lane=LANE,
        offsets=list(offsets),
        payloads=[memoryview(v) for v in values],
        keys=list(keys),
        timestamps=list(timestamps),
        next_offset=next_offset,
    )
    reads: Counter[str] = Counter()
    lazy = PayloadBatch.lazy(
        LANE,
        values,
        first_offset=offsets[0] if offsets else start,
        next_offset=next_offset,
        offsets=counting(reads, "offsets", offsets),  # type: ignore[arg-type]
        keys=counting(reads, "keys", keys),  # type: ignore[arg-type]
        timestamps=counting(reads, "timestamps", timestamps),  # type: ignore[arg-type]
    )
    # Length, bounds and size need none of the lazily read fields.
    assert len(lazy) == len(eager) == len(rows)
    assert lazy.first_offset == eager.first_offset
    assert lazy.next_offset == eager.next_offset
    assert lazy.payload_bytes() == eager.payload_bytes() == sum(map(len, values))
    assert lazy.values is values and eager.values is None
    assert not reads
    # Any order of reads, each twice: the same values, each field read once.
    fields = ["offsets", "keys", "timestamps", "payloads", "last_offset", "first_offset"]
    for index in order:
        name = fields[index % len(fields)]
        for _ in range(2):
            got, want = getattr(lazy, name), getattr(eager, name)
            if name == "payloads":
                assert [bytes(v) for v in got] == [bytes(v) for v in want]
                assert all(type(v) is memoryview for v in got)
                assert all(v.obj is value for v, value in zip(got, values, strict=True))
            else:
                assert got == want
    assert all(n == 1 for n in reads.values())
    assert lazy.payloads is lazy.payloads  # built once


def test_eager_batch_lists_grow_after_construction() -> None:
    """A source may fill an eager batch's lists after making it (length follows them)."""
    batch = PayloadBatch(lane=LANE, offsets=[], payloads=[], keys=[], timestamps=[], next_offset=0)
    assert len(batch) == 0 and batch.first_offset == 0
    batch.offsets.append(7)
    batch.payloads.append(memoryview(b"ab"))
    batch.keys.append(None)
    batch.timestamps.append(0)
    batch.next_offset = 8
    assert len(batch) == 1
    assert (batch.first_offset, batch.last_offset, batch.payload_bytes()) == (7, 7, 2)
