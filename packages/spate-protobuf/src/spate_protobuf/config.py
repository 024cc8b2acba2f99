"""The ``deserializer: {protobuf: ...}`` section: modes, descriptors, registry, policy.

Owns the config model only; spate's strict decoder (``spate.config.decode``) maps YAML
onto it and refuses unknown keys with their dotted path (B17). Cross-field rules (which
keys each mode needs or refuses) live in ``config_errors``. The registry keys
(``registry:``, ``prewarm_subjects``, the waits and the error policies) are spate-avro's
:class:`~spate_avro.RegistrySettings`, so both formats share one client and one set of
rules.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Literal

from spate_avro import RegistrySettings

__all__ = [
    "EnumStyle",
    "ProtobufConfig",
    "ProtobufMode",
]

ProtobufMode = Literal["confluent", "raw"]
EnumStyle = Literal["names", "numbers"]


@dataclass(frozen=True, slots=True, kw_only=True)
class ProtobufConfig(RegistrySettings):
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

    def config_errors(self) -> Iterator[tuple[str, str]]:
        yield from self.registry_errors(self.mode)
        if self.mode == "confluent":
            for key in ("descriptor_set", "message"):
                if getattr(self, key) is not None:
                    yield key, "only used in raw mode (confluent schemas come from the registry)"
        else:
            if self.descriptor_set is None or not self.descriptor_set.strip():
                yield "descriptor_set", "required in raw mode"
            if self.message is None or not self.message.strip():
                yield "message", "required in raw mode"
