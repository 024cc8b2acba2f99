"""The supervisor rebuilds a failed pipeline with capped backoff and gives up (B63).

The pipelines here read a :class:`SequenceSource` (its commits survive a rebuild in an
offsets file, as a Kafka group's do) and write to the fsynced :class:`FileSink`, whose
writes can be made to fail fatally for the first builds. The supervisor runs on a
:class:`ManualClock`, so its waits are recorded instead of slept; the pipelines run in
real time.
"""

from __future__ import annotations

import threading
from collections import Counter
from pathlib import Path

import pytest
from spate import ConfigError, ExitReport, Pipeline, Supervisor, SupervisorConfig
from spate.config.models import CheckpointConfig
from spate.metrics import Meter
from spate.pipeline import RestartPolicy
from spate.testing import (
    CopyToSinkProcessor,
    FileSink,
    ManualClock,
    SealedBatch,
    SequenceSource,
    read_file_sink,
    read_offsets,
    sequence_payload,
)
from spate.testing._buffered import Attempt

RECORDS = 200
PARTITIONS = 2


class _FailingFileSink(FileSink):
    """A file sink whose writes fail fatally while ``fail`` is True."""

    fail = False

    def _attempt(self, batch: SealedBatch) -> Attempt:
        if self.fail:
            return "fatal"
        return super()._attempt(batch)


class _Builds:
    """The factory: a fresh pipeline per call; the first ``failing`` builds' sinks fail."""

    def __init__(self, tmp: Path, meter: Meter, failing: int, clock: ManualClock) -> None:
        self.tmp = tmp
        self.meter = meter
        self.failing = failing
        self.clock = clock
        self.built = 0
        self.healthy_runs = 0.0

    def __call__(self) -> Pipeline:
        self.built += 1
        # Let the supervisor's clock see each run lasting this long.
        self.clock.advance(self.healthy_runs)
        source = SequenceSource(
            self.tmp / "offsets.json", partitions=PARTITIONS, records_per_lane=RECORDS
        )
        sink = _FailingFileSink(self.tmp / "out.jsonl", "out", max_rows=50, threaded=True)
        sink.fail = self.built <= self.failing
        return Pipeline(
            "supervised",
            source,
            {"out": sink},
            processor=CopyToSinkProcessor(sink, as_text=True),
            checkpoint=CheckpointConfig(interval=0.1, drain_timeout=5, stalled_fail_after=0.2),
            meter=self.meter,
            handle_signals=False,
        )


def _supervisor(
    tmp: Path, failing: int, config: SupervisorConfig
) -> tuple[Supervisor, _Builds, list[float]]:
    clock = ManualClock()
    waits: list[float] = []
    sleep = clock.sleep

    def recording_sleep(seconds: float) -> None:
        waits.append(seconds)
        sleep(seconds)

    clock.sleep = recording_sleep  # type: ignore[method-assign]
    meter = Meter("supervised")
    builds = _Builds(tmp, meter, failing, clock)
    supervisor = Supervisor(
        builds, config, name="supervised", meter=meter, clock=clock, handle_signals=False
    )
    return supervisor, builds, waits


def _sample(meter: Meter, name: str) -> float:
    value = meter.registry.get_sample_value(
        name,
        {
            "pipeline": "supervised",
            "component": "supervisor",
            "component_type": "supervisor",
            "worker": "0",
        },
    )
    return value or 0.0


def test_b63_sink_failing_three_times_is_rebuilt_with_growing_waits_and_completes(
    tmp_path: Path,
) -> None:
    config = SupervisorConfig(max_restarts=3, initial_backoff=1, multiplier=2, max_backoff=3)
    supervisor, builds, waits = _supervisor(tmp_path, 3, config)
    report = supervisor.run()
    assert report.state == "completed", report.reason
    assert builds.built == 4
    assert supervisor.restarts == 3
    assert waits == [1.0, 2.0, 3.0]  # doubling, capped at max_backoff
    # Resumed from committed positions: every record is there, none lost.
    rows = Counter(read_file_sink(tmp_path / "out.jsonl"))
    expected = {sequence_payload("seq", p, o) for p in range(PARTITIONS) for o in range(RECORDS)}
    assert set(rows) == expected
    assert read_offsets(tmp_path / "offsets.json") == dict.fromkeys(range(PARTITIONS), RECORDS)
    assert _sample(supervisor.meter, "spate_supervisor_restarts_total") == 3
    assert _sample(supervisor.meter, "spate_supervisor_failures_total") == 3
    assert _sample(supervisor.meter, "spate_supervisor_give_ups_total") == 0


