"""What the Confluent-framed deserializers share, Avro's and Protobuf's (spate-protobuf).

:class:`ConfluentDeserializer` owns the registry side of the per-record path: the lookup
of a writer schema by id (a miss is ``NOT_READY`` until the id has been unknown for
``unknown_schema_timeout``, then ``UNKNOWN_SCHEMA`` with ``on_unknown_schema``, B21, B28)
and the announcement of each new writer schema to the sinks that evolve their tables
(:class:`~spate.schema.SchemaChanges`, B60): a sink that cannot take the schema makes the
record ``NOT_READY`` with its one-line reason, logged once per schema id, so nothing
written with that schema is decoded (or committed past) until it can.
"""

from __future__ import annotations

import logging
from typing import Any

from spate import DeserError, DeserErrorKind, ErrorPolicy
from spate.schema import Field, SchemaChanges

from spate_avro._registry import SchemaRegistryClient

logger = logging.getLogger(__name__)


class ConfluentDeserializer:
    """Base of the ``mode: confluent`` deserializers: registry lookups and announcements."""

    def __init__(
        self,
        client: SchemaRegistryClient,
        *,
        fetch_wait: float,
        unknown_schema_timeout: float = 300.0,
        on_unknown_schema: ErrorPolicy = ErrorPolicy.FAIL,
        schema_changes: SchemaChanges | None = None,
    ) -> None:
        self._client = client
        self._fetch_wait = fetch_wait
        self._unknown_timeout = unknown_schema_timeout
        self._on_unknown = on_unknown_schema
        self._changes = schema_changes
        self._refused: set[int] = set()

    @property
    def registry(self) -> SchemaRegistryClient:
        return self._client

    def _lookup(self, schema_id: int) -> Any:
        """The parsed writer schema of ``schema_id`` (waits at most ``fetch_wait``)."""
        try:
            return self._client.lookup(schema_id, self._fetch_wait)
        except DeserError as exc:
            if exc.kind is DeserErrorKind.NOT_READY:
                error = self._client.unknown_error(
                    schema_id, self._unknown_timeout, self._on_unknown
                )
                if error is not None:
                    raise error from None
            raise

    @property
    def _announcing(self) -> bool:
        return self._changes is not None and self._changes.watched

    def _announce(self, schema_id: int, fields: tuple[Field, ...] | None) -> None:
        """Tell the sinks that follow the schemas about a new writer schema (B60).

        A sink that refuses it (an incompatible change, a table it cannot alter yet) makes
        the record ``NOT_READY``: the runtime retries it and commits nothing past it.
        """
        if self._changes is None or fields is None:
            return
        try:
            self._changes.publish(f"schema id {schema_id}", fields)
        except Exception as exc:
            reason = str(getattr(exc, "reason", None) or exc)
            if schema_id not in self._refused:
                self._refused.add(schema_id)
                logger.warning("records of schema id %d wait: %s", schema_id, reason)
            raise DeserError(f"schema id {schema_id}: {reason}", DeserErrorKind.NOT_READY) from None
        if self._refused:
            self._refused.discard(schema_id)

    def close(self) -> None:
        """Stop the registry client's fetch thread (the pipeline calls it at the end)."""
        self._client.close()
