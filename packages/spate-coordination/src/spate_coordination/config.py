"""Configuration of coordination: the ``coordination`` YAML section and the store sections.

Owns :class:`CoordinationConfig` (decoded strictly with :func:`spate.config.decode` at
path ``coordination``), the store models :class:`MemoryStoreConfig` and
:class:`NatsStoreConfig`, and the lookup of store factories through the
``spate.coordination_stores`` entry-point group. Does not own the stores themselves.

```yaml
coordination:
  store:
    nats:
      servers: [nats://127.0.0.1:4222]
      creds_file: /etc/spate/job.creds     # or token, or user + password
      tls: {ca_file: /etc/ssl/ca.pem}
  job: backfill-2024
  instance_id: worker-a                    # default: <hostname>-<pid>
  lease_duration: 10s
  drain_deadline: 30s
  retry_quarantined: false                 # true: read quarantined splits again
```

Upholds B17 (unknown keys refused with their dotted path, cross-field rules) and B29
(bad configuration fails at start-up naming the key).
"""

from __future__ import annotations

import os
import re
import socket
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from importlib import metadata
from typing import Protocol, runtime_checkable

from spate import Secret
from spate.config import Duration, decode, join_path
from spate.errors import ConfigError, MissingConnectorError, PluginError
from spate.plugins import BuildContext, PluginKind

from spate_coordination._store import TOKEN_RE, CoordinationStore

__all__ = [
    "CoordinationConfig",
    "CoordinationStoreFactory",
    "JobStore",
    "MemoryStoreConfig",
    "NatsStoreConfig",
    "NatsTlsConfig",
    "load_coordination_config",
    "load_store_factory",
]

_BUCKET_PREFIX_RE = re.compile(r"^[A-Za-z0-9_-]+$")


@dataclass(frozen=True, slots=True, kw_only=True)
class MemoryStoreConfig:
    """``store: {memory: {}}`` — an in-process store; every instance must share the process."""


@dataclass(frozen=True, slots=True, kw_only=True)
class NatsTlsConfig:
    """TLS towards the NATS servers (``tls://`` URLs or servers that require TLS)."""

    ca_file: str | None = None
    """PEM bundle to verify the server with; the system trust store when unset."""
    cert_file: str | None = None
    """Client certificate (PEM) for mutual TLS; needs ``key_file``."""
    key_file: str | None = None
    """Client private key (PEM)."""
    verify: bool = True
    """Verify the server's certificate and host name; turn off only for local tests."""
    server_name: str | None = None
    """Host name to verify instead of the one in the URL."""

    def config_errors(self) -> Iterator[tuple[str, str]]:
        if (self.cert_file is None) != (self.key_file is None):
            yield ("cert_file", "cert_file and key_file must be given together")


@dataclass(frozen=True, slots=True, kw_only=True)
class NatsStoreConfig:
    """``store: {nats: {...}}`` — NATS JetStream KV; two buckets per job.

    Buckets are ``<bucket_prefix>_<job>`` (durable: plan, assignments, progress) and
    ``<bucket_prefix>_<job>_leases`` (a bucket-wide TTL equal to ``lease_duration``:
    heartbeats and the leader lease). Authentication: at most one of ``token``,
    ``user``/``password`` and ``creds_file``.
    """

    servers: list[str] = field(default_factory=lambda: ["nats://127.0.0.1:4222"])
    """Server URLs (``nats://`` or ``tls://``); the client fails over among them."""
    token: Secret | None = None
    """Token authentication (instead of ``user``/``password`` or ``creds_file``)."""
    user: str | None = None
    """User name for user/password authentication."""
    password: Secret | None = None
    """Password of ``user``; write ``${NATS_PASSWORD}`` to keep it out of the file."""
    creds_file: str | None = None
    """A ``.creds`` file (user JWT and NKey seed)."""
    tls: NatsTlsConfig | None = None
    connect_timeout: Duration = 5.0
    """How long start-up waits for a server before failing with the URLs it tried."""
    request_timeout: Duration = 5.0
    """Timeout of one KV request; a timed-out request is retried by the coordinator."""
    reconnect_wait: Duration = 1.0
    """Pause between reconnect attempts after the connection dropped."""
    bucket_prefix: str = "spate"
    """First part of the key-value bucket names (``<bucket_prefix>_<job>``)."""
    replicas: int = 1
    """JetStream replicas of the buckets (1 for a single server)."""

    def config_errors(self) -> Iterator[tuple[str, str]]:
        if not self.servers:
            yield ("servers", "at least one server URL is required")
        for i, url in enumerate(self.servers):
            if "://" not in url:
                yield (f"servers[{i}]", f"expected a nats:// or tls:// URL, got {url!r}")
        methods = [
            name
            for name, used in (
                ("token", self.token is not None),
                ("user", self.user is not None or self.password is not None),
                ("creds_file", self.creds_file is not None),
            )
            if used
        ]
        if len(methods) > 1:
            yield (methods[1], f"use only one of token, user/password, creds_file (got {methods})")
        if (self.user is None) != (self.password is None):
            yield ("user", "user and password must be given together")
        if not _BUCKET_PREFIX_RE.match(self.bucket_prefix):
            yield ("bucket_prefix", "may only contain letters, digits, '_' and '-'")
        if self.replicas < 1:
            yield ("replicas", "must be at least 1")
        for name in ("connect_timeout", "request_timeout", "reconnect_wait"):
            if getattr(self, name) <= 0:
                yield (name, "must be positive")


