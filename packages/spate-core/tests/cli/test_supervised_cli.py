"""B63, B64: ``spate run`` under a supervisor and with ``--processes N``, as processes.

The pipelines use core's built-in plugins (an unbounded memory source, the fsynced file
sink), so no service is needed; the Kafka proof is in ``tests/kafka``. A sink that
cannot open its file fails every start-up, which is what the give-up tests need.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.support.cli_run import SpateRun as _Run

pytestmark = pytest.mark.e2e

UNBOUNDED = """
pipeline: {{name: {name}}}
checkpoint: {{interval: 200ms, drain_timeout: 10s}}
admin: {{listen: "{listen}"}}
source:
  memory: {{partitions: 2, records: 500, bounded: false}}
sink:
  file: {{path: "{out}", max_rows: 100}}
{extra}
"""


def _config(tmp: Path, name: str, *, out: Path, listen: str = "none", extra: str = "") -> Path:
    path = tmp / f"{name}.yaml"
    path.write_text(UNBOUNDED.format(name=name, listen=listen, out=out, extra=extra))
    return path


def _until(predicate: Callable[[], object], what: str, run: _Run, timeout: float = 120) -> None:
    run.until(predicate, what, timeout)


def _get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=10) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()
    except OSError:
        return 0, ""


def test_b63_supervised_run_gives_up_with_one_line_and_exit_1(tmp_path: Path) -> None:
    out = tmp_path / "missing-dir" / "out.jsonl"
    extra = "supervisor: {max_restarts: 2, initial_backoff: 50ms, max_backoff: 100ms}"
    config = _config(tmp_path, "always-fails", out=out, extra=extra)
    run = _Run(tmp_path, "run", str(config))
    assert run.wait() == 1
    lines = run.text.strip().splitlines()
    assert lines[-1].startswith(
        "pipeline always-fails gave up after 3 failures within 10m (supervisor.max_restarts=2); "
        "last error: "
    ), run.text[-3000:]
    assert "cannot open" in lines[-1]
    assert run.text.count("restarting in") == 2


def test_b29_without_a_supervisor_a_start_up_failure_exits_at_once(tmp_path: Path) -> None:
    out = tmp_path / "missing-dir" / "out.jsonl"
    run = _Run(tmp_path, "run", str(_config(tmp_path, "unsupervised", out=out)))
    assert run.wait() == 1
    assert "restarting" not in run.text
    assert "cannot open" in run.text.strip().splitlines()[-1]


def test_b64_parent_serves_all_workers_restarts_a_killed_one_and_drains_on_sigterm(
    tmp_path: Path,
) -> None:
    out = tmp_path / "out.jsonl"
    extra = "supervisor: {initial_backoff: 100ms}"
    config = _config(tmp_path, "two-workers", out=out, listen="127.0.0.1:0", extra=extra)
    run = _Run(tmp_path, "run", str(config), "--processes", "2")
    try:
        _until(lambda: re.search(r"reachable at (http://\S+)", run.text), "the admin URL", run)
        match = re.search(r"reachable at (http://\S+)", run.text)
        assert match is not None
        base = match.group(1)
        _until(lambda: _get(base + "/readyz")[0] == 200, "both workers ready", run)
        status, metrics = _get(base + "/metrics")
        assert status == 200
        for worker in ("0", "1"):
            assert re.search(
                rf'spate_source_records_total\{{[^}}]*worker="{worker}"[^}}]*\}} [1-9]', metrics
            ), metrics[:2000]
        assert _get(base + "/healthz")[0] == 200

        pids = dict(re.findall(r"worker (\d) started \(pid (\d+)\)", run.text))
        os.kill(int(pids["1"]), signal.SIGKILL)
        _until(
            lambda: len(re.findall(r"worker 1 started", run.text)) == 2, "worker 1 restarted", run
        )
        assert "worker 1 died (killed by SIGKILL" in run.text
        _until(lambda: _get(base + "/readyz")[0] == 200, "both workers ready again", run)
        metrics = _get(base + "/metrics")[1]
        assert re.search(r'spate_supervisor_restarts_total\{[^}]*worker="1"[^}]*\} 1\.0', metrics)
        code = run.sigterm()
    finally:
        run.kill_if_running()
    assert code == 0, run.text[-3000:]
    assert "every worker completed" in run.text


def test_b64_a_worker_that_keeps_failing_gives_up_naming_it(tmp_path: Path) -> None:
    out = tmp_path / "missing-dir" / "out.jsonl"
    extra = "supervisor: {max_restarts: 1, initial_backoff: 50ms}"
    config = _config(tmp_path, "workers-fail", out=out, extra=extra)
    run = _Run(tmp_path, "run", str(config), "--processes", "2")
    assert run.wait() == 1
    give_up = [line for line in run.text.splitlines() if "gave up" in line]
    assert give_up, run.text[-3000:]
    assert re.search(
        r"pipeline workers-fail: worker \d gave up after 2 failures within 10m "
        r"\(supervisor.max_restarts=1\); last error: exit code 1: .*cannot open",
        give_up[0],
    ), give_up[0]


def test_b64_processes_must_be_a_count(tmp_path: Path) -> None:
    config = _config(tmp_path, "bad-count", out=tmp_path / "out.jsonl")
    run = _Run(tmp_path, "run", str(config), "--processes", "many")
    assert run.wait() == 2
    assert "--processes: expected a number or auto, got 'many'" in run.text


def test_b65_two_pipelines_in_one_run_one_failing_the_other_keeps_delivering(
    tmp_path: Path,
) -> None:
    good_out = tmp_path / "good.jsonl"
    good = _config(tmp_path, "good", out=good_out, listen="127.0.0.1:0")
    bad = _config(
        tmp_path,
        "bad",
        out=tmp_path / "missing-dir" / "out.jsonl",
        listen="127.0.0.1:0",
        extra="supervisor: {max_restarts: 1, initial_backoff: 50ms}",
    )
    run = _Run(tmp_path, "run", str(good), str(bad))
    try:
        _until(lambda: "pipeline bad gave up" in run.text, "the failing pipeline to give up", run)
        size = good_out.stat().st_size if good_out.exists() else 0
        # The other pipeline is still running and its admin server still answers.
        match = re.search(r"reachable at (http://\S+) \(pipeline=good", run.text)
        assert match is not None, run.text[-3000:]
        base = match.group(1)
        _until(lambda: _get(base + "/readyz")[0] == 200, "pipeline good ready", run)
        metrics = _get(base + "/metrics")[1]
        assert 'pipeline="good"' in metrics
        assert 'pipeline="bad"' not in metrics  # each pipeline has its own registry
        assert run.proc.poll() is None
        code = run.sigterm()
    finally:
        run.kill_if_running()
    assert good_out.stat().st_size >= size > 0
    assert code == 1  # one of the pipelines failed
    lines = run.text.strip().splitlines()
    assert lines[-1].startswith("pipeline bad failed: pipeline bad gave up after 2 failures")
    assert "pipeline good completed (signal SIGTERM)" in run.text


def test_b65_pipelines_of_one_run_need_distinct_names(tmp_path: Path) -> None:
    first = _config(tmp_path, "same", out=tmp_path / "a.jsonl")
    second = tmp_path / "copy.yaml"
    second.write_text(first.read_text())
    run = _Run(tmp_path, "run", str(first), str(second))
    assert run.wait() == 2
    assert "each pipeline of a run needs its own name" in run.text


def test_b64_workers_drain_when_the_parent_is_killed(tmp_path: Path) -> None:
    config = _config(tmp_path, "orphans", out=tmp_path / "out.jsonl")
    run = _Run(tmp_path, "run", str(config), "--processes", "2")
    _until(lambda: len(re.findall(r"worker \d started", run.text)) == 2, "2 workers", run)
    _until(lambda: run.text.count("orphans running") == 2, "workers running", run)
    pids = [int(p) for _, p in re.findall(r"worker (\d) started \(pid (\d+)\)", run.text)]
    run.proc.kill()
    run.proc.wait()
    deadline = time.monotonic() + 120
    alive = pids
    while alive and time.monotonic() < deadline:
        time.sleep(0.2)
        alive = [pid for pid in pids if Path(f"/proc/{pid}").exists() and _running(pid)]
    assert not alive, run.text[-3000:]
    assert "the parent process is gone; draining" in run.text


def _running(pid: int) -> bool:
    """False for a process that exited (a zombie waiting for its reaper counts as exited)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def test_b64_a_worker_whose_parent_died_before_it_looked_still_drains(tmp_path: Path) -> None:
    """The parent can be killed while a worker is still importing its plugins; by the
    time the worker starts watching, init has adopted it. The worker must compare with
    the parent it was started by, not with whoever its parent is when it looks."""
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    worker = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import time\n"
            "from spate.cli._processes import WorkerSlot\n"
            "slot = WorkerSlot.from_env()\n"
            "assert slot is not None\n"
            "slot.watch_parent(interval=0.05)\n"
            "time.sleep(300)\n",
        ],
        env=dict(
            os.environ,
            SPATE_WORKER_INDEX="0",
            SPATE_WORKER_DIR=str(tmp_path),
            SPATE_WORKER_PARENT=str(gone.pid),
        ),
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        _, err = worker.communicate(timeout=120)
    finally:
        worker.kill()
    assert worker.returncode == -signal.SIGTERM, err
    assert "the parent process is gone; draining" in err


