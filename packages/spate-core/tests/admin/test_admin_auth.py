"""B68: the admin server's default port and the optional credentials of ``/metrics``."""

from __future__ import annotations

import base64
import urllib.error
import urllib.request
from collections.abc import Iterator

import pytest
from spate import Secret
from spate.admin import AdminServer
from spate.config import AdminConfig, decode, parse_config
from spate.config.models import MetricsAuthConfig
from spate.errors import ConfigError
from spate.metrics import Meter


class _Health:
    def readiness(self) -> tuple[bool, str]:
        return True, "ready"

    def liveness(self, stall_after: float) -> tuple[bool, str]:
        return True, "alive"


def _get(url: str, authorization: str | None = None) -> tuple[int, str]:
    headers = {"Authorization": authorization} if authorization else {}
    try:
        with urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=5) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.headers.get("WWW-Authenticate", "")


def _basic(user: str, password: str) -> str:
    return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()


@pytest.fixture
def guarded() -> Iterator[str]:
    auth = MetricsAuthConfig(user="prom", password=Secret("pw-1234"), token=Secret("tok-5678"))
    server = AdminServer("127.0.0.1:0", registry=Meter("auth").registry, metrics_auth=auth)
    server.start(_Health())
    assert server.url is not None
    yield server.url
    server.stop()


def test_b68_default_port_is_not_prometheus_9090() -> None:
    listen = AdminConfig().listen
    assert listen.endswith(":9484") and not listen.endswith(":9090")
    cfg = parse_config("source: {memory: {}}\nsink: {capture: {}}\n", check_connectors=False)
    assert cfg.admin.listen == listen


def test_b68_metrics_answer_401_without_the_credentials(guarded: str) -> None:
    status, challenge = _get(guarded + "/metrics")
    assert status == 401 and challenge.startswith("Basic")
    assert _get(guarded + "/metrics", _basic("prom", "wrong"))[0] == 401
    assert _get(guarded + "/metrics", "Bearer wrong")[0] == 401
    assert _get(guarded + "/metrics", "Basic !!notbase64")[0] == 401


def test_b68_metrics_answer_with_basic_auth_or_the_bearer_token(guarded: str) -> None:
    assert _get(guarded + "/metrics", _basic("prom", "pw-1234"))[0] == 200
    assert _get(guarded + "/metrics", "Bearer tok-5678")[0] == 200


def test_b68_probes_stay_open_for_the_kubelet(guarded: str) -> None:
    assert _get(guarded + "/healthz")[0] == 200
    assert _get(guarded + "/readyz")[0] == 200


def test_b68_basic_auth_needs_user_and_password_together() -> None:
    with pytest.raises(ConfigError, match=r"admin\.metrics_auth\.user"):
        decode(AdminConfig, {"metrics_auth": {"user": "prom"}}, "admin")
    decoded = decode(AdminConfig, {"metrics_auth": {"token": "tok-5678"}}, "admin")
    assert isinstance(decoded.metrics_auth.token, Secret)
    assert "tok-5678" not in repr(decoded)
