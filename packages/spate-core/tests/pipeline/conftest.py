"""Shared builders for the runtime tests, handed to tests as fixtures."""

from __future__ import annotations

import threading
from collections.abc import Mapping

import pytest
from spate.checkpoint import AckToken
from spate.config.models import BackpressureConfig, CheckpointConfig
from spate.flow import InflightBudget
from spate.metrics import Meter
from spate.ops import BatchProcessor, Stalled
from spate.pipeline import PipelineRuntime, ShutdownHandle
from spate.records import Lane, PayloadBatch
from spate.sink import Offer, Sink
from spate.source import Source
from spate.testing import ManualClock

_COUNTER = iter(range(1_000_000))


def make_runtime(
    source: Source,
    sinks: Mapping[str, Sink],
    processor: BatchProcessor,
    clock: ManualClock,
    *,
    checkpoint: CheckpointConfig | None = None,
    backpressure: BackpressureConfig | None = None,
    budget: InflightBudget | None = None,
) -> tuple[PipelineRuntime, ShutdownHandle]:
    backpressure = backpressure or BackpressureConfig()
    wake = threading.Event()
    shutdown = ShutdownHandle(wake)
    name = f"rt{next(_COUNTER)}"
    runtime = PipelineRuntime(
        name=name,
        source=source,
        sinks=sinks,
        processor=processor,
        checkpoint=checkpoint or CheckpointConfig(interval=1.0),
        backpressure=backpressure,
        clock=clock,
        meter=Meter(name),
        budget=budget or InflightBudget(backpressure.max_inflight_bytes),
        shutdown=shutdown,
        wake=wake,
    )
    return runtime, shutdown


class LaneRouter:
    """Test processor: each lane's payloads (copied) go to the sink named for the lane."""

    def __init__(self, sinks: Mapping[int, Sink]) -> None:
        self.sinks = sinks

    def process(
        self, batch: PayloadBatch, ack: AckToken, resume: object | None = None
    ) -> Stalled | None:
        sink = self.sinks[batch.lane.partition]
        start = resume if isinstance(resume, int) else 0
        for i in range(start, len(batch.payloads)):
            if sink.offer(bytes(batch.payloads[i]), None, batch.lane, ack) is Offer.REJECTED:
                return Stalled(cursor=i, reason="sink_full", sink=sink.name)
        return None


class FanOut:
    """Test processor: every payload goes to every sink (a split with all branches, B2)."""

    def __init__(self, sinks: list[Sink]) -> None:
        self.sinks = sinks

    def process(
        self, batch: PayloadBatch, ack: AckToken, resume: object | None = None
    ) -> Stalled | None:
        for payload in batch.payloads:
            row = bytes(payload)
            for sink in self.sinks:
                if sink.offer(row, None, batch.lane, ack) is Offer.REJECTED:
                    raise AssertionError("unexpected rejection")
        return None


def lane(partition: int, stream: str = "memory") -> Lane:
    return Lane(stream, partition)


@pytest.fixture
def runtime_factory() -> object:
    return make_runtime


@pytest.fixture
def lane_router() -> type[LaneRouter]:
    return LaneRouter


@pytest.fixture
def fan_out() -> type[FanOut]:
    return FanOut
