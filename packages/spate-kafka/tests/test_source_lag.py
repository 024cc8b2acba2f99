"""The position lag and the committed lag of a partition from librdkafka's statistics
(B23): what the consumer has still to read, and what a crash now would replay."""

from __future__ import annotations

import pytest
from spate_kafka._lag import _partition_lags

UNSET = -1001  # librdkafka's "no offset" in its statistics


def _stats(**fields: int) -> dict[str, int]:
    base = {
        "lo_offset": 0,
        "hi_offset": UNSET,
        "ls_offset": UNSET,
        "app_offset": UNSET,
        "committed_offset": UNSET,
    }
    base.update(fields)
    return base


@pytest.mark.parametrize(
    ("fields", "from_start", "expected"),
    [
        # A new group before its first record: the whole backlog is behind both.
        ({"hi_offset": 5_000_000, "ls_offset": 5_000_000}, True, (5_000_000, 5_000_000)),
        # ... counted from the low watermark when the log was truncated.
        ({"lo_offset": 1000, "hi_offset": 5000, "ls_offset": 5000}, True, (4000, 4000)),
        # ... and nothing behind with auto.offset.reset: latest.
        ({"hi_offset": 5000, "ls_offset": 5000}, False, (0, 0)),
        # Reading ahead of the commit: 940,000 taken, nothing committed yet.
        (
            {"hi_offset": 5_000_000, "ls_offset": 5_000_000, "app_offset": 940_000},
            True,
            (4_060_000, 5_000_000),
        ),
        # Committed behind the position.
        (
            {
                "hi_offset": 5_000_000,
                "ls_offset": 5_000_000,
                "app_offset": 4_800_000,
                "committed_offset": 3_540_000,
            },
            True,
            (200_000, 1_460_000),
        ),
        # Restarted on a committed group: the position is the committed offset.
        ({"hi_offset": 900, "ls_offset": 900, "committed_offset": 700}, True, (200, 200)),
        # read_committed: an open transaction's records are not readable yet.
        ({"hi_offset": 1000, "ls_offset": 800, "app_offset": 500}, True, (300, 800)),
        # No end known yet.
        ({}, True, None),
    ],
)
def test_b23_position_and_committed_lag_from_librdkafka_statistics(
    fields: dict[str, int], from_start: bool, expected: tuple[int, int] | None
) -> None:
    assert _partition_lags(_stats(**fields), from_start) == expected
