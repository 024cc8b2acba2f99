"""Columnar Protobuf decoding: a batch of messages into polars DataFrames (``spate[columnar]``).

The messages of one batch (one message type) are decoded at once by ptars (Rust, straight
from the wire format into Arrow builders, no object per record) into one Arrow record
batch, which becomes one polars DataFrame with a ``__spate_row`` column (each record's
index in the batch). Values take the row path's shape: fields with presence (``optional``,
``oneof`` members, messages, wrappers) are null when unset, the others their default;
enums are names (an unknown number is its decimal text, as a column holds one type) or
numbers; repeated fields are lists, maps lists of ``key``/``value`` entries (what a
ClickHouse ``Map`` column takes); ``Timestamp`` is ``Datetime(us, UTC)``.

Exactness (B28, B142). The row path's parser (the protobuf runtime's upb) decides which
messages are valid, and its converter which values are: so the batch is first parsed by
upb as one message holding every record as a repeated field (one C call; the wrapper type
is generated once per message type, in the message type's own pool). When that parse
fails, each message is parsed alone and the ones upb refuses are record errors with the
row path's own error, for those records alone; ptars reads only the others. Where ptars
and the row path read the same valid bytes differently, the rows concerned are found by
vectorized checks on the decoded columns and decoded again exactly: a message that sets
two members of one ``oneof`` (the last one wins on the row path; ptars keeps both), a
map with a repeated key (the last one wins), and a ``Timestamp`` outside ``datetime``'s
range (a record error on the row path). Each such record goes through the row path's
deserializer: its error is the record's error, else upb's canonical encoding of the
message (one member per ``oneof``, one entry per key) is what ptars reads for that row.

``Timestamp`` and the wrappers are handed to ptars as look-alike plain messages (see
:func:`_plain_pool`): ptars reads the well-known types as single values and so keeps the
last occurrence of a field given twice, where the row path merges the occurrences. As
plain messages they merge like any message; the frame's timestamps are then computed
from their seconds and nanos with the row path's rounding (toward zero) and range check,
and a wrapper column is its ``value``.

A message type has a columnar form when every type it reaches is declared in a
``proto3`` file, is not recursive, and uses no field whose value the row path turns into
a Python object with no column type: ``Duration`` (a ``timedelta`` wider than 64-bit
microseconds), ``Struct``, ``Value``, ``ListValue``, ``Any``, ``Empty``, ``FieldMask``
(JSON-like values). :func:`no_columnar_form` says why not; such a pipeline keeps rows.
"""

from __future__ import annotations

import importlib.util
import itertools
from collections.abc import Callable, Sequence
from typing import Any

from google.protobuf import descriptor_pb2, message_factory
from google.protobuf.descriptor import Descriptor, FieldDescriptor
from spate import DeserError, DeserErrorKind
from spate.records import ROW_COLUMN

from spate_protobuf._deserializer import DECODE_ERRORS
from spate_protobuf._schema import MessageType, _is_repeated

DecodedFrames = tuple[list[tuple[str | None, Any]], list[tuple[int, DeserError]]]
"""``(frames, errors)``: ``(None, polars DataFrame)`` per frame with a ``__spate_row``
column, and ``(batch index, DeserError)`` for each bad record."""

Reference = Callable[[bytes], object]
"""The row path's decoding of one message body: its record, or ``DeserError``."""

COLUMNAR_MODULES = {"ptars": "ptars", "polars": "polars", "pyarrow": "pyarrow"}
"""The modules the columnar Protobuf path imports, and the distribution of each."""

