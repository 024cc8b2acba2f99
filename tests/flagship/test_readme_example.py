"""The README's twenty-line pipeline runs as written: its table, YAML and Python, taken
from README.md, move JSON payments from Kafka (the mock cluster) into ClickHouse (chDB)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
RUNNER = Path(__file__).with_name("_readme_runner.py")


def readme_blocks(lang: str) -> list[str]:
    text = (ROOT / "README.md").read_text()
    return re.findall(rf"```{lang}\n(.*?)```", text, flags=re.S)


def test_readme_pipeline_runs_as_written(tmp_path: Path) -> None:
    yaml_text = next(b for b in readme_blocks("yaml") if "# pipeline.yaml" in b)
    py_text = next(b for b in readme_blocks("python") if "# payments.py" in b)
    sql_text = next(b for b in readme_blocks("sql") if "CREATE TABLE payments" in b)
    (tmp_path / "schema.sql").write_text(sql_text)
    quiet = "pipeline: {name: payments}\nadmin: {listen: none}"
    (tmp_path / "pipeline.yaml").write_text(yaml_text.replace("pipeline: {name: payments}", quiet))
    (tmp_path / "payments.py").write_text(py_text)
    result = subprocess.run(
        [sys.executable, str(RUNNER), str(tmp_path / "ch")],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr[-3000:]
    summary = json.loads(result.stdout.strip().splitlines()[-1])
    assert summary == {"exit": 0, "rows": 200, "expected": 200}
