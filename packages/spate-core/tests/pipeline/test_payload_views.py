"""Payloads reach the chain as borrowed views over the source's own buffer.

See docs/concepts/architecture.md, "Records are borrowed".
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence

from spate.checkpoint import AckToken
from spate.ops import Stalled
from spate.pipeline import Pipeline
from spate.records import Lane, PayloadBatch
from spate.source import SourceEvents
from spate.testing import ManualClock, capture_sink, memory_source


class _Inspect:
    """Records what the chain was handed, and keeps references the wrong way and the right way."""

    def __init__(self) -> None:
        self.objs: list[object] = []
        self.kept_views: list[memoryview] = []
        self.kept_copies: list[bytes] = []

    def process(
        self, batch: PayloadBatch, ack: AckToken, resume: object | None = None
    ) -> Stalled | None:
        for view in batch.payloads:
            assert type(view) is memoryview
            self.objs.append(view.obj)
            self.kept_views.append(view)  # wrong: a borrowed view kept past its batch
            self.kept_copies.append(bytes(view))  # right: a copy
        return None


def test_payloads_are_memoryviews_over_the_source_buffer_without_a_copy() -> None:
    clock = ManualClock()
    data = {0: [b"alpha", b"beta"], 1: [b"gamma"]}
    source, handle = memory_source(data, batch_size=10)
    sink, _ = capture_sink(clock=clock)
    chain = _Inspect()
    report = Pipeline(
        "views", source, {"sink": sink}, processor=chain, clock=clock, handle_signals=False
    ).run()
    assert report.exit_code == 0
    (buffer,) = handle.buffers
    assert len(chain.objs) == 3
    assert all(obj is buffer for obj in chain.objs)  # the very object the source owns
    assert sorted(bytes(v) for v in chain.kept_views) == [b"alpha", b"beta", b"gamma"]


class _RecyclingSource:
    """A source that reuses one read buffer for every poll, as a chunked reader does."""

    def __init__(self, chunks: list[list[bytes]]) -> None:
        self._chunks = chunks
        self._buffer = bytearray(max(sum(map(len, c)) for c in chunks))
        self._next = 0
        self._events: SourceEvents | None = None
        self.lane = Lane("recycle", 0)

    def start(self, events: SourceEvents) -> None:
        self._events = events
        events.assigned([self.lane])

    def poll(self, timeout: float) -> Sequence[PayloadBatch]:
        assert self._events is not None
        if self._next >= len(self._chunks):
            if self._next == len(self._chunks):
                self._next += 1
                self._events.drained()
            return []
        chunk = self._chunks[self._next]
        view = memoryview(self._buffer)
        views, pos = [], 0
        for payload in chunk:
            self._buffer[pos : pos + len(payload)] = payload  # overwrite in place
            views.append(view[pos : pos + len(payload)])
            pos += len(payload)
        first = self._next * 10
        self._next += 1
        return [
            PayloadBatch(
                lane=self.lane,
                offsets=list(range(first, first + len(chunk))),
                payloads=views,
                keys=[None] * len(chunk),
                timestamps=[0] * len(chunk),
                next_offset=first + len(chunk),
            )
        ]

    def commit(self, offsets: Mapping[Lane, int], *, sync: bool) -> None:
        pass

    def pause(self, lanes: Collection[Lane]) -> None:
        pass

    def resume(self, lanes: Collection[Lane]) -> None:
        pass

    def close(self) -> None:
        pass


def test_a_record_kept_past_its_batch_must_be_copied() -> None:
    """Views are borrowed: once the source reuses its buffer, a kept view shows other
    bytes, while ``bytes(view)`` taken during the batch stays correct."""
    clock = ManualClock()
    source = _RecyclingSource([[b"first-1", b"first-2"], [b"later-1", b"later-2"]])
    sink, _ = capture_sink(clock=clock)
    chain = _Inspect()
    report = Pipeline(
        "kept", source, {"sink": sink}, processor=chain, clock=clock, handle_signals=False
    ).run()
    assert report.exit_code == 0
    assert chain.kept_copies == [b"first-1", b"first-2", b"later-1", b"later-2"]
    assert [bytes(v) for v in chain.kept_views[:2]] == [b"later-1", b"later-2"]  # clobbered


class _BytesSource:
    """A source holding whole ``bytes`` payloads, handed over lazily as Kafka's are."""

    def __init__(self, values: list[bytes]) -> None:
        self.values = values
        self.timestamp_reads = 0
        self._done = False
        self._events: SourceEvents | None = None
        self.lane = Lane("bytes", 0)

    def start(self, events: SourceEvents) -> None:
        self._events = events
        events.assigned([self.lane])

    def _timestamps(self) -> list[int]:
        self.timestamp_reads += 1
        return [0] * len(self.values)

    def poll(self, timeout: float) -> Sequence[PayloadBatch]:
        assert self._events is not None
        if self._done:
            self._events.drained()
            return []
        self._done = True
        count = len(self.values)
        return [
            PayloadBatch.lazy(
                self.lane,
                list(self.values),
                first_offset=0,
                next_offset=count,
                offsets=list(range(count)),
                keys=[None] * count,
                timestamps=self._timestamps,
            )
        ]

    def commit(self, offsets: Mapping[Lane, int], *, sync: bool) -> None:
        pass

    def pause(self, lanes: Collection[Lane]) -> None:
        pass

    def resume(self, lanes: Collection[Lane]) -> None:
        pass

    def close(self) -> None:
        pass


class _Collect:
    """A deserializer that keeps what it is handed."""

    many = False

    def __init__(self, takes_bytes: bool) -> None:
        self.takes_bytes = takes_bytes
        self.seen: list[object] = []

    def deserialize(self, payload: memoryview | bytes) -> object:
        self.seen.append(payload)
        return bytes(payload)


def test_whole_bytes_values_reach_the_chain_without_views_or_copies_b97() -> None:
    """A batch of ``bytes`` values: without a deserializer the sink gets the very
    objects; a deserializer with ``takes_bytes`` gets them too; one without it gets views
    over them. Nobody asked for timestamps, so the source never read them."""
    values = [b"alpha", b"beta", b"gamma"]
    for deserializer in (None, _Collect(True), _Collect(False)):
        clock = ManualClock()
        source = _BytesSource(values)
        sink, script = capture_sink(clock=clock)
        report = Pipeline(
            "bytes",
            source,
            {"sink": sink},
            deserializer=deserializer,
            clock=clock,
            handle_signals=False,
        ).run()
        assert report.exit_code == 0
        assert script.rows == values
        assert source.timestamp_reads == 0
        if deserializer is None:
            assert all(row is value for row, value in zip(script.rows, values, strict=True))
        elif deserializer.takes_bytes:
            assert all(seen is value for seen, value in zip(deserializer.seen, values, strict=True))
        else:
            assert all(type(seen) is memoryview for seen in deserializer.seen)
            assert all(
                seen.obj is value  # type: ignore[union-attr]
                for seen, value in zip(deserializer.seen, values, strict=True)
            )
