"""The deserializer contract: one borrowed payload view in, decoded value(s) out.

A deserializer turns the ``memoryview`` of a payload into the value the operator chain
sees. It runs on the pipeline thread, once per record, so it must not parse schemas or
build clients per call. When the view spans a whole object (a Kafka message's
``bytes``), ``payload.obj`` returns that object without a copy; decoders that accept
``bytes`` should use it. A slice (an S3 line) must be decoded from the view itself.

A deserializer that accepts ``bytes`` as well as a ``memoryview`` may set
``takes_bytes = True`` (:class:`BytesDeserializer`): for a batch whose source holds every
payload as a whole ``bytes`` object (Kafka, :attr:`~spate.records.PayloadBatch.values`)
it is then called with those objects, and no view is made per record. It must still
accept views (the payloads of other sources). A pipeline without a deserializer passes
such values on as they are (``bytes`` of a ``bytes`` object is the object itself, no
copy).

Outcomes:

* a value — one record;
* :data:`NO_RECORD` — the payload holds no record (an empty ``single`` JSON payload);
  counted as dropped with reason ``empty`` and acknowledged as delivered (B3, B21);
* ``DeserError(kind=MALFORMED | SCHEMA_UNAVAILABLE | UNKNOWN_SCHEMA)`` — a record error:
  skipped or fatal by the deserializer's ``on_error`` policy (or by the error's own
  ``policy``, when the deserializer has a separate setting for it), always counted under
  its kind (B28);
* ``DeserError(kind=NOT_READY)`` — the record cannot be decoded *yet* (schema registry
  unreachable, or not serving the schema yet): the runtime retries it later and never
  drops it (B21).

A deserializer that holds resources (a background thread, connections) may have a
``close()`` method; ``Pipeline.run`` calls it once when the run ends, however it ends,
and also when the run cannot start.

A deserializer whose framing yields several records per payload (``ndjson``, ``array``)
sets ``many = True`` and implements :meth:`ManyDeserializer.deserialize_many`, which
returns a list whose items are values or ``DeserError`` instances (one bad line is one
bad record), or raises ``DeserError`` when the whole payload is bad.

Each of these is a declared, runtime-checkable :class:`~typing.Protocol` the chain
checks with ``isinstance`` once, when it is compiled (ADR 0023, B232).
"""

from __future__ import annotations

from typing import ClassVar, Final, Protocol, final, runtime_checkable

from spate.errors import ErrorPolicy


@final
class _NoRecord:
    __slots__ = ()

    def __repr__(self) -> str:
        return "NO_RECORD"


NO_RECORD: Final = _NoRecord()
"""Returned by a deserializer for a payload that holds no record."""


def whole_payload(payload: bytes | memoryview) -> bytes | memoryview:
    """The payload's whole ``bytes`` object when it is one, or its view spans one (no
    copy); else the view itself (a slice, e.g. an S3 line).

    For a deserializer with ``takes_bytes`` whose decoder is fastest on ``bytes``; test
    ``type(payload) is bytes`` inline first on a per-record path, it is the common case.
    """
    if type(payload) is bytes:
        return payload
    data = payload.obj  # type: ignore[union-attr]
    if type(data) is bytes and len(data) == payload.nbytes:  # type: ignore[union-attr]
        return data
    return payload


@runtime_checkable
class Deserializer(Protocol):
    """Decodes one payload into one value (its ``many``, when it has one, is False)."""

    def deserialize(self, payload: memoryview) -> object:
        """Return the decoded value or ``NO_RECORD``; raise ``DeserError``. Never blocks."""
        ...


@runtime_checkable
class ManyDeserializer(Protocol):
    """Decodes one payload into any number of values (when ``many`` is True)."""

    many: ClassVar[bool]

    def deserialize_many(self, payload: memoryview) -> list[object]:
        """Return values and ``DeserError`` items in order; raise for a wholly bad payload."""
        ...


@runtime_checkable
class BytesDeserializer(Protocol):
    """A deserializer that says whether it takes whole ``bytes`` payloads as well as
    views (``takes_bytes``, B97): the chain then hands it a batch's ``bytes`` values as
    they are."""

    takes_bytes: bool


def takes_bytes(deserializer: object) -> bool:
    """Whether the chain may hand ``deserializer`` whole ``bytes`` payloads
    (:class:`BytesDeserializer` with ``takes_bytes``); no deserializer passes payloads
    on as ``bytes`` (``bytes`` of a ``bytes`` object is the object itself)."""
    return deserializer is None or (
        isinstance(deserializer, BytesDeserializer) and deserializer.takes_bytes is True
    )


def many_per_payload(deserializer: object) -> ManyDeserializer | None:
    """``deserializer`` when it yields several records per payload
    (:class:`ManyDeserializer` with ``many``), else None."""
    if isinstance(deserializer, ManyDeserializer) and deserializer.many is True:
        return deserializer
    return None


@runtime_checkable
class PolicyDeserializer(Protocol):
    """A deserializer that carries its own ``on_error`` (its configuration section's):
    what the chain does with a payload it cannot decode (B3). The pipeline's
    ``deserializer.on_error`` wins when that is set."""

    on_error: ErrorPolicy


def own_policy(deserializer: object) -> ErrorPolicy | None:
    """The error policy ``deserializer`` declares (:class:`PolicyDeserializer`), or None."""
    if isinstance(deserializer, PolicyDeserializer) and isinstance(
        deserializer.on_error, ErrorPolicy
    ):
        return deserializer.on_error
    return None
