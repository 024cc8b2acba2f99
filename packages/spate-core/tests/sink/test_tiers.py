"""Memory tier, tee and the ``tiered`` / ``tee`` YAML sections (B2, B17, B54, B58)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry
from spate import AckStatus, Lane, ManualClock
from spate.config import parse_config
from spate.errors import ConfigError
from spate.metrics import Meter
from spate.plugins import default_registry
from spate.sink import MemoryTier, MemoryTierConfig, Offer, TeeSink
from spate.testing import AckRecorder, capture_sink, delay, read_file_sink

from tests.support.scale import scaled

LANE = Lane("t", 0)


def Acks() -> AckRecorder:
    return AckRecorder(LANE)


def test_memory_tier_holds_acks_until_the_next_tier_wrote_the_rows() -> None:
    clock = ManualClock()
    terminal, script = capture_sink("t", max_rows=1000, clock=clock)
    tier = MemoryTier(
        "m",
        MemoryTierConfig(max_records=100, every=60),
        terminal,
        meter=Meter("p", CollectorRegistry()),
        clock=clock,
    )
    tier.start()
    ack = Acks().new()
    for i in range(10):
        assert tier.offer(i, None, LANE, ack) is Offer.ACCEPTED
    ack.release()
    tier.tick()  # the policy has not fired: nothing moves, the ack waits
    assert ack.status is AckStatus.PENDING and script.rows == []
    clock.advance(61)
    tier.tick()  # `every` elapsed: handed on; the terminal seals on its own tick
    terminal.tick()
    assert script.rows == list(range(10))
    assert ack.status is AckStatus.DELIVERED


def test_memory_tier_abandon_fails_what_it_holds_b4() -> None:
    clock = ManualClock()
    terminal, _ = capture_sink("t", clock=clock)
    tier = MemoryTier(
        "m", MemoryTierConfig(), terminal, meter=Meter("p", CollectorRegistry()), clock=clock
    )
    ack = Acks().new()
    tier.offer("x", None, LANE, ack)
    ack.release()
    assert tier.abandon() == 1
    assert ack.status is AckStatus.FAILED


def test_b58_tee_delivers_only_when_both_sinks_wrote_and_the_worst_status_wins() -> None:
    clock = ManualClock()
    a, script_a = capture_sink("a", max_rows=1000, clock=clock)
    b, script_b = capture_sink("b", max_rows=1000, clock=clock)
    tee = TeeSink("tee", [a, b], clock=clock)
    tee.start()
    acks = Acks()
    script_b.then(delay(5))
    ok = acks.new()
    tee.offer("r1", None, LANE, ok)
    ok.release()
    a.tick()
    assert script_a.rows == ["r1"]
    b.tick()
    assert ok.status is AckStatus.PENDING  # b has not written yet
    assert tee.flush(clock.monotonic() + 60)
    assert ok.status is AckStatus.DELIVERED
    script_b.then("fatal")
    bad = acks.new()
    tee.offer("r2", None, LANE, bad)
    bad.release()
    tee.flush(clock.monotonic() + 60)
    assert script_a.rows == ["r1", "r2"]
    assert bad.status is AckStatus.FAILED  # written by a, failed by b: failed (B2)


def test_b58_tee_counts_what_each_branch_delivered_and_failed() -> None:
    """``spate_tee_branch_records_total`` per branch and outcome; a source batch of two
    rows split by a tick across two branch tokens still resolves once (B58, B2)."""
    clock = ManualClock()
    meter = Meter("p", CollectorRegistry())
    a, _ = capture_sink("a", max_rows=1000, clock=clock)
    b, script_b = capture_sink("b", max_rows=1000, clock=clock)
    tee = TeeSink("tee", [a, b], clock=clock, meter=meter)
    tee.start()
    acks = Acks()
    ok = acks.new()
    tee.offer("r1", None, LANE, ok)
    tee.tick()  # closes the branch tokens; the source batch is still held by the chain
    tee.offer("r2", None, LANE, ok)
    ok.release()
    assert tee.flush(clock.monotonic() + 60)
    assert ok.status is AckStatus.DELIVERED
    script_b.then("fatal")
    bad = acks.new()
    for row in ("r3", "r4", "r5"):
        tee.offer(row, None, LANE, bad)
    bad.release()
    tee.flush(clock.monotonic() + 60)
    assert bad.status is AckStatus.FAILED

    def count(branch: str, outcome: str) -> float | None:
        labels = {"component": "tee", "component_type": "tee", "pipeline": "p"}
        return meter.registry.get_sample_value(
            "spate_tee_branch_records_total", {**labels, "branch": branch, "outcome": outcome}
        )

    assert (count("a", "delivered"), count("a", "failed")) == (5, 0)
    assert (count("b", "delivered"), count("b", "failed")) == (2, 3)


def test_b58_tee_keeps_a_refused_row_for_the_slow_branch_and_never_doubles_it() -> None:
    clock = ManualClock()
    a, script_a = capture_sink("a", max_rows=1000, clock=clock)
    b, script_b = capture_sink("b", max_rows=1, capacity=1, clock=clock)
    script_b.then("retryable", times=3)
    tee = TeeSink("tee", [a, b], clock=clock)
    ack = Acks().new()
    results = [tee.offer(i, None, LANE, ack) for i in range(5)]
    ack.release()
    assert Offer.REJECTED in results
    accepted = [i for i, r in zip(range(5), results, strict=True) if r is Offer.ACCEPTED]
    assert tee.flush(clock.monotonic() + 600)
    assert script_a.rows == accepted
    assert script_b.rows == accepted
    assert ack.status is AckStatus.DELIVERED


# -- YAML ------------------------------------------------------------------------------


def _yaml(tiers: str, tmp: Path) -> str:
    return f"""\
