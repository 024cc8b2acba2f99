"""B22, B29: ``Pipeline.from_config`` builds through the registry and runs the admin server."""

from __future__ import annotations

import sys
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from spate import Pipeline
from spate.config import parse_config
from spate.errors import MissingConnectorError
from spate.pipeline import PipelineHealth
from spate.pipeline._builder import assemble
from spate.plugins import Registry
from spate.testing import read_file_sink

from tests.support.fake_plugins import install_connectors


@pytest.fixture
def registry(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Registry]:
    root = tmp_path / "site"
    module = install_connectors(root)
    monkeypatch.syspath_prepend(str(root))
    yield Registry(path=[str(root), *sys.path])
    sys.modules.pop(module, None)


def _config(out: Path, *, listen: str, exporter: str = "prometheus") -> str:
    return f"""\
pipeline: {{name: from-config}}
checkpoint: {{interval: 100ms}}
admin: {{listen: "{listen}"}}
metrics: {{exporter: {exporter}}}
source: {{counting: {{partitions: 2, records: 30}}}}
deserializer: {{text: {{}}}}
sink: {{lines: {{path: "{out}"}}}}
"""


def _get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def test_b22_the_admin_server_serves_while_the_pipeline_runs(
    registry: Registry, tmp_path: Path
) -> None:
    out = tmp_path / "rows.jsonl"
    cfg = parse_config(_config(out, listen="127.0.0.1:0"), env={}, resolver=registry)
    assembly = assemble(cfg, registry=registry, handle_signals=False)
    admin = assembly.admin
    assert admin is not None
    seen: dict[str, tuple[int, str]] = {}

    def probe(health: PipelineHealth) -> None:
        # Services start in order: the admin server is already listening here.
        assert admin.url is not None
        seen["metrics"] = _get(f"{admin.url}/metrics")
        seen["readyz"] = _get(f"{admin.url}/readyz")

    assembly.pipeline.add_service(probe, lambda: None)
    report = assembly.pipeline.run()
    assert report.exit_code == 0, report.summary()
    status, text = seen["metrics"]
    assert status == 200
    assert "spate_source_records_total" in text or "# TYPE spate_source_records" in text
    assert seen["readyz"][0] == 503  # not ready before the source started (B22)
    assert admin.url is None  # stopped with the run
    assert len(read_file_sink(out)) == 60


def test_b22_exporter_none_answers_404_on_metrics(registry: Registry, tmp_path: Path) -> None:
    cfg = parse_config(
        _config(tmp_path / "o.jsonl", listen="127.0.0.1:0", exporter="none"),
        env={},
        resolver=registry,
    )
    assembly = assemble(cfg, registry=registry, handle_signals=False)
    admin = assembly.admin
    assert admin is not None
    seen: list[int] = []
    assembly.pipeline.add_service(
        lambda health: seen.append(_get(f"{admin.url}/metrics")[0]), lambda: None
    )
    assert assembly.pipeline.run().exit_code == 0
    assert seen == [404]


def test_b22_listen_none_builds_no_admin_server(registry: Registry, tmp_path: Path) -> None:
    cfg = parse_config(_config(tmp_path / "o.jsonl", listen="none"), env={}, resolver=registry)
    assert assemble(cfg, registry=registry, handle_signals=False).admin is None
    pipeline = Pipeline.from_config(cfg, registry=registry, handle_signals=False)
    assert pipeline.name == "from-config"
    assert pipeline.run().exit_code == 0


def test_b26_assembly_of_an_unchecked_config_reports_the_missing_connector(
    registry: Registry, tmp_path: Path
) -> None:
    text = _config(tmp_path / "o.jsonl", listen="none").replace("lines:", "nosuchsink:")
    cfg = parse_config(text, env={}, check_connectors=False)
    assert cfg.sinks["sink"].config is None
    with pytest.raises(MissingConnectorError) as info:
        assemble(cfg, registry=registry)
    assert info.value.path == "sink.nosuchsink"


def test_from_config_accepts_the_path_of_a_yaml_file(registry: Registry, tmp_path: Path) -> None:
    out = tmp_path / "rows.jsonl"
    path = tmp_path / "pipeline.yaml"
    path.write_text(_config(out, listen="none"), encoding="utf-8")
    for given in (str(path), path):
        pipeline = Pipeline.from_config(given, registry=registry, handle_signals=False)
        assert pipeline.name == "from-config"
    report = pipeline.run()
    assert report.exit_code == 0
    assert len(read_file_sink(out)) == 60


def test_from_config_refuses_anything_else_with_a_type_error() -> None:
    with pytest.raises(TypeError, match="PipelineConfig or the path"):
        Pipeline.from_config({"pipeline": {"name": "x"}})  # type: ignore[arg-type]
