"""No registry thread or socket outlives a run, however the run ends (B31).

The Confluent deserializer fetches schemas on its own background thread; the pipeline
closes the deserializer when the run completes, fails, or could not be assembled, and
closing stops that thread. Each test compares the process's threads and sockets before
building the deserializer with what is left once the run is over.
"""

from __future__ import annotations

import json
import os
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from spate import ConfigError, SystemClock
from spate.config import parse_config
from spate.metrics._meter import Meter
from spate.pipeline import Pipeline
from spate.pipeline._builder import assemble
from spate.plugins import default_registry
from spate.testing import capture_sink, memory_source
from spate_avro import SchemaRegistryClient

from tests.support.schema_registry import SchemaRegistryServer

USER = {"type": "record", "name": "U", "fields": [{"name": "id", "type": "long"}]}


def _sockets() -> int:
    fd_dir = Path("/proc/self/fd")
    count = 0
    for fd in fd_dir.iterdir():
        try:
            count += os.readlink(fd).startswith("socket:")
        except OSError:
            continue
    return count


class Leaks:
    """Threads and sockets of the process, taken before a run and compared after it."""

    def __init__(self) -> None:
        self.threads = set(threading.enumerate())
        self.sockets = _sockets() if Path("/proc/self/fd").is_dir() else None

    def assert_none_left(self, timeout: float = 15.0) -> None:
        """Wait (generously) for threads and sockets to go back to what they were."""
        deadline = time.monotonic() + timeout
        while True:
            extra = [t.name for t in set(threading.enumerate()) - self.threads if t.is_alive()]
            sockets = _sockets() if self.sockets is not None else None
            more_sockets = (
                sockets is not None and self.sockets is not None and (sockets > self.sockets)
            )
            if not extra and not more_sockets:
                return
            if time.monotonic() > deadline:
                raise AssertionError(
                    f"left after the run: threads {extra}, sockets {sockets} (were {self.sockets})"
                )
            time.sleep(0.05)


def _deser_config(url: str, **extra: Any) -> dict[str, Any]:
    return {
        "mode": "confluent",
        "registry": {"url": url, "retry_backoff": "50ms"},
        "fetch_wait": "20ms",
        **extra,
    }


def _run(kit: Any, deser: Any, payloads: list[bytes], name: str) -> Any:
    source, _ = memory_source({0: payloads}, batch_size=3)
    sink, _ = capture_sink("out")
    return Pipeline(
        name, source, {"out": sink}, deserializer=deser, meter=Meter(name), handle_signals=False
    ).run()


def test_no_registry_thread_or_socket_outlives_a_completed_run_b31(
    kit: Any, schema_registry: SchemaRegistryServer
) -> None:
    schema_id = schema_registry.register("users-value", USER)
    payloads = [kit.confluent(schema_id, kit.encode(USER, {"id": i})) for i in range(10)]
    leaks = Leaks()
    deser = kit.build(_deser_config(schema_registry.url))
    report = _run(kit, deser, payloads, "close-completed")
    assert report.exit_code == 0, report.reason
    assert schema_registry.requests[f"GET /schemas/ids/{schema_id}"] == 1  # the thread ran
    assert deser.registry.closed
    leaks.assert_none_left()


def test_no_registry_thread_or_socket_outlives_a_failed_run_b31(
    kit: Any, schema_registry: SchemaRegistryServer
) -> None:
    payloads = [kit.confluent(404, kit.encode(USER, {"id": 1}))]
    leaks = Leaks()
    deser = kit.build(
        _deser_config(schema_registry.url, unknown_schema_timeout="100ms"), clock=SystemClock()
    )
    report = _run(kit, deser, payloads, "close-failed")
    assert report.exit_code == 1
    assert deser.registry.closed
    leaks.assert_none_left()


def _yaml(url: str, sink: dict[str, Any]) -> str:
    # Confluent framing of schema id 1 and the datum {"id": 1}: all bytes are ASCII, so the
    # memory source's text payloads can carry them.
    payload = "\x00\x00\x00\x00\x01\x02"
    return json.dumps(
        {
            "pipeline": {"name": "close-config"},
            "admin": {"listen": "none"},
            "source": {"memory": {"payloads": [payload] * 5}},
            "deserializer": {"avro": _deser_config(url)},
            "sink": sink,
        }
    )


def test_no_registry_thread_outlives_a_run_built_from_configuration_b31(
    schema_registry: SchemaRegistryServer, tmp_path: Path
) -> None:
    assert schema_registry.register("users-value", USER) == 1
    leaks = Leaks()
    out = tmp_path / "out.jsonl"
    cfg = parse_config(
        _yaml(schema_registry.url, {"file": {"path": str(out)}}),
        env={},
        resolver=default_registry(),
    )
    report = assemble(cfg, handle_signals=False).pipeline.run()
    assert report.exit_code == 0, report.reason
    assert len(out.read_text().splitlines()) == 5
    assert schema_registry.requests["GET /schemas/ids/1"] == 1
    leaks.assert_none_left()


def test_registry_client_is_closed_when_assembly_fails_after_the_deserializer_b31(
    schema_registry: SchemaRegistryServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The sink is built after the deserializer; when its factory refuses to build it,
    the deserializer built already is closed (its registry client with it)."""
    from spate.testing._factories import FileSinkFactory

    built: list[SchemaRegistryClient] = []
    probe = SchemaRegistryClient.probe

    def recording_probe(client: SchemaRegistryClient) -> None:
        built.append(client)
        probe(client)

    def refusing_build(config: object, context: object) -> object:
        raise ConfigError("sink.file.path", "cannot be written here")

    monkeypatch.setattr(SchemaRegistryClient, "probe", recording_probe)
    monkeypatch.setattr(FileSinkFactory, "build", staticmethod(refusing_build))
    leaks = Leaks()
    cfg = parse_config(
        _yaml(schema_registry.url, {"file": {"path": str(tmp_path / "o")}}),
        env={},
        check_connectors=False,
    )
    with pytest.raises(ConfigError, match="cannot be written here"):
        assemble(cfg, handle_signals=False)
    assert len(built) == 1 and built[0].closed
    leaks.assert_none_left()


def test_a_sink_section_in_error_fails_before_a_registry_client_is_built_b31(
    schema_registry: SchemaRegistryServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every sink section is decoded before anything is built (a sink may name another,
    ``late_data.to``): a section in error fails with no registry client made."""
    built: list[SchemaRegistryClient] = []
    probe = SchemaRegistryClient.probe

    def recording_probe(client: SchemaRegistryClient) -> None:
        built.append(client)
        probe(client)

    monkeypatch.setattr(SchemaRegistryClient, "probe", recording_probe)
    leaks = Leaks()
    cfg = parse_config(
        _yaml(schema_registry.url, {"file": {"path": str(tmp_path / "o"), "max_rows": 0}}),
        env={},
        check_connectors=False,
    )
    with pytest.raises(ConfigError, match="max_rows"):
        assemble(cfg, handle_signals=False)
    assert built == []
    leaks.assert_none_left()
