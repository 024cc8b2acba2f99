"""The sinks of one pipeline share its registry of commit gates; two pipelines do not,
unless given the same one (B231, B157, B52)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from spate._assembly import Parts, build_parts
from spate.config import parse_config
from spate.sink.writebehind import CommitGate, CommitGates


def _config(lake: Path) -> str:
    parquet = (
        f'{{parquet: {{path: "{lake}", publish: manifest, table: events, schema: {{id: int64}}}}}}'
    )
    return f"""\
pipeline: {{name: gates}}
source: {{memory: {{}}}}
sinks:
  first: {parquet}
  second: {parquet}
"""


def _gates(parts: Parts) -> list[CommitGate]:
    found = [sink._gate for sink in parts.sinks.values()]
    assert all(isinstance(gate, CommitGate) for gate in found)
    return found


def test_b231_the_sinks_of_a_pipeline_share_its_commit_gates(tmp_path: Path) -> None:
    config = parse_config(_config(tmp_path / "lake"), env={})
    first, second = _gates(build_parts(config))
    assert first._lock is second._lock  # one manifest: one gate for both writers
    assert first.acquire(0.0)
    try:
        assert not second.acquire(0.0)
    finally:
        first.release()
    # Another pipeline of the process has a registry of its own...
    other, _ = _gates(build_parts(config))
    assert other._lock is not first._lock
    # ...unless it is given the same one.
    gates = CommitGates()
    a, _ = _gates(build_parts(config, commit_gates=gates))
    b, _ = _gates(build_parts(config, commit_gates=gates))
    assert a._lock is b._lock and len(gates) == 1


def test_b231_pipelines_run_side_by_side_by_the_cli_share_one_registry(tmp_path: Path) -> None:
    """``spate run`` builds every pipeline of the process (side by side, B65, or restarted
    by a supervisor) from the process's one registry."""
    import io

    from spate.cli._main import _Cli
    from spate.pipeline import Pipeline
    from spate.plugins import default_registry

    cli = _Cli(default_registry(), io.StringIO(), io.StringIO())
    config = parse_config(_config(tmp_path / "lake"), env={})
    locks = []
    for _ in range(2):
        pipeline = cli._runner(config, None, None)
        assert isinstance(pipeline, Pipeline)
        sinks: dict[str, Any] = dict(pipeline.sinks)
        locks += [sink._gate._lock for sink in sinks.values()]
    assert len({id(lock) for lock in locks}) == 1 and len(cli.commit_gates) == 1