source:
  memory: {{records: 10}}
sink:
  tiered:
    tiers: {tiers}
    terminal:
      file: {{path: "{tmp / "out.jsonl"}"}}
"""


def test_b17_a_memory_tier_after_the_spool_is_refused_at_validation(tmp_path: Path) -> None:
    tiers = f'[{{spool: {{dir: "{tmp_path}"}}}}, {{memory: {{max_records: 10}}}}]'
    with pytest.raises(ConfigError) as err:
        parse_config(_yaml(tiers, tmp_path), resolver=default_registry())
    assert err.value.path == "sink.tiered.tiers[1]"
    assert "breaks the custody chain" in err.value.message


def test_b17_tier_settings_are_checked_with_their_dotted_path(tmp_path: Path) -> None:
    tiers = f'[{{spool: {{dir: "{tmp_path}", fsync: always}}}}]'
    with pytest.raises(ConfigError) as err:
        parse_config(_yaml(tiers, tmp_path), resolver=default_registry())
    assert err.value.path == "sink.tiered.tiers[0].spool.fsync"
    tiers = "[{disk: {}}]"
    with pytest.raises(ConfigError, match="unknown tier 'disk'"):
        parse_config(_yaml(tiers, tmp_path), resolver=default_registry())


@pytest.mark.parametrize("ack", ["spooled", "terminal"])
def test_b54_yaml_memory_then_spool_then_file_delivers_all_and_leaves_no_segment(
    tmp_path: Path, ack: str
) -> None:
    records = scaled(5_000, minimum=200)
    spool_dir = tmp_path / "spool"
    out = tmp_path / "out.jsonl"
    config = tmp_path / "tiers.yaml"
    config.write_text(
        f"""\
pipeline: {{name: tiers-run}}
checkpoint: {{interval: 100ms}}
admin: {{listen: none}}
source:
  memory: {{partitions: 3, records: {records}, batch_size: 250}}
sink:
  tiered:
    tiers:
      - memory: {{max_records: 700, every: 200ms}}
      - spool: {{dir: "{spool_dir}", ack: {ack}, max_records: 400, segment_bytes: 64KiB}}
    terminal:
      file: {{path: "{out}", max_rows: 500}}
""",
        encoding="utf-8",
    )
    result = subprocess.run(
        [sys.executable, "-m", "spate.cli", "run", str(config)],
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert result.returncode == 0, result.stderr
    rows = read_file_sink(out)
    assert sorted(rows) == sorted(f"{p}:{i}" for p in range(3) for i in range(records))
    assert os.listdir(spool_dir) == []


def test_b57_b7_a_full_spool_pauses_the_source_which_resumes_when_the_terminal_catches_up(
    tmp_path: Path,
) -> None:
    """A pipeline over a spool with a tiny ``max_bytes`` and a slow terminal: the source
    is paused because the sink refuses rows, resumes as segments are deleted, and every
    record arrives; the spool directory is empty after the drain."""
    from prometheus_client import CollectorRegistry as Registry
    from spate import Pipeline, SystemClock
    from spate.config.models import CheckpointConfig
    from spate.sink import JsonlStore, SpoolConfig, SpoolTier
    from spate.testing import CopyToSinkProcessor, memory_source

    records = scaled(20_000, minimum=2_000)
    data = {p: [f"{p}:{i}".encode() for i in range(records // 2)] for p in range(2)}
    source, _handle = memory_source(data, batch_size=200)
    clock = SystemClock()
    meter = Meter("spool-pause", Registry())
    terminal, script = capture_sink("t", max_rows=500, clock=clock, threaded=True)
    script.always(delay(0.02))
    config = SpoolConfig(
        dir=str(tmp_path), ack="spooled", max_records=200, segment_bytes=4096, max_bytes=8192
    )
    spool = SpoolTier(
        "spool",
        config,
        terminal,
        JsonlStore(str(tmp_path), segment_bytes=config.segment_bytes),
        meter=meter,
        clock=clock,
    )
    pipeline = Pipeline(
        "spool-pause",
        source,
        {"sink": spool},
        processor=CopyToSinkProcessor(spool),
        checkpoint=CheckpointConfig(interval=0.1),
        meter=meter,
        handle_signals=False,
    )
    report = pipeline.run()
    assert report.exit_code == 0, report
    labels = {"pipeline": "spool-pause", "component": "backpressure", "component_type": "flow"}
    paused = meter.registry.get_sample_value(
        "spate_backpressure_pause_events_total", {**labels, "cause": "sink_full"}
    )
    assert sorted(script.rows) == sorted(r for rows in data.values() for r in rows)
    assert os.listdir(tmp_path) == []
    assert paused, "the source was never paused by the full spool"


def test_memory_tier_on_tick_hands_everything_on_at_each_tick() -> None:
    clock = ManualClock()
    terminal, script = capture_sink("t", max_rows=1000, clock=clock)
    tier = MemoryTier(
        "m",
        MemoryTierConfig(max_records=100, every=3600, on_tick=True),
        terminal,
        meter=Meter("p", CollectorRegistry()),
        clock=clock,
    )
    ack = Acks().new()
    tier.offer("a", None, LANE, ack)
    ack.release()
    tier.tick()
    terminal.tick()
    assert script.rows == ["a"] and ack.status is AckStatus.DELIVERED


def test_b58_yaml_tee_writes_every_record_to_both_sinks(tmp_path: Path) -> None:
    records = scaled(3_000, minimum=200)
    left, right = tmp_path / "left.jsonl", tmp_path / "right.jsonl"
    config = tmp_path / "tee.yaml"
    config.write_text(
        f"""\