_NO_COLUMNS = frozenset(
    f"google.protobuf.{name}"
    for name in ("Duration", "Struct", "Value", "ListValue", "Any", "Empty", "FieldMask")
)
_TIMESTAMP = "google.protobuf.Timestamp"
_WRAPPERS = {
    f"google.protobuf.{name}": kind
    for name, kind in (
        ("DoubleValue", "TYPE_DOUBLE"),
        ("FloatValue", "TYPE_FLOAT"),
        ("Int64Value", "TYPE_INT64"),
        ("UInt64Value", "TYPE_UINT64"),
        ("Int32Value", "TYPE_INT32"),
        ("UInt32Value", "TYPE_UINT32"),
        ("BoolValue", "TYPE_BOOL"),
        ("StringValue", "TYPE_STRING"),
        ("BytesValue", "TYPE_BYTES"),
    )
}
_PLAIN = "spate_columnar_plain"
_MIN_SECONDS = -62_135_596_801
_MAX_SECONDS = 253_402_300_800
"""A ``Timestamp`` whose seconds lie beyond these is out of range whatever its nanos."""
_MIN_MICROS = -62_135_596_800_000_000
"""``datetime(1, 1, 1, tzinfo=UTC)`` in microseconds since the epoch."""
_MAX_MICROS = 253_402_300_799_999_999
"""``datetime(9999, 12, 31, 23, 59, 59, 999999, tzinfo=UTC)`` in microseconds."""


def columnar_unavailable() -> str | None:
    """Why batches cannot be decoded as columns (what is missing and how to install it
    from a checkout), or None when they can. Looked up, not imported."""
    missing = [
        dist
        for module, dist in COLUMNAR_MODULES.items()
        if importlib.util.find_spec(module) is None
    ]
    if not missing:
        return None
    return (
        f"columnar Protobuf decoding is not available: {', '.join(missing)} not installed "
        "(spate-protobuf's columnar extra); from a spate checkout: pip install "
        './packages/spate-core ./packages/spate-avro "./packages/spate-protobuf[columnar]"'
    )


def no_columnar_form(descriptor: Descriptor) -> str | None:
    """Why records of ``descriptor`` cannot be columns (see the module docstring), or None."""
    return _reason(descriptor, ())


def _reason(descriptor: Descriptor, seen: tuple[str, ...]) -> str | None:
    name = descriptor.full_name
    if name in seen:
        return f"{name} is recursive"
    syntax = _syntax(descriptor.file)
    if syntax != "proto3":
        return f"{name} is declared in a {syntax} file (proto3 only)"
    for field in descriptor.fields:
        message = field.message_type
        if message is None:
            if field.type == FieldDescriptor.TYPE_GROUP:  # pragma: no cover - not proto3
                return f"{name}.{field.name} is a group"
            continue
        if message.full_name in _NO_COLUMNS:
            return f"{name}.{field.name} is a {message.full_name}"
        if message.full_name.startswith("google.protobuf."):
            continue  # Timestamp and the wrappers
        reason = _reason(message, (*seen, name))
        if reason is not None:
            return reason
    return None


def _syntax(file: Any) -> str:
    """A file's ``syntax`` as declared (``proto2``, ``proto3`` or ``editions``)."""
    proto = descriptor_pb2.FileDescriptorProto()
    file.CopyToProto(proto)
    return proto.syntax or "proto2"


def _varint(n: int) -> bytes:
    out = bytearray()
    while n > 0x7F:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


class _Heads(dict[int, bytes]):
    """The wrapper's tag and length in front of a message of each size (field 1,
    length-delimited), kept for the sizes below 16 KiB (a two-byte length at most; larger
    messages are rare, and their sizes would grow the table without bound)."""

    def __missing__(self, size: int) -> bytes:
        head = b"\x0a" + _varint(size)
        if size < 1 << 14:
            self[size] = head
        return head


def _wrapper(descriptor: Descriptor) -> Any:
    """The class of a message holding ``repeated <descriptor> items = 1``, added to the
    descriptor's own pool once (the file name is derived from the type's)."""
    pool = descriptor.file.pool
    name = "spate_columnar_" + descriptor.full_name.replace(".", "_")
    try:
        return message_factory.GetMessageClass(pool.FindMessageTypeByName(name + ".Batch"))
    except KeyError:
        pass
    file = descriptor_pb2.FileDescriptorProto(
        name=f"{name}.proto", package=name, syntax="proto3", dependency=[descriptor.file.name]
    )
    batch = file.message_type.add(name="Batch")
    batch.field.add(
        name="items",
        number=1,
        label=descriptor_pb2.FieldDescriptorProto.LABEL_REPEATED,
        type=descriptor_pb2.FieldDescriptorProto.TYPE_MESSAGE,
        type_name="." + descriptor.full_name,
    )
    pool.Add(file)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName(name + ".Batch"))


