"""The S3 backfill's progress in bytes of the whole job, for the CLI's progress bar:
committed bytes of the planned bytes, as the coordination store holds them."""

from __future__ import annotations

from pathlib import Path

from spate.source import Progress, ProgressSource
from spate_coordination import SplitState, SplitStatus
from spate_s3 import ObjectInfo, S3SourceConfig
from spate_s3._plan import SplitObjects
from spate_s3._source import job_progress
from spate_s3.config import Location

from tests.s3.s3kit import make_source, record_line, run_to_end

HERE = Location("file", "/data", "")


def split(split_id: str, *sizes: int) -> SplitObjects:
    objects = tuple(ObjectInfo(f"{split_id}/{i}", f'"e{i}"', size) for i, size in enumerate(sizes))
    return SplitObjects(split_id, HERE, objects)


def position(obj: int, byte: int | None) -> dict[str, object]:
    return {"object": obj, "record": 7, "byte": byte, "offset": 70}


def test_job_progress_counts_committed_bytes_of_every_split_against_the_plan() -> None:
    plan = {
        s.split_id: s
        for s in (
            split("done", 100, 50),
            split("plain", 100, 200, 300),
            split("gzip", 400, 500),
            split("held", 1000),
            split("pending", 60),
            split("odd", 70),
        )
    }
    states = {
        "done": SplitState("done", SplitStatus.COMPLETED, 1, None, position(1, 40)),
        # Two objects committed, 120 bytes into the third.
        "plain": SplitState("plain", SplitStatus.OWNED, 2, "i-1", position(2, 120)),
        # A compressed object cannot be sought: only the finished first object counts.
        "gzip": SplitState("gzip", SplitStatus.OWNED, 1, "i-2", position(1, None)),
        # Quarantined keeps its committed progress; the total keeps its bytes.
        "held": SplitState("held", SplitStatus.QUARANTINED, 1, None, position(0, 250), "bad"),
        # Progress this version cannot read counts as none.
        "odd": SplitState("odd", SplitStatus.OWNED, 1, "i-1", {"object": "x"}),
    }
    got = job_progress(plan, states)
    assert got == Progress(150 + 300 + 120 + 400 + 250, 150 + 600 + 900 + 1000 + 60 + 70, "bytes")
    # A byte offset past its object (it cannot be) never counts more than the object.
    over = job_progress(
        plan, {"pending": SplitState("pending", SplitStatus.OWNED, 1, "i", position(0, 999))}
    )
    assert over.done == 60


def test_a_finished_backfill_reports_all_its_planned_bytes(tmp_path: Path) -> None:
    root = tmp_path / "d"
    root.mkdir()
    sizes = []
    for i in range(4):
        body = b"".join(record_line(i, r) + b"\n" for r in range(150))
        (root / f"obj-{i}.ndjson").write_bytes(body)
        sizes.append(len(body))
    cfg = S3SourceConfig(url=f"file://{root}", split_target_bytes=sizes[0] + 1, batch_records=32)  # type: ignore[arg-type]
    source, _ = make_source(cfg)
    assert isinstance(source, ProgressSource)
    assert source.progress() is None  # not started: the plan is not known
    report, rows = run_to_end(source)
    assert report.exit_code == 0, report.reason
    assert len(rows) == 600
    assert source.progress() == Progress(sum(sizes), sum(sizes), "bytes")
