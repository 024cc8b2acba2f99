"""B17: the configuration reference is generated from the models, with every default."""

from __future__ import annotations

import dataclasses
import importlib.util
from pathlib import Path
from types import ModuleType
from typing import Literal

from spate.config._decode import ByteSize, Duration
from spate.config._reference import FRAMEWORK_SECTIONS, Section, render_sections
from spate.plugins import Registry

ROOT = Path(__file__).resolve().parents[4]
PAGE = ROOT / "docs" / "reference" / "configuration.md"


def _generator() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "gen_config_reference", ROOT / "scripts" / "gen_config_reference.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class _Inner:
    """Inner settings."""

    depth: int = 3
    """How deep."""


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class _Sample:
    """A sample model."""

    url: str
    """Where to connect | with a pipe."""
    timeout: Duration = 2.5
    size: ByteSize = 64 * 1024
    mode: Literal["fast", "safe"] = "safe"
    tags: list[str] = dataclasses.field(default_factory=list)
    limit: int | None = None
    inner: _Inner = dataclasses.field(default_factory=_Inner)
    renamed: bool = dataclasses.field(default=True, metadata={"key": "yaml-name"})


def test_b17_renderer_shows_types_defaults_docs_and_nested_models() -> None:
    text = "\n".join(render_sections([Section("source.sample", _Sample)]))
    assert "### `source.sample`" in text
    assert "A sample model." in text
    assert "| `url` | string | required | Where to connect \\| with a pipe. |" in text
    assert "| `timeout` | duration | `2500ms` |" in text
    assert "| `size` | size | `64KiB` |" in text
    assert "| `mode` | one of `fast`, `safe` | `safe` |" in text
    assert "| `tags` | list of string | `[]` |" in text
    assert "| `limit` | integer (optional) | `null` |" in text
    assert "| `inner` | section | see below |" in text
    assert "| `yaml-name` | boolean | `true` |" in text
    assert "#### `source.sample.inner`" in text
    assert "| `depth` | integer | `3` | How deep. |" in text


def test_b17_every_framework_default_is_in_the_reference() -> None:
    page = PAGE.read_text(encoding="utf-8")
    rendered = "\n".join(render_sections(FRAMEWORK_SECTIONS))
    assert rendered in page
    for section in FRAMEWORK_SECTIONS:
        for field in dataclasses.fields(section.model):
            assert f"| `{field.name}` |" in rendered, f"{section.key}.{field.name}"


def test_b17_committed_reference_matches_the_models() -> None:
    """Fails when a model changed: run ``python scripts/gen_config_reference.py``."""
    expected = _generator().render_page(Registry())
    assert PAGE.read_text(encoding="utf-8") == expected, (
        "docs/reference/configuration.md is stale: run python scripts/gen_config_reference.py"
    )


def test_b17_every_key_in_the_reference_has_a_description() -> None:
    """An empty Description cell fails: write the docstring under the field."""
    page = _generator().render_page(Registry())
    heading = ""
    empty = []
    for line in page.splitlines():
        if line.startswith("#"):
            heading = line
        elif line.startswith("| `") and line.rstrip().endswith("|"):
            cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
            if not cells[-1]:
                empty.append(f"{heading}: {cells[0]}")
    assert empty == []


def test_b17_a_key_the_model_requires_is_marked_required_not_by_its_default() -> None:
    @dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
    class _Needs:
        table: str = dataclasses.field(default="", metadata={"required": True})
        """The table."""

    text = "\n".join(render_sections([Section("sink.needs", _Needs)]))
    assert "| `table` | string | required | The table. |" in text