def _plain_pool(descriptor: Descriptor) -> Any:
    """A pool holding the files ``descriptor`` reaches with ``Timestamp`` and the wrappers
    replaced by look-alike plain messages (same fields, same wire format).

    ptars reads those well-known types as single values, and so takes the last occurrence
    of such a field where the row path merges the occurrences (a message concatenated
    with another); as plain messages they merge like every message, and
    :func:`_single` makes them values afterwards, with the row path's rounding and range.
    """
    from spate_protobuf._schema import compile_files

    plain = descriptor_pb2.FileDescriptorProto(
        name=f"{_PLAIN}.proto", package=_PLAIN, syntax="proto3"
    )
    Field = descriptor_pb2.FieldDescriptorProto
    timestamp = plain.message_type.add(name="Timestamp")
    timestamp.field.add(name="seconds", number=1, type=Field.TYPE_INT64, label=1)
    timestamp.field.add(name="nanos", number=2, type=Field.TYPE_INT32, label=1)
    for full_name, kind in _WRAPPERS.items():
        wrapper = plain.message_type.add(name=full_name.rpartition(".")[2])
        wrapper.field.add(name="value", number=1, type=getattr(Field, kind), label=1)
    renamed = {
        f".{name}": f".{_PLAIN}.{name.rpartition('.')[2]}" for name in (_TIMESTAMP, *_WRAPPERS)
    }
    files = [plain]
    for file in _reached(descriptor.file):
        if file.name.startswith("google/protobuf/"):
            continue
        proto = descriptor_pb2.FileDescriptorProto()
        file.CopyToProto(proto)
        stack = list(proto.message_type)
        while stack:
            message = stack.pop()
            stack.extend(message.nested_type)
            for field in message.field:
                if field.type_name in renamed:
                    field.type_name = renamed[field.type_name]
        proto.dependency.append(plain.name)
        files.append(proto)
    return compile_files(files)


def _reached(file: Any) -> list[Any]:
    """``file`` and every file it imports, transitively."""
    found: dict[str, Any] = {}
    stack = [file]
    while stack:
        current = stack.pop()
        if current.name not in found:
            found[current.name] = current
            stack.extend(current.dependencies)
    return list(found.values())