pipeline: {{name: tee-run}}
checkpoint: {{interval: 100ms}}
admin: {{listen: none}}
source:
  memory: {{partitions: 2, records: {records}, batch_size: 250}}
sink:
  tee:
    sinks:
      - file: {{path: "{left}", max_rows: 300}}
      - file: {{path: "{right}", max_rows: 700}}
""",
        encoding="utf-8",
    )
    result = subprocess.run(
        [sys.executable, "-m", "spate.cli", "run", str(config)],
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert result.returncode == 0, result.stderr
    expected = sorted(f"{p}:{i}" for p in range(2) for i in range(records))
    assert sorted(read_file_sink(left)) == expected
    assert sorted(read_file_sink(right)) == expected


STORE_MODULE = """
from pathlib import Path

from spate.sink import JsonlStore, SpoolConfig


class MarkedStore(JsonlStore):
    def recover(self):
        Path(self.directory).parent.joinpath("marked-store-used").touch()
        return super().recover()


class MarkedStoreFactory:
    config_model = SpoolConfig

    @staticmethod
    def build(config, context):
        return MarkedStore(config.dir, segment_bytes=config.segment_bytes, nonce=context.run_nonce)
"""


def test_b27_a_third_party_spool_store_is_used_through_its_entry_point(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from spate.pipeline._builder import assemble
    from spate.plugins import Registry

    from tests.support.fake_plugins import install_dist

    plugins = tmp_path / "plugins"
    install_dist(
        plugins,
        "spate-marked-store",
        entry_points={"spate.stores": {"marked": "marked_store:MarkedStoreFactory"}},
        modules={"marked_store.py": STORE_MODULE},
    )
    monkeypatch.syspath_prepend(str(plugins))
    registry = Registry(path=[str(plugins), *sys.path])
    out, spool = tmp_path / "out.jsonl", tmp_path / "spool"
    config = parse_config(
        f"""\
pipeline: {{name: marked-store}}
checkpoint: {{interval: 100ms}}
admin: {{listen: none}}
source:
  memory: {{records: 300}}
sink:
  tiered:
    tiers: [{{spool: {{dir: "{spool}", store: marked}}}}]
    terminal:
      file: {{path: "{out}"}}
""",
        resolver=registry,
    )
    report = assemble(config, registry=registry, handle_signals=False).pipeline.run()
    assert report.exit_code == 0, report
    assert (tmp_path / "marked-store-used").exists()
    assert sorted(read_file_sink(out)) == sorted(f"0:{i}" for i in range(300))
    assert os.listdir(spool) == []


def test_b17_nested_sink_sections_are_checked_at_validation(tmp_path: Path) -> None:
    text = _yaml(f'[{{spool: {{dir: "{tmp_path}"}}}}]', tmp_path).replace("{path:", "{pathz:")
    with pytest.raises(ConfigError) as err:
        parse_config(text, resolver=default_registry())
    assert err.value.path == "sink.tiered.terminal.file.pathz"
    tee = """\
source:
  memory: {records: 1}
sink:
  tee:
    sinks:
      - file: {path: a.jsonl}
      - nosuchsink: {}
"""
    with pytest.raises(ConfigError) as err:
        parse_config(tee, resolver=default_registry())
    assert err.value.path.startswith("sink.tee.sinks[1]")
    assert "nosuchsink" in err.value.message
