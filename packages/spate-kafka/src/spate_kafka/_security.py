"""``security:`` — TLS and SASL of a Kafka source or sink, mapped to librdkafka (B70).

Example::

    security:
      protocol: SASL_SSL                 # PLAINTEXT | SSL | SASL_PLAINTEXT | SASL_SSL
      ca: /etc/kafka/ca.pem              # CA that signed the brokers' certificates
      cert: /etc/kafka/client.pem        # mutual TLS (with key)
      key: /etc/kafka/client.key
      sasl: {mechanism: SCRAM-SHA-512, username: etl, password_file: /run/secrets/kafka}

The typed keys sit alongside the ``rdkafka:`` passthrough, which may add any other
``ssl.*``/``sasl.*`` setting; a librdkafka key set both here and there is refused, so a
file never says two things. The password is a :class:`~spate.Secret` (B67).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Literal

from spate import NO_SECRET, Secret
from spate.config import tls_file_errors

Protocol = Literal["PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"]


@dataclass(frozen=True, slots=True, kw_only=True)
class KafkaSaslConfig:
    """``security.sasl:`` — the SASL mechanism and credentials."""

    mechanism: Literal["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"] = "SCRAM-SHA-512"
    """SASL mechanism the brokers' listener enables."""
    username: str = ""
    """SASL user name."""
    password: Secret = NO_SECRET
    """Its password (``password_file:`` reads it from a file); never logged."""

    def config_errors(self) -> Iterator[tuple[str, str]]:
        if not self.username:
            yield "username", "required key is missing"
        if not self.password:
            yield "password", "required key is missing"


@dataclass(frozen=True, slots=True, kw_only=True)
class KafkaSecurityConfig:
    """``security:`` — how the client talks to the brokers (TLS, SASL)."""

    protocol: Protocol = "PLAINTEXT"
    """``PLAINTEXT``, ``SSL``, ``SASL_PLAINTEXT`` or ``SASL_SSL`` (librdkafka's
    ``security.protocol``)."""
    ca: str = ""
    """CA bundle (PEM) that signed the brokers' certificates; empty: the system's."""
    cert: str = ""
    """Client certificate (PEM) for mutual TLS; needs ``key``."""
    key: str = ""
    """Private key (PEM) of ``cert``."""
    key_password: Secret = NO_SECRET
    """Password of an encrypted ``key``; never logged."""
    sasl: KafkaSaslConfig | None = None
    """Mechanism and credentials, required with ``SASL_PLAINTEXT`` and ``SASL_SSL``."""

    @property
    def tls(self) -> bool:
        return self.protocol in ("SSL", "SASL_SSL")

    def config_errors(self) -> Iterator[tuple[str, str]]:
        uses_sasl = self.protocol.startswith("SASL_")
        if uses_sasl and self.sasl is None:
            yield "sasl", f"protocol {self.protocol} needs sasl: {{mechanism, username, password}}"
        if not uses_sasl and self.sasl is not None:
            yield "sasl", f"only used with SASL_PLAINTEXT or SASL_SSL, not {self.protocol}"
        for name in ("ca", "cert", "key"):
            if getattr(self, name) and not self.tls:
                yield name, f"only used with SSL or SASL_SSL, not {self.protocol}"
        yield from tls_file_errors(self.ca, self.cert, self.key)

    def librdkafka(self) -> dict[str, str]:
        """The librdkafka settings these keys stand for."""
        settings: dict[str, str] = {"security.protocol": self.protocol}
        if self.ca:
            settings["ssl.ca.location"] = self.ca
        if self.cert:
            settings["ssl.certificate.location"] = self.cert
            settings["ssl.key.location"] = self.key
        if self.key_password:
            settings["ssl.key.password"] = self.key_password
        if self.sasl is not None:
            settings["sasl.mechanism"] = self.sasl.mechanism
            settings["sasl.username"] = self.sasl.username
            settings["sasl.password"] = self.sasl.password
        return settings

    def conflicts(self, rdkafka: Mapping[str, object]) -> Iterator[tuple[str, str]]:
        """``(key, message)`` for each passthrough key that these typed keys also set."""
        if self.protocol == "PLAINTEXT" and "security.protocol" in rdkafka:
            return  # the passthrough alone configures security (the older way)
        for key in self.librdkafka():
            if key in rdkafka:
                yield key, "is set by security:; give it in one place"
