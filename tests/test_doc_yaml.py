"""Every YAML block of the README and the docs is a configuration ``spate validate``
accepts (B137).

A block that is a whole configuration (it has ``source:`` or ``pipelines:``) is
validated as written. A block that shows some top-level sections only (``sinks:``,
``deserializer:``, ``admin:`` …) is validated with the sections it leaves out filled in
by a minimal Kafka source and ClickHouse sink, so the sections it shows are checked the
way spate reads them. A block showing the inside of one section (``security:`` of a
Kafka source) is named by the list at the bottom, which a test keeps from growing
stale. The environment each block needs is given: every ``${VAR}`` it names without a
default gets a value of the right shape, every ``${file:PATH}`` and secret file a file,
and every certificate or key path a real one (a test CA's).
"""

from __future__ import annotations

import io
import re
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from spate.cli import main

from tests.support.tls import Pki, make_pki

ROOT = Path(__file__).resolve().parents[1]
_TOP_LEVEL = {
    "pipeline",
    "source",
    "deserializer",
    "sink",
    "sinks",
    "checkpoint",
    "backpressure",
    "admin",
    "metrics",
    "readiness",
    "supervisor",
    "coordination",
    "dead_letter",
    "pipelines",
}
_SOURCE = "source: {kafka: {brokers: localhost:9092, topic: docs, group_id: docs}}\n"
_SINK = (
    "sink: {clickhouse: {table: t, columns: [a], shards: [{replicas: [http://localhost:8123]}]}}\n"
)
_VARIABLE = re.compile(r"\$\{(?!file:)([A-Za-z_][A-Za-z0-9_]*)(:-[^}]*)?\}")
_FILE = re.compile(r"\$\{file:([^}]+)\}")
_PATH = re.compile(r"(?<=[:\s\[])(/(?:etc|run)/[\w./-]+)")


def _documents() -> list[Path]:
    found = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
    found += sorted((ROOT / "packages").glob("*/README.md"))
    found += sorted((ROOT / "examples").rglob("README.md"))
    return found


def yaml_blocks() -> Iterator[tuple[str, str]]:
    """(where, text) of every fenced YAML block."""
    for path in _documents():
        text = path.read_text()
        for match in re.finditer(r"```ya?ml\n(.*?)```", text, flags=re.S):
            line = text.count("\n", 0, match.start()) + 1
            yield f"{path.relative_to(ROOT)}:{line}", match.group(1)


def _top_keys(text: str) -> set[str]:
    """The block's top-level keys (interpolations stood in for, as spate substitutes
    them before it parses)."""
    parsed = yaml.safe_load(_FILE.sub("x", _VARIABLE.sub("x", text)))
    return set(parsed) if isinstance(parsed, dict) else set()


def _value_for(name: str) -> str:
    upper = name.upper()
    if "BROKER" in upper or "BOOTSTRAP" in upper:
        return "localhost:9092"
    if "REGISTRY" in upper or "URL" in upper or "ENDPOINT" in upper:
        return "http://localhost:8081"
    if "LISTEN" in upper:
        return "127.0.0.1:0"
    return "docs-value"


def _stand_in(path: str, pki: Pki, tmp_path: Path) -> str:
    """A real file for an absolute path the block names: a certificate or key of the
    test CA, or a secret file."""
    name = Path(path).name
    if name.endswith((".pem", ".crt", ".key")):
        if "key" in name:
            return str(pki.client_key)
        if "cert" in name or "client" in name:
            return str(pki.client_cert)
        return str(pki.ca)
    secret = tmp_path / "secrets" / name
    secret.parent.mkdir(exist_ok=True)
    secret.write_text("docs-secret\n")
    return str(secret)


SECTION_FRAGMENTS = {
    # The inside of one connector's section, shown on its own: not a configuration.
    "docs/connectors/kafka.md": ("security:",),
    "docs/guides/security.md": ("security:", "endpoint_url:"),
}


def _fragment(where: str, text: str) -> bool:
    starts = SECTION_FRAGMENTS.get(where.rsplit(":", 1)[0], ())
    return text.lstrip().startswith(starts)


def test_b137_every_yaml_block_in_the_docs_validates(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    checked = 0
    failures: list[str] = []
    pki = make_pki(tmp_path / "pki")
    for where, text in yaml_blocks():
        if _fragment(where, text):
            continue
        keys = _top_keys(text)
        assert keys and keys <= _TOP_LEVEL, f"{where}: not a configuration ({sorted(keys)})"
        if "pipelines" not in keys:
            if "source" not in keys:
                text = _SOURCE + text
            if not keys & {"sink", "sinks"}:
                text += _SINK
        for match in _VARIABLE.finditer(text):
            if match.group(2) is None:
                monkeypatch.setenv(match.group(1), _value_for(match.group(1)))
        for match in _FILE.finditer(text):
            target = tmp_path / match.group(1).lstrip("/")
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text("docs-secret\n")
            text = text.replace(match.group(0), "${file:" + str(target) + "}")
        text = _PATH.sub(lambda m: _stand_in(m.group(1), pki, tmp_path), text)
        config = tmp_path / f"block{checked}.yaml"
        config.write_text(text)
        out, err = io.StringIO(), io.StringIO()
        code = main(["validate", str(config)], stdout=out, stderr=err)
        checked += 1
        if code != 0:
            failures.append(f"{where}: {err.getvalue().strip()}")
    assert checked >= 40, "the docs' YAML blocks were not found"
    assert not failures, "\n".join(failures)


def test_b137_the_section_fragments_listed_exist() -> None:
    """Each exemption still names a block that is there (and still a fragment)."""
    for document, starts in SECTION_FRAGMENTS.items():
        blocks = [t for w, t in yaml_blocks() if w.rsplit(":", 1)[0] == document]
        for start in starts:
            assert any(t.lstrip().startswith(start) for t in blocks), (document, start)
