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
from typing import TYPE_CHECKING, Any

from spate.errors import ErrorClass, SinkError
from spate.plugins import install_hint

from spate_clickhouse._endpoint import Endpoint
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

    database = config.fixed_database or None
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