JobStore = Callable[[str, float], CoordinationStore]
"""What a store factory builds: ``(job, ttl) -> store`` for one job's keyspaces."""


@runtime_checkable
class CoordinationStoreFactory(Protocol):
    """What a ``spate.coordination_stores`` entry point names."""

    config_model: type[object]

    def build(self, config: object, context: BuildContext) -> JobStore:
        """Return a function that opens the store for one job with a given lease TTL."""
        ...


def load_store_factory(name: str, path: str = "") -> CoordinationStoreFactory:
    """The factory registered as ``name`` under ``spate.coordination_stores``.

    Raises :class:`~spate.errors.MissingConnectorError` when nothing is registered under
    that name and :class:`~spate.errors.PluginError` when the entry point is not a factory.
    """
    group = PluginKind.COORDINATION_STORE.group
    for ep in metadata.entry_points(group=group):
        if ep.name == name:
            try:
                loaded = ep.load()
            except ImportError as exc:
                raise PluginError(
                    f"{path}: cannot load coordination store {name!r}: {exc}"
                ) from exc
            factory = loaded() if isinstance(loaded, type) else loaded
            if not isinstance(factory, CoordinationStoreFactory):
                raise PluginError(f"{ep.value} is not a coordination store factory")
            return factory
    raise MissingConnectorError("coordination store", name, None, path=path)


def _default_instance_id() -> str:
    host = re.sub(r"[^A-Za-z0-9_-]", "-", socket.gethostname()) or "host"
    return f"{host}-{os.getpid()}"


@dataclass(frozen=True, slots=True, kw_only=True)
class CoordinationConfig:
    """The ``coordination`` section (B24).

    ``store`` is a single-key map ``{name: body}``: ``memory`` or ``nats`` (or a store
    another distribution registers); the body is decoded with that store's model and the
    result is available as :attr:`store_name` / :attr:`store_config`. In code, the body
    may already be the model object (``store={"nats": NatsStoreConfig(...)}``).
    """

    store: Mapping[str, object] = field(default_factory=lambda: {"memory": {}}, repr=False)
    job: str
    """Name shared by every instance that splits the same work; it names the buckets."""
    instance_id: str = field(default_factory=_default_instance_id)
    """Unique among live instances of the job; a duplicate is refused at start."""
    lease_duration: Duration = 10.0
    """An instance that has not renewed its heartbeat for this long is dead; its splits move."""
    heartbeat_interval: Duration | None = None
    """How often heartbeats and the leader lease are renewed; default a third of the lease."""
    poll_interval: Duration = 1.0
    """How often the leader rebalances and workers read assignments (watches wake them early)."""
    drain_deadline: Duration = 30.0
    """How long an owner may drain a revoked split before it is taken away by force."""
    retry_quarantined: bool = False
    """At start, hand the job's quarantined splits out again; each resumes from its
    committed position (fix what made them fail first)."""

    store_name: str = field(init=False, default="")
    store_config: object = field(init=False, default=None)

    def __post_init__(self) -> None:
        if not isinstance(self.store, Mapping) or len(self.store) != 1:
            raise ConfigError("store", "expected exactly one store, e.g. {nats: {...}}")
        ((name, body),) = self.store.items()
        factory = load_store_factory(name, join_path("store", name))
        check = getattr(factory, "check_installed", None)
        if check is not None:
            # Fail while validating, not at start-up, when the store's client is missing.
            check(join_path("store", name))
        model = factory.config_model
        decoded = body if isinstance(body, model) else decode(model, body, join_path("store", name))
        object.__setattr__(self, "store_name", name)
        object.__setattr__(self, "store_config", decoded)

    @property
    def renew_interval(self) -> float:
        """The heartbeat cadence in seconds."""
        if self.heartbeat_interval is not None:
            return self.heartbeat_interval
        return self.lease_duration / 3

    def config_errors(self) -> Iterator[tuple[str, str]]:
        if not TOKEN_RE.match(self.job):
            yield ("job", "may only contain letters, digits, '_' and '-'")
        if not TOKEN_RE.match(self.instance_id):
            yield ("instance_id", "may only contain letters, digits, '_' and '-'")
        if self.lease_duration < 1.0:
            yield ("lease_duration", "must be at least 1s")
        if self.heartbeat_interval is not None and not (
            0 < self.heartbeat_interval <= self.lease_duration / 2
        ):
            yield ("heartbeat_interval", "must be positive and at most half of lease_duration")
        if not 0 < self.poll_interval <= self.lease_duration:
            yield ("poll_interval", "must be positive and at most lease_duration")
        if self.drain_deadline <= 0:
            yield ("drain_deadline", "must be positive")

    def open_store(self, context: BuildContext) -> CoordinationStore:
        """Build the configured store for this job (not yet connected: call ``open``)."""
        factory = load_store_factory(self.store_name, join_path("store", self.store_name))
        return factory.build(self.store_config, context)(self.job, self.lease_duration)


def load_coordination_config(raw: object, path: str = "coordination") -> CoordinationConfig:
    """Decode the ``coordination`` section strictly; errors name their dotted path.

    Raises :class:`~spate.errors.ConfigError`, or
    :class:`~spate.errors.MissingConnectorError` (with the install command when known)
    for a store that is not installed.
    """
    try:
        return decode(CoordinationConfig, raw, path)
    except MissingConnectorError as exc:
        raise MissingConnectorError(
            exc.kind, exc.name or "", exc.install, path=join_path(path, exc.path or "")
        ) from exc.__cause__
