"""The ``avro`` config model (B17) and the entry point that names its factory (B27)."""

from __future__ import annotations

from importlib.metadata import entry_points
from pathlib import Path
from typing import Any

import pytest
import yaml
from spate import ConfigError, ErrorPolicy
from spate.config import decode
from spate.plugins import ComponentFactory
from spate_avro import AvroConfig, AvroDeserializerFactory, RawAvroDeserializer

SEED_SECTION = """
deserializer:
  avro:
    mode: raw
    schema:
      inline: |
        [
          {"type":"record","name":"OrderPlaced","namespace":"spate.datagen","fields":[
            {"name":"order_id","type":"long"},
            {"name":"customer_id","type":"int"},
            {"name":"region","type":"string"},
            {"name":"placed_at","type":{"type":"long","logicalType":"timestamp-millis"}},
            {"name":"lines","type":{"type":"array","items":
              {"type":"record","name":"OrderLine","fields":[
                {"name":"sku","type":"string"},
                {"name":"qty","type":"int"},
                {"name":"unit_cents","type":"int"}]}}}]},
          {"type":"record","name":"PaymentCaptured","namespace":"spate.datagen","fields":[
            {"name":"order_id","type":"long"},
            {"name":"amount_cents","type":"long"}]},
          {"type":"record","name":"RefundIssued","namespace":"spate.datagen","fields":[
            {"name":"order_id","type":"long"},
            {"name":"amount_cents","type":"long"},
            {"name":"reason","type":"string"}]}
        ]
"""


def test_the_example_deserializer_section_builds(kit: Any) -> None:
    body = yaml.safe_load(SEED_SECTION)["deserializer"]["avro"]
    deser = kit.build(body)
    assert isinstance(deser, RawAvroDeserializer)
    event = ("spate.datagen.RefundIssued", {"order_id": 9, "amount_cents": 1, "reason": "x"})
    assert deser.deserialize(memoryview(kit.encode(kit.union, event))) == event


def test_defaults() -> None:
    config = decode(AvroConfig, {"registry": {"url": "http://registry:8081"}}, "d.avro")
    assert config.mode == "confluent"
    assert config.on_error is ErrorPolicy.SKIP
    assert config.negative_cache_ttl == 300.0
    assert config.fetch_wait == 0.5
    assert config.unknown_schema_timeout == 300.0
    assert config.on_unknown_schema is ErrorPolicy.FAIL  # never skipped unless opted in
    assert config.registry is not None and config.registry.timeout == 5.0
    assert (config.registry.retry_backoff, config.registry.retry_backoff_max) == (1.0, 30.0)


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ({}, r"d\.avro\.registry: required in confluent mode"),
        ({"mode": "raw"}, r"d\.avro\.schema: required in raw mode"),
        ({"mode": "raw", "schema": {}}, r"d\.avro\.schema: give exactly one of inline or path"),
        (
            {"mode": "raw", "schema": {"inline": "{}", "path": "x"}},
            r"d\.avro\.schema: give exactly one",
        ),
        ({"mode": "avro"}, r"d\.avro\.mode: expected one of confluent, raw, single_object"),
        ({"mode": "raw", "schema": {"inline": "1"}, "on_error": "drop"}, r"on_error: expected"),
        (
            {"mode": "raw", "schema": {"inline": '"int"'}, "registry": {"url": "http://r"}},
            r"d\.avro\.registry: only used in confluent mode",
        ),
        ({"registry": {"url": "r:8081"}}, r"d\.avro\.registry\.url: must start with http"),
        ({"registry": {}}, r"d\.avro\.registry\.url: required key is missing"),
        ({"registry": {"url": "http://r", "urll": 1}}, r"d\.avro\.registry\.urll: unknown key"),
        (
            {"registry": {"url": "http://r"}, "schema": {"inline": '"int"'}},
            r"d\.avro\.schema: not used in confluent mode",
        ),
        (
            {"mode": "raw", "schema": {"inline": '"int"'}, "writer_schemas": [{"inline": "1"}]},
            r"writer_schemas: only used in single_object mode",
        ),
        (
            {"registry": {"url": "http://r"}, "negative_cache_ttl": "-1s"},
            r"negative_cache_ttl",
        ),
        (
            {"registry": {"url": "http://r"}, "unknown_schema_timeout": "-1s"},
            r"d\.avro\.unknown_schema_timeout: expected a duration",
        ),
        (
            {"registry": {"url": "http://r"}, "on_unknown_schema": "drop"},
            r"d\.avro\.on_unknown_schema: expected",
        ),
        (
            {"registry": {"url": "http://r", "retry_backoff": "5s", "retry_backoff_max": "1s"}},
            r"d\.avro\.registry\.retry_backoff_max: must not be less than retry_backoff",
        ),
    ],
)
def test_config_errors_name_the_dotted_key_b17(raw: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        decode(AvroConfig, raw, "d.avro")


def test_entry_point_names_the_factory_b27() -> None:
    (entry,) = [e for e in entry_points(group="spate.deserializers") if e.name == "avro"]
    factory = entry.load()
    assert factory is AvroDeserializerFactory
    assert isinstance(factory, ComponentFactory)
    assert factory.config_model is AvroConfig


def test_pyproject_declares_the_entry_point() -> None:
    text = (Path(__file__).parents[1] / "pyproject.toml").read_text()
    assert 'avro = "spate_avro:AvroDeserializerFactory"' in text
