"""The ``source: {s3: ...}`` model: strict decoding, URL rules, defaults (B17, B29)."""

from __future__ import annotations

import pytest
from spate.config import decode
from spate.errors import ConfigError
from spate_s3 import S3SourceConfig, S3SourceFactory, parse_url

from tests.s3.s3kit import build_context


def test_urls_name_a_bucket_and_prefix_or_a_local_directory() -> None:
    loc = parse_url("s3://data/events/2024/")
    assert (loc.scheme, loc.bucket, loc.prefix) == ("s3", "data", "events/2024/")
    assert parse_url("s3://data").prefix == ""
    local = parse_url("file:///var/lib/dump/")
    assert (local.scheme, local.bucket, local.prefix) == ("file", "/var/lib/dump", "")


@pytest.mark.parametrize(
    ("body", "path", "message"),
    [
        ({"url": "http://x/y"}, "source.s3.url", "s3:// or file://"),
        ({"url": "s3:///prefix"}, "source.s3.url", "s3://bucket/prefix"),
        ({"url": "file://host/dir"}, "source.s3.url", "local directory"),
        ({"url": "s3://b/p", "framing": "csv"}, "source.s3.framing", ""),
        ({"url": "s3://b/p", "compression": "lz4"}, "source.s3.compression", ""),
        ({"url": "s3://b/p", "prefetch_bytes": "1KiB"}, "source.s3.prefetch_bytes", "64KiB"),
        ({"url": "s3://b/p", "split_attempts": 0}, "source.s3.split_attempts", "at least 1"),
        ({"url": "s3://b/p", "endpoint_url": "localhost:9000"}, "source.s3.endpoint_url", ""),
        ({"url": "s3://b/p", "split_target": "1MiB"}, "source.s3.split_target", "unknown"),
        ({}, "source.s3.url", ""),
    ],
)
def test_b17_bad_settings_are_refused_with_their_dotted_path(
    body: dict[str, object], path: str, message: str
) -> None:
    with pytest.raises(ConfigError) as info:
        decode(S3SourceConfig, body, "source.s3")
    assert info.value.path == path
    assert message in info.value.message


def test_units_and_defaults_apply() -> None:
    cfg = decode(
        S3SourceConfig,
        {"url": "s3://b/p/", "split_target_bytes": "64MiB", "prefetch_bytes": "1MiB"},
        "source.s3",
    )
    assert cfg.split_target_bytes == 64 * 1024 * 1024
    assert cfg.chunk_bytes == 1024 * 1024
    assert (cfg.compression, cfg.framing, cfg.refresh_listing) == ("auto", "ndjson", False)


def test_b24_factory_without_a_coordination_section_runs_alone_on_a_memory_store() -> None:
    cfg = decode(S3SourceConfig, {"url": "file:///tmp"}, "source.s3")
    source = S3SourceFactory.build(cfg, build_context(None))
    assert source.coordination_config.store_name == "memory"
    assert source.coordination_config.job == "s3-test"


def test_b17_factory_decodes_the_coordination_section_strictly() -> None:
    cfg = decode(S3SourceConfig, {"url": "file:///tmp"}, "source.s3")
    section = {"store": {"memory": {}}, "job": "j1", "lease_duraton": "5s"}
    with pytest.raises(ConfigError) as info:
        S3SourceFactory.build(cfg, build_context(section))
    assert info.value.path == "coordination.lease_duraton"
    source = S3SourceFactory.build(
        cfg, build_context({"store": {"memory": {}}, "job": "j1", "instance_id": "w1"})
    )
    assert source.coordination_config.instance_id == "w1"
