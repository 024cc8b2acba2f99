"""A pipeline with a dead-letter sink: the runtime runs it like any sink (B71, B72).

The dead-letter sink is started, ticked, drained and closed with the others, a batch is
committed only when its dead letters are written (a dead-letter sink that keeps failing
holds the commit back), the limits end the run with exit code 1 and one line, and the
configuration refuses ``dead_letter`` policies without a dead-letter sink.
"""

from __future__ import annotations

import json
import logging
from typing import Any, ClassVar

import pytest
from spate import DeserError, ErrorPolicy, ManualClock
from spate.config import DeadLetterSettings
from spate.errors import ConfigError
from spate.pipeline import Pipeline
from spate.testing import capture_sink, memory_source


class Json:
    many: ClassVar[bool] = False
    on_error = ErrorPolicy.DEAD_LETTER

    def deserialize(self, payload: memoryview) -> object:
        try:
            return json.loads(bytes(payload))
        except ValueError as exc:
            raise DeserError(f"invalid JSON: {exc}") from exc


def _chains(ctx: Any) -> Any:
    return ctx.chain(on_error="dead_letter").map(lambda v: 10 // v)


def _pipeline(
    payloads: list[bytes], settings: DeadLetterSettings | None = None, *, dlq_fails: bool = False
) -> tuple[Pipeline, Any, Any, Any]:
    clock = ManualClock()
    src, handle = memory_source({0: payloads}, batch_size=4)
    out, out_script = capture_sink("out", clock=clock)
    dlq, dlq_script = capture_sink("dead_letter", clock=clock)
    if dlq_fails:
        dlq_script.always("fatal")
    pipeline = Pipeline(
        "dl",
        src,
        {"out": out},
        deserializer=Json(),
        clock=clock,
        handle_signals=False,
        dead_letter=dlq,
        dead_letter_settings=settings or DeadLetterSettings(format="row"),
    ).chains(_chains)
    return pipeline, handle, out_script, dlq_script


def test_b71_the_runtime_writes_and_commits_dead_letters_with_the_batch(
    caplog: pytest.LogCaptureFixture,
) -> None:
    payloads = [b"1", b"{x", b"2", b"0", b"5", b"{y"]
    pipeline, handle, out, dlq = _pipeline(payloads)
    with caplog.at_level(logging.WARNING, logger="spate.ops.skipped"):
        report = pipeline.run()
    # Visible without a scrape: the first dead letter of a stage and reason is logged.
    assert "deserializer dead-lettered a record (malformed) at memory[0] offset 1" in caplog.text
    assert "operator dead-lettered a record (ZeroDivisionError)" in caplog.text
    assert report.exit_code == 0, report.summary()
    assert out.rows == [10, 5, 2]
    assert [(r["error_stage"], r["error_reason"], r["source_offset"]) for r in dlq.rows] == [
        ("deserializer", "malformed", 1),
        ("operator", "ZeroDivisionError", 3),
        ("deserializer", "malformed", 5),
    ]
    assert [r["payload"] for r in dlq.rows] == ["{x", "0", "{y"]
    assert handle.committed == {handle.lane(0): len(payloads)}


def test_b71_a_failing_dead_letter_sink_holds_the_commit_back() -> None:
    payloads = [b"1", b"2", b"3", b"4", b"{x", b"5", b"6", b"7"]
    pipeline, handle, _, dlq = _pipeline(payloads, dlq_fails=True)
    report = pipeline.run()
    assert report.exit_code == 1
    # The first batch (no dead letters) is committed; the second holds a dead letter
    # that was never written, so nothing past offset 4 is.
    assert handle.committed.get(handle.lane(0), 0) <= 4
    assert dlq.rows == []


def test_b72_a_limit_ends_the_run_with_one_line() -> None:
    settings = DeadLetterSettings(format="row", max_consecutive=2)
    pipeline, handle, _, _ = _pipeline([b"1", b"{a", b"{b", b"{c", b"2"], settings)
    report = pipeline.run()
    assert report.exit_code == 1
    assert "max_consecutive is 2" in report.reason
    assert "\n" not in report.reason
    assert handle.committed.get(handle.lane(0), 0) == 0


def test_b71_a_dead_letter_policy_needs_a_dead_letter_sink() -> None:
    src, _ = memory_source({0: [b"1"]})
    out, _ = capture_sink("out")
    pipeline = Pipeline("dl", src, {"out": out}, deserializer=Json(), handle_signals=False)
    with pytest.raises(ConfigError, match="no dead_letter section"):
        pipeline.run()


def test_b71_a_sink_may_not_take_the_dead_letter_name() -> None:
    src, _ = memory_source({0: [b"1"]})
    out, _ = capture_sink("out")
    dlq, _ = capture_sink("dlq")
    with pytest.raises(ConfigError, match="reserved for the dead-letter sink"):
        Pipeline("dl", src, {"dead_letter": out}, dead_letter=dlq, handle_signals=False)
