"""NATS JetStream KV store specifics: authentication, TLS, clear start-up errors (B29),
bucket TTL agreement, and the missing-extra hint (B26)."""

from __future__ import annotations

import asyncio
import contextlib
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from spate import BuildContext, ManualClock, MissingConnectorError
from spate.flow import InflightBudget
from spate.metrics import Meter
from spate_coordination import (
    CoordinationConfig,
    CoordinationError,
    Keyspace,
    NatsStoreConfig,
    NatsTlsConfig,
    StoreUnavailableError,
)
from spate_coordination._nats import NatsStore

from tests.support.nats_creds import make_creds
from tests.support.tls import make_pki

pytestmark = pytest.mark.integration


async def _roundtrip(store: NatsStore) -> None:
    await store.open()
    try:
        revision = await store.create(Keyspace.DURABLE, "k", b"v")
        assert revision is not None
        entry = await store.get(Keyspace.DURABLE, "k")
        assert entry is not None and entry.value == b"v"
    finally:
        await store.close()


def test_b29_unreachable_server_fails_naming_the_endpoint(unused_port: int) -> None:
    url = f"nats://127.0.0.1:{unused_port}"
    store = NatsStore(NatsStoreConfig(servers=[url], connect_timeout=1.0), "j", 2.0)
    with pytest.raises(StoreUnavailableError, match=f"cannot connect to NATS at {url}"):
        asyncio.run(store.open())


def test_token_and_user_password_authentication(nats_servers: Callable[..., Any]) -> None:
    token_server = nats_servers("tok", "--auth", "s3cret")
    user_server = nats_servers("usr", "--user", "spate", "--pass", "pw")
    asyncio.run(
        _roundtrip(NatsStore(NatsStoreConfig(servers=[token_server.url], token="s3cret"), "j", 2.0))
    )
    asyncio.run(
        _roundtrip(
            NatsStore(
                NatsStoreConfig(servers=[user_server.url], user="spate", password="pw"), "j", 2.0
            )
        )
    )
    wrong = NatsStore(
        NatsStoreConfig(servers=[token_server.url], token="nope", connect_timeout=1.0), "j", 2.0
    )
    with pytest.raises(StoreUnavailableError, match=token_server.url):
        asyncio.run(wrong.open())


def test_tls_with_a_private_ca(tmp_path: Path, nats_servers: Callable[..., Any]) -> None:
    pki = make_pki(tmp_path / "pki")
    cert, key = str(pki.server_cert), str(pki.server_key)
    server = nats_servers("tls", "--tls", "--tlscert", cert, "--tlskey", key)
    url = f"tls://127.0.0.1:{server.port}"
    asyncio.run(
        _roundtrip(
            NatsStore(
                NatsStoreConfig(servers=[url], tls=NatsTlsConfig(ca_file=str(pki.ca))), "j", 2.0
            )
        )
    )
    # Without the CA the certificate is not trusted: a clear failure, not a hang.
    untrusted = NatsStore(
        NatsStoreConfig(servers=[url], tls=NatsTlsConfig(), connect_timeout=2.0), "j", 2.0
    )
    with pytest.raises(StoreUnavailableError, match=url):
        asyncio.run(untrusted.open())


def test_mutual_tls_with_a_client_certificate(
    tmp_path: Path, nats_servers: Callable[..., Any]
) -> None:
    """B29: a server that verifies clients refuses one without a certificate, by URL."""
    pki = make_pki(tmp_path / "pki")
    server = nats_servers(
        "mtls",
        "--tlsverify",
        "--tlscert",
        str(pki.server_cert),
        "--tlskey",
        str(pki.server_key),
        "--tlscacert",
        str(pki.ca),
    )
    url = f"tls://127.0.0.1:{server.port}"
    client = NatsTlsConfig(
        ca_file=str(pki.ca), cert_file=str(pki.client_cert), key_file=str(pki.client_key)
    )
    asyncio.run(_roundtrip(NatsStore(NatsStoreConfig(servers=[url], tls=client), "j", 2.0)))
    without = NatsStore(
        NatsStoreConfig(servers=[url], tls=NatsTlsConfig(ca_file=str(pki.ca)), connect_timeout=2.0),
        "j",
        2.0,
    )
    with pytest.raises(StoreUnavailableError, match=url):
        asyncio.run(without.open())


def test_instances_with_another_lease_duration_are_refused(private_nats: Any) -> None:
    config = NatsStoreConfig(servers=[private_nats.url])
    asyncio.run(_roundtrip(NatsStore(config, "leases", 2.0)))
    other = NatsStore(config, "leases", 5.0)
    with pytest.raises(CoordinationError, match="same lease_duration"):
        asyncio.run(other.open())


