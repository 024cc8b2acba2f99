"""The ``deserializer: {protobuf: ...}`` section: modes, descriptors, registry, policy.

Owns the config model only; spate's strict decoder (``spate.config.decode``) maps YAML
onto it and refuses unknown keys with their dotted path (B17). Cross-field rules (which
keys each mode needs or refuses) live in ``config_errors``. The ``registry:`` section is
spate-avro's :class:`~spate_avro.RegistryConfig`, so both formats share one client.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Literal

from spate import ErrorPolicy
from spate.config import Duration
from spate_avro import RegistryConfig

ProtobufMode = Literal["confluent", "raw"]
EnumStyle = Literal["names", "numbers"]


@dataclass(frozen=True, slots=True, kw_only=True)
class ProtobufConfig:
    """``deserializer: {protobuf: ...}`` — decode Protobuf payloads into dicts."""

    mode: ProtobufMode = "confluent"
    """``confluent`` (magic byte 0, 4-byte schema id, message-index array; schemas from
    the registry) or ``raw`` (bare messages of ``message`` from ``descriptor_set``)."""
    descriptor_set: str | None = None
    """``raw`` only: a compiled ``FileDescriptorSet`` (``protoc --include_imports
    --descriptor_set_out=FILE``), resolved against the working directory."""
    message: str | None = None
    """``raw`` only: the full name of the message type, e.g. ``shop.v1.OrderPlaced``."""
    enums: EnumStyle = "names"
    """Enum values as their ``names`` or their ``numbers`` (an unknown number stays a
    number either way)."""
    registry: RegistryConfig | None = None
    """The schema registry (``confluent`` mode only)."""
    prewarm_subjects: tuple[str, ...] = ()
    """Subjects whose latest schema is fetched and compiled at start-up (``confluent``)."""
    negative_cache_ttl: Duration = 300.0
    """How long a registry schema that cannot be used (not Protobuf, does not compile)
    is remembered. For an id the registry answers 404 for, it only caps the wait before
    asking again: such records wait, they are never skipped for it."""
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

    def config_errors(self) -> Iterator[tuple[str, str]]:
        if self.mode == "confluent":
            if self.registry is None:
                yield "registry", "required in confluent mode"
            for key in ("descriptor_set", "message"):
                if getattr(self, key) is not None:
                    yield key, "only used in raw mode (confluent schemas come from the registry)"
        else:
            if self.descriptor_set is None or not self.descriptor_set.strip():
                yield "descriptor_set", "required in raw mode"
            if self.message is None or not self.message.strip():
                yield "message", "required in raw mode"
            if self.registry is not None:
                yield "registry", "only used in confluent mode, not in raw mode"
            if self.prewarm_subjects:
                yield "prewarm_subjects", "only used in confluent mode, not in raw mode"
        for i, subject in enumerate(self.prewarm_subjects):
            if not subject.strip():
                yield f"prewarm_subjects[{i}]", "must not be empty"
        if self.negative_cache_ttl < 0:
            yield "negative_cache_ttl", "must not be negative"
        if self.fetch_wait < 0:
            yield "fetch_wait", "must not be negative"
        if self.unknown_schema_timeout < 0:
            yield "unknown_schema_timeout", "must not be negative"
