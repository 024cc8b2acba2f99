"""What the Confluent-framed deserializers share, Avro's and Protobuf's (spate-protobuf).

:func:`open_registry` is the start-up of ``mode: confluent``: the registry client, probed,
with ``prewarm_subjects`` fetched, so an unreachable registry or a missing subject fails
start-up with one line naming it (B29).

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
from collections.abc import Callable
from typing import Any

from spate import BuildContext, ConfigError, DeserError, DeserErrorKind, FatalError
from spate.records import ROW_COLUMN
from spate.schema import Field, SchemaChanges

from spate_avro._registry import AnswerParser, RegistryError, SchemaRegistryClient
from spate_avro.config import RegistrySettings

logger = logging.getLogger(__name__)


def open_registry(
    config: RegistrySettings,
    context: BuildContext,
    base: str,
    *,
    check: Callable[[str, int, Any], None] | None = None,
    parser: AnswerParser | None = None,
    query: str = "",
) -> tuple[SchemaRegistryClient, list[Any]]:
    """The probed registry client and the latest schema of each prewarmed subject.

    ``check(subject, schema_id, schema)`` may refuse a prewarmed schema with a
    ``ConfigError``; the client is closed whenever this raises.
    """
    if config.registry is None:
        raise ConfigError(f"{base}.registry", "required in confluent mode")
    client = SchemaRegistryClient(
        config.registry,
        clock=context.clock,
        negative_cache_ttl=config.negative_cache_ttl,
        parser=parser,
        query=query,
    )
    prewarmed: list[Any] = []
    try:
        client.probe()
        for i, subject in enumerate(config.prewarm_subjects):
            try:
                schema_id, schema = client.latest(subject)
            except RegistryError as exc:
                if exc.status == 404:
                    raise ConfigError(
                        f"{base}.prewarm_subjects[{i}]",
                        f"subject {subject!r} not found at {client.url}",
                    ) from None
                raise
            if check is not None:
                check(subject, schema_id, schema)
            logger.info("prewarmed schema id %d of subject %s", schema_id, subject)
            prewarmed.append(schema)
    except RegistryError as exc:
        client.close()
        raise FatalError(context.component, str(exc)) from None
    except ConfigError:
        client.close()
        raise
    return client, prewarmed


class ConfluentDeserializer:
    """Base of the ``mode: confluent`` deserializers: registry lookups and announcements."""

    def __init__(
        self,
        client: SchemaRegistryClient,
        settings: RegistrySettings,
        schema_changes: SchemaChanges | None = None,
    ) -> None:
        self.on_error = settings.on_error
        """The record error policy; the deserializer stage reads it (B28)."""
        self._client = client
        self._fetch_wait = settings.fetch_wait
        self._unknown_timeout = settings.unknown_schema_timeout
        self._on_unknown = settings.on_unknown_schema
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

    @staticmethod
    def _not_framed(data: Any, fmt: str, expected: str) -> DeserError:
        """The ``MALFORMED`` error of a payload whose Confluent header is wrong or cut
        short (``fmt`` names the format, ``expected`` what follows the magic byte)."""
        if not len(data):
            reason = "empty payload"
        elif data[0] != 0:
            reason = f"wrong magic byte 0x{data[0]:02x}"
        else:
            reason = f"only {len(data)} bytes"
        return DeserError(
            f"not a Confluent {fmt} payload ({reason}; expected magic byte 0{expected})",
            DeserErrorKind.MALFORMED,
        )

    @staticmethod
    def _in_batch(
        group_frames: list[tuple[str | None, Any]], rows: list[int]
    ) -> list[tuple[str | None, Any]]:
        """The frames of one schema's group of a batch, their ``__spate_row`` (a position
        in the group) made each record's position in the whole batch (``rows[i]``)."""
        import polars as pl

        positions = pl.Series(rows, dtype=pl.UInt32)
        for _, df in group_frames:
            df.replace_column(
                df.get_column_index(ROW_COLUMN),
                positions.gather(df.get_column(ROW_COLUMN)).alias(ROW_COLUMN),
            )
        return group_frames

    def close(self) -> None:
        """Stop the registry client's fetch thread (the pipeline calls it at the end)."""
        self._client.close()