def _pipelines_file(tmp: Path, *, good_out: Path, bad_out: Path, top: str = "") -> Path:
    path = tmp / "two.yaml"
    path.write_text(
        f"""
admin: {{listen: "127.0.0.1:0"}}
checkpoint: {{interval: 200ms, drain_timeout: 10s}}
{top}
pipelines:
  - pipeline: {{name: good}}
    source:
      memory: {{partitions: 2, records: 500, bounded: false}}
    sink:
      file: {{path: "{good_out}", max_rows: 100}}
  - pipeline: {{name: bad}}
    supervisor: {{max_restarts: 1, initial_backoff: 50ms}}
    source:
      memory: {{partitions: 2, records: 500, bounded: false}}
    sink:
      file: {{path: "{bad_out}", max_rows: 100}}
"""
    )
    return path


def test_b92_a_pipelines_list_runs_side_by_side_behind_one_admin_endpoint(
    tmp_path: Path,
) -> None:
    good_out = tmp_path / "good.jsonl"
    config = _pipelines_file(
        tmp_path, good_out=good_out, bad_out=tmp_path / "missing-dir" / "out.jsonl"
    )
    run = _Run(tmp_path, "run", str(config))
    try:
        _until(lambda: "pipeline bad gave up" in run.text, "the failing pipeline to give up", run)
        size = good_out.stat().st_size if good_out.exists() else 0
        match = re.search(r"reachable at (http://\S+) \(pipeline=good,bad", run.text)
        assert match is not None, run.text[-3000:]
        base = match.group(1)
        # One endpoint for the file: every pipeline's series, each under its own label.
        _until(lambda: 'pipeline="good"' in _get(base + "/metrics")[1], "good's series", run)
        metrics = _get(base + "/metrics")[1]
        assert re.search(r'spate_source_records_total\{[^}]*pipeline="good"[^}]*\} [1-9]', metrics)
        assert re.search(
            r'spate_supervisor_give_ups_total\{[^}]*pipeline="bad"[^}]*\} 1\.0', metrics
        ), metrics[:3000]
        # Ready only when every pipeline of the file is: bad gave up.
        status, text = _get(base + "/readyz")
        assert status == 503 and "pipeline bad" in text, text
        assert run.proc.poll() is None  # the other pipeline keeps delivering
        code = run.sigterm()
    finally:
        run.kill_if_running()
    assert good_out.stat().st_size >= size > 0
    assert code == 1
    assert (
        run.text.strip()
        .splitlines()[-1]
        .startswith("pipeline bad failed: pipeline bad gave up after 2 failures")
    )
    assert "pipeline good completed (signal SIGTERM)" in run.text


