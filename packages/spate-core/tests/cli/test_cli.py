"""B16, B17, B26, B29: the ``spate`` command — run, validate, plugins, contributed commands.

The pipelines run on connectors from a throwaway third-party distribution installed
into a temporary directory (a bounded memory source, a text deserializer, the test kit's
fsynced file sink, and a source whose endpoint is unreachable), so these tests also show
a plugin outside spate being used from YAML (B27).
"""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from spate.cli import main
from spate.plugins import Registry
from spate.testing import read_file_sink

from tests.support.fake_plugins import install_connectors
from tests.support.scale import scaled


class Env:
    """A plugin directory and a registry over it plus the installed distributions."""

    def __init__(self, root: Path, module: str) -> None:
        self.root = root
        self.module = module
        self.registry = Registry(path=[str(root), *sys.path])

    def write_config(self, name: str, text: str) -> Path:
        path = self.root.parent / name
        path.write_text(text, encoding="utf-8")
        return path

    def cli(self, *argv: str) -> tuple[int, str, str]:
        out, err = io.StringIO(), io.StringIO()
        code = main(list(argv), registry=self.registry, stdout=out, stderr=err)
        return code, out.getvalue(), err.getvalue()

    def subprocess(self, *argv: str) -> subprocess.CompletedProcess[str]:
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join([str(self.root), env.get("PYTHONPATH", "")])
        return subprocess.run(
            [sys.executable, "-m", "spate.cli", *argv],
            capture_output=True,
            text=True,
            env=env,
            cwd=self.root.parent,
            timeout=120,
        )


@pytest.fixture
def env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Env]:
    root = tmp_path / "site"
    module = install_connectors(root)
    monkeypatch.syspath_prepend(str(root))
    yield Env(root, module)
    sys.modules.pop(module, None)


def _pipeline_yaml(out: Path, records: int, extra: str = "") -> str:
    return f"""\
pipeline:
  name: cli-test
checkpoint:
  interval: 100ms
admin:
  listen: none
source:
  counting:
    partitions: 2
    records: {records}
deserializer:
  text: {{}}
{extra or f"sink:{chr(10)}  lines:{chr(10)}    path: {out}"}
"""


def test_b16_run_exits_0_and_delivers_every_record(env: Env) -> None:
    out = env.root.parent / "out.jsonl"
    records = scaled(2_000, minimum=50)
    config = env.write_config("p.yaml", _pipeline_yaml(out, records))
    code, _, err = env.cli("run", str(config))
    assert code == 0, err
    rows = read_file_sink(out)
    expected = {f"{p}-{i}" for p in range(2) for i in range(records)}
    assert set(rows) == expected  # without --chain, decoded records go straight to the sink


def test_b16_run_with_chain_module_function(env: Env) -> None:
    out = env.root.parent / "upper.jsonl"
    config = env.write_config("p.yaml", _pipeline_yaml(out, 20))
    code, _, err = env.cli("run", str(config), "--chain", f"{env.module}:chains")
    assert code == 0, err
    assert set(read_file_sink(out)) == {f"{p}-{i}".upper() for p in range(2) for i in range(20)}


def test_b17_sinks_map_without_chain_is_refused_naming_the_flag(env: Env) -> None:
    sinks = "sinks:\n  a:\n    lines: {path: a.jsonl}\n  b:\n    lines: {path: b.jsonl}\n"
    config = env.write_config("p.yaml", _pipeline_yaml(Path("x"), 5, extra=sinks))
    code, _, err = env.cli("run", str(config))
    assert code == 2
    assert err.count("\n") == 1
    assert err.startswith("sinks: ")
    assert "--chain" in err


@pytest.mark.parametrize(
    ("spec", "fragment"),
    [
        ("nope_mod_xyz:chains", "cannot import module"),
        ("justamodule", "module:function"),
        ("broken_chain_mod:chains", "ZeroDivisionError"),
        ("json:no_such_function", "has no attribute"),
    ],
)
def test_bad_chain_reference_exits_2(env: Env, spec: str, fragment: str) -> None:
    (env.root / "broken_chain_mod.py").write_text("1 / 0\n", encoding="utf-8")
    config = env.write_config("p.yaml", _pipeline_yaml(env.root.parent / "o.jsonl", 5))
    code, _, err = env.cli("run", str(config), "--chain", spec)
    assert code == 2
    assert err.startswith("--chain: ")
    assert fragment in err


def test_b17_validate_a_typo_prints_one_line_with_the_dotted_path_and_exits_2(env: Env) -> None:
    text = _pipeline_yaml(env.root.parent / "o.jsonl", 5).replace("records:", "recordz:")
    config = env.write_config("typo.yaml", text)
    code, out, err = env.cli("validate", str(config))
    assert code == 2
    assert out == ""
    assert err == f"{config}:10:5: source.counting.recordz: unknown key\n"


