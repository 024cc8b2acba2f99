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
import threading
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
    assert err == (
        f"{config}:10:5: source.counting.recordz: unknown key; did you mean 'records'? "
        "(expected one of partitions, records)\n"
    )


def test_b17_validate_a_good_file_exits_0(env: Env) -> None:
    config = env.write_config("ok.yaml", _pipeline_yaml(env.root.parent / "o.jsonl", 5))
    code, out, err = env.cli("validate", str(config))
    assert (code, err) == (0, "")
    assert out == (
        f"{config}: ok (pipeline cli-test: source counting, deserializer text, sink lines)\n"
    )


def test_b26_validate_an_unknown_connector_gets_no_guessed_install_command(env: Env) -> None:
    text = _pipeline_yaml(Path("o"), 5).replace("  text: {}", "  thrift: {}")
    config = env.write_config("missing.yaml", text)
    code, _, err = env.cli("validate", str(config))
    assert code == 2
    assert err.startswith(
        f"{config}:12:3: deserializer.thrift: no deserializer named 'thrift' is installed"
    )
    assert "pip install" not in err  # spate-thrift is nobody we know (typosquatting)
    assert "text" in err.partition("installed: ")[2]


def test_b26_a_connector_typo_says_did_you_mean_with_file_and_line(env: Env) -> None:
    text = _pipeline_yaml(Path("o"), 5).replace("  counting:", "  kafak:")
    config = env.write_config("typo.yaml", text)
    result = env.subprocess("validate", str(config))
    assert result.returncode == 2
    assert result.stderr == (
        f"{config}:8:3: source.kafak: no source named 'kafak' is installed; did you mean 'kafka'?\n"
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
        assert f"no {kind} named '{name}' is installed; install spate-{name}" in err.getvalue()


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
    # Each contributed command is described in the overview, as the built-in ones are.
    assert "print a greeting (from acme-connectors 0.3.0)" in " ".join(listed.stdout.split())


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


def _bad_records_yaml(out: Path, on_error: str) -> str:
    text = _pipeline_yaml(out, 20)
    return text.replace(
        "deserializer:\n  text: {}",
        f'deserializer:\n  text: {{reject_suffix: "-3", on_error: {on_error}}}',
    )


def test_b42_skipped_records_show_in_the_summary_and_a_warning(env: Env) -> None:
    """B42: `spate run` with bad records under skip: one warning naming the first bad
    record, and the one summary line counts them by reason."""
    out = env.root.parent / "skip.jsonl"
    config = env.write_config("skip.yaml", _bad_records_yaml(out, "skip"))
    result = env.subprocess("run", str(config), "--log-level", "info")
    assert result.returncode == 0, result.stderr
    lines = result.stderr.splitlines()
    summaries = [line for line in lines if "pipeline cli-test completed" in line]
    assert len(summaries) == 1, result.stderr  # printed once, not by the runtime and the CLI
    assert "delivered=40 dropped=2 (malformed=2) failed=0" in summaries[0]
    skips = [line for line in lines if "skipped a record" in line]
    assert len(skips) == 1, result.stderr  # the second skip falls inside the interval
    assert "level=warning" in skips[0]
    assert "(malformed) at counting[" in skips[0] and "offset 3" in skips[0]
    assert "refusing" in skips[0]
    assert len(read_file_sink(out)) == 38


def test_fail_policy_reports_the_reason_on_one_line_without_a_traceback(env: Env) -> None:
    config = env.write_config("fail.yaml", _bad_records_yaml(env.root.parent / "f.jsonl", "fail"))
    result = env.subprocess("run", str(config))
    assert result.returncode == 1
    assert "Traceback" not in result.stderr
    with_reason = [line for line in result.stderr.splitlines() if "cannot decode" in line]
    assert len(with_reason) == 1, result.stderr
    assert "offset 3" in with_reason[0] and "on_error is fail" in with_reason[0]


def test_log_level_is_accepted_after_the_subcommand(env: Env) -> None:
    config = env.write_config("ok.yaml", _pipeline_yaml(env.root.parent / "o.jsonl", 5))
    quiet = env.subprocess("run", str(config), "--log-level", "error")
    assert quiet.returncode == 0, quiet.stderr
    assert quiet.stderr == ""
    loud = env.subprocess("run", str(config), "--log-level", "debug")
    assert loud.returncode == 0, loud.stderr
    assert "level=debug" in loud.stderr
    checked = env.subprocess("validate", str(config), "--log-level", "warning")
    assert checked.returncode == 0, checked.stderr


def test_contributed_command_help_has_its_description(env: Env) -> None:
    helped = env.subprocess("hello", "--help")
    assert helped.returncode == 0
    assert "print a greeting" in helped.stdout


def test_b43_a_running_pipeline_logs_a_periodic_status_line(tmp_path: Path) -> None:
    """B43: `spate run` logs a status line on pipeline.status_interval while it runs."""
    import signal

    config = tmp_path / "forever.yaml"
    config.write_text(
        "pipeline: {name: status, status_interval: 200ms}\n"
        "admin: {listen: none}\n"
        "source: {memory: {partitions: 2, records: 50, bounded: false}}\n"
        "sink: {capture: {}}\n",
        encoding="utf-8",
    )
    proc = subprocess.Popen(
        [sys.executable, "-m", "spate.cli", "run", str(config)],
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stderr is not None
    seen: list[str] = []
    watchdog = threading.Timer(120, proc.kill)  # no status line at all must not hang the test
    watchdog.start()
    try:
        for line in proc.stderr:
            seen.append(line)
            if "rec/s" in line:
                break
        proc.send_signal(signal.SIGTERM)
        rest, _ = proc.communicate(timeout=120)
    finally:
        watchdog.cancel()
        if proc.poll() is None:
            proc.kill()
    status = [line for line in seen if "rec/s" in line]
    assert status, "".join(seen)
    assert "logger=spate.pipeline.status" in status[0]
    for part in ("in ", "out ", "lag 0", "last commit", "paused 0 of 2 lane(s)", "dropped 0"):
        assert part in status[0], status[0]
    assert proc.returncode == 0, rest
