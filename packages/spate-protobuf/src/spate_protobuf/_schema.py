"""Descriptors compiled at run time, and the message-to-dict converters built from them.

Owns three things, all done once per schema and never per record:

* compiling ``FileDescriptorProto`` s (from a registry answer or a descriptor set) into a
  private :class:`~google.protobuf.descriptor_pool.DescriptorPool` — one pool per schema,
  so two versions of the same ``.proto`` file never clash; imports of the well-known
  types (``google/protobuf/*.proto``) come from the protobuf runtime;
* walking Confluent's message-index array to a message type of a file;
* generating a converter per message type: a plain Python function (``exec`` of generated
  source, like spate's chain codegen) that reads each field of a parsed message into a
  dict keyed by the schema's field names.

The dict shape: scalars as Python values (``int64`` stays an ``int``, ``bytes`` stays
``bytes``); a field with presence (``optional``, a ``oneof`` member, a message field) is
``None`` when unset; enums are names or numbers by setting (an unknown number stays a
number); repeated fields are lists, maps dicts; ``Timestamp`` is an aware UTC
``datetime``, ``Duration`` a ``timedelta``, wrappers (``Int64Value`` …) their value,
``Struct``/``Value``/``ListValue`` plain JSON-like values, ``Empty`` ``{}``, ``FieldMask``
a list of paths and ``Any`` a dict of ``type_url`` and ``value`` bytes.
"""

from __future__ import annotations

import base64
import binascii
import keyword
from collections.abc import Callable, Iterable, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

from google.protobuf import (
    any_pb2,
    api_pb2,
    descriptor_pb2,
    descriptor_pool,
    duration_pb2,
    empty_pb2,
    field_mask_pb2,
    json_format,
    message_factory,
    source_context_pb2,
    struct_pb2,
    timestamp_pb2,
    type_pb2,
    wrappers_pb2,
)
from google.protobuf.descriptor import Descriptor, FieldDescriptor, FileDescriptor
from google.protobuf.message import DecodeError, Message
from spate.schema import Field, FieldKind, FieldType

Convert = Callable[[Message], dict[str, Any]]

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_WELL_KNOWN_PREFIXES = ("google/protobuf/", "google/type/", "confluent/")
# Importing the runtime's own modules puts the well-known files into its default pool.
_RUNTIME_FILES = {
    m.DESCRIPTOR.name: m.DESCRIPTOR
    for m in (
        any_pb2,
        api_pb2,
        descriptor_pb2,
        duration_pb2,
        empty_pb2,
        field_mask_pb2,
        source_context_pb2,
        struct_pb2,
        timestamp_pb2,
        type_pb2,
        wrappers_pb2,
    )
}


def _timestamp(m: Any) -> datetime:
    # Nanoseconds to microseconds toward zero, as for a Duration and on the columnar path
    # (a negative ``nanos`` is out of the type's range; each path must read it alike).
    return _EPOCH + timedelta(seconds=m.seconds, microseconds=int(m.nanos / 1000))


def _duration(m: Any) -> timedelta:
    return timedelta(seconds=m.seconds, microseconds=int(m.nanos / 1000))


def _json_value(m: Message) -> Any:
    return json_format.MessageToDict(m, preserving_proto_field_name=True)


def _wrapper(m: Any) -> Any:
    return m.value


_WELL_KNOWN: dict[str, Callable[[Any], Any]] = {
    "google.protobuf.Timestamp": _timestamp,
    "google.protobuf.Duration": _duration,
    "google.protobuf.Struct": _json_value,
    "google.protobuf.Value": _json_value,
    "google.protobuf.ListValue": _json_value,
    "google.protobuf.Empty": lambda m: {},
    "google.protobuf.FieldMask": lambda m: list(m.paths),
    "google.protobuf.Any": lambda m: {"type_url": m.type_url, "value": m.value},
    **{
        f"google.protobuf.{name}": _wrapper
        for name in (
            "DoubleValue",
            "FloatValue",
            "Int64Value",
            "UInt64Value",
            "Int32Value",
            "UInt32Value",
            "BoolValue",
            "StringValue",
            "BytesValue",
        )
    },
}