class ColumnarProtobufDecoder:
    """Decodes message bodies of one type into frames (see the module docstring).

    ``reference(body)`` is the row path's decode of one body (the record, or
    ``DeserError``): it decides every record the checks single out.
    """

    def __init__(self, message_type: MessageType, reference: Reference, enums_as_names: bool):
        import ptars  # the columnar extra

        descriptor = message_type.descriptor
        reason = no_columnar_form(descriptor)
        if reason is not None:
            raise ValueError(f"no columnar form: {reason}")
        config = ptars.PtarsConfig(enum_repr="string" if enums_as_names else "int32")
        plain = _plain_pool(descriptor)
        self._handler = ptars.HandlerPool(
            [plain.FindFileByName(descriptor.file.name)], config
        ).get_for_message(plain.FindMessageTypeByName(descriptor.full_name))
        self._parse = message_type.parse
        self._reference = reference
        self._descriptor = descriptor
        self._batch = _wrapper(descriptor).FromString
        self._heads = _Heads()
        self._checks = _checks_for(descriptor)

    def decode(self, bodies: Sequence[bytes]) -> DecodedFrames:
        """Frames and errors for ``bodies`` (each a whole message, its framing removed)."""
        errors: list[tuple[int, DeserError]] = []
        if not bodies:
            return [], errors
        good = self._valid(bodies, errors)
        if not good:
            return [], errors
        rows: list[int] | None = None
        if len(good) != len(bodies):
            rows = good
            bodies = [bodies[i] for i in good]
        return self._frame(bodies, rows, errors), errors

    def _valid(self, bodies: Sequence[bytes], errors: list[tuple[int, DeserError]]) -> list[int]:
        """Indices of the bodies upb parses (all of them after one wrapped parse, the
        common case); the others become the row path's record errors."""
        heads = self._heads
        wrapped = b"".join(
            itertools.chain.from_iterable(
                zip(map(heads.__getitem__, map(len, bodies)), bodies, strict=True)
            )
        )
        try:
            self._batch(wrapped)
            return list(range(len(bodies)))
        except DECODE_ERRORS:  # which record is bad is found one by one below
            pass
        good: list[int] = []
        parse = self._parse
        for index, body in enumerate(bodies):
            try:
                parse(body)
            except DECODE_ERRORS:  # the reference gives the row path's error
                errors.append((index, self._error(body)))
                continue
            good.append(index)
        return good

    def _error(self, body: bytes) -> DeserError:
        """The row path's error for a body the checks single out (its ``DeserError``)."""
        try:
            self._reference(body)
        except DeserError as exc:
            return exc
        raise RuntimeError("the row path accepts a record the columnar path refuses")

    def _frame(
        self, bodies: Sequence[bytes], rows: list[int] | None, errors: list[tuple[int, DeserError]]
    ) -> list[tuple[str | None, Any]]:
        import polars as pl
        import pyarrow as pa

        count = len(bodies)
        positions = list(range(count)) if rows is None else rows
        table, bodies, positions = self._read(bodies, positions, errors)
        if table is None:
            return []
        suspects = _suspects(self._checks, _struct_of(table), None)
        if suspects:
            keep = sorted(set(range(len(positions))) - suspects)
            redone: list[bytes] = []
            redone_rows: list[int] = []
            for i in sorted(suspects):
                record = self._reference_or_error(bodies[i], positions[i], errors)
                if record is not None:
                    redone.append(record)
                    redone_rows.append(positions[i])
            parts = [table.take(keep)] if keep else []
            if redone:
                again, _, redone_rows = self._read(redone, redone_rows, errors)
                if again is not None:
                    parts.append(again)
            frame_rows = [positions[i] for i in keep] + redone_rows
            if not frame_rows:
                return []
            table = pa.Table.from_batches(parts)
            errors.sort(key=_first)
        else:
            frame_rows = positions
        if isinstance(table, pa.Table):
            table = table.combine_chunks().to_batches()[0]
        finished = _message(_struct_of(table), self._descriptor)
        df = pl.DataFrame(pa.RecordBatch.from_struct_array(finished))
        if rows is None and not suspects and len(frame_rows) == count:  # all, in order
            index = pl.int_range(0, len(positions), dtype=pl.UInt32, eager=True)
        else:
            index = pl.Series(frame_rows, dtype=pl.UInt32)
        df.insert_column(df.width, index.alias(ROW_COLUMN))
        if suspects:
            df = df.sort(ROW_COLUMN)
        return [(None, df)]

    def _reference_or_error(
        self, body: bytes, row: int, errors: list[tuple[int, DeserError]]
    ) -> bytes | None:
        """A singled-out record: upb's canonical encoding of it, or its row path error."""
        try:
            self._reference(body)
        except DeserError as exc:
            errors.append((row, exc))
            return None
        canonical: bytes = self._parse(body).SerializeToString()
        return canonical

    def _read(
        self, bodies: Sequence[bytes], positions: list[int], errors: list[tuple[int, DeserError]]
    ) -> tuple[Any, Sequence[bytes], list[int]]:
        """ptars' record batch of ``bodies`` (all valid for upb), with the bodies and the
        positions it holds: a body ptars refuses alone is a record error for that record
        alone (no such body is known)."""
        try:
            return self._handler.list_to_record_batch(bodies), bodies, positions
        except ValueError:
            pass
        kept: list[bytes] = []
        kept_rows: list[int] = []
        for body, row in zip(bodies, positions, strict=True):
            try:
                self._handler.list_to_record_batch([body])
            except ValueError as exc:
                errors.append((row, _refused(exc)))
                continue
            kept.append(body)
            kept_rows.append(row)
        errors.sort(key=_first)
        if not kept:
            return None, [], []
        return self._handler.list_to_record_batch(kept), kept, kept_rows


def _refused(exc: BaseException) -> DeserError:
    detail = f"{type(exc).__name__}: {exc}"[:200]
    return DeserError(
        f"malformed Protobuf payload (the columnar reader refuses it: {detail})",
        DeserErrorKind.MALFORMED,
    )


def _first(item: tuple[int, DeserError]) -> int:
    return item[0]


# -- the vectorized checks -----------------------------------------------------------------