def test_b63_always_failing_pipeline_gives_up_after_max_restarts(tmp_path: Path) -> None:
    config = SupervisorConfig(max_restarts=2, initial_backoff=0.5)
    supervisor, builds, waits = _supervisor(tmp_path, 1_000, config)
    report = supervisor.run()
    assert report.exit_code == 1
    assert supervisor.gave_up
    assert builds.built == 3  # the first run and two restarts
    assert waits == [0.5, 1.0]
    assert report.reason.startswith("pipeline supervised gave up after 3 failures within 10m")
    assert "max_restarts=2" in report.reason
    assert "last error:" in report.reason
    assert "\n" not in report.reason
    assert _sample(supervisor.meter, "spate_supervisor_give_ups_total") == 1


def test_b63_a_healthy_run_resets_the_failure_count(tmp_path: Path) -> None:
    config = SupervisorConfig(max_restarts=1, initial_backoff=1, healthy_after=30)
    supervisor, builds, waits = _supervisor(tmp_path, 4, config)
    builds.healthy_runs = 60  # each failing run lasted longer than healthy_after
    report = supervisor.run()
    assert report.state == "completed", report.reason
    assert builds.built == 5
    assert waits == [1.0, 1.0, 1.0, 1.0]  # the backoff starts again after each


def test_b63_bad_configuration_is_not_retried(tmp_path: Path) -> None:
    calls = []

    def build() -> Pipeline:
        calls.append(1)
        raise ConfigError("sink.file.path", "bad")

    supervisor = Supervisor(build, SupervisorConfig(), name="bad", handle_signals=False)
    with pytest.raises(ConfigError):
        supervisor.run()
    assert len(calls) == 1


def test_b63_start_up_errors_are_failures_named_at_give_up() -> None:
    def build() -> Pipeline:
        raise ConnectionRefusedError("broker 127.0.0.1:1 refused")

    clock = ManualClock()
    supervisor = Supervisor(
        build,
        SupervisorConfig(max_restarts=1),
        name="unreachable",
        clock=clock,
        handle_signals=False,
    )
    report = supervisor.run()
    assert report.exit_code == 1
    assert "ConnectionRefusedError: broker 127.0.0.1:1 refused" in report.reason


def test_b63_stop_while_waiting_to_restart_ends_the_run(tmp_path: Path) -> None:
    meter = Meter("supervised")
    builds = _Builds(tmp_path, meter, 1_000, ManualClock())
    supervisor = Supervisor(
        builds,
        SupervisorConfig(initial_backoff=3600, max_backoff=3600),
        name="supervised",
        meter=meter,
        handle_signals=False,
    )
    result: list[ExitReport] = []
    thread = threading.Thread(target=lambda: result.append(supervisor.run()))
    thread.start()
    deadline = 120.0
    waited = 0.0
    while _sample(meter, "spate_supervisor_backoff_seconds") != 3600 and waited < deadline:
        threading.Event().wait(0.05)
        waited += 0.05
    assert not supervisor.health.readiness()[0]
    supervisor.request_stop("signal SIGTERM")
    thread.join(120)
    assert not thread.is_alive()
    (report,) = result
    assert report.exit_code == 1
    assert builds.built == 1
    assert "while waiting to restart" in report.reason


def test_b63_failures_outside_the_window_do_not_count() -> None:
    clock = ManualClock()
    policy = RestartPolicy(SupervisorConfig(max_restarts=2, window=100), clock)
    assert not policy.failed(0).give_up
    clock.advance(60)
    assert not policy.failed(0).give_up
    clock.advance(60)  # the first failure is now outside the window
    decision = policy.failed(0)
    assert not decision.give_up and decision.failures == 2
    assert policy.failed(0).give_up
