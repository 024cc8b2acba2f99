"""``DeserializerConformance``: the promises every deserializer keeps (B28, B17).

Borrowed payloads are described in docs/concepts/architecture.md.

* every sample payload decodes to its expected values, whether the ``memoryview`` spans
  a whole ``bytes`` object (a Kafka message) or is a slice of a larger buffer (an S3
  line): decoders may use ``view.obj`` only when the view spans all of it;
* decoded values do not borrow the payload: the buffer is overwritten after decoding and
  the values must not change (views are borrowed; keep ``bytes(view)`` if anything);
* a malformed payload raises ``DeserError`` (MALFORMED or SCHEMA_UNAVAILABLE) — or, for
  a ``many`` deserializer, yields ``DeserError`` items — and never any other exception,
  so the pipeline counts and skips or fails by policy instead of crashing (B28);
* every truncation of a sample decodes or raises ``DeserError``, nothing else (B28);
* it declares the method the runtime calls: ``deserialize`` (a
  :class:`~spate.ops.Deserializer`) or ``many = True`` with ``deserialize_many`` (a
  :class:`~spate.ops.ManyDeserializer`);
* a deserializer with ``takes_bytes = True`` decodes whole ``bytes`` payloads (what a
  Kafka batch hands it) to the same values as views, and refuses malformed ones with
  ``DeserError`` alike (B97).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar

from spate.errors import DeserError, DeserErrorKind
from spate.ops._deser import NO_RECORD, Deserializer, many_per_payload, takes_bytes
from spate.testing.conformance._base import (
    ConfigConformance,
    ConformanceFailure,
    Promise,
    check,
    conformance_context,
    skip,
)

DESER_DECODES = Promise(
    "§3", "a deserializer decodes a payload view, whole or a slice of a larger buffer"
)
DESER_BORROWED = Promise(
    "§3", "decoded values never borrow the payload view (it is reused after the batch)"
)
DESER_MALFORMED = Promise(
    "B28", "a malformed payload raises DeserError (a record error), never another exception"
)
DESER_SHAPE = Promise("§3", "`many` names the method the runtime calls, and it exists")
DESER_BYTES = Promise(
    "B97", "a deserializer with takes_bytes decodes whole bytes payloads as it does views"
)

_RECORD_ERRORS = (
    DeserErrorKind.MALFORMED,
    DeserErrorKind.SCHEMA_UNAVAILABLE,
    DeserErrorKind.UNKNOWN_SCHEMA,
)


class DeserializerConformance(ConfigConformance):
    """Subclass as ``Test<Name>DeserializerConformance`` and fill in the hooks.

    Required: :meth:`samples` and either :attr:`factory` with :meth:`config` or an
    override of :meth:`make_deserializer`. Optional: :meth:`malformed`.
    """

    section: ClassVar[str] = "deserializer"
    max_truncations: ClassVar[int] = 64
    """Truncation lengths tried per sample (spread over the payload)."""

    # -- hooks ----------------------------------------------------------------------

    def samples(self) -> Sequence[tuple[bytes, list[object]]]:
        """Payloads and the values each decodes to (``[]`` for a payload with no record)."""
        raise NotImplementedError

    def malformed(self) -> Sequence[bytes]:
        """Payloads that are not valid in this format."""
        return ()

    def make_deserializer(self) -> Any:
        """The deserializer under test; by default built by :attr:`factory` from :meth:`config`."""
        return self._factory().build(self.decode_config(), conformance_context("deserializer"))

    # -- helpers --------------------------------------------------------------------

    def decode(self, deserializer: Any, view: bytes | memoryview) -> list[object]:
        """Decode one payload as the runtime does; ``DeserError`` items stay in the list."""
        if many_per_payload(deserializer) is not None:
            return list(deserializer.deserialize_many(view))
        value = deserializer.deserialize(view)
        return [] if value is NO_RECORD else [value]

    def _expect(
        self, deserializer: Any, view: bytes | memoryview, expected: list[object], what: str
    ) -> list[object]:
        """Decode ``view`` and check it gives ``expected``; any exception is a failure."""
        try:
            got = self.decode(deserializer, view)
        except Exception as exc:
            raise ConformanceFailure(
                DESER_DECODES, f"{what} raised {type(exc).__name__}: {exc}"
            ) from exc
        check(got == expected, DESER_DECODES, f"{what} decoded to {got!r}, expected {expected!r}")
        return got

    @staticmethod
    def _check_record_error(exc: DeserError, payload: bytes) -> None:
        check(
            exc.kind in _RECORD_ERRORS,
            DESER_MALFORMED,
            f"{payload[:40]!r}: DeserError kind {exc.kind.name}; NOT_READY is only for a "
            "schema that cannot be fetched right now",
        )

    def _decode_or_error(self, deserializer: Any, payload: bytes) -> list[object] | None:
        """Values, or None when the payload was refused with a record error."""
        try:
            values = self.decode(deserializer, memoryview(payload))
        except DeserError as exc:
            self._check_record_error(exc, payload)
            return None
        except Exception as exc:
            raise ConformanceFailure(
                DESER_MALFORMED,
                f"{payload[:40]!r} raised {type(exc).__name__} ({exc}); raise DeserError "
                "from the client library's exception instead",
            ) from exc
        for item in values:
            if isinstance(item, DeserError):
                self._check_record_error(item, payload)
        return values

    # -- the promises ---------------------------------------------------------------

    def test_many_names_the_method_the_runtime_calls(self) -> None:
        deserializer = self.make_deserializer()
        name = type(deserializer).__name__
        check(
            many_per_payload(deserializer) is not None or isinstance(deserializer, Deserializer),
            DESER_SHAPE,
            f"{name} declares neither deserialize() (Deserializer) nor many = True with "
            "deserialize_many() (ManyDeserializer)",
        )

    def test_decodes_whole_payload_views(self) -> None:
        deserializer = self.make_deserializer()
        for payload, expected in self.samples():
            self._expect(deserializer, memoryview(payload), expected, repr(payload[:40]))

    def test_decodes_a_view_that_is_a_slice_of_a_larger_buffer(self) -> None:
        deserializer = self.make_deserializer()
        for payload, expected in self.samples():
            # Framing bytes on both sides that no format accepts as part of a record.
            buffer = b"\xff\x00\xfe" + payload + b"\x00\xff\xfe"
            view = memoryview(buffer)[3 : 3 + len(payload)]
            what = (
                f"a slice of a larger buffer holding {payload[:40]!r} (decode the view "
                "itself; view.obj is the whole buffer)"
            )
            self._expect(deserializer, view, expected, what)

    def test_b97_takes_bytes_decodes_whole_bytes_as_views(self) -> None:
        deserializer = self.make_deserializer()
        if not takes_bytes(deserializer):
            raise skip(f"{type(deserializer).__name__} takes views only (no takes_bytes)")
        for payload, expected in self.samples():
            self._expect(
                deserializer, bytes(payload), expected, f"the bytes object {payload[:40]!r}"
            )
        for payload in self.malformed():
            try:
                values = self.decode(deserializer, bytes(payload))
            except DeserError as exc:
                self._check_record_error(exc, payload)
                continue
            except Exception as exc:
                raise ConformanceFailure(
                    DESER_BYTES,
                    f"the malformed bytes object {payload[:40]!r} raised "
                    f"{type(exc).__name__} ({exc}); raise DeserError instead",
                ) from exc
            check(
                any(isinstance(v, DeserError) for v in values),
                DESER_BYTES,
                f"the malformed bytes object {payload[:40]!r} decoded to {values!r}",
            )

    def test_values_do_not_borrow_the_payload(self) -> None:
        deserializer = self.make_deserializer()
        for payload, expected in self.samples():
            buffer = bytearray(payload)
            view = memoryview(buffer)
            got = self._expect(deserializer, view, expected, repr(payload[:40]))
            try:
                view.release()
            except BufferError as exc:
                raise ConformanceFailure(
                    DESER_BORROWED, f"the values of {payload[:40]!r} still export the view: {exc}"
                ) from exc
            buffer[:] = b"\x00" * len(buffer)
            check(
                got == expected,
                DESER_BORROWED,
                f"after the payload buffer was reused the values of {payload[:40]!r} read "
                f"{got!r}, expected {expected!r}",
            )

    def test_b28_malformed_payloads_raise_deser_error(self) -> None:
        payloads = list(self.malformed())
        if not payloads:
            raise skip(f"{type(self).__name__} lists no malformed() payloads")
        deserializer = self.make_deserializer()
        for payload in payloads:
            values = self._decode_or_error(deserializer, payload)
            if values is None:
                continue
            check(
                any(isinstance(v, DeserError) for v in values),
                DESER_MALFORMED,
                f"the malformed payload {payload[:40]!r} decoded to {values!r}",
            )

    def test_b28_truncated_payloads_decode_or_raise_deser_error(self) -> None:
        deserializer = self.make_deserializer()
        for payload, _ in self.samples():
            n = len(payload)
            step = max(1, n // self.max_truncations)
            for cut in range(0, n, step):
                self._decode_or_error(deserializer, payload[:cut])
