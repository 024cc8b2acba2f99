"""The two registry formats of the Kafka tests, behind one face: Avro and Protobuf.

A schema is written as field specs, ``(("id", "long"), ("note", "string"))``; a type is
``long``, ``string``, ``double``, ``string=DEFAULT`` (Avro keeps the default; proto3 has
none) or ``T?`` (optional: an Avro union with null, a proto3 ``optional`` field).
:meth:`register` stores the schema in the registry test server, :meth:`encode` frames one
record as Confluent's serializers do, and :meth:`section` is the pipeline's
``deserializer:`` section with fast registry retries.
"""

from __future__ import annotations

import base64
import io
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from tests.support.schema_registry import SchemaRegistryServer

Fields = tuple[tuple[str, str], ...]


def written_keys(path: Path) -> list[bytes]:
    """The keys (``k<id>``) of the rows the file sink holds; a torn last line is skipped."""
    if not path.exists():
        return []
    lines = path.read_bytes().split(b"\n")[:-1]
    return [b"k%d" % json.loads(line)["id"] for line in lines if line]


def _section(tag: str, url: str, extra: Mapping[str, Any]) -> dict[str, Any]:
    return {
        tag: {
            "registry": {"url": url, "retry_backoff": "100ms", "retry_backoff_max": "500ms"},
            "fetch_wait": "50ms",
            **extra,
        }
    }


class AvroFormat:
    """Confluent Avro: magic byte, schema id, the datum (fastavro)."""

    name = "avro"

    @staticmethod
    def schema(fields: Fields) -> dict[str, Any]:
        out: list[dict[str, Any]] = []
        for name, kind in fields:
            field: dict[str, Any] = {"name": name}
            if kind.endswith("?"):
                field.update(type=["null", kind[:-1]], default=None)
            elif "=" in kind:
                kind, default = kind.split("=", 1)
                field.update(type=kind, default=default)
            else:
                field["type"] = kind
            out.append(field)
        return {"type": "record", "name": "U", "fields": out}

    def register(self, registry: SchemaRegistryServer, subject: str, fields: Fields) -> int:
        return registry.register(subject, self.schema(fields))

    def encode(self, schema_id: int, fields: Fields, datum: Mapping[str, Any]) -> bytes:
        import fastavro

        buf = io.BytesIO()
        fastavro.schemaless_writer(buf, fastavro.parse_schema(self.schema(fields)), dict(datum))
        return b"\x00" + schema_id.to_bytes(4, "big") + buf.getvalue()

    def section(self, url: str, **extra: Any) -> dict[str, Any]:
        return _section("avro", url, extra)


class ProtobufFormat:
    """Confluent Protobuf: magic byte, schema id, message index ``[0]``, the message."""

    name = "protobuf"

    def __init__(self) -> None:
        self._classes: dict[Fields, Any] = {}

    @staticmethod
    def file(fields: Fields) -> Any:
        from google.protobuf import descriptor_pb2

        kinds = {
            "long": descriptor_pb2.FieldDescriptorProto.TYPE_INT64,
            "string": descriptor_pb2.FieldDescriptorProto.TYPE_STRING,
            "double": descriptor_pb2.FieldDescriptorProto.TYPE_DOUBLE,
        }
        proto = descriptor_pb2.FileDescriptorProto(name="u.proto", package="t.v1", syntax="proto3")
        message = proto.message_type.add(name="U")
        for number, (name, kind) in enumerate(fields, 1):
            optional = kind.endswith("?")
            field = message.field.add(
                name=name,
                number=number,
                type=kinds[kind.rstrip("?").split("=", 1)[0]],
                label=descriptor_pb2.FieldDescriptorProto.LABEL_OPTIONAL,
            )
            if optional:
                field.proto3_optional = True
                field.oneof_index = len(message.oneof_decl)
                message.oneof_decl.add(name=f"_{name}")
        return proto

    def register(self, registry: SchemaRegistryServer, subject: str, fields: Fields) -> int:
        serialized = base64.b64encode(self.file(fields).SerializeToString()).decode("ascii")
        return registry.register(subject, serialized, "PROTOBUF")

    def encode(self, schema_id: int, fields: Fields, datum: Mapping[str, Any]) -> bytes:
        cls = self._classes.get(fields)
        if cls is None:
            from google.protobuf import descriptor_pool, message_factory

            pool = descriptor_pool.DescriptorPool()
            pool.Add(self.file(fields))
            cls = message_factory.GetMessageClass(pool.FindMessageTypeByName("t.v1.U"))
            self._classes[fields] = cls
        values = {k: v for k, v in datum.items() if v is not None}
        body = cls(**values).SerializeToString()
        return b"\x00" + schema_id.to_bytes(4, "big") + b"\x00" + body

    def section(self, url: str, **extra: Any) -> dict[str, Any]:
        return _section("protobuf", url, extra)


Format = AvroFormat | ProtobufFormat
FORMATS: list[Format] = [AvroFormat(), ProtobufFormat()]