def _validate(config: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "spate.cli", "validate", str(config)],
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_b92_validate_lists_every_pipeline_of_a_file(tmp_path: Path) -> None:
    config = _pipelines_file(tmp_path, good_out=tmp_path / "a", bad_out=tmp_path / "b")
    check = _validate(config)
    assert check.returncode == 0, check.stderr
    assert check.stdout.splitlines() == [
        f"{config}: ok (pipelines[0]: pipeline good: source memory, sink file)",
        f"{config}: ok (pipelines[1]: pipeline bad: source memory, sink file)",
    ]
    broken = tmp_path / "broken.yaml"
    broken.write_text(
        config.read_text().replace("max_rows: 100}\n  - pipeline", "max_row: 1}\n  - pipeline")
    )
    check = _validate(broken)
    assert check.returncode == 2
    assert re.match(
        rf"{re.escape(str(broken))}:10:\d+: pipelines\[0\]\.sink\.file\.max_row: unknown key",
        check.stderr,
    ), check.stderr


def test_b94_processes_give_every_pipeline_of_a_list_its_own_workers(tmp_path: Path) -> None:
    good_out = tmp_path / "good.jsonl"
    other_out = tmp_path / "other.jsonl"
    config = _pipelines_file(tmp_path, good_out=good_out, bad_out=other_out)
    config.write_text(config.read_text().replace("name: bad", "name: other"))
    run = _Run(tmp_path, "run", str(config), "--processes", "2")
    try:
        _until(lambda: "reachable at" in run.text, "the admin URL", run)
        match = re.search(r"reachable at (http://\S+) \(pipeline=good,other", run.text)
        assert match is not None, run.text[-3000:]
        base = match.group(1)
        _until(lambda: _get(base + "/readyz")[0] == 200, "all four workers ready", run)
        for name in ("good", "other"):
            started = re.findall(rf"pipeline {name}: worker (\d) started", run.text)
            assert sorted(started) == ["0", "1"], run.text[-3000:]
        metrics = _get(base + "/metrics")[1]
        for name in ("good", "other"):
            for worker in ("0", "1"):
                assert re.search(
                    r"spate_source_records_total\{"
                    rf'(?=[^}}]*pipeline="{name}")(?=[^}}]*worker="{worker}")[^}}]*\}} [1-9]',
                    metrics,
                ), (name, worker, metrics[:3000])
        code = run.sigterm()
    finally:
        run.kill_if_running()
    assert code == 0, run.text[-3000:]
    assert "pipeline good: every worker completed" in run.text
    assert "pipeline other: every worker completed" in run.text
    assert good_out.stat().st_size > 0 and other_out.stat().st_size > 0


