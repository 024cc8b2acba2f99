"""The soak's own setup and tear-down, quickly: what it starts, it stops on every path.

The soak (B1, B14) starts a ClickHouse front process and two fault proxies before the
pipeline; a failure between those steps must not leave any of them behind. These tests
run at every scale (they fail before anything is produced).
"""

from __future__ import annotations

import os
import signal
import socket
import threading
from pathlib import Path

import pytest

from tests.soak.soak import run_soak
from tests.support.netfault import KAFKA_FAULT
from tests.support.services import service_address

pytestmark = pytest.mark.integration


def processes_naming(text: str) -> list[int]:
    """The processes whose command line contains ``text``."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ")
        except OSError:  # gone meanwhile
            continue
        if text.encode() in cmdline:
            found.append(int(entry.name))
    return found


def proxy_threads() -> int:
    return sum(1 for t in threading.enumerate() if t.name == "fault-proxy")


def test_b1_b14_a_busy_fault_proxy_port_leaves_no_front_and_no_proxy_behind(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    """B1, B14: with the Kafka fault proxy's port taken, the soak fails at its setup and
    stops the ClickHouse front it had already started (and the proxy's loop thread)."""
    host, _, port = service_address(KAFKA_FAULT).rpartition(":")
    threads_before = proxy_threads()
    with socket.socket() as busy:
        busy.bind((host, int(port)))
        busy.listen()
        with pytest.raises(OSError):
            run_soak(0.1, 10, tmp_path)
    left = processes_naming(str(tmp_path / "clickhouse"))
    try:
        assert left == [], f"ClickHouse front processes left running: {left}"
        assert proxy_threads() == threads_before, "a fault proxy's loop thread is still running"
    finally:
        for pid in left:
            os.kill(pid, signal.SIGKILL)
