"""``Pipeline.chains(fn)`` runs the user's operator chain through the ops compiler."""

from __future__ import annotations

import pytest
from spate.errors import ConfigError
from spate.pipeline import Pipeline
from spate.testing import ManualClock, capture_sink, memory_source


def test_b2_split_chain_commits_after_both_sinks_wrote() -> None:
    clock = ManualClock()
    source, handle = memory_source({0: [str(i).encode() for i in range(100)]}, batch_size=25)
    even, even_rows = capture_sink("even", max_rows=10, clock=clock)
    odd, odd_rows = capture_sink("odd", max_rows=10, clock=clock)

    def chains(ctx):  # type: ignore[no-untyped-def]
        evens, odds = ctx.sink("even"), ctx.sink("odd")
        return (
            ctx.chain()
            .map(int)
            .split()
            .route(lambda v, out: out.emit(evens if v % 2 == 0 else odds, v))
        )

    report = (
        Pipeline("chains", source, {"even": even, "odd": odd}, clock=clock, handle_signals=False)
        .chains(chains)
        .run()
    )
    assert report.exit_code == 0
    assert even_rows.rows == list(range(0, 100, 2))
    assert odd_rows.rows == list(range(1, 100, 2))
    assert handle.last_committed(0) == 100


def test_b3_filtered_records_resolve_as_delivered() -> None:
    clock = ManualClock()
    source, handle = memory_source({0: [b"keep", b"drop"] * 30}, batch_size=7)
    sink, script = capture_sink("out", clock=clock)
    report = (
        Pipeline("filter", source, {"out": sink}, clock=clock, handle_signals=False)
        .chains(lambda ctx: ctx.chain().filter(lambda v: v == b"keep").sink("out"))
        .run()
    )
    assert report.exit_code == 0
    assert script.rows == [b"keep"] * 30
    assert handle.last_committed(0) == 60


def test_without_a_chain_records_go_straight_to_the_single_sink() -> None:
    source, _ = memory_source({0: [b"a", b"b"]})
    sink, script = capture_sink("only", clock=ManualClock())
    report = Pipeline("direct", source, {"only": sink}, handle_signals=False).run()
    assert report.exit_code == 0 and script.rows == [b"a", b"b"]


def test_several_sinks_without_a_chain_is_a_config_error() -> None:
    source, _ = memory_source({0: [b"a"]})
    a, _ = capture_sink("a")
    b, _ = capture_sink("b")
    with pytest.raises(ConfigError, match="chain"):
        Pipeline("nochain", source, {"a": a, "b": b}, handle_signals=False).run()


def test_b42_dropped_records_are_in_the_exit_report_by_reason(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """B42: filtered, skipped and unrouted records are counted in ExitReport and its summary,
    and each skip reason is logged once (rate-limited) with an example location."""
    clock = ManualClock()
    values = [str(i).encode() for i in range(40)]
    source, _ = memory_source({0: values}, batch_size=7)
    sink, script = capture_sink("out", clock=clock)

    def parse(v: bytes) -> int:
        if v.endswith(b"3"):
            raise ValueError(f"no threes: {v!r}")
        return int(v)

    def chains(ctx):  # type: ignore[no-untyped-def]
        out = ctx.sink("out")
        return (
            ctx.chain()
            .try_map(parse, "skip")
            .filter(lambda v: v % 2 == 0)
            .split(unrouted="skip")
            .route(lambda v, emit: emit.emit(out, v) if v % 4 == 0 else None)
        )

    with caplog.at_level("WARNING", logger="spate"):
        report = (
            Pipeline("drops", source, {"out": sink}, clock=clock, handle_signals=False)
            .chains(chains)
            .run()
        )
    assert report.exit_code == 0
    assert script.rows == [v for v in range(40) if v % 4 == 0]
    # 3, 13, 23, 33 raise; of the rest, odd ones are filtered, 2 mod 4 ones unrouted.
    assert report.dropped == {"error": 4, "filter": 16, "unrouted": 10}
    assert report.records_dropped == 30
    assert "dropped=30 (error=4, filter=16, unrouted=10)" in report.summary()
    skips = [r.getMessage() for r in caplog.records if "skipped" in r.getMessage()]
    assert len(skips) == 2, skips  # one per reason: the rest is inside the interval
    assert any("(error) at memory[0] offset 3:" in m and "no threes" in m for m in skips), skips
    assert any("(unrouted) at memory[0] offset 2" in m for m in skips), skips


def test_a_failing_user_operator_logs_its_traceback_once_and_the_reason_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Under the fail policy the reason is one line; the traceback is logged only when
    the user's own code raised (here a map), never for a policy decision."""
    clock = ManualClock()
    source, _ = memory_source({0: [b"1", b"x", b"3"]}, batch_size=10)
    sink, _script = capture_sink("out", clock=clock)
    with caplog.at_level("DEBUG", logger="spate"):
        report = (
            Pipeline("user-error", source, {"out": sink}, clock=clock, handle_signals=False)
            .chains(lambda ctx: ctx.chain().map(int).sink("out"))
            .run()
        )
    assert report.exit_code == 1
    errors = [r for r in caplog.records if r.levelname == "ERROR"]
    with_traceback = [r for r in errors if r.exc_info]
    assert len(with_traceback) == 1
    assert isinstance(with_traceback[0].exc_info[1], ValueError)  # the user's exception
    reasons = [r for r in errors if "offset 1" in r.getMessage()]
    assert len(reasons) == 1, [r.getMessage() for r in errors]
