"""The built-in coordination stores pass ``CoordinationStoreConformance`` (B24, B29).

The in-memory store always; NATS JetStream KV against the local nats-server (integration),
including an unreachable server failing ``open()`` with its URL.
"""

from __future__ import annotations

import uuid

import pytest
from spate_coordination import CoordinationStore, MemoryStore, NatsStoreConfig
from spate_coordination._nats import NatsStore
from spate_coordination.testing import CoordinationStoreConformance


class TestMemoryStoreConformance(CoordinationStoreConformance):
    async def open_store(self) -> CoordinationStore:
        store = MemoryStore(self.ttl)
        await store.open()
        return store


@pytest.mark.integration
class TestNatsStoreConformance(CoordinationStoreConformance):
    @pytest.fixture(autouse=True)
    def _server(self, nats_url: str) -> None:
        self.url = nats_url

    async def open_store(self) -> CoordinationStore:
        job = f"conformance-{uuid.uuid4().hex[:10]}"
        store = NatsStore(NatsStoreConfig(servers=[self.url]), job, self.ttl)
        await store.open()
        return store

    async def unreachable_store(self) -> tuple[CoordinationStore, str]:
        url = "nats://127.0.0.1:9"
        config = NatsStoreConfig(servers=[url], connect_timeout=0.5)
        return NatsStore(config, "conformance-down", self.ttl), "127.0.0.1:9"
