"""B17 and B29: strict loading, defaults, cross-field rules and dotted-path errors."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest
from spate.config import (
    AdminConfig,
    BackpressureConfig,
    CheckpointConfig,
    PipelineSection,
    load_config,
    parse_config,
)
from spate.config._decode import ByteSize, Duration
from spate.errors import ConfigError, MissingConnectorError

BASE = """\
source:
  memory:
    partitions: 2
sink:
  capture: {}
"""


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class _Batch:
    max_rows: int = 1000
    linger: Duration = 1.0


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class _SinkModel:
    table: str = "t"
    max_bytes: ByteSize = 1024
    batch: _Batch = dataclasses.field(default_factory=_Batch)


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class _SourceModel:
    partitions: int = 1


class _Models:
    """A resolver with two connectors, standing in for the registry's model lookup."""

    def config_model(self, kind: str, name: str, path: str) -> type[Any]:
        table: dict[tuple[str, str], type[Any]] = {
            ("source", "memory"): _SourceModel,
            ("sink", "capture"): _SinkModel,
        }
        try:
            return table[(kind, name)]
        except KeyError:
            raise MissingConnectorError(kind, name, f"install spate-{name}", path=path) from None


def _parse(text: str, **kwargs: Any) -> Any:
    return parse_config(text, env=kwargs.pop("env", {}), resolver=_Models(), **kwargs)


def test_b17_defaults_apply_to_every_framework_section() -> None:
    cfg = _parse(BASE)
    assert cfg.pipeline == PipelineSection()
    assert cfg.checkpoint == CheckpointConfig()
    assert cfg.backpressure == BackpressureConfig()
    assert cfg.admin == AdminConfig()
    assert cfg.metrics.exporter == "prometheus"
    assert cfg.pipeline.name == "spate"
    assert cfg.checkpoint.interval == 5.0
    assert cfg.backpressure.max_inflight_bytes == 256 * 1024**2
    assert cfg.admin.listen == "127.0.0.1:9484"


def test_b17_connector_bodies_are_decoded_by_their_models() -> None:
    text = BASE.replace("capture: {}", "capture:\n    max_bytes: 2KiB\n    batch: {linger: 250ms}")
    cfg = _parse(text)
    assert cfg.source.config == _SourceModel(partitions=2)
    sink = cfg.sinks["sink"]
    # The single sink's logs and metrics carry its connector's name, not "sink".
    assert (sink.tag, sink.component, sink.path) == ("capture", "capture", "sink.capture")
    assert sink.config == _SinkModel(max_bytes=2048, batch=_Batch(linger=0.25))
    assert cfg.sinks_map is False
    assert cfg.deserializer is None


def test_b17_unknown_key_in_a_connector_names_the_dotted_path_and_line() -> None:
    text = """\
source:
  memory: {}
sinks:
  payments:
    capture:
      batch:
        max_rowz: 5
"""
    with pytest.raises(ConfigError) as info:
        _parse(text, file="split.yaml")
    err = info.value
    assert err.path == "sinks.payments.capture.batch.max_rowz"
    assert err.message.startswith("unknown key; did you mean 'max_rows'? (expected one of ")
    assert (err.line, err.column) == (7, 9)
    assert str(err).startswith(
        "split.yaml:7:9: sinks.payments.capture.batch.max_rowz: unknown key; did you mean"
    )


@pytest.mark.parametrize(
    ("body", "meant"),
    [("batch:\n      max_row: 5", "max_rows"), ("tabel: x", "table"), ("max_byte: 1", "max_bytes")],
)
def test_b17_b45_unknown_key_offers_the_close_valid_key(body: str, meant: str) -> None:
    text = f"source:\n  memory: {{}}\nsink:\n  capture:\n    {body}\n"
    with pytest.raises(ConfigError) as info:
        _parse(text)
    assert f"did you mean {meant!r}?" in info.value.message
    assert meant in info.value.message.partition("expected one of ")[2]