Check = tuple[str, Any]
"""One check of a message type's columns: ``("oneof", member names)``,
``("timestamp", field name)``, ``("map", field name)``, ``("message", (field name,
repeated, nested checks))`` or ``("map_values", (field name, nested checks))``."""


def _checks_for(descriptor: Descriptor) -> list[Check]:
    """What may differ between ptars and the row path in records of ``descriptor``."""
    checks: list[Check] = []
    for oneof in descriptor.oneofs:
        members = [f.name for f in oneof.fields]
        if len(members) > 1:
            checks.append(("oneof", members))
    for field in descriptor.fields:
        message = field.message_type
        if message is None:
            continue
        if message.GetOptions().map_entry:
            checks.append(("map", field.name))
            value = message.fields_by_name["value"].message_type
            if value is not None and not value.full_name.startswith("google.protobuf."):
                nested = _checks_for(value)
                if nested:
                    checks.append(("map_values", (field.name, nested)))
            elif value is not None and value.full_name == _TIMESTAMP:
                checks.append(("map_timestamps", field.name))
            continue
        repeated = _is_repeated(field)
        if message.full_name == _TIMESTAMP:
            checks.append(("timestamp", (field.name, repeated)))
        elif not message.full_name.startswith("google.protobuf."):
            nested = _checks_for(message)
            if nested:
                checks.append(("message", (field.name, repeated, nested)))
    return checks


def _suspects(checks: list[Check], array: Any, parents: Any) -> set[int]:
    """Rows (of the top-level batch) whose values the checks single out. ``array`` is a
    struct array of one message type; ``parents`` maps its elements to top-level rows
    (None: element ``i`` is row ``i``). All pyarrow kernels; a Python step per hit only."""
    import pyarrow as pa
    import pyarrow.compute as pc

    if not checks or not len(array):
        return set()
    children = dict(zip([f.name for f in array.type], array.flatten(), strict=True))
    hits: Any = None

    def flag(mask: Any) -> None:
        nonlocal hits
        hits = mask if hits is None else pc.or_(hits, mask)

    found: set[int] = set()

    def rows_of(indices: Any) -> set[int]:
        if parents is not None:
            indices = parents.take(indices)
        return set(indices.to_pylist())

    for kind, arg in checks:
        if kind == "oneof":
            count = None
            for name in arg:
                valid = pc.cast(pc.is_valid(children[name]), pa.int8())
                count = valid if count is None else pc.add(count, valid)
            flag(pc.greater(count, 1))
        elif kind == "timestamp":
            name, repeated = arg
            column = children[name]
            if repeated:
                found |= _out_of_range_rows(column, parents)
            else:
                flag(pc.fill_null(_out_of_range(column), False))
        elif kind == "map":
            found |= _repeated_key_rows(_entries(children[arg]), parents)
        elif kind == "map_timestamps":
            column = _entries(children[arg])
            values = pc.list_flatten(column).field("value")
            bad = pc.fill_null(_out_of_range(values), False)
            if pc.any(bad).as_py():
                found |= rows_of(pc.list_parent_indices(column).filter(bad))
        elif kind == "map_values":
            name, nested = arg
            column = _entries(children[name])
            inner = _element_parents(column, parents)
            found |= _suspects(nested, pc.list_flatten(column).field("value"), inner)
        else:
            name, repeated, nested = arg
            column = children[name]
            if repeated:
                found |= _suspects(
                    nested, pc.list_flatten(column), _element_parents(column, parents)
                )
            else:
                found |= _suspects(nested, column, parents)
    if hits is not None and pc.any(hits).as_py():
        found |= rows_of(pc.indices_nonzero(pc.fill_null(hits, False)))
    return found


def _entries(maps: Any) -> Any:
    """A map array as the list array of its ``key``/``value`` entries (the list kernels
    take no maps)."""
    import pyarrow as pa

    return pa.ListArray.from_arrays(maps.offsets, maps.values)


def _element_parents(lists: Any, parents: Any) -> Any:
    """For each element of a list array, the top-level row holding it."""
    import pyarrow.compute as pc

    indices = pc.list_parent_indices(lists)
    return indices if parents is None else parents.take(indices)


