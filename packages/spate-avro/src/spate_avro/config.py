"""The ``deserializer: {avro: ...}`` section: modes, schemas, registry and error policy.

Owns the config models only; decoding them from YAML is spate's strict decoder
(``spate.config.decode``), which refuses unknown keys with their dotted path (B17).
Cross-field rules (which keys each mode needs or refuses) live in ``config_errors``.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Literal
from urllib.parse import urlsplit

from spate import ErrorPolicy, Secret, config
from spate.config import Duration, tls_file_errors

__all__ = [
    "AvroConfig",
    "AvroMode",
    "RegistryConfig",
    "RegistrySettings",
    "SchemaSource",
]

AvroMode = Literal["confluent", "raw", "single_object"]


@dataclass(frozen=True, slots=True, kw_only=True)
class SchemaSource(config.SchemaSource):
    """An Avro schema given ``inline:`` (JSON text) or by ``path:`` to a ``.avsc`` file.

    A relative ``path`` is resolved against the working directory of the process.
    """


@dataclass(frozen=True, slots=True, kw_only=True)
class RegistryConfig:
    """``registry:`` — where a Confluent-compatible schema registry answers."""

    url: str = ""
    """Base URL, e.g. ``http://localhost:8081``. Required in ``confluent`` mode. Credentials
    in it (``https://user:password@host``) are basic auth, as ``username``/``password``."""
    username: str | None = None
    """HTTP basic-auth user (an empty value means no authentication)."""
    password: Secret | None = None
    """HTTP basic-auth password (``password_file:`` reads it from a file; never logged)."""
    token: Secret | None = None
    """Bearer token (``Authorization: Bearer``), instead of ``username``/``password``."""
    ca: str = ""
    """CA bundle (PEM) that signed an ``https://`` registry's certificate; empty: the system's."""
    cert: str = ""
    """Client certificate (PEM) for mutual TLS; needs ``key``."""
    key: str = ""
    """Private key (PEM) of ``cert``."""
    timeout: Duration = 5.0
    """Timeout of one registry request."""
    retry_backoff: Duration = 1.0
    """Wait before a schema id whose fetch failed (registry unreachable, 5xx, 404) is
    asked for again; the wait doubles with each further failure, up to
    ``retry_backoff_max``."""
    retry_backoff_max: Duration = 30.0
    """Longest wait between two fetches of the same schema id."""

    def config_errors(self) -> Iterator[tuple[str, str]]:
        if not self.url.strip():
            yield "url", "required key is missing"
        elif not self.url.startswith(("http://", "https://")):
            yield "url", f"must start with http:// or https://, got {self.url!r}"
        elif "@" in urlsplit(self.url).netloc and (self.username or self.token):
            yield "url", "has credentials (user:password@): give them there or in username/token"
        if self.password and not self.username:
            yield "password", "given without username"
        if self.token and self.username:
            yield "token", "give a bearer token or username/password, not both"
        yield from tls_file_errors(self.ca, self.cert, self.key)
        if self.timeout <= 0:
            yield "timeout", "must be positive"
        if self.retry_backoff < 0:
            yield "retry_backoff", "must not be negative"
        if self.retry_backoff_max < self.retry_backoff:
            yield "retry_backoff_max", "must not be less than retry_backoff"


@dataclass(frozen=True, slots=True, kw_only=True)
class RegistrySettings:
    """The keys every registry-backed deserializer shares (Avro here, Protobuf in
    spate-protobuf): the registry, prewarming, the waits and the error policies."""

    registry: RegistryConfig | None = None
    """The schema registry (``confluent`` mode only)."""
    prewarm_subjects: tuple[str, ...] = ()
    """Subjects whose latest schema is fetched (and compiled) at start-up (``confluent``
    mode); a missing subject or an unreachable registry fails start-up."""
    negative_cache_ttl: Duration = 300.0
    """How long a registry schema that cannot be used (not of this format, not
    parseable or compilable, with unsupported references) is remembered. For an id the
    registry answers 404 for, it only caps the wait before asking again: such records
    wait, they are never skipped for it."""
    fetch_wait: Duration = 0.5
    """How long a record may wait for a schema fetch on a cache miss before it is
    reported not ready (and retried later by the runtime); 0 never waits."""
    unknown_schema_timeout: Duration = 300.0
    """How long records whose schema id the registry does not know (404) wait for it
    (a registry follower may not have caught up yet) before ``on_unknown_schema``
    applies; until then the pipeline stops at the record and nothing after it is
    committed."""
    on_unknown_schema: ErrorPolicy = ErrorPolicy.FAIL
    """What happens to a record whose schema id is still unknown after
    ``unknown_schema_timeout``: fail the pipeline, naming the id, topic, partition and
    offset, skip the record (counted with reason ``unknown_schema``), or write it to the
    ``dead_letter`` sink."""
    on_error: ErrorPolicy = ErrorPolicy.SKIP
    """What the pipeline does with a payload that cannot be decoded: skip it (counted),
    fail, or write it to the ``dead_letter`` sink with its error. Unknown schema ids
    follow ``on_unknown_schema`` instead."""

    def registry_errors(self, mode: str) -> Iterator[tuple[str, str]]:
        """The shared keys' errors; only ``confluent`` mode uses the registry."""
        if mode == "confluent":
            if self.registry is None:
                yield "registry", "required in confluent mode"
        else:
            if self.registry is not None:
                yield "registry", f"only used in confluent mode, not in {mode} mode"
            if self.prewarm_subjects:
                yield "prewarm_subjects", f"only used in confluent mode, not in {mode} mode"
        for i, subject in enumerate(self.prewarm_subjects):
            if not subject.strip():
                yield f"prewarm_subjects[{i}]", "must not be empty"
        if self.negative_cache_ttl < 0:
            yield "negative_cache_ttl", "must not be negative"
        if self.fetch_wait < 0:
            yield "fetch_wait", "must not be negative"
        if self.unknown_schema_timeout < 0:
            yield "unknown_schema_timeout", "must not be negative"


@dataclass(frozen=True, slots=True, kw_only=True)
class AvroConfig(RegistrySettings):
    """``deserializer: {avro: ...}`` — decode Avro payloads with fastavro."""

    mode: AvroMode = "confluent"
    """``confluent`` (magic byte 0 + 4-byte schema id, schemas from the registry), ``raw``
    (bare Avro binary written with ``schema``) or ``single_object`` (marker ``C3 01`` + the
    schema's 64-bit Rabin fingerprint)."""
    schema: SchemaSource | None = None
    """The writer schema (``raw``; ``single_object``: the current writer schema)."""
    writer_schemas: tuple[SchemaSource, ...] = ()
    """``single_object`` only: further writer schemas recognised by their fingerprint."""
    reader_schema: SchemaSource | None = None
    """Decode into this schema (Avro schema resolution); default: the writer schema."""
    envelope: Literal["none", "debezium"] = "none"
    """``debezium``: the records are Debezium change events. The values are decoded as
    they are (for the ``spate.cdc.DebeziumRows`` operator), but the table is described by
    the envelope's ``after`` record: ``create_table``, ``spate schema ddl`` and ``evolve:
    add_columns`` see the source table's columns, so a column added in the source is
    added to the ClickHouse table before the first change carrying it is decoded. The
    records take the row path."""

    def config_errors(self) -> Iterator[tuple[str, str]]:
        yield from self.registry_errors(self.mode)
        if self.mode == "confluent":
            if self.schema is not None:
                yield "schema", "not used in confluent mode (writer schemas come from the registry)"
        elif self.schema is None and not (self.mode == "single_object" and self.writer_schemas):
            yield "schema", f"required in {self.mode} mode"
        if self.writer_schemas and self.mode != "single_object":
            yield "writer_schemas", "only used in single_object mode"