def test_b17_unknown_top_level_key_offers_the_close_section() -> None:
    with pytest.raises(ConfigError) as info:
        _parse(BASE + "checkpiont: {}\n")
    assert "did you mean 'checkpoint'?" in info.value.message


@pytest.mark.parametrize(
    ("extra", "path", "fragment"),
    [
        ("pipeline:\n  nmae: x\n", "pipeline.nmae", "unknown key"),
        ("checkpoint:\n  interval: 50ms\n", "checkpoint.interval", "at least 100ms"),
        ("checkpoint:\n  interval: 5\n", "checkpoint.interval", "unit"),
        ("backpressure:\n  low_ratio: 0.95\n", "backpressure.low_ratio", "less than high"),
        ("backpressure:\n  high_ratio: 1.5\n", "backpressure.high_ratio", "(0, 1]"),
        ("backpressure:\n  max_inflight_bytes: 1 GB\n", "backpressure.max_inflight_bytes", ""),
        ("backpressure:\n  max_inflight_bytes: lots\n", "backpressure.max_inflight_bytes", "size"),
        ("admin:\n  listen: nowhere\n", "admin.listen", "host:port"),
        ("metrics:\n  exporter: statsd\n", "metrics.exporter", "prometheus, none"),
        ("pipeline:\n  io_threads: 0\n", "pipeline.io_threads", "at least 1"),
        ("sourcez: {}\n", "sourcez", "unknown key"),
        ("deserializer: [avro]\n", "deserializer", "single-key mapping"),
    ],
)
def test_b17_invalid_values_are_refused_with_their_path(
    extra: str, path: str, fragment: str
) -> None:
    text = BASE + extra
    if path == "backpressure.max_inflight_bytes" and not fragment:
        # "1 GB" is a valid decimal size: the control case that must load.
        assert _parse(text).backpressure.max_inflight_bytes == 10**9
        return
    with pytest.raises(ConfigError) as info:
        _parse(text)
    assert info.value.path == path
    assert fragment in info.value.message


def test_b17_exactly_one_of_sink_and_sinks() -> None:
    both = BASE + "sinks:\n  a:\n    capture: {}\n"
    with pytest.raises(ConfigError) as info:
        _parse(both)
    assert info.value.path == "sinks"
    assert "not both" in info.value.message
    neither = "source:\n  memory: {}\n"
    with pytest.raises(ConfigError) as info:
        _parse(neither)
    assert info.value.path == "sink"


@pytest.mark.parametrize("name", ["sink", "''", '" "'])
def test_b17_reserved_sink_names_are_refused(name: str) -> None:
    text = f"source:\n  memory: {{}}\nsinks:\n  {name}:\n    capture: {{}}\n"
    with pytest.raises(ConfigError, match="reserved"):
        _parse(text)


def test_b17_sinks_map_keeps_names_and_requires_a_chain_flag() -> None:
    text = "source:\n  memory: {}\nsinks:\n  a:\n    capture: {}\n  b:\n    capture: {table: x}\n"
    cfg = _parse(text)
    assert list(cfg.sinks) == ["a", "b"]
    assert cfg.sinks_map is True
    assert cfg.sinks["b"].path == "sinks.b.capture"
    assert cfg.sinks["b"].config == _SinkModel(table="x")
    assert [spec.component for spec in cfg.connectors()] == ["source", "a", "b"]


def test_b17_empty_sinks_map_and_missing_source_are_refused() -> None:
    with pytest.raises(ConfigError, match="at least one"):
        _parse("source:\n  memory: {}\nsinks: {}\n")
    with pytest.raises(ConfigError) as info:
        _parse("sink:\n  capture: {}\n")
    assert info.value.path == "source"


def test_b17_a_connector_section_needs_exactly_one_key() -> None:
    with pytest.raises(ConfigError) as info:
        _parse("source:\n  memory: {}\n  kafka: {}\nsink:\n  capture: {}\n")
    assert info.value.path == "source"
    assert "2 keys" in info.value.message


def test_b17_duplicate_keys_are_refused() -> None:
    with pytest.raises(ConfigError) as info:
        _parse(BASE + "pipeline:\n  name: a\n  name: b\n", file="d.yaml")
    assert info.value.path == "pipeline.name"
    assert info.value.message == "duplicate key"
    assert info.value.line == 8


