"""Entry-point factories of the built-in coordination stores (``memory`` and ``nats``).

Owns what the ``spate.coordination_stores`` entry points name. The ``nats`` factory
imports nats-py only when a store is built, so spate-coordination installs and loads
without the ``nats`` extra; building it without the extra fails with the install
command (B26).
"""

from __future__ import annotations

from spate.plugins import BuildContext

from spate_coordination._memory import MemoryStore
from spate_coordination._store import CoordinationStore
from spate_coordination.config import JobStore, MemoryStoreConfig, NatsStoreConfig


class MemoryStoreFactory:
    """``store: {memory: {}}``: a fresh in-process store for a single-instance job."""

    config_model = MemoryStoreConfig

    def build(self, config: object, context: BuildContext) -> JobStore:
        if not isinstance(config, MemoryStoreConfig):
            raise TypeError(f"expected MemoryStoreConfig, got {type(config).__name__}")
        clock = context.clock

        def open_store(job: str, ttl: float) -> CoordinationStore:
            return MemoryStore(ttl, clock=clock)

        return open_store


class NatsStoreFactory:
    """``store: {nats: {...}}``: NATS JetStream KV (needs ``spate[coordination-nats]``)."""

    config_model = NatsStoreConfig

    def check_installed(self, path: str = "") -> None:
        """Raise ``MissingConnectorError`` naming ``spate[coordination-nats]`` without nats-py."""
        from spate_coordination._nats import require_nats

        require_nats(path)

    def build(self, config: object, context: BuildContext) -> JobStore:
        if not isinstance(config, NatsStoreConfig):
            raise TypeError(f"expected NatsStoreConfig, got {type(config).__name__}")
        from spate_coordination._nats import NatsStore, require_nats

        require_nats()
        nats_config = config

        def open_store(job: str, ttl: float) -> CoordinationStore:
            return NatsStore(nats_config, job, ttl)

        return open_store


memory_store_factory = MemoryStoreFactory()
nats_store_factory = NatsStoreFactory()
