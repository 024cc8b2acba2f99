"""B26/B27: the registry finds plugins by entry point, loads lazily, hints installs.

Each test installs throwaway distributions (real ``.dist-info`` folders) into its own
directory and points a :class:`Registry` at it, so the shared environment is untouched.
"""

from __future__ import annotations

import sys
import tomllib
import uuid
from pathlib import Path

import pytest
from spate.config import parse_config
from spate.errors import MissingConnectorError, PluginError
from spate.plugins import PluginKind, Registry
from spate.plugins._entry_points import FRONT_DOOR_EXTRAS, SPATE_CONNECTORS

from tests.support.fake_plugins import (
    REPO_ROOT,
    front_door_extras,
    install_dist,
    install_front_door,
)

FACTORY_MODULE = """
from dataclasses import dataclass

LOADED = True


@dataclass(frozen=True, slots=True, kw_only=True)
class EchoConfig:
    greeting: str = "hi"
    count: int = 1


class EchoFactory:
    config_model = EchoConfig

    @staticmethod
    def build(config, context):
        return ("echo", config, context)


class NoModel:
    @staticmethod
    def build(config, context):
        return None


class NoBuild:
    config_model = EchoConfig


class Hello:
    help = "say hello"

    @staticmethod
    def configure(parser):
        parser.add_argument("--who", default="world")

    @staticmethod
    def run(args):
        return 0
"""


@pytest.fixture
def plugin_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, str]:
    """A directory on sys.path holding a uniquely named plugin module."""
    module = f"thirdparty_{uuid.uuid4().hex[:8]}"
    root = tmp_path / "site"
    root.mkdir()
    (root / f"{module}.py").write_text(FACTORY_MODULE, encoding="utf-8")
    monkeypatch.syspath_prepend(str(root))
    yield root, module
    sys.modules.pop(module, None)


def test_b27_third_party_entry_points_are_listed_with_distribution_and_version(
    plugin_dir: tuple[Path, str],
) -> None:
    root, module = plugin_dir
    install_dist(
        root,
        "acme-spate-echo",
        "2.3.4",
        entry_points={
            "spate.sinks": {"echo": f"{module}:EchoFactory"},
            "spate.sources": {"echo": f"{module}:EchoFactory"},
            "spate.commands": {"hello": f"{module}:Hello"},
            "console_scripts": {"unrelated": f"{module}:Hello"},
        },
    )
    registry = Registry(path=[str(root)])
    rows = [(p.name, p.kind, p.distribution, p.version) for p in registry.plugins()]
    assert rows == [
        ("hello", "command", "acme-spate-echo", "2.3.4"),
        ("echo", "sink", "acme-spate-echo", "2.3.4"),
        ("echo", "source", "acme-spate-echo", "2.3.4"),
    ]
    assert registry.names("sink") == ["echo"]
    # Listing never imports the plugin.
    assert module not in sys.modules


def test_b27_a_third_party_sink_is_usable_from_yaml(plugin_dir: tuple[Path, str]) -> None:
    root, module = plugin_dir
    install_dist(
        root,
        "acme-spate-echo",
        entry_points={
            "spate.sinks": {"echo": f"{module}:EchoFactory"},
            "spate.sources": {"echo": f"{module}:EchoFactory"},
        },
    )
    registry = Registry(path=[str(root)])
    text = "source:\n  echo: {}\nsinks:\n  out:\n    echo:\n      count: '3'\n"
    cfg = parse_config(text, env={}, resolver=registry)
    config = cfg.sinks["out"].config
    assert type(config).__name__ == "EchoConfig"
    assert (config.greeting, config.count) == ("hi", 3)  # type: ignore[attr-defined]
    factory = registry.factory(PluginKind.SINK, "echo")
    assert factory is registry.factory("sink", "echo")  # cached
    assert factory.build(config, "ctx") == ("echo", config, "ctx")


def test_b27_commands_are_loaded_and_checked(plugin_dir: tuple[Path, str]) -> None:
    root, module = plugin_dir
    install_dist(
        root,
        "acme-cmds",
        entry_points={"spate.commands": {"hello": f"{module}:Hello", "bad": f"{module}:NoBuild"}},
    )
    registry = Registry(path=[str(root)])
    assert registry.command("hello").help == "say hello"
    with pytest.raises(PluginError, match="configure"):
        registry.command("bad")
    with pytest.raises(PluginError, match="no command named 'nope'"):
        registry.command("nope")


