"""``spate new-connector NAME``: a connector package from the template, green from the start.

Each template (sink, source, deserializer) makes a working distribution whose own tests
run spate's conformance suite of its kind; they pass as generated (B1, B2, B4, B7, B9,
B17, B28, B29), so an author starts from a connector that keeps spate's promises and
changes it from there (B27).
Bad names and existing folders are refused with one line and exit 2 (B16).
"""

from __future__ import annotations

import io
import os
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import NamedTuple

import pytest
from spate.cli import main
from spate.cli._scaffold import ConnectorNames, ScaffoldError
from spate.plugins import Registry


def _main(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = main(list(argv), registry=Registry(path=[]), stdout=out, stderr=err)
    return code, out.getvalue(), err.getvalue()


@pytest.mark.parametrize(
    ("raw", "tag", "dist", "module", "name"),
    [
        ("parquet", "parquet", "spate-parquet", "spate_parquet", "Parquet"),
        (
            "spate-object-store",
            "object_store",
            "spate-object-store",
            "spate_object_store",
            "ObjectStore",
        ),
        ("http_poll2", "http_poll2", "spate-http-poll2", "spate_http_poll2", "HttpPoll2"),
    ],
)
def test_names_are_spelled_for_each_use(
    raw: str, tag: str, dist: str, module: str, name: str
) -> None:
    assert ConnectorNames.parse(raw) == ConnectorNames(tag, dist, module, name)


@pytest.mark.parametrize("raw", ["", "Bad Name", "9lives", "two--dashes", "trailing-", "x.y"])
def test_bad_names_are_refused(raw: str) -> None:
    with pytest.raises(ScaffoldError, match="connector name"):
        ConnectorNames.parse(raw)


def test_b16_bad_name_and_existing_folder_exit_2_with_one_line(tmp_path: Path) -> None:
    code, _, err = _main("new-connector", "Bad Name", "--directory", str(tmp_path))
    assert code == 2 and len(err.strip().splitlines()) == 1 and "Bad Name" in err
    assert _main("new-connector", "demo", "--directory", str(tmp_path))[0] == 0
    marker = tmp_path / "spate-demo" / "README.md"
    marker.write_text("mine")
    code, _, err = _main("new-connector", "demo", "--directory", str(tmp_path))
    assert code == 2 and "already exists" in err
    assert marker.read_text() == "mine"  # nothing overwritten


# What each template makes, besides README.md, pyproject.toml, py.typed and __init__.py.
KIND_MODULES = {
    "sink": ["config.py", "_connector.py", "_factory.py"],
    "source": ["config.py", "_source.py"],
    "deserializer": ["config.py", "_deserializer.py"],
}
ENTRY_POINTS = {
    "sink": ("spate.sinks", "LedgerLinesSinkFactory"),
    "source": ("spate.sources", "LedgerLinesSourceFactory"),
    "deserializer": ("spate.deserializers", "LedgerLinesDeserializerFactory"),
}


class Generated(NamedTuple):
    kind: str
    root: Path


@pytest.fixture(scope="module", params=sorted(KIND_MODULES))
def generated(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Generated:
    kind = str(request.param)
    where = tmp_path_factory.mktemp(f"scaffold-{kind}")
    code, out, err = _main(
        "new-connector", "ledger-lines", "--kind", kind, "--directory", str(where)
    )
    assert code == 0, err
    root = where / "spate-ledger-lines"
    assert f"created {root}" in out
    return Generated(kind, root)


def test_the_template_is_rendered_with_every_name(generated: Generated) -> None:
    kind, root = generated
    files = sorted(p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file())
    package = "src/spate_ledger_lines"
    assert files == sorted(
        [
            "README.md",
            "pyproject.toml",
            f"{package}/__init__.py",
            f"{package}/py.typed",
            "tests/test_conformance.py",
            *(f"{package}/{name}" for name in KIND_MODULES[kind]),
        ]
    )
    for path in root.rglob("*"):
        if path.is_file():
            text = path.read_text()
            assert "${" not in text and "__module__" not in text, path
    project = tomllib.loads((root / "pyproject.toml").read_text())["project"]
    assert project["name"] == "spate-ledger-lines"
    group, factory = ENTRY_POINTS[kind]
    assert project["entry-points"] == {group: {"ledger_lines": f"spate_ledger_lines:{factory}"}}


def test_b27_the_generated_package_passes_its_conformance_suite(generated: Generated) -> None:
    env = {**os.environ, "PYTHONPATH": str(generated.root / "src")}
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests"],
        cwd=generated.root,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    assert " passed" in proc.stdout.splitlines()[-1], proc.stdout[-2000:]
    assert "failed" not in proc.stdout.splitlines()[-1]


def test_the_generated_package_is_lint_clean(generated: Generated) -> None:
    ruff = shutil.which("ruff", path=str(Path(sys.executable).parent))
    if ruff is None:
        pytest.skip("ruff is not installed next to this interpreter")
    for args in (["check"], ["format", "--check"]):
        proc = subprocess.run(
            [ruff, *args, "--isolated", "--line-length", "100", "."],
            cwd=generated.root,
            capture_output=True,
            text=True,
            check=False,
        )
        assert proc.returncode == 0, proc.stdout + proc.stderr


@pytest.mark.parametrize("name", ["kafka", "spate-clickhouse", "core", "datagen"])
def test_new_connector_refuses_the_names_of_spates_distributions(tmp_path: Path, name: str) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "spate.cli", "new-connector", name, "--directory", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 2
    assert result.stderr.count("\n") == 1, result.stderr
    assert "spate's own distributions" in result.stderr and "shadow" in result.stderr
    assert list(tmp_path.iterdir()) == []


def test_new_connector_refuses_an_installed_distribution_name(tmp_path: Path) -> None:
    # spate-sqlite, the example third-party connector, is installed in the dev environment.
    code, _, err = _main("new-connector", "sqlite", "--directory", str(tmp_path))
    assert code == 2
    assert "a distribution named spate-sqlite is installed" in err
