"""A deterministic source whose committed offsets survive the process (for kill -9 tests).

:class:`SequenceSource` generates, per lane, the payloads ``b"<stream>:<partition>:<offset>"``
for offsets ``0 .. records_per_lane - 1`` (or without end). Its commits are written to a
small JSON offsets file — to a temporary file, fsynced, then atomically renamed over the
old one — so a restarted process resumes from the last commit, exactly as a Kafka
consumer group would, and a test can sample the committed offsets from another process
with :func:`read_offsets`. It stands in for a broker in multi-process delivery tests that
need no infrastructure; the Kafka connector has its own versions of those tests.

Each poll builds one ``bytes`` buffer per batch and hands out views into it.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Collection, Mapping, Sequence
from pathlib import Path

from spate.records import Lane, PayloadBatch
from spate.source._contract import SourceEvents


def read_offsets(path: str | os.PathLike[str]) -> dict[int, int]:
    """The committed offsets in an offsets file: partition → next offset (empty if none)."""
    try:
        raw = Path(path).read_text()
    except FileNotFoundError:
        return {}
    return {int(k): int(v) for k, v in json.loads(raw).items()}


def sequence_payload(stream: str, partition: int, offset: int) -> str:
    """The payload text of one record (what a test expects to find in the sink)."""
    return f"{stream}:{partition}:{offset}"


class SequenceSource:
    """Implements ``Source`` over generated lanes, committing to an offsets file."""

    def __init__(
        self,
        offsets_path: str | os.PathLike[str],
        *,
        stream: str = "seq",
        partitions: int = 2,
        records_per_lane: int | None = 1000,
        batch_size: int = 50,
        pace: float = 0.0,
    ) -> None:
        """``pace`` seconds are slept per poll that returns data (real time), so a test
        can stop a process part-way through."""
        self.offsets_path = Path(offsets_path)
        self.stream = stream
        self.partitions = partitions
        self.records_per_lane = records_per_lane
        self.batch_size = batch_size
        self.pace = pace
        self._events: SourceEvents | None = None
        self._position: dict[Lane, int] = {}
        self._paused: set[Lane] = set()
        self._drained = False
        self.commits = 0

    def start(self, events: SourceEvents) -> None:
        self._events = events
        committed = read_offsets(self.offsets_path)
        lanes = [Lane(self.stream, p) for p in range(self.partitions)]
        self._position = {lane: committed.get(lane.partition, 0) for lane in lanes}
        events.assigned(lanes)

    def poll(self, timeout: float) -> Sequence[PayloadBatch]:
        events = self._events
        if events is None:
            raise RuntimeError("poll before start")
        end = self.records_per_lane
        batches: list[PayloadBatch] = []
        for lane, start in self._position.items():
            if lane in self._paused or (end is not None and start >= end):
                continue
            stop = start + self.batch_size if end is None else min(start + self.batch_size, end)
            texts = [
                sequence_payload(lane.stream, lane.partition, o).encode()
                for o in range(start, stop)
            ]
            buffer = b"".join(texts)
            view = memoryview(buffer)
            views: list[memoryview] = []
            pos = 0
            for text in texts:
                views.append(view[pos : pos + len(text)])
                pos += len(text)
            batches.append(
                PayloadBatch(
                    lane=lane,
                    offsets=list(range(start, stop)),
                    payloads=views,
                    keys=[None] * len(views),
                    timestamps=[0] * len(views),
                    next_offset=stop,
                )
            )
            self._position[lane] = stop
        if batches and self.pace:
            time.sleep(self.pace)
        if (
            not batches
            and not self._drained
            and end is not None
            and all(pos >= end for pos in self._position.values())
        ):
            self._drained = True
            events.drained()
        return batches

    def commit(self, offsets: Mapping[Lane, int], *, sync: bool) -> None:
        current = read_offsets(self.offsets_path)
        for lane, offset in offsets.items():
            current[lane.partition] = offset
        tmp = self.offsets_path.with_name(f"{self.offsets_path.name}.{os.getpid()}.tmp")
        with open(tmp, "w") as fh:
            json.dump({str(k): v for k, v in sorted(current.items())}, fh)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, self.offsets_path)
        self.commits += 1

    def pause(self, lanes: Collection[Lane]) -> None:
        self._paused.update(lanes)

    def resume(self, lanes: Collection[Lane]) -> None:
        self._paused.difference_update(lanes)

    def close(self) -> None:
        self._events = None
