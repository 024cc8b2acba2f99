"""The run's summary line adds up (B42): ``in`` counts what the source handed over,
``delivered`` and ``dropped`` what became of it; what a source left out before intake
(duplicates of an overlapping poll) is counted apart, so ``dropped`` never exceeds ``in``."""

from __future__ import annotations

from spate.pipeline import ExitReport


def test_b42_source_drops_are_counted_apart_from_the_records_taken_in() -> None:
    report = ExitReport(
        pipeline="collector",
        state="completed",
        reason="source drained",
        records_in=60,
        records_delivered=60,
        dropped={},
        source_dropped={"duplicate": 114},
    )
    line = report.summary()
    assert "records in=60 delivered=60 dropped=0 source_dropped=114 (duplicate=114)" in line
    assert report.records_dropped <= report.records_in


def test_b242_late_rows_are_shown_by_table_apart_from_the_drops() -> None:
    report = ExitReport(
        pipeline="events",
        state="completed",
        reason="source drained",
        records_in=100,
        records_delivered=100,
        dropped={},
        late_rows={"events_late": 7, "db.other_late": 3},
    )
    line = report.summary()
    assert "dropped=0 late_rows=10 (db.other_late=3, events_late=7) failed=0" in line
