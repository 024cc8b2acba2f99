"""B22: the admin server's endpoints, ``listen: none`` and port 0; B134: its default
address (loopback) and a taken port."""

from __future__ import annotations

import socket
import urllib.error
import urllib.request

import pytest
from spate.admin import AdminServer, healthz, parse_listen, readyz
from spate.config import parse_config
from spate.config.models import AdminConfig
from spate.errors import ConfigError
from spate.metrics import Meter, names


class _Health:
    def __init__(self) -> None:
        self.ready = (False, "no lanes assigned yet")
        self.alive = (True, "alive")
        self.asked_stall: list[float] = []

    def readiness(self) -> tuple[bool, str]:
        return self.ready

    def liveness(self, stall_after: float) -> tuple[bool, str]:
        self.asked_stall.append(stall_after)
        return self.alive


class _Broken:
    def readiness(self) -> tuple[bool, str]:
        raise RuntimeError("boom")

    def liveness(self, stall_after: float) -> tuple[bool, str]:
        raise RuntimeError("boom")


def _get(url: str) -> tuple[int, str, str]:
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            return response.status, response.headers["Content-Type"], response.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.headers["Content-Type"], exc.read().decode()


@pytest.fixture
def served() -> tuple[AdminServer, _Health, Meter]:
    meter = Meter("admin-test")
    health = _Health()
    server = AdminServer("127.0.0.1:0", registry=meter.registry, stall_after=12.5, pipeline="t")
    server.start(health)
    yield server, health, meter
    server.stop()


def test_b22_port_zero_binds_a_free_port_and_reports_it(
    served: tuple[AdminServer, _Health, Meter],
) -> None:
    server, _, _ = served
    assert server.port is not None and server.port > 0
    assert server.url == f"http://127.0.0.1:{server.port}"


def test_b22_readyz_follows_readiness(served: tuple[AdminServer, _Health, Meter]) -> None:
    server, health, _ = served
    status, _, body = _get(f"{server.url}/readyz")
    assert (status, body) == (503, "not ready: no lanes assigned yet\n")
    health.ready = (True, "ready")
    assert _get(f"{server.url}/readyz")[0] == 200


def test_b22_healthz_turns_503_when_progress_stops(
    served: tuple[AdminServer, _Health, Meter],
) -> None:
    server, health, _ = served
    assert _get(f"{server.url}/healthz")[0] == 200
    health.alive = (False, "pipeline thread made no progress for 31.0s")
    status, _, body = _get(f"{server.url}/healthz")
    assert status == 503
    assert "no progress" in body
    assert health.asked_stall[-1] == 12.5


def test_b23_metrics_serves_the_pipeline_registry(
    served: tuple[AdminServer, _Health, Meter],
) -> None:
    server, _, meter = served
    meter.counter(
        names.SOURCE_RECORDS, component="source", component_type="memory", lane="m[0]"
    ).inc(4)
    status, content_type, body = _get(f"{server.url}/metrics")
    assert status == 200
    assert content_type.startswith("text/plain")
    assert (
        'spate_source_records_total{component="source",component_type="memory",'
        'lane="m[0]",pipeline="admin-test"} 4.0'
    ) in body
    assert "_created" not in body  # no creation-timestamp series next to every counter
    assert "spate_coordination_" not in body  # not a coordinated pipeline
    assert _get(f"{server.url}/nothing")[0] == 404


def test_b22_metrics_is_404_when_the_exporter_is_none() -> None:
    server = AdminServer("127.0.0.1:0", registry=None)
    server.start()
    try:
        assert _get(f"{server.url}/metrics")[0] == 404
        # No health view attached: alive, but never ready.
        assert _get(f"{server.url}/healthz")[0] == 200
        assert _get(f"{server.url}/readyz")[0] == 503
    finally:
        server.stop()


def test_b22_listen_none_binds_nothing() -> None:
    server = AdminServer("none", registry=Meter("n").registry)
    server.start(_Health())
    assert not server.enabled
    assert server.port is None and server.url is None
    server.stop()


