"""The runtime closes the deserializer on every way a run can end (B31).

A deserializer may hold background resources (the Avro registry client's fetch thread
and its connections); ``Pipeline.run`` owns the deserializer it was given and calls its
``close()`` exactly once whether the run completes, drains on a stop request (SIGTERM),
fails, or never starts (B14, B16, B31).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, ClassVar

import pytest
from spate import DeserError, DeserErrorKind, ErrorPolicy, FatalError, ManualClock
from spate.pipeline import Pipeline
from spate.testing import capture_sink, memory_source


class ClosingDeserializer:
    """Decodes payloads as text; counts ``close`` calls; optional hook per record."""

    many: ClassVar[bool] = False

    def __init__(
        self,
        on_error: ErrorPolicy = ErrorPolicy.SKIP,
        hook: Callable[[bytes], None] | None = None,
    ) -> None:
        self.on_error = on_error
        self.hook = hook
        self.closed = 0

    def deserialize(self, payload: memoryview) -> object:
        data = bytes(payload)
        if self.hook is not None:
            self.hook(data)
        return data.decode()

    def close(self) -> None:
        self.closed += 1


def _pipeline(name: str, deser: ClosingDeserializer, **source: Any) -> Pipeline:
    clock = ManualClock()
    src, _ = memory_source({0: [b"a", b"b", b"c"]}, **source)
    sink, _ = capture_sink("out", clock=clock)
    return Pipeline(name, src, {"out": sink}, deserializer=deser, clock=clock, handle_signals=False)


def test_deserializer_is_closed_when_the_run_completes() -> None:
    deser = ClosingDeserializer()
    report = _pipeline("close-done", deser).run()
    assert report.exit_code == 0
    assert deser.closed == 1


def test_deserializer_is_closed_after_a_stop_request_drain_b14() -> None:
    holder: list[Pipeline] = []

    def stop_after_first(data: bytes) -> None:
        holder[0].request_stop("SIGTERM")

    deser = ClosingDeserializer(hook=stop_after_first)
    pipeline = _pipeline("close-stop", deser, bounded=False)
    holder.append(pipeline)
    report = pipeline.run()
    assert report.reason.startswith("SIGTERM")
    assert deser.closed == 1


def test_deserializer_is_closed_when_the_run_fails_b16() -> None:
    def refuse(data: bytes) -> None:
        raise DeserError("bad", DeserErrorKind.MALFORMED)

    deser = ClosingDeserializer(on_error=ErrorPolicy.FAIL, hook=refuse)
    report = _pipeline("close-fail", deser).run()
    assert report.exit_code == 1
    assert deser.closed == 1


def test_deserializer_is_closed_when_start_up_fails_b29() -> None:
    deser = ClosingDeserializer()
    pipeline = _pipeline("close-start", deser)

    def refuse_start(events: object) -> None:
        raise FatalError("source", "unreachable")

    pipeline.source.start = refuse_start  # type: ignore[method-assign]
    with pytest.raises(FatalError, match="unreachable"):
        pipeline.run()
    assert deser.closed == 1


def test_deserializer_is_closed_when_the_chain_cannot_be_built() -> None:
    deser = ClosingDeserializer()
    pipeline = _pipeline("close-chain", deser)

    def broken_chains(ctx: object) -> object:
        raise ValueError("no chain")

    pipeline.chains(broken_chains)
    with pytest.raises(Exception, match="no chain"):
        pipeline.run()
    assert deser.closed == 1