def decode_serialized(text: str) -> descriptor_pb2.FileDescriptorProto:
    """A registry schema in ``format=serialized``: base64 of a ``FileDescriptorProto``."""
    try:
        proto = descriptor_pb2.FileDescriptorProto.FromString(base64.b64decode(text, validate=True))
    except (binascii.Error, ValueError, DecodeError):
        raise ValueError(
            "not a serialized Protobuf file descriptor (the registry must answer "
            "format=serialized with a base64 FileDescriptorProto)"
        ) from None
    if not proto.name:
        raise ValueError("the serialized file descriptor has no file name")
    return proto


def _runtime_file(name: str) -> descriptor_pb2.FileDescriptorProto | None:
    """A well-known import (``google/protobuf/timestamp.proto``) from the runtime's pool."""
    found = _RUNTIME_FILES.get(name)
    if found is None and name.startswith(_WELL_KNOWN_PREFIXES):
        # google/type/*, confluent/*: known when their generated modules were imported.
        try:
            found = descriptor_pool.Default().FindFileByName(name)
        except KeyError:
            return None
    if found is None:
        return None
    proto = descriptor_pb2.FileDescriptorProto()
    found.CopyToProto(proto)
    return proto


def compile_files(
    files: Iterable[descriptor_pb2.FileDescriptorProto],
) -> descriptor_pool.DescriptorPool:
    """Add ``files`` (and the well-known files they import) to a new pool, imports first.

    Raises ``ValueError`` naming an import that is neither given nor well known, or the
    descriptor error of a file that does not compile.
    """
    given = {f.name: f for f in files}
    pool = descriptor_pool.DescriptorPool()
    added: set[str] = set()

    def add(name: str, chain: tuple[str, ...]) -> None:
        if name in added:
            return
        if name in chain:
            raise ValueError(f"import cycle through {name}")
        proto = given.get(name) or _runtime_file(name)
        if proto is None:
            raise ValueError(f"{chain[-1] if chain else name} imports {name}, which is not given")
        for dependency in proto.dependency:
            add(dependency, (*chain, name))
        try:
            pool.Add(proto)
        except (TypeError, ValueError) as exc:
            raise ValueError(f"{name} does not compile: {exc}") from None
        added.add(name)

    for name in given:
        add(name, ())
    return pool


def message_by_index(file: FileDescriptor, indexes: Sequence[int]) -> Descriptor:
    """The message type at Confluent's message-index path (``[0]`` is the first type)."""
    if not indexes:
        raise ValueError("empty message-index array")
    candidates: Sequence[Descriptor] = list(file.message_types_by_name.values())
    found: Descriptor | None = None
    for depth, index in enumerate(indexes):
        if not 0 <= index < len(candidates):
            where = file.name if depth == 0 else found.full_name  # type: ignore[union-attr]
            raise ValueError(f"message index {list(indexes)} is not a message type of {where}")
        found = candidates[index]
        candidates = found.nested_types
    assert found is not None
    return found


class MessageType:
    """One message type: its generated class and its converter, built once."""

    __slots__ = ("convert", "descriptor", "parse")

    def __init__(self, descriptor: Descriptor, enums_as_names: bool) -> None:
        self.descriptor = descriptor
        cls = message_factory.GetMessageClass(descriptor)
        self.parse: Callable[[Any], Message] = cls.FromString
        self.convert: Convert = ConverterBuilder(enums_as_names).build(descriptor)