def test_b24_an_expired_lease_sends_no_watch_event_but_is_gone_from_list(
    private_nats: Any,
) -> None:
    """Why coordination polls: on NATS 2.9 a bucket-TTL expiry is silent for watchers."""

    async def scenario() -> bool:
        store = NatsStore(NatsStoreConfig(servers=[private_nats.url]), "silent", 1.0)
        await store.open()
        try:
            events = store.watch(Keyspace.TTL, "member.")
            pending = asyncio.ensure_future(anext(events))
            await asyncio.sleep(0.2)
            await store.create(Keyspace.TTL, "member.a", b"hb")
            seen = await asyncio.wait_for(pending, 5)
            assert seen.value == b"hb"
            pending = asyncio.ensure_future(anext(events))
            await asyncio.sleep(2.5)
            assert await store.list(Keyspace.TTL, "member.") == []
            assert await store.get(Keyspace.TTL, "member.a") is None
            got_event = pending.done()
            pending.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await pending
            await events.aclose()  # type: ignore[attr-defined]
            return got_event
        finally:
            await store.close()

    assert asyncio.run(scenario()) is False


def test_b26_nats_store_without_nats_py_names_the_install_command() -> None:
    """Validating a config that asks for the NATS store fails without nats-py, naming the
    extra to install and the key; the memory store keeps working."""
    script = (
        "import sys; sys.modules['nats'] = None\n"
        "from spate_coordination import load_coordination_config\n"
        "assert load_coordination_config({'job': 'j'}).store_name == 'memory'\n"
        "try:\n"
        "    load_coordination_config({'store': {'nats': {}}, 'job': 'j'})\n"
        "except ImportError as exc:\n"
        "    print(type(exc).__name__, exc)\n"
    )
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
    assert out.stdout.startswith("MissingConnectorError coordination.store.nats: ")
    assert 'pip install "./packages/spate-coordination[nats]"' in out.stdout
    assert "spate[coordination-nats]" in out.stdout


def test_config_builds_a_nats_store_for_the_job(private_nats: Any) -> None:
    config = CoordinationConfig(
        store={"nats": {"servers": [private_nats.url]}}, job="built", lease_duration=2.0
    )
    context = BuildContext(
        pipeline="p",
        component="coordination",
        meter=Meter("p"),
        clock=ManualClock(),
        run_nonce="n",
        budget=InflightBudget(1 << 20),
    )
    store = config.open_store(context)
    assert isinstance(store, NatsStore)
    assert store.ttl == 2.0
    asyncio.run(_roundtrip(store))
    with pytest.raises(MissingConnectorError):
        CoordinationConfig(store={"etcd": {}}, job="j")


def test_b24_duplicate_instance_id_is_refused_on_nats(private_nats: Any) -> None:
    """Two processes configured with the same instance_id: the second is refused."""
    from spate_coordination import Coordinator, DuplicateInstanceError

    config = CoordinationConfig(
        store={"nats": {"servers": [private_nats.url]}},
        job="dup",
        instance_id="same",
        lease_duration=2.0,
    )

    def make() -> Coordinator:
        return Coordinator(
            config,
            NatsStore(config.store_config, "dup", 2.0),
            meter=Meter("dup"),  # type: ignore[arg-type]
        )

    first = make()
    first.start()
    try:
        with pytest.raises(DuplicateInstanceError, match="'same' is already used"):
            make().start()
    finally:
        first.stop()
    # A clean stop deletes the heartbeat: the id is free again at once.
    again = make()
    again.start()
    again.stop()


def test_creds_file_authenticates_with_a_user_jwt_and_nkey(
    tmp_path: Path, nats_servers: Callable[..., Any]
) -> None:
    """A ``.creds`` file (user JWT + NKEY seed) against a server in operator mode; a
    server that does not know the account refuses it, naming the URL (B29)."""
    config, creds = make_creds(tmp_path / "creds-files")
    server = nats_servers("creds", "-c", str(config))
    asyncio.run(
        _roundtrip(
            NatsStore(NatsStoreConfig(servers=[server.url], creds_file=str(creds)), "j", 2.0)
        )
    )
    _, foreign = make_creds(tmp_path / "foreign")
    refused = NatsStore(
        NatsStoreConfig(servers=[server.url], creds_file=str(foreign), connect_timeout=2.0),
        "j",
        2.0,
    )
    with pytest.raises(StoreUnavailableError, match=server.url):
        asyncio.run(refused.open())