def _micros(timestamps: Any) -> Any:
    """``Timestamp`` structs (seconds, nanos) as microseconds since the epoch, the
    nanoseconds rounded toward zero as on the row path (wrapping for seconds far out of
    range, which :func:`_out_of_range` flags first)."""
    import pyarrow.compute as pc

    seconds, nanos = timestamps.flatten()
    return pc.add(pc.multiply(seconds, 1_000_000), pc.cast(pc.divide(nanos, 1000), "int64"))


def _out_of_range(timestamps: Any) -> Any:
    """Where a ``Timestamp`` struct lies outside ``datetime``'s range (a record error on
    the row path); null where the struct is null."""
    import pyarrow.compute as pc

    seconds = timestamps.flatten()[0]
    micros = _micros(timestamps)
    far = pc.or_(pc.less(seconds, _MIN_SECONDS), pc.greater(seconds, _MAX_SECONDS))
    outside = pc.or_(pc.less(micros, _MIN_MICROS), pc.greater(micros, _MAX_MICROS))
    return pc.or_(far, outside)


def _struct_of(batch: Any) -> Any:
    import pyarrow as pa

    return pa.StructArray.from_arrays(batch.columns, fields=list(batch.schema))


# -- the frame's columns from ptars' --------------------------------------------------------


def _message(array: Any, descriptor: Descriptor) -> Any:
    """A struct array of ``descriptor`` read by ptars, in the frame's form: timestamps
    from their (seconds, nanos) structs, wrappers their values, maps lists of entries."""
    import pyarrow as pa

    children = array.flatten()
    out = [_value(child, field) for child, field in zip(children, descriptor.fields, strict=True)]
    names = [field.name for field in descriptor.fields]
    mask = array.is_null() if array.null_count else None
    return pa.StructArray.from_arrays(out, names=names, mask=mask)


def _value(array: Any, field: FieldDescriptor) -> Any:
    import pyarrow as pa

    message = field.message_type
    if message is None:
        return array
    if message.GetOptions().map_entry:
        entries = pa.StructArray.from_arrays(
            [array.keys, _single(array.items, message.fields_by_name["value"])],
            names=["key", "value"],
        )
        return _relist(array, entries)
    if _is_repeated(field):
        return _relist(array, _single(array.flatten(), field))
    return _single(array, field)


def _relist(lists: Any, values: Any) -> Any:
    """``values`` (the flattened elements of ``lists``, converted) as a list array with
    the offsets and nulls of ``lists``."""
    import pyarrow as pa
    import pyarrow.compute as pc

    offsets = lists.offsets
    if lists.offset or (len(offsets) and offsets[0].as_py()):
        offsets = pc.subtract(offsets, offsets[0])
    mask = lists.is_null() if lists.null_count else None
    return pa.ListArray.from_arrays(offsets, values, mask=mask)


def _single(array: Any, field: FieldDescriptor) -> Any:
    """One value of ``field`` per element of ``array`` (no list level)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    message = field.message_type
    if message is None:
        return array
    name = message.full_name
    if name == _TIMESTAMP:
        micros = _micros(array)
        if array.null_count:
            micros = pc.if_else(array.is_null(), None, micros)
        return micros.cast(pa.timestamp("us", "UTC"))
    if name in _WRAPPERS:
        return array.flatten()[0]
    return _message(array, message)


def _out_of_range_rows(lists: Any, parents: Any) -> set[int]:
    import pyarrow.compute as pc

    bad = pc.fill_null(_out_of_range(pc.list_flatten(lists)), False)
    if not pc.any(bad).as_py():
        return set()
    return set(_element_parents(lists, parents).filter(bad).to_pylist())


def _repeated_key_rows(maps: Any, parents: Any) -> set[int]:
    """Rows holding a map with a key twice (the row path keeps the last entry)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    entries = pc.list_flatten(maps)
    if len(entries) < 2:
        return set()
    owners = pc.list_parent_indices(maps)
    table = pa.table({"owner": owners, "key": entries.field("key")})
    counted = table.group_by(["owner", "key"]).aggregate([([], "count_all")])
    repeated = counted.filter(pc.greater(counted["count_all"], 1))
    if not repeated.num_rows:
        return set()
    owner = repeated["owner"].combine_chunks()
    return set((owner if parents is None else parents.take(owner)).to_pylist())