class ConverterBuilder:
    """Generates converters for a message type and every type it reaches (recursion ok)."""

    def __init__(self, enums_as_names: bool) -> None:
        self._enums_as_names = enums_as_names
        self._built: dict[str, Convert] = {}
        self._namespace: dict[str, Any] = {}

    def build(self, descriptor: Descriptor) -> Convert:
        done = self._built.get(descriptor.full_name)
        if done is not None:
            return done
        slot = f"_m{len(self._built)}"
        # Placeholder first, so a recursive type refers to itself through the namespace.
        self._built[descriptor.full_name] = lambda m: self._namespace[slot](m)
        lines = [f"def {slot}(m):", "    return {"]
        for field in descriptor.fields:
            lines.append(f"        {field.name!r}: {self._field(field)},")
        lines.append("    }")
        exec("\n".join(lines), self._namespace)
        convert: Convert = self._namespace[slot]
        self._built[descriptor.full_name] = convert
        return convert

    def _name(self, value: object) -> str:
        name = f"_v{len(self._namespace)}"
        self._namespace[name] = value
        return name

    def _field(self, field: FieldDescriptor) -> str:
        attr = (
            f"getattr(m, {field.name!r})"
            if keyword.iskeyword(field.name) or not field.name.isidentifier()
            else f"m.{field.name}"
        )
        repeated = _is_repeated(field)
        if field.message_type is not None and field.message_type.GetOptions().map_entry:
            value_field = field.message_type.fields_by_name["value"]
            item = self._item(value_field)
            if item is None:
                return f"dict({attr})"
            return f"{{k: {item}(v) for k, v in {attr}.items()}}"
        item = self._item(field)
        if repeated:
            return f"list({attr})" if item is None else f"[{item}(v) for v in {attr}]"
        value = attr if item is None else f"{item}({attr})"
        if field.has_presence:
            return f"({value} if m.HasField({field.name!r}) else None)"
        return value

    def _item(self, field: FieldDescriptor) -> str | None:
        """The name of the function that converts one value of ``field`` (None: as is)."""
        if field.message_type is not None:
            special = _WELL_KNOWN.get(field.message_type.full_name)
            if special is not None:
                return self._name(special)
            nested = self.build(field.message_type)
            return self._name(nested)
        if field.enum_type is not None and self._enums_as_names:
            names = {v.number: v.name for v in field.enum_type.values}
            return self._name(lambda n, names=names: names.get(n, n))
        return None


def _is_repeated(field: FieldDescriptor) -> bool:
    is_repeated = getattr(field, "is_repeated", None)
    if isinstance(is_repeated, bool):
        return is_repeated
    return bool(field.label == FieldDescriptor.LABEL_REPEATED)


class FileSchema:
    """A compiled ``.proto`` file and the message types used from it so far."""

    def __init__(self, file: FileDescriptor, enums_as_names: bool) -> None:
        self.file = file
        self._enums_as_names = enums_as_names
        self._types: dict[tuple[int, ...], MessageType] = {}

    def by_index(self, indexes: tuple[int, ...]) -> MessageType:
        """The message type at ``indexes``; raises ``ValueError`` for a path not in the file."""
        found = self._types.get(indexes)
        if found is None:
            found = MessageType(message_by_index(self.file, indexes), self._enums_as_names)
            self._types[indexes] = found
        return found


def load_descriptor_set(path: str, message: str, enums_as_names: bool) -> MessageType:
    """``raw`` mode: the type ``message`` of the ``FileDescriptorSet`` at ``path``.

    Raises ``OSError`` for an unreadable file and ``ValueError`` for a file that is not a
    descriptor set, does not compile, or lacks the type.
    """
    with open(path, "rb") as f:
        data = f.read()
    try:
        files = descriptor_pb2.FileDescriptorSet.FromString(data).file
    except DecodeError:
        raise ValueError("not a compiled FileDescriptorSet") from None
    if not files:
        raise ValueError("the descriptor set holds no files")
    pool = compile_files(files)
    try:
        descriptor = pool.FindMessageTypeByName(message)
    except KeyError:
        known = sorted(
            f"{f.package}.{m.name}" if f.package else m.name for f in files for m in f.message_type
        )
        raise ValueError(
            f"message type {message!r} is not in the descriptor set (top-level types: "
            f"{', '.join(known) or 'none'})"
        ) from None
    return MessageType(descriptor, enums_as_names)