def test_b22_stop_releases_the_port() -> None:
    server = AdminServer("127.0.0.1:0", registry=None)
    server.start()
    port = server.port
    server.stop()
    assert server.port is None
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", port))  # free again


def test_b29_a_port_in_use_fails_naming_admin_listen() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        server = AdminServer(f"127.0.0.1:{port}", registry=None)
        with pytest.raises(ConfigError) as info:
            server.start()
    assert info.value.path == "admin.listen"
    assert f"127.0.0.1:{port}" in str(info.value)


def test_b22_probes_answer_even_when_the_health_view_raises() -> None:
    assert healthz(_Broken(), 30.0)[0] == 503
    assert readyz(_Broken())[0] == 503
    assert "boom" in readyz(_Broken())[1]


@pytest.mark.parametrize(
    ("listen", "expected"),
    [
        ("0.0.0.0:9090", ("0.0.0.0", 9090)),
        ("127.0.0.1:0", ("127.0.0.1", 0)),
        ("[::1]:8080", ("::1", 8080)),
        ("none", None),
    ],
)
def test_parse_listen(listen: str, expected: tuple[str, int] | None) -> None:
    assert parse_listen(listen) == expected


@pytest.mark.parametrize("listen", ["9090", "host:", ":80", "host:99999", "host:http"])
def test_parse_listen_refuses_bad_addresses(listen: str) -> None:
    with pytest.raises(ConfigError, match=r"admin\.listen"):
        parse_listen(listen)


def test_b22_the_startup_log_names_the_address_actually_bound(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Bound to every interface, the log says 0.0.0.0 (and where to reach it locally)."""
    server = AdminServer("0.0.0.0:0", registry=None, pipeline="p")
    with caplog.at_level("INFO", logger="spate.admin"):
        server.start()
    try:
        port = server.port
        lines = [r.getMessage() for r in caplog.records if "listening" in r.getMessage()]
        assert lines == [
            f"admin server listening on 0.0.0.0:{port}, reachable at http://127.0.0.1:{port} "
            "(pipeline=p)"
        ]
    finally:
        server.stop()


def test_b134_the_default_address_is_loopback() -> None:
    """``/metrics`` is not offered on every interface unless asked for."""
    listen = AdminConfig().listen
    assert listen == "127.0.0.1:9484"
    cfg = parse_config("source: {memory: {}}\nsink: {capture: {}}\n", check_connectors=False)
    assert cfg.admin.listen == listen


def _hold(address: tuple[str, int]) -> socket.socket | None:
    """Listen on ``address`` if it is free; None when another process holds it already."""
    held = socket.socket()
    try:
        held.bind(address)
    except OSError:
        held.close()
        return None
    held.listen()
    return held


def test_b134_the_default_port_taken_chooses_a_free_one_and_says_so(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A second instance on one host starts, on a free port it names in a warning."""
    held = _hold(("127.0.0.1", 9484))  # or someone else's process holds it: taken either way
    try:
        server = AdminServer(AdminConfig().listen, registry=None, pipeline="second")
        with caplog.at_level("INFO", logger="spate.admin"):
            server.start()
        try:
            port = server.port
            assert port is not None and port != 9484
            warnings = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
            assert len(warnings) == 1
            assert "127.0.0.1:9484 is taken" in warnings[0]
            assert f"127.0.0.1:{port}" in warnings[0] and "admin.listen" in warnings[0]
            assert _get(f"http://127.0.0.1:{port}/healthz")[0] in (200, 503)
        finally:
            server.stop()
    finally:
        if held is not None:
            held.close()


def test_b134_a_chosen_port_taken_fails_with_the_fix() -> None:
    """An address written in the configuration is kept or refused, never moved."""
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(ConfigError) as info:
            AdminServer(f"127.0.0.1:{port}", registry=None).start()
    assert info.value.path == "admin.listen"
    message = str(info.value)
    assert f"127.0.0.1:{port}" in message
    assert "another spate" in message and "port 0" in message
