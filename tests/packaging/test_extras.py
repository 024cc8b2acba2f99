"""B26: each extra of the front door installs its own client libraries and nothing else.

Builds wheels of the front door and every distribution from this checkout once per
module, then installs ``spate[clickhouse]==0.1.0``, ``spate[kafka]==0.1.0`` and
``spate[protobuf]==0.1.0`` into fresh
virtual environments (spate's wheels from the local wheel directory, third-party
dependencies from the package index) and checks, inside each new environment, which
client libraries are installed and importable and what ``spate plugins`` lists.

The version pin matters: an unrelated project holds the name ``spate`` on the public index,
with no 0.1.0.
"""

from __future__ import annotations

import json
import re
import shutil
import sys
import tomllib
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.support.venvs import build_wheels, run

pytestmark = pytest.mark.packaging

REPO_ROOT = Path(__file__).resolve().parents[2]
DISTRIBUTION_DIRS = [REPO_ROOT, *sorted((REPO_ROOT / "packages").glob("spate-*"))]
VERSION = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["project"]["version"]

# Client library (distribution name) -> its import name.
CLIENT_LIBRARIES = {
    "confluent-kafka": "confluent_kafka",
    "fastavro": "fastavro",
    "orjson": "orjson",
    "aioboto3": "aioboto3",
    "nats-py": "nats",
    "clickhouse-connect": "clickhouse_connect",
    "chdb": "chdb",
    "polars": "polars",
    "pyarrow": "pyarrow",
    "jetliner": "jetliner",
    "xxhash": "xxhash",
    "protobuf": "google.protobuf",
}
COLUMNAR_LIBRARIES = {
    "polars",
    "pyarrow",
    "jetliner",
    "ptars",
    "spate-avro-native",
    "xxhash",
    "polars-runtime-32",
}
"""What ``spate[columnar]`` brings; the row path installs none of it."""

# Run inside the new environment: what is installed and what imports.
_INSPECT = """
import importlib.metadata, importlib.util, json, re, sys
names = {re.sub(r"[-_.]+", "-", d.metadata["Name"]).lower(): d.version
         for d in importlib.metadata.distributions()}
def found(module):
    try:  # a dotted name imports its parent, which may be absent ("google")
        return importlib.util.find_spec(module) is not None
    except ModuleNotFoundError:
        return False
modules = {m: found(m) for m in sys.argv[1:]}
print(json.dumps({"distributions": names, "importable": modules}))
"""


@dataclass(frozen=True, slots=True)
class Environment:
    """A fresh virtual environment with one extra of the front door installed."""

    root: Path
    distributions: dict[str, str]
    importable: dict[str, bool]

    @property
    def bin(self) -> Path:
        return self.root / "bin"

    def plugins(self) -> list[dict[str, str]]:
        """Rows of ``spate plugins`` (header ``NAME KIND DISTRIBUTION VERSION``)."""
        proc = run([str(self.bin / "spate"), "plugins"], cwd=self.root)
        lines = [line.split() for line in proc.stdout.splitlines() if line.strip()]
        assert lines, f"`spate plugins` printed nothing:\n{proc.stderr}"
        header, *rows = lines
        assert header == ["NAME", "KIND", "DISTRIBUTION", "VERSION"], proc.stdout
        assert all(len(row) == 4 for row in rows), proc.stdout
        return [dict(zip(header, row, strict=True)) for row in rows]


