"""Replica URLs and the clickhouse-connect clients behind them.

A replica is ``http://host:port``, ``https://host:port`` (optionally with ``user:password@``,
which overrides the sink's ``user``/``password``) or ``chdb://<dir>``: the ClickHouse engine
embedded in this process through chDB, writing into ``<dir>`` (``chdb:///abs/dir`` or
``chdb://relative/dir``; ``chdb://:memory:`` keeps nothing). chDB hosts one engine per
process, so one process can use one ``chdb://`` directory; a second one is refused with
an error naming both.

Owns URL parsing and client construction (compression, timeouts, no client-side retries,
no server sessions — the pool retries, and concurrent writes must not share a session).
Does not write or classify (``_writer``, ``_errors``). Upholds B29: a replica that cannot
be reached fails naming its URL.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote, urlsplit

from spate.errors import ErrorClass, SinkError
from spate.plugins import install_hint

from spate_clickhouse._errors import to_sink_error

if TYPE_CHECKING:
    from clickhouse_connect.driver.client import Client

    from spate_clickhouse.config import ClickHouseSinkConfig

logger = logging.getLogger(__name__)


class _RepeatedFailure(logging.Filter):
    """Drops clickhouse-connect's bare "Unexpected Http Driver Exception" warning: the
    exception it announces reaches spate, which reports it once with the endpoint and
    what happens next (a retry, a failed start)."""

    def filter(self, record: logging.LogRecord) -> bool:
        return record.msg != "Unexpected Http Driver Exception"


for _name in (
    "clickhouse_connect.driver._backend.http_sync",
    "clickhouse_connect.driver.httpclient",
):
    logging.getLogger(_name).addFilter(_RepeatedFailure())

_MEMORY = (":memory:", "memory")


class EndpointError(ValueError):
    """A replica URL that cannot be used."""


@dataclass(frozen=True, slots=True)
class Endpoint:
    """A parsed replica URL."""

    url: str = field(repr=False)  # may carry user:password@ (B67)
    scheme: str
    host: str = ""
    port: int = 0
    user: str | None = None
    password: str | None = field(default=None, repr=False)
    chdb_path: str | None = None
    """The absolute data directory for ``chdb://`` (``:memory:`` for an in-memory engine)."""

    @property
    def embedded(self) -> bool:
        return self.scheme == "chdb"

    def __str__(self) -> str:
        return self.redacted

    @property
    def redacted(self) -> str:
        """The URL without its password (for logs and errors)."""
        if self.embedded:
            return f"chdb://{self.chdb_path}"
        user = f"{self.user}@" if self.user else ""
        return f"{self.scheme}://{user}{self.host}:{self.port}"


def parse_endpoint(url: str) -> Endpoint:
    """Parse a replica URL; raise :class:`EndpointError` saying what is wrong."""
    text = url.strip()
    if text.startswith("chdb://"):
        location = text[len("chdb://") :]
        if not location:
            raise EndpointError(f"{url!r}: chdb:// needs a data directory, e.g. chdb://./data")
        if location in _MEMORY:
            return Endpoint(text, "chdb", chdb_path=":memory:")
        return Endpoint(text, "chdb", chdb_path=os.path.abspath(location))
    try:
        parts = urlsplit(text)
        port = parts.port
    except ValueError as exc:
        raise EndpointError(f"{url!r}: {exc}") from None
    if parts.scheme not in ("http", "https"):
        raise EndpointError(f"{url!r}: expected an http://, https:// or chdb:// URL")
    if not parts.hostname:
        raise EndpointError(f"{url!r}: no host")
    if parts.path not in ("", "/") or parts.query or parts.fragment:
        raise EndpointError(
            f"{url!r}: a replica URL is scheme://host:port only; put the database and "
            "settings in their own keys"
        )
    default_port = 8443 if parts.scheme == "https" else 8123
    return Endpoint(
        text,
        parts.scheme,
        host=parts.hostname,
        port=port or default_port,
        user=unquote(parts.username) if parts.username else None,
        password=unquote(parts.password) if parts.password is not None else None,
    )


CHDB_HINT = install_hint("spate-clickhouse", "clickhouse-embedded", dist_extra="embedded")


