"""The README's "pipeline in twenty lines" runs as written against the local services (B137).

Every fenced block of that README section is taken verbatim: the files (``schema.sql``,
``pipeline.yaml``, ``payments.py``) are written to a directory of their own, and the
shell blocks run in order in one environment carried from block to block — the first
in the checkout (``make services-up``, ``scripts/services.sh env``), the others in that
directory. The block that runs the pipeline runs until the README's own count query
shows every payment the generated events hold, then gets Ctrl-C (SIGINT to its process
group, as a terminal sends it) and must drain and exit 0.

The README's names are fixed (topic ``events``, table ``payments``, group
``payments-etl``), so the test first removes what an earlier run left of them.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
_SECTION = "### A pipeline in twenty lines"
_FILE_NAME = re.compile(r"^(?:#|--) (\S+\.(?:sql|yaml|py))$")


def quickstart_blocks() -> list[tuple[str, str]]:
    """The section's fenced blocks in order, as (language, text)."""
    text = (ROOT / "README.md").read_text()
    start = text.index(_SECTION)
    end = text.index("\n## ", start)
    return re.findall(r"```(\w+)\n(.*?)```", text[start:end], flags=re.S)


def _run_block(block: str, cwd: Path, env: dict[str, str], tmp: Path) -> dict[str, str]:
    """Run one shell block to completion; the environment it leaves behind."""
    dump = tmp / "env.json"
    script = f"set -euo pipefail\n{block}\n{shlex.quote(sys.executable)} -c " + shlex.quote(
        f"import json, os; open({str(dump)!r}, 'w').write(json.dumps(dict(os.environ)))"
    )
    result = subprocess.run(
        ["bash", "-c", script],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert result.returncode == 0, f"{block}\n{result.stdout[-2000:]}\n{result.stderr[-3000:]}"
    carried: dict[str, str] = json.loads(dump.read_text())
    return carried


def _count(block: str, cwd: Path, env: dict[str, str]) -> int:
    result = subprocess.run(
        ["bash", "-c", block], cwd=cwd, env=env, capture_output=True, text=True, timeout=60
    )
    return int(result.stdout.strip()) if result.returncode == 0 and result.stdout.strip() else -1


def _forget_earlier_runs(env: dict[str, str]) -> None:
    """Drop the README's table, topic and group left by an earlier run."""
    from confluent_kafka.admin import AdminClient

    clickhouse = env["CLICKHOUSE_URL"]
    subprocess.run(
        ["curl", "-sS", "--fail", "--data-binary", "DROP TABLE IF EXISTS payments", clickhouse],
        check=True,
        capture_output=True,
        timeout=60,
    )
    admin = AdminClient({"bootstrap.servers": env["KAFKA_BROKERS"]})
    groups = admin.delete_consumer_groups(["payments-etl"], request_timeout=30)
    for future in groups.values():
        with contextlib.suppress(Exception):  # no such group: nothing to forget
            future.result()
    topics = admin.delete_topics(["events"], operation_timeout=30)
    for future in topics.values():
        with contextlib.suppress(Exception):  # no such topic
            future.result()
    deadline = time.monotonic() + 60
    while "events" in admin.list_topics(timeout=10).topics:
        assert time.monotonic() < deadline, "topic events was not deleted"
        time.sleep(0.2)


def test_b137_the_readme_quickstart_runs_as_written(
    tmp_path: Path, kafka_bootstrap: str, clickhouse_url: str
) -> None:
    blocks = quickstart_blocks()
    work = tmp_path / "work"
    work.mkdir()
    for lang, text in blocks:
        first = text.splitlines()[0]
        named = _FILE_NAME.match(first)
        if lang in ("sql", "yaml", "python"):
            assert named, f"a {lang} block of the quick start names no file: {first}"
            (work / named.group(1)).write_text(text)
    shells = [text for lang, text in blocks if lang == "bash"]
    assert "make services-up" in shells[0]
    env = {k: v for k, v in os.environ.items() if k not in ("KAFKA_BROKERS", "CLICKHOUSE_URL")}
    env["PATH"] = f"{Path(sys.executable).parent}:{env.get('PATH', '')}"
    env = _run_block(shells[0], ROOT, env, tmp_path)
    # The exports name the services the tests use, not the YAML's fallbacks.
    assert (env["KAFKA_BROKERS"], env["CLICKHOUSE_URL"]) == (kafka_bootstrap, clickhouse_url)
    _forget_earlier_runs(env)
    run_block = next(b for b in shells if "payments.py" in b or "spate run" in b)
    count_block = shells[-1]
    assert "SELECT count() FROM payments" in count_block
    for block in shells[1 : shells.index(run_block)]:
        env = _run_block(block, work, env, tmp_path)
    datagen = next(line for line in run_block.splitlines() if "spate datagen" in line)
    setup, _, run_line = run_block.partition(datagen)
    env = _run_block(setup + datagen, work, env, tmp_path)
    from spate_datagen import manifest_of

    count = int(re.search(r"--count (\d+)", datagen).group(1))  # type: ignore[union-attr]
    expected = manifest_of(count).counts["PaymentCaptured"]

    log = (tmp_path / "pipeline.log").open("w")
    pipeline = subprocess.Popen(
        ["bash", "-c", run_line.strip()],
        cwd=work,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 240
        rows = -1
        while time.monotonic() < deadline and pipeline.poll() is None:
            rows = _count(count_block, work, env)
            if rows >= expected:
                break
            time.sleep(0.5)
        assert rows == expected, (tmp_path / "pipeline.log").read_text()[-4000:]
        os.killpg(pipeline.pid, signal.SIGINT)  # Ctrl-C
        assert pipeline.wait(timeout=120) == 0, (tmp_path / "pipeline.log").read_text()[-4000:]
    finally:
        if pipeline.poll() is None:
            os.killpg(pipeline.pid, signal.SIGKILL)
            pipeline.wait()
        log.close()
    assert _count(count_block, work, env) == expected