@pytest.mark.parametrize(
    ("target", "fragment"),
    [("NoModel", "no config_model"), ("NoBuild", "no build"), ("Missing", "could not be loaded")],
)
def test_objects_that_are_not_factories_are_refused(
    plugin_dir: tuple[Path, str], target: str, fragment: str
) -> None:
    root, module = plugin_dir
    install_dist(root, "acme-bad", entry_points={"spate.sinks": {"bad": f"{module}:{target}"}})
    with pytest.raises(PluginError, match=fragment) as info:
        Registry(path=[str(root)]).factory("sink", "bad")
    assert "acme-bad" in str(info.value)


def test_a_plugin_whose_module_is_missing_fails_naming_its_distribution(tmp_path: Path) -> None:
    install_dist(
        tmp_path, "acme-gone", "0.9", entry_points={"spate.sources": {"gone": "no_such_mod:F"}}
    )
    with pytest.raises(PluginError) as info:
        Registry(path=[str(tmp_path)]).factory("source", "gone")
    message = str(info.value)
    assert "acme-gone 0.9" in message
    assert "ModuleNotFoundError" in message


def test_two_distributions_declaring_one_name_is_an_error(plugin_dir: tuple[Path, str]) -> None:
    root, module = plugin_dir
    for dist in ("acme-a", "acme-b"):
        install_dist(root, dist, entry_points={"spate.sinks": {"dup": f"{module}:EchoFactory"}})
    with pytest.raises(PluginError, match="more than one package"):
        Registry(path=[str(root)]).factory("sink", "dup")


def _hint(dist: str, extra: str) -> str:
    return (
        f"install {dist} (the front door's extra spate[{extra}]); spate is not on the "
        f'public package index yet, so from a spate checkout: pip install "./packages/{dist}"'
    )


def test_b26_missing_connector_hint_comes_from_the_front_door_extras(tmp_path: Path) -> None:
    install_front_door(tmp_path)
    registry = Registry(path=[str(tmp_path)])
    with pytest.raises(MissingConnectorError) as info:
        registry.factory("sink", "clickhouse", path="sinks.payments.clickhouse")
    assert str(info.value) == (
        "sinks.payments.clickhouse: no sink named 'clickhouse' is installed; "
        + _hint("spate-clickhouse", "clickhouse")
    )
    assert isinstance(info.value, ImportError)
    assert (info.value.kind, info.value.name) == ("sink", "clickhouse")
    assert info.value.path == "sinks.payments.clickhouse"
    hints = {
        ("source", "kafka"): _hint("spate-kafka", "kafka"),
        ("deserializer", "avro"): _hint("spate-avro", "avro"),
        ("source", "s3"): _hint("spate-s3", "s3"),
        ("source", "datagen"): _hint("spate-datagen", "datagen"),
        ("coordination_store", "nats"): _hint("spate-coordination[nats]", "coordination-nats"),
        ("coordination_store", "memory"): _hint("spate-coordination", "coordination"),
        ("sink", "nosuchthing"): None,
    }
    for (kind, name), hint in hints.items():
        assert registry.install_hint(kind, name) == hint, (kind, name)


def test_b26_a_distribution_only_reachable_through_an_extra_is_found(tmp_path: Path) -> None:
    """A connector named unlike any extra maps through ``spate-<name>`` in the requirements."""
    install_dist(
        tmp_path,
        "spate",
        "0.1.0",
        extras=["warehouse"],
        requires=['spate-iceberg==0.1.0; extra == "warehouse"'],
    )
    registry = Registry(path=[str(tmp_path)])
    assert registry.install_hint("sink", "iceberg") == _hint("spate-iceberg", "warehouse")


def test_b26_without_the_front_door_the_hint_names_only_known_distributions(
    tmp_path: Path,
) -> None:
    registry = Registry(path=[str(tmp_path)])
    with pytest.raises(MissingConnectorError) as info:
        registry.factory("source", "kafka")
    assert info.value.install == _hint("spate-kafka", "kafka")
    assert registry.install_hint("coordination_store", "nats") == _hint(
        "spate-coordination[nats]", "coordination-nats"
    )
    # A name no spate distribution provides gets no install command (it could be anybody's).
    assert registry.install_hint("sink", "iceberg") is None