def test_b17_yaml_syntax_errors_name_file_line_and_column() -> None:
    with pytest.raises(ConfigError) as info:
        _parse("source:\n  memory: [unclosed\n", file="bad.yaml")
    assert info.value.file == "bad.yaml"
    assert info.value.line is not None
    assert "invalid YAML" in str(info.value)


def test_b17_empty_and_non_mapping_documents_are_refused() -> None:
    with pytest.raises(ConfigError, match="empty"):
        _parse("")
    with pytest.raises(ConfigError, match="mapping"):
        _parse("- a\n- b\n")


def test_b26_missing_connector_names_path_and_install_command() -> None:
    with pytest.raises(MissingConnectorError) as info:
        _parse(BASE.replace("capture: {}", "clickhouse: {}"))
    assert str(info.value) == (
        "sink.clickhouse: no sink named 'clickhouse' is installed; install spate-clickhouse"
    )


def test_b29_unreadable_file_names_the_file(tmp_path: Path) -> None:
    missing = tmp_path / "nope.yaml"
    with pytest.raises(ConfigError) as info:
        load_config(missing, check_connectors=False)
    assert info.value.file == str(missing)
    assert "cannot read" in str(info.value)


def test_b17_load_config_reads_a_file_and_keeps_its_name(tmp_path: Path) -> None:
    path = tmp_path / "p.yaml"
    path.write_text(BASE + "coordination:\n  store: {memory: {}}\n", encoding="utf-8")
    cfg = load_config(path, env={}, resolver=_Models())
    assert cfg.file == str(path)
    assert cfg.coordination == {"store": {"memory": {}}}


TOML_BASE = """\
[pipeline]
name = "${NAME:-toml-pipeline}"

[checkpoint]
interval = "250ms"

[source.memory]
partitions = 2

[sink.capture]
max_bytes = "${MAX_BYTES}"
batch = {max_rows = 10}
"""


def test_b17_b18_a_toml_file_is_loaded_interpolated_and_decoded_like_yaml(
    tmp_path: Path,
) -> None:
    path = tmp_path / "p.toml"
    path.write_text(TOML_BASE, encoding="utf-8")
    cfg = load_config(path, env={"MAX_BYTES": "2KiB"}, resolver=_Models())
    assert cfg.file == str(path)
    assert cfg.pipeline.name == "toml-pipeline"
    assert cfg.checkpoint.interval == 0.25
    assert cfg.source.config == _SourceModel(partitions=2)
    assert cfg.sinks["sink"].config == _SinkModel(max_bytes=2048, batch=_Batch(max_rows=10))


def test_b17_a_toml_file_refuses_unknown_keys_with_their_dotted_path(tmp_path: Path) -> None:
    path = tmp_path / "p.toml"
    path.write_text(TOML_BASE.replace("partitions = 2", "partitons = 2"), encoding="utf-8")
    with pytest.raises(ConfigError) as info:
        load_config(path, env={"MAX_BYTES": "1KiB"}, resolver=_Models())
    assert info.value.path == "source.memory.partitons"
    assert info.value.file == str(path)


def test_b17_toml_syntax_errors_name_file_line_and_column(tmp_path: Path) -> None:
    path = tmp_path / "bad.toml"
    path.write_text("[source.memory]\npartitions = 2\n[sink.capture\n", encoding="utf-8")
    with pytest.raises(ConfigError) as info:
        load_config(path, env={}, resolver=_Models())
    assert info.value.file == str(path)
    assert info.value.line == 3
    assert info.value.column is not None
    assert "invalid TOML" in str(info.value)
    assert "(at line" not in str(info.value)


def test_b17_a_yaml_file_is_not_read_as_toml(tmp_path: Path) -> None:
    path = tmp_path / "p.yaml"
    path.write_text(BASE, encoding="utf-8")
    assert load_config(path, env={}, resolver=_Models()).source.config == _SourceModel(partitions=2)