def test_b17_validate_a_good_file_exits_0(env: Env) -> None:
    config = env.write_config("ok.yaml", _pipeline_yaml(env.root.parent / "o.jsonl", 5))
    code, out, err = env.cli("validate", str(config))
    assert (code, err) == (0, "")
    assert out == (
        f"{config}: ok (pipeline cli-test: source counting, deserializer text, sink lines)\n"
    )


def test_b26_validate_names_a_missing_connector_and_its_install_command(env: Env) -> None:
    text = _pipeline_yaml(Path("o"), 5).replace("  text: {}", "  thrift: {}")
    config = env.write_config("missing.yaml", text)
    code, _, err = env.cli("validate", str(config))
    assert code == 2
    assert err == (
        "deserializer.thrift: no deserializer named 'thrift' is installed; "
        "install it with: pip install spate-thrift\n"
    )


def test_b26_validate_the_multi_table_split_example() -> None:
    """Passes once the Kafka, Avro and ClickHouse plugins exist; names what is missing before."""
    example = Path(__file__).resolve().parents[4] / "examples" / "multi_table_split.yaml"
    registry = Registry()
    out, err = io.StringIO(), io.StringIO()
    code = main(["validate", str(example)], registry=registry, stdout=out, stderr=err)
    needed = [("source", "kafka"), ("deserializer", "avro"), ("sink", "clickhouse")]
    missing = [(k, n) for k, n in needed if n not in registry.names(k)]
    if not missing:
        assert code == 0, err.getvalue()
        assert "pipeline storefront-split" in out.getvalue()
    else:
        kind, name = missing[0]
        assert code == 2
        assert f"no {kind} named '{name}' is installed; install it with: pip install" in (
            err.getvalue()
        )


def test_b27_plugins_lists_header_then_sorted_plugins(env: Env) -> None:
    code, out, _ = env.cli("plugins")
    assert code == 0
    lines = out.splitlines()
    assert lines[0].split() == ["NAME", "KIND", "DISTRIBUTION", "VERSION"]
    rows = [line.split() for line in lines[1:]]
    assert all(len(row) == 4 for row in rows)
    assert rows == sorted(rows, key=lambda r: (r[1], r[0]))
    ours = {(r[0], r[1]) for r in rows if r[2] == "acme-connectors"}
    assert ours == {
        ("counting", "source"),
        ("remote", "source"),
        ("text", "deserializer"),
        ("lines", "sink"),
        ("hello", "command"),
    }
    assert all(r[3] == "0.3.0" for r in rows if r[2] == "acme-connectors")


def test_contributed_subcommand_runs_with_its_own_arguments(env: Env) -> None:
    result = env.subprocess("hello", "--who", "spate")
    assert result.returncode == 3, result.stderr
    assert result.stdout == "hello spate\n"
    helped = env.subprocess("--log-level", "warning", "hello", "--help")
    assert helped.returncode == 0
    assert "--who" in helped.stdout
    listed = env.subprocess("--help")
    assert "hello" in listed.stdout and "acme-connectors" in listed.stdout


def test_b29_unreachable_endpoint_fails_at_start_with_one_line(env: Env) -> None:
    import socket

    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]  # bound, never listening: connections are refused
        text = _pipeline_yaml(env.root.parent / "o.jsonl", 5).replace(
            "  counting:\n    partitions: 2\n    records: 5",
            f"  remote:\n    endpoint: 127.0.0.1:{port}",
        )
        config = env.write_config("down.yaml", text)
        result = env.subprocess("--log-level", "error", "run", str(config))
    assert result.returncode == 1
    assert result.stderr.count("\n") == 1, result.stderr
    assert f"cannot reach broker 127.0.0.1:{port}" in result.stderr
    assert "Traceback" not in result.stderr
    assert (
        not (env.root.parent / "o.jsonl").exists()
        or read_file_sink(env.root.parent / "o.jsonl") == []
    )


def test_version_and_usage_errors() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "spate.cli", "--version"], capture_output=True, text=True, timeout=60
    )
    assert (result.returncode, result.stdout.strip()) == (0, "spate 0.1.0")
    result = subprocess.run(
        [sys.executable, "-m", "spate.cli", "frobnicate"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2


def test_logging_is_key_value_with_structured_fields(env: Env) -> None:
    out = env.root.parent / "log.jsonl"
    config = env.write_config("p.yaml", _pipeline_yaml(out, 5))
    result = env.subprocess("--log-level", "debug", "run", str(config))
    assert result.returncode == 0, result.stderr
    lines = [line for line in result.stderr.splitlines() if line]
    assert lines
    for line in lines:
        assert line.startswith("ts="), line
        assert " level=" in line and " logger=" in line and " msg=" in line
    assert any("level=debug" in line for line in lines)
    json.dumps(lines)  # plain text, one event per line
