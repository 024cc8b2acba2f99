"""Pytest fixtures for the ClickHouse HTTP front: start replicas, inject faults, restart them.

``chfront`` (per test) and ``chfront_module`` (per test module) are factories: each call
starts one front process (one simulated replica, ~400 MB of chDB, a few seconds to start)
on a free port with its own data directory, and returns a ``ChFront`` handle; everything
started is stopped at teardown. Keep at most ~4 running at once.

    def test_failover(chfront):
        a, b = chfront(), chfront()
        a.inject("5xx", seconds=10)
        client = b.client()

The handle: ``url``, ``host``, ``port``, ``data_dir``; ``client(**kw)`` (clickhouse-connect
with the front's credentials); ``inject(mode, seconds=None, **options)`` and ``recover()``;
``status()``; ``stop(kill=False)`` / ``start()`` (the data directory and port are kept, so a
restart finds its tables and rows). A front that does not come up fails the test with the
tail of its log; it is never skipped. ``chfront(tls=make_pki(dir))`` serves HTTPS with
that PKI's server certificate (``url`` is then ``https://localhost:PORT``), and
``mutual=True`` also requires a client certificate.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.tls import Pki

REPO_ROOT = Path(__file__).resolve().parents[2]
START_TIMEOUT = 90.0


class ChFrontError(RuntimeError):
    """A front process did not start, stop or obey a control request."""


class ChFront:
    """Handle on one front process (one simulated ClickHouse replica)."""

    def __init__(
        self,
        data_dir: Path,
        *,
        host: str = "127.0.0.1",
        user: str = "default",
        password: str = "",
        display_name: str | None = None,
        tls: Pki | None = None,
        mutual: bool = False,
    ) -> None:
        self.tls = tls
        self.mutual = mutual
        self.data_dir = data_dir
        self.host = host
        self.user = user
        self.password = password
        self.display_name = display_name
        self.port = 0
        self.log_path = data_dir.parent / f"{data_dir.name}.log"
        self._proc: subprocess.Popen[bytes] | None = None
        self._last_mode = "none"

    @property
    def url(self) -> str:
        if self.tls is not None:
            return f"https://localhost:{self.port}"
        return f"http://{self.host}:{self.port}"

    def _ssl_context(self) -> ssl.SSLContext | None:
        if self.tls is None:
            return None
        context = ssl.create_default_context(cafile=str(self.tls.ca))
        if self.mutual:
            context.load_cert_chain(str(self.tls.client_cert), str(self.tls.client_key))
        return context

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None

    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def __repr__(self) -> str:
        return f"ChFront({self.url}, data_dir={self.data_dir})"

    # -- lifecycle -------------------------------------------------------------------------

    def start(self, timeout: float = START_TIMEOUT) -> ChFront:
        """Start the process (same data dir, and the same port after the first start)."""
        if self.running:
            return self
        self.data_dir.mkdir(parents=True, exist_ok=True)
        port_file = self.data_dir.parent / f"{self.data_dir.name}.port"
        port_file.unlink(missing_ok=True)
        cmd = [
            sys.executable,
            "-m",
            "tests.support.chfront",
            "--host",
            self.host,
            "--port",
            str(self.port),
            "--data-dir",
            str(self.data_dir),
            "--user",
            self.user,
            "--password",
            self.password,
            "--port-file",
            str(port_file),
        ]
        if self.display_name:
            cmd += ["--display-name", self.display_name]
        if self.tls is not None:
            cmd += ["--tls-cert", str(self.tls.server_cert), "--tls-key", str(self.tls.server_key)]
            if self.mutual:
                cmd += ["--tls-client-ca", str(self.tls.ca)]
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(
            p for p in (str(REPO_ROOT), env.get("PYTHONPATH", "")) if p
        )
        with open(self.log_path, "ab") as log:
            self._proc = subprocess.Popen(
                cmd, cwd=REPO_ROOT, env=env, stdout=log, stderr=subprocess.STDOUT
            )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                raise ChFrontError(
                    f"ClickHouse front exited with {self._proc.returncode} during start-up "
                    f"(port {self.port or 'auto'}); log tail:\n{self.log_tail()}"
                )
            if port_file.exists():
                self.port = int(port_file.read_text().strip())
                if self._ping():
                    return self
            time.sleep(0.1)
        self.stop(kill=True)
        raise ChFrontError(
            f"ClickHouse front at {self.host}:{self.port or 'auto'} not ready after {timeout:.0f}s;"
            f" log tail:\n{self.log_tail()}"
        )

    def stop(self, kill: bool = False, timeout: float = 30.0) -> None:
        """Stop the process: SIGTERM (clean) or, with ``kill``, SIGKILL (a crash)."""
        proc, self._proc = self._proc, None
        if proc is None or proc.poll() is not None:
            return
        if kill:
            proc.kill()
        else:
            proc.terminate()
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)

    def log_tail(self, lines: int = 30) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return "(no log)"
        return "\n".join(text.splitlines()[-lines:])

    # -- clients -------------------------------------------------------------------------

    def client(self, **kwargs: Any) -> Any:
        """A clickhouse-connect client for this front (keyword arguments override)."""
        import clickhouse_connect

        options: dict[str, Any] = {
            "host": self.host,
            "port": self.port,
            "username": self.user,
            "password": self.password,
        }
        if self.tls is not None:
            options.update(interface="https", host="localhost", ca_cert=str(self.tls.ca))
            if self.mutual:
                options.update(
                    client_cert=str(self.tls.client_cert),
                    client_cert_key=str(self.tls.client_key),
                    tls_mode="strict",
                )
        options.update(kwargs)
        return clickhouse_connect.get_client(**options)

    def _ping(self) -> bool:
        try:
            with urllib.request.urlopen(
                f"{self.url}/ping", timeout=2, context=self._ssl_context()
            ) as response:
                return bool(response.status == 200)
        except (OSError, urllib.error.URLError):
            return False

    def _control(self, action: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
        query = "&".join(f"{k}={v}" for k, v in (params or {}).items())
        url = f"{self.url}/__control/{action}" + (f"?{query}" if query else "")
        try:
            with urllib.request.urlopen(
                url, data=b"", timeout=10, context=self._ssl_context()
            ) as response:
                return dict(json.loads(response.read()))
        except urllib.error.HTTPError as exc:
            raise ChFrontError(f"control {action} {params}: {exc.read().decode()}") from exc
        except OSError as exc:
            raise ChFrontError(f"control endpoint {url} unreachable: {exc}") from exc

    # -- faults --------------------------------------------------------------------------

    def status(self) -> dict[str, Any]:
        """The front's counters and current fault (``/__control/status``)."""
        return self._control("status")

    def inject(self, mode: str, seconds: float | None = None, **options: Any) -> None:
        """Inject ``5xx``, ``slow``, ``drop`` or ``refuse``; options: ``count``, ``status``,
        ``code``, ``delay``, ``when`` (before/after), ``only`` (all/insert/query)."""
        params: dict[str, Any] = {"mode": mode, **options}
        if seconds is not None:
            params["seconds"] = seconds
        self._control("fault", params)
        self._last_mode = mode
        if mode == "refuse":
            deadline = time.monotonic() + 10
            while self._accepts() and time.monotonic() < deadline:
                time.sleep(0.02)

    def release(self) -> None:
        """Let every slow request held so far go on, also those a ``count`` fault held."""
        self._control("release")

    def recover(self, timeout: float = 10.0) -> None:
        """End the fault. A refusing front cannot be reached, so it gets SIGUSR1 instead."""
        if self._last_mode == "refuse" or not self._accepts():
            if self._proc is None:
                raise ChFrontError(f"front {self.url} is not running")
            self._proc.send_signal(signal.SIGUSR1)
            deadline = time.monotonic() + timeout
            while not self._ping():
                if time.monotonic() > deadline:
                    raise ChFrontError(f"front {self.url} did not listen again after recover")
                time.sleep(0.02)
        else:
            self._control("recover")
        self._last_mode = "none"

    def _accepts(self) -> bool:
        try:
            with socket.create_connection((self.host, self.port), timeout=1):
                return True
        except OSError:
            return False


FrontFactory = Callable[..., ChFront]


def _factory(base: Path) -> Iterator[FrontFactory]:
    started: list[ChFront] = []

    def make(
        *,
        user: str = "default",
        password: str = "",
        display_name: str | None = None,
        data_dir: Path | None = None,
        tls: Pki | None = None,
        mutual: bool = False,
    ) -> ChFront:
        name = f"replica{len(started)}"
        front = ChFront(
            data_dir or base / name,
            user=user,
            password=password,
            display_name=display_name,
            tls=tls,
            mutual=mutual,
        )
        started.append(front)
        return front.start()

    try:
        yield make
    finally:
        for front in started:
            front.stop()


@pytest.fixture
def chfront(tmp_path_factory: pytest.TempPathFactory) -> Iterator[FrontFactory]:
    """Factory of front processes stopped at the end of the test."""
    yield from _factory(tmp_path_factory.mktemp("chfront"))


@pytest.fixture(scope="module")
def chfront_module(tmp_path_factory: pytest.TempPathFactory) -> Iterator[FrontFactory]:
    """Factory of front processes shared by a test module (stopped after its last test)."""
    yield from _factory(tmp_path_factory.mktemp("chfront"))