def test_b26_the_builtin_extras_table_matches_the_front_door() -> None:
    declared = {
        extra: tuple(sorted({r.split("==")[0].split("[")[0] for r in reqs}))
        for extra, reqs in front_door_extras().items()
    }
    assert {k: tuple(sorted(set(v))) for k, v in FRONT_DOOR_EXTRAS.items()} == declared


@pytest.mark.parametrize("front_door", [True, False])
@pytest.mark.parametrize(
    ("kind", "typo", "close"),
    [
        ("source", "kafak", "kafka"),
        # An extra (clickhouse-embedded) is no sink: never offered for one.
        ("sink", "clickhouse-embeded", "clickhouse"),
    ],
)
def test_b26_b45_a_typo_gets_did_you_mean_and_no_install_command(
    tmp_path: Path, front_door: bool, kind: str, typo: str, close: str
) -> None:
    if front_door:
        install_front_door(tmp_path)
    registry = Registry(path=[str(tmp_path)])
    with pytest.raises(MissingConnectorError) as info:
        registry.factory(kind, typo, path=f"{kind}.{typo}")
    assert info.value.install is None
    assert str(info.value) == (
        f"{kind}.{typo}: no {kind} named '{typo}' is installed; did you mean '{close}'?"
    )
    assert "pip install" not in str(info.value)


def test_b26_b45_an_unknown_name_lists_the_installed_ones(plugin_dir: tuple[Path, str]) -> None:
    root, module = plugin_dir
    install_dist(root, "acme-x", entry_points={"spate.sinks": {"echo": f"{module}:EchoFactory"}})
    with pytest.raises(MissingConnectorError) as info:
        Registry(path=[str(root)]).factory("sink", "zzzzqqq")
    assert str(info.value) == "no sink named 'zzzzqqq' is installed (installed: echo)"


def test_unknown_kind_is_refused(tmp_path: Path) -> None:
    with pytest.raises(PluginError, match="unknown plugin kind"):
        Registry(path=[str(tmp_path)]).factory("widget", "x")


def test_b26_did_you_mean_names_only_connectors_of_that_kind(tmp_path: Path) -> None:
    """Extras (``clickhouse-embedded``, ``columnar``) are not connectors."""
    install_front_door(tmp_path)
    registry = Registry(path=[str(tmp_path)])
    assert registry.suggestions("sink", "clickhous") == ["clickhouse"]
    assert registry.suggestions("deserializer", "avr") == ["avro"]
    assert "columnar" not in registry.suggestions("source", "columnr")


def test_b26_no_install_hint_for_a_distribution_already_installed(tmp_path: Path) -> None:
    """spate-clickhouse installed does not provide a sink ``embedded``: installing it
    again cannot help, so the error offers no install command."""
    install_front_door(tmp_path)
    install_dist(
        tmp_path,
        "spate-clickhouse",
        "0.1.0",
        entry_points={"spate.sinks": {"clickhouse": "spate_clickhouse:ClickHouseSinkFactory"}},
    )
    registry = Registry(path=[str(tmp_path)])
    assert registry.install_hint("sink", "embedded") is None
    with pytest.raises(MissingConnectorError) as info:
        registry.factory("sink", "embedded", path="sink.embedded")
    assert "pip install" not in str(info.value)
    assert str(info.value).startswith("sink.embedded: no sink named 'embedded' is installed")
    # A connector of a distribution that is not installed still gets its hint.
    assert registry.install_hint("sink", "parquet") == _hint("spate-parquet", "parquet")


def test_b26_the_builtin_connectors_table_matches_the_distributions() -> None:
    declared: dict[str, dict[str, str]] = {}
    for pyproject in sorted((REPO_ROOT / "packages").glob("*/pyproject.toml")):
        project = tomllib.loads(pyproject.read_text())["project"]
        for group, entries in project.get("entry-points", {}).items():
            kind = group.removeprefix("spate.").removesuffix("s")
            if group.startswith("spate.") and group != "spate.commands":
                for name in entries:
                    declared.setdefault(kind, {})[name] = project["name"]
    assert declared == SPATE_CONNECTORS