def test_b94_processes_give_every_file_its_own_parent_and_endpoint(tmp_path: Path) -> None:
    outs = {name: tmp_path / f"{name}.jsonl" for name in ("left", "right")}
    configs = [_config(tmp_path, name, out=out, listen="127.0.0.1:0") for name, out in outs.items()]
    run = _Run(tmp_path, "run", *map(str, configs), "--processes", "2")
    try:
        for name in outs:
            _until(lambda n=name: f"(pipeline={n})" in run.text, f"{name}'s endpoint", run)
            match = re.search(rf"reachable at (http://\S+) \(pipeline={name}\)", run.text)
            assert match is not None, run.text[-3000:]
            base = match.group(1)
            _until(lambda b=base: _get(b + "/readyz")[0] == 200, f"{name}'s workers", run)
            metrics = _get(base + "/metrics")[1]
            for worker in ("0", "1"):
                assert re.search(
                    rf'spate_source_records_total\{{[^}}]*worker="{worker}"[^}}]*\}} [1-9]',
                    metrics,
                ), metrics[:2000]
            other = "right" if name == "left" else "left"
            assert f'pipeline="{other}"' not in metrics  # each file keeps its endpoint
        code = run.sigterm()
    finally:
        run.kill_if_running()
    assert code == 0, run.text[-3000:]
    for name in outs:
        assert f"pipeline {name}: every worker completed" in run.text


def test_b94_a_refused_run_leaves_no_worker_directory_behind(tmp_path: Path) -> None:
    config = _pipelines_file(tmp_path, good_out=tmp_path / "a", bad_out=tmp_path / "b")
    # The second pipeline is refused after the first one's parent was built.
    config.write_text(
        config.read_text().replace(
            '    sink:\n      file: {path: "' + str(tmp_path / "b"),
            '    sinks:\n      x:\n        file: {path: "' + str(tmp_path / "b"),
        )
    )
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    check = subprocess.run(
        [sys.executable, "-m", "spate.cli", "run", str(config), "--processes", "2"],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "TMPDIR": str(scratch)},
    )
    assert check.returncode == 2, check.stderr
    assert "named sinks need --chain" in check.stderr
    assert list(scratch.iterdir()) == []