@pytest.fixture(scope="module")
def wheelhouse(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Wheels of the front door and every distribution, built once (hatchling is in the venv)."""
    if shutil.which("cargo") is None:
        pytest.skip(
            "cargo not found: these tests build every wheel, spate-avro-native's (a Rust "
            "extension) included; install Rust with rustup (https://rustup.rs) to run them"
        )
    out = tmp_path_factory.mktemp("wheels")
    wheels = [p.name for p in build_wheels(out, DISTRIBUTION_DIRS)]
    assert len(wheels) == len(DISTRIBUTION_DIRS), wheels
    assert all(f"-{VERSION}-" in name for name in wheels), wheels
    return out


def _install(extra: str, wheelhouse: Path, tmp_path_factory: pytest.TempPathFactory) -> Environment:
    root = tmp_path_factory.mktemp(f"venv-{extra}")
    # No pip inside the new venv: the dev venv's pip installs into it (--python), faster.
    run([sys.executable, "-m", "venv", "--without-pip", str(root)], cwd=root)
    python = root / "bin" / "python"
    run(
        [
            sys.executable,
            "-m",
            "pip",
            "--python",
            str(python),
            "install",
            "--quiet",
            "--find-links",
            str(wheelhouse),
            f"spate[{extra}]=={VERSION}",
        ],
        cwd=root,
    )
    proc = run([str(python), "-c", _INSPECT, *CLIENT_LIBRARIES.values()], cwd=root)
    report = json.loads(proc.stdout)
    return Environment(root, report["distributions"], report["importable"])


@pytest.fixture(scope="module")
def clickhouse_env(wheelhouse: Path, tmp_path_factory: pytest.TempPathFactory) -> Environment:
    return _install("clickhouse", wheelhouse, tmp_path_factory)


@pytest.fixture(scope="module")
def kafka_env(wheelhouse: Path, tmp_path_factory: pytest.TempPathFactory) -> Environment:
    return _install("kafka", wheelhouse, tmp_path_factory)


@pytest.fixture(scope="module")
def protobuf_env(wheelhouse: Path, tmp_path_factory: pytest.TempPathFactory) -> Environment:
    return _install("protobuf", wheelhouse, tmp_path_factory)


def _assert_installed(env: Environment, present: set[str], absent: set[str]) -> None:
    for dist in sorted(present):
        assert dist in env.distributions, f"{dist} is not installed in {env.root}"
        if dist in CLIENT_LIBRARIES:
            assert env.importable[CLIENT_LIBRARIES[dist]], f"{dist} does not import"
    for dist in sorted(absent):
        assert dist not in env.distributions, f"{dist} was installed into {env.root}"
        if dist in CLIENT_LIBRARIES:
            assert not env.importable[CLIENT_LIBRARIES[dist]], f"{dist} imports"


def _mentions(row: dict[str, str], words: set[str]) -> bool:
    text = f"{row['NAME']} {row['DISTRIBUTION']}".lower()
    return any(re.search(rf"\b{word}\b", text) for word in words)


def test_b26_clickhouse_extra_installs_clickhouse_connect_and_no_other_client(
    clickhouse_env: Environment,
) -> None:
    _assert_installed(
        clickhouse_env,
        present={"spate", "spate-core", "spate-clickhouse", "clickhouse-connect"},
        absent={
            "confluent-kafka",
            "fastavro",
            "orjson",
            "aioboto3",
            "nats-py",
            "chdb",
            "protobuf",
            "spate-kafka",
            "spate-avro",
            "spate-json",
            "spate-protobuf",
            "spate-s3",
            "spate-coordination",
            "spate-datagen",
            *COLUMNAR_LIBRARIES,
            "spate-parquet",
            "spate-http",
            "spate-huggingface",
        },
    )
    spate_dists = {d: v for d, v in clickhouse_env.distributions.items() if d.startswith("spate")}
    assert set(spate_dists.values()) == {VERSION}, spate_dists


def test_b26_clickhouse_extra_lists_no_kafka_s3_avro_json_or_nats_plugin(
    clickhouse_env: Environment,
) -> None:
    rows = clickhouse_env.plugins()
    unwanted = [row for row in rows if _mentions(row, {"kafka", "s3", "avro", "json", "nats"})]
    assert unwanted == [], unwanted
    assert any(
        row["NAME"] == "clickhouse" and row["DISTRIBUTION"] == "spate-clickhouse" for row in rows
    ), rows


def test_b26_kafka_extra_installs_kafka_avro_json_clients_and_no_other(
    kafka_env: Environment,
) -> None:
    _assert_installed(
        kafka_env,
        present={
            "spate",
            "spate-core",
            "spate-kafka",
            "spate-avro",
            "spate-json",
            "confluent-kafka",
            "fastavro",
            "orjson",
            "jsonschema",  # spate-json's validation of Confluent JSON Schema records
        },
        absent={
            "clickhouse-connect",
            "chdb",
            "aioboto3",
            "nats-py",
            "protobuf",
            "spate-clickhouse",
            "spate-s3",
            "spate-coordination",
            *COLUMNAR_LIBRARIES,
            "spate-protobuf",
            "spate-parquet",
            "spate-http",
            "spate-huggingface",
            "pyarrow",
        },
    )


def test_b26_kafka_extra_lists_kafka_avro_json_plugins_and_no_clickhouse(
    kafka_env: Environment,
) -> None:
    rows = kafka_env.plugins()
    unwanted = [row for row in rows if _mentions(row, {"clickhouse", "s3", "nats"})]
    assert unwanted == [], unwanted
    distributions = {row["DISTRIBUTION"] for row in rows}
    assert {"spate-kafka", "spate-avro", "spate-json"} <= distributions, rows


def test_b26_columnar_extra_brings_the_columnar_libraries_and_the_row_extras_do_not() -> None:
    """``spate[columnar]`` pins the columnar extras of spate-avro, spate-clickhouse,
    spate-json and spate-protobuf; the row extras (kafka, clickhouse, avro, json,
    protobuf) name no columnar library."""
    root = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["project"]
    extras = root["optional-dependencies"]
    assert extras["columnar"] == [
        f"spate-avro[columnar]=={VERSION}",
        f"spate-clickhouse[columnar]=={VERSION}",
        f"spate-json[columnar]=={VERSION}",
        f"spate-protobuf[columnar]=={VERSION}",
    ]
    for name in ("kafka", "clickhouse", "avro", "json", "protobuf"):
        assert not any("[columnar]" in dep for dep in extras[name]), extras[name]
    wanted: set[str] = set()
    for package in ("spate-avro", "spate-clickhouse", "spate-json", "spate-protobuf"):
        meta = tomllib.loads((REPO_ROOT / "packages" / package / "pyproject.toml").read_text())
        project = meta["project"]
        assert not any(
            re.split(r"[<>=\[ ]", dep)[0] in COLUMNAR_LIBRARIES for dep in project["dependencies"]
        ), project["dependencies"]
        wanted |= {
            re.split(r"[<>=\[ ]", d)[0] for d in project["optional-dependencies"]["columnar"]
        }
    assert wanted == COLUMNAR_LIBRARIES - {"polars-runtime-32"}


def test_b26_protobuf_extra_installs_protobuf_and_the_registry_client_only(
    protobuf_env: Environment,
) -> None:
    """spate-protobuf reuses spate-avro's registry client, so fastavro comes along."""
    _assert_installed(
        protobuf_env,
        present={"spate", "spate-core", "spate-protobuf", "spate-avro", "protobuf", "fastavro"},
        absent={
            "confluent-kafka",
            "clickhouse-connect",
            "chdb",
            "orjson",
            "aioboto3",
            "nats-py",
            "spate-kafka",
            "spate-clickhouse",
            "spate-json",
            "spate-s3",
            "spate-coordination",
        },
    )
    rows = protobuf_env.plugins()
    assert any(
        row["NAME"] == "protobuf" and row["DISTRIBUTION"] == "spate-protobuf" for row in rows
    ), rows
