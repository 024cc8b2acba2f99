"""Decentralised NATS auth for tests: an operator, an account with JetStream and a user.

Made with ``nkeys`` at test time (nothing committed): :func:`make_creds` writes the
server configuration (operator JWT, memory resolver preloaded with the account) and the
user's ``.creds`` file (JWT and NKEY seed), as ``nsc`` would.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import time
from pathlib import Path
from typing import Any

import nkeys


def _keypair(prefix: int) -> Any:
    return nkeys.from_seed(nkeys.encode_seed(os.urandom(32), prefix))


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).decode().rstrip("=")


def _jwt(issuer: Any, subject: str, name: str, nats: dict[str, Any]) -> str:
    claims: dict[str, Any] = {
        "iat": int(time.time()),
        "iss": issuer.public_key.decode(),
        "name": name,
        "sub": subject,
        "nats": {**nats, "version": 2},
    }
    digest = hashlib.sha256(json.dumps(claims, sort_keys=True).encode()).digest()
    claims["jti"] = base64.b32encode(digest).decode().rstrip("=")
    header = _b64(json.dumps({"typ": "JWT", "alg": "ed25519-nkey"}).encode())
    payload = _b64(json.dumps(claims).encode())
    signature = _b64(issuer.sign(f"{header}.{payload}".encode()))
    return f"{header}.{payload}.{signature}"


def make_creds(directory: Path) -> tuple[Path, Path]:
    """``(server_config, user_creds)`` for a server in operator mode with one user."""
    directory.mkdir(parents=True, exist_ok=True)
    operator = _keypair(nkeys.PREFIX_BYTE_OPERATOR)
    account = _keypair(nkeys.PREFIX_BYTE_ACCOUNT)
    system = _keypair(nkeys.PREFIX_BYTE_ACCOUNT)  # JetStream needs a system account
    user = _keypair(nkeys.PREFIX_BYTE_USER)
    unlimited = {"subs": -1, "data": -1, "payload": -1, "imports": -1, "exports": -1}
    jetstream = {"mem_storage": -1, "disk_storage": -1, "streams": -1, "consumer": -1}
    operator_jwt = _jwt(operator, operator.public_key.decode(), "spate-test", {"type": "operator"})
    account_pub = account.public_key.decode()
    account_jwt = _jwt(
        operator,
        account_pub,
        "spate",
        {"type": "account", "limits": {**unlimited, "wildcards": True, "conn": -1, **jetstream}},
    )
    system_pub = system.public_key.decode()
    system_jwt = _jwt(operator, system_pub, "SYS", {"type": "account", "limits": unlimited})
    user_jwt = _jwt(
        account,
        user.public_key.decode(),
        "etl",
        {"type": "user", "pub": {}, "sub": {}, "subs": -1, "data": -1, "payload": -1},
    )
    config = directory / "server.conf"
    config.write_text(
        f"operator: {operator_jwt}\n"
        f"system_account: {system_pub}\n"
        "resolver: MEMORY\n"
        f"resolver_preload: {{\n  {account_pub}: {account_jwt}\n  {system_pub}: {system_jwt}\n}}\n",
        encoding="utf-8",
    )
    creds = directory / "etl.creds"
    creds.write_text(
        "-----BEGIN NATS USER JWT-----\n"
        f"{user_jwt}\n"
        "------END NATS USER JWT------\n\n"
        "-----BEGIN USER NKEY SEED-----\n"
        f"{user.seed.decode()}\n"
        "------END USER NKEY SEED------\n",
        encoding="utf-8",
    )
    return config, creds