_SCALARS = {
    FieldDescriptor.TYPE_BOOL: FieldKind.BOOL,
    FieldDescriptor.TYPE_INT32: FieldKind.INT32,
    FieldDescriptor.TYPE_SINT32: FieldKind.INT32,
    FieldDescriptor.TYPE_SFIXED32: FieldKind.INT32,
    FieldDescriptor.TYPE_INT64: FieldKind.INT64,
    FieldDescriptor.TYPE_SINT64: FieldKind.INT64,
    FieldDescriptor.TYPE_SFIXED64: FieldKind.INT64,
    FieldDescriptor.TYPE_UINT32: FieldKind.UINT32,
    FieldDescriptor.TYPE_FIXED32: FieldKind.UINT32,
    FieldDescriptor.TYPE_UINT64: FieldKind.UINT64,
    FieldDescriptor.TYPE_FIXED64: FieldKind.UINT64,
    FieldDescriptor.TYPE_FLOAT: FieldKind.FLOAT32,
    FieldDescriptor.TYPE_DOUBLE: FieldKind.FLOAT64,
    FieldDescriptor.TYPE_STRING: FieldKind.STRING,
    FieldDescriptor.TYPE_BYTES: FieldKind.BYTES,
}
_WELL_KNOWN_KINDS = {
    "google.protobuf.Timestamp": FieldKind.TIMESTAMP_MICROS,
    "google.protobuf.Duration": FieldKind.DURATION,
    "google.protobuf.Struct": FieldKind.JSON,
    "google.protobuf.Value": FieldKind.JSON,
    "google.protobuf.ListValue": FieldKind.JSON,
    "google.protobuf.Any": FieldKind.JSON,
    "google.protobuf.Empty": FieldKind.JSON,
}


def describe(descriptor: Descriptor, enums_as_names: bool) -> tuple[Field, ...]:
    """A message type as spate's neutral record description, in the converter's shape:
    fields with presence nullable, enums by name or number, wrappers nullable scalars."""
    return _describe_message(descriptor, enums_as_names, ())


def _describe_message(
    descriptor: Descriptor, enums_as_names: bool, seen: tuple[str, ...]
) -> tuple[Field, ...]:
    seen = (*seen, descriptor.full_name)
    return tuple(
        Field(field.name, _describe_field(field, enums_as_names, seen))
        for field in descriptor.fields
    )


def _describe_field(
    field: FieldDescriptor, enums_as_names: bool, seen: tuple[str, ...]
) -> FieldType:
    message = field.message_type
    if message is not None and message.GetOptions().map_entry:
        value = _describe_value(message.fields_by_name["value"], enums_as_names, seen)
        return FieldType(kind=FieldKind.MAP, items=value)
    item = _describe_value(field, enums_as_names, seen)
    if _is_repeated(field):
        return FieldType(kind=FieldKind.ARRAY, items=item)
    return item.with_nullable(field.has_presence) if field.has_presence else item


def _describe_value(
    field: FieldDescriptor, enums_as_names: bool, seen: tuple[str, ...]
) -> FieldType:
    message = field.message_type
    if message is not None:
        known = _WELL_KNOWN_KINDS.get(message.full_name)
        if known is not None:
            return FieldType(kind=known)
        if message.full_name.startswith("google.protobuf.") and message.full_name.endswith("Value"):
            return _describe_value(message.fields_by_name["value"], enums_as_names, seen)
        if message.full_name in seen:
            return FieldType(kind=FieldKind.JSON, name=message.full_name)
        fields = _describe_message(message, enums_as_names, seen)
        return FieldType(kind=FieldKind.RECORD, name=message.full_name, fields=fields)
    if field.enum_type is not None:
        if not enums_as_names:
            return FieldType(kind=FieldKind.INT32)
        values = field.enum_type.values
        return FieldType(
            kind=FieldKind.ENUM,
            name=field.enum_type.full_name,
            symbols=tuple(v.name for v in values),
            numbers=tuple(v.number for v in values),
        )
    return FieldType(kind=_SCALARS.get(field.type, FieldKind.JSON))
