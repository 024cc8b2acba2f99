"""Test helpers for packages that use spate-kafka: a librdkafka mock cluster whose groups
form at once (:class:`MockKafkaCluster`), for fast unit tests without a broker.

A mock cluster made by a client's ``test.mock.num.brokers`` holds every group's first join
for its initial rebalance delay, 3 s in librdkafka's mock and not settable through client
configuration: every unit test that subscribed waited those 3 s. Here the cluster is made
through librdkafka's C API (the library confluent-kafka loads) with the delay set to 0, as
a test broker's ``group.initial.rebalance.delay.ms=0`` does. Delivery, rebalance and
failure behaviours are still proven against a real broker: the mock is for unit tests.
"""

from __future__ import annotations

import ctypes
import ctypes.util
from pathlib import Path
from types import TracebackType

import confluent_kafka

__all__ = ["MockKafkaCluster"]

_RD_KAFKA_PRODUCER = 0


def _librdkafka() -> ctypes.CDLL:
    """The librdkafka confluent-kafka uses: the copy in its wheel, else the system's."""
    bundled = sorted(
        (Path(confluent_kafka.__file__).parent.parent / "confluent_kafka.libs").glob(
            "librdkafka*.so*"
        )
    )
    path = str(bundled[0]) if bundled else ctypes.util.find_library("rdkafka")
    if path is None:
        raise RuntimeError("librdkafka not found next to confluent_kafka nor on the system")
    lib = ctypes.CDLL(path)
    signatures: dict[str, tuple[object, list[object]]] = {
        "rd_kafka_conf_new": (ctypes.c_void_p, []),
        "rd_kafka_new": (
            ctypes.c_void_p,
            [ctypes.c_int, ctypes.c_void_p, ctypes.c_char_p, ctypes.c_size_t],
        ),
        "rd_kafka_destroy": (None, [ctypes.c_void_p]),
        "rd_kafka_mock_cluster_new": (ctypes.c_void_p, [ctypes.c_void_p, ctypes.c_int]),
        "rd_kafka_mock_cluster_bootstraps": (ctypes.c_char_p, [ctypes.c_void_p]),
        "rd_kafka_mock_cluster_destroy": (None, [ctypes.c_void_p]),
        "rd_kafka_mock_group_initial_rebalance_delay_ms": (
            None,
            [ctypes.c_void_p, ctypes.c_int32],
        ),
    }
    for name, (restype, argtypes) in signatures.items():
        function = getattr(lib, name)
        function.restype = restype
        function.argtypes = argtypes
    return lib


class MockKafkaCluster:
    """A mock cluster of ``brokers`` brokers whose groups form without delay; a context
    manager (closing destroys the cluster). Clients connect with ``bootstrap.servers``
    set to :attr:`bootstrap`."""

    def __init__(self, brokers: int = 1) -> None:
        self._lib = _librdkafka()
        errstr = ctypes.create_string_buffer(512)
        # The mock cluster lives in a client handle of its own that never connects.
        self._rk = self._lib.rd_kafka_new(
            _RD_KAFKA_PRODUCER, self._lib.rd_kafka_conf_new(), errstr, len(errstr)
        )
        if not self._rk:
            raise RuntimeError(f"rd_kafka_new: {errstr.value.decode(errors='replace')}")
        self._cluster = self._lib.rd_kafka_mock_cluster_new(self._rk, brokers)
        if not self._cluster:
            self._lib.rd_kafka_destroy(self._rk)
            raise RuntimeError("rd_kafka_mock_cluster_new failed")
        self._lib.rd_kafka_mock_group_initial_rebalance_delay_ms(self._cluster, 0)
        self.bootstrap: str = self._lib.rd_kafka_mock_cluster_bootstraps(self._cluster).decode()

    def close(self) -> None:
        if self._cluster:
            self._lib.rd_kafka_mock_cluster_destroy(self._cluster)
            self._cluster = None
            self._lib.rd_kafka_destroy(self._rk)

    def __enter__(self) -> MockKafkaCluster:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()