def _require_chdb(endpoint: Endpoint) -> None:
    """Refuse ``chdb://`` without chDB, with spate's install hint (not clickhouse-connect's)."""
    try:
        import chdb  # noqa: F401
    except ImportError:
        raise SinkError(
            f"{endpoint.redacted}: chdb:// runs ClickHouse embedded through chDB, which is "
            f"not installed; {CHDB_HINT}",
            ErrorClass.FATAL,
        ) from None


def tls_options(endpoint: Endpoint, config: ClickHouseSinkConfig) -> dict[str, Any]:
    """clickhouse-connect's TLS arguments for an ``https://`` replica (B69)."""
    if endpoint.scheme != "https":
        return {}
    tls = config.tls
    options: dict[str, Any] = {"verify": tls.verify}
    if not tls.verify:
        logger.warning(
            "TLS certificate verification is OFF for %s (tls.verify: false): anyone on the "
            "path can read and change what is written; use tls.ca instead",
            endpoint.redacted,
        )
        import urllib3

        # Said once per connect above; urllib3 would repeat it on every request.
        urllib3.disable_warnings(urllib3.exceptions.InsecureRequestWarning)
    if tls.ca:
        options["ca_cert"] = tls.ca
    if tls.cert:
        # Mutual TLS on the transport; the user still authenticates with its password
        # (clickhouse-connect's "strict" mode, not certificate authentication).
        options["client_cert"] = tls.cert
        options["client_cert_key"] = tls.key
        options["tls_mode"] = "strict"
    return options


def connect(endpoint: Endpoint, config: ClickHouseSinkConfig) -> Client:
    """A clickhouse-connect client for one replica.

    Raises ``SinkError`` naming the replica: RETRYABLE when it cannot be reached now,
    FATAL when it answered with an error retrying cannot cure (bad credentials, unknown
    database, a second chDB directory in this process).
    """
    if endpoint.embedded:
        _require_chdb(endpoint)
    import clickhouse_connect

    database = config.database_name or None
    try:
        if endpoint.embedded:
            kwargs: dict[str, Any] = {"interface": "chdb", "database": database}
            if endpoint.chdb_path != ":memory:":
                kwargs["path"] = endpoint.chdb_path
            return clickhouse_connect.get_client(**kwargs)
        client = clickhouse_connect.get_client(
            **tls_options(endpoint, config),
            interface=endpoint.scheme,
            host=endpoint.host,
            port=endpoint.port,
            username=endpoint.user if endpoint.user is not None else config.user,
            password=endpoint.password if endpoint.password is not None else config.password,
            database=database,
            compress=False if config.compression == "none" else config.compression,
            connect_timeout=config.timeouts.connect,
            send_receive_timeout=config.timeouts.send_receive,
            query_retries=0,
            autogenerate_session_id=False,
            dedicated_pool=True,
        )
        close_dropped_pools(client)
        return client
    except SinkError:
        raise
    except Exception as exc:
        error = to_sink_error(exc, endpoint.redacted, "connect")
        if endpoint.embedded and "already initialized with path" in str(exc):
            raise SinkError(
                f"connect to {endpoint.redacted} failed: chDB runs one engine per process and "
                f"another chdb:// directory is already open here ({exc})",
                ErrorClass.FATAL,
            ) from exc
        raise error from exc


def close_dropped_pools(client: Client) -> None:
    """Make the client's connection pool manager close the pools it drops (B106).

    clickhouse-connect replaces a client's pools every ``max_connection_age`` (10 minutes)
    with urllib3's ``PoolManager.clear()``, which since urllib3 2 forgets the pools without
    closing them: their idle connections stay open for as long as anything still refers
    to a pool (after faults something did in the soak, likely tracebacks kept in
    reference cycles until a full run of the cyclic collector). Closed on dropping, a
    pool closes its idle connections at once, and one still in use when it comes back.
    """
    pools = getattr(getattr(client, "http", None), "pools", None)
    if pools is not None and getattr(pools, "dispose_func", True) is None:
        pools.dispose_func = _close_pool


def _close_pool(pool: Any) -> None:
    pool.close()
