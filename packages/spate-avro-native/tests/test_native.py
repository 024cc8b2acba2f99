"""The scanner's own contract: programs are checked when built, buffers are read in place
and inconsistent framing is refused (B110). Scans against compiled schemas are tested in
``spate-avro`` (``tests/test_scan.py``), where the compiler lives."""

from __future__ import annotations

import array

import pytest

from tests.support.avro_native import SKIP_REASON

pytest.importorskip("spate_avro_native", reason=SKIP_REASON)

from spate_avro_native import Program, scan

LONG = [3]
"""A program whose root is a ``long``."""


def _ends(*sizes: int) -> bytes:
    offsets = [0]
    for size in sizes:
        offsets.append(offsets[-1] + size)
    return array.array("q", offsets).tobytes()


@pytest.mark.parametrize(
    "ops",
    [
        [],  # no root
        [99],  # unknown opcode
        [13, 2, 4],  # a record cut short
        [10, 7, 1],  # an array whose items are past the end
        [13, 1, 2, 3],  # a field pointing into a node's arguments
        [8, -1],  # a negative fixed size
    ],
)
def test_b110_programs_that_could_send_the_scan_astray_are_refused(ops: list[int]) -> None:
    with pytest.raises(ValueError):
        Program(ops)


def test_b110_each_datum_is_scanned_without_its_trailer() -> None:
    trailer = b"\xa5\x5a\xc3\x3c"
    datums = [b"\x02", b"\x02\x00", b"", b"\xff", b"\x04"]
    body = b"".join(d + trailer for d in datums)
    ends = _ends(*(len(d) + 4 for d in datums))
    assert scan(Program(LONG), memoryview(body), ends, 4) == [1, 2, 3]
    assert scan(Program(LONG), bytearray(body), memoryview(ends), 4) == [1, 2, 3]


def test_b110_offsets_that_do_not_fit_the_body_are_an_error_not_a_scan() -> None:
    with pytest.raises(ValueError):
        scan(Program(LONG), b"\x02", _ends(5), 0)
    with pytest.raises(ValueError):
        scan(Program(LONG), b"\x02", b"\x00" * 12, 0)
    with pytest.raises(ValueError):
        scan(Program(LONG), b"\x02\x00", _ends(2), 4)  # shorter than the trailer
    with pytest.raises(BufferError):
        scan(Program(LONG), memoryview(b"\x02\x00\x02")[::2], _ends(1, 1), 0)
