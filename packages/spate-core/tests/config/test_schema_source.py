"""``schema: {inline | path}``: the one model behind the Avro and JSON schema keys (B17)."""

from __future__ import annotations

from pathlib import Path

import pytest
from spate.config import SchemaSource, decode
from spate.errors import ConfigError


@pytest.mark.parametrize(
    ("raw", "path", "message"),
    [
        ({}, "d.schema", "give exactly one of inline or path"),
        ({"inline": "{}", "path": "x.json"}, "d.schema", "give exactly one of inline or path"),
        ({"inline": " "}, "d.schema.inline", "must not be empty"),
        ({"path": ""}, "d.schema.path", "must not be empty"),
        ({"url": "x"}, "d.schema.url", "unknown key"),
    ],
)
def test_b17_exactly_one_non_empty_key(raw: dict[str, str], path: str, message: str) -> None:
    with pytest.raises(ConfigError) as info:
        decode(SchemaSource, raw, "d.schema")
    assert info.value.path == path
    assert message in info.value.message


def test_text_comes_inline_or_from_the_file(tmp_path: Path) -> None:
    file = tmp_path / "s.json"
    file.write_text('{"type": "int"}', encoding="utf-8")
    inline = decode(SchemaSource, {"inline": '"int"'}, "d")
    assert (inline.key, inline.read_text()) == ("inline", '"int"')
    by_path = decode(SchemaSource, {"path": str(file)}, "d")
    assert (by_path.key, by_path.read_text()) == ("path", '{"type": "int"}')


def test_an_unreadable_file_names_it(tmp_path: Path) -> None:
    missing = tmp_path / "missing.avsc"
    with pytest.raises(ValueError, match=r"cannot read '.*missing\.avsc': No such file"):
        SchemaSource(path=str(missing)).read_text()
