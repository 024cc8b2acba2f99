"""The NATS JetStream KV coordination store (nats-py, behind the ``nats`` extra).

Owns :class:`NatsStore`: the six store primitives on two KV buckets per job — a durable
bucket ``<prefix>_<job>`` and a lease bucket ``<prefix>_<job>_leases`` whose bucket-wide
TTL is the lease duration (NATS 2.9 has no per-key TTL). It connects with a token,
user/password or a creds file, optionally over TLS, reconnects on its own after the
server restarts, and maps client exceptions at its boundary: "key exists" and "wrong
last sequence" become results, anything about reaching the server becomes
:class:`~spate_coordination._store.StoreUnavailableError` (the coordinator retries).

nats-py is imported lazily so that spate-coordination works without the extra; using
this store without it fails with the install command (B26). On NATS 2.9 a key that
expires by the bucket TTL sends watchers no event, so :meth:`NatsStore.watch` is only a
hint and the coordinator also polls with :meth:`NatsStore.list` (B24).
"""

from __future__ import annotations

import asyncio
import logging
import ssl
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any

from spate.errors import MissingConnectorError
from spate.plugins import install_hint

from spate_coordination._store import (
    CoordinationError,
    Entry,
    Keyspace,
    StoreUnavailableError,
    WatchEvent,
    check_key,
    check_prefix,
)
from spate_coordination.config import NatsStoreConfig

if TYPE_CHECKING:
    from nats.aio.client import Client
    from nats.js.client import JetStreamContext
    from nats.js.kv import KeyValue

logger = logging.getLogger(__name__)

INSTALL_HINT = install_hint("spate-coordination", "coordination-nats", dist_extra="nats")
_WRONG_LAST_SEQUENCE = (10071, 10164)
_DELETE_OPS = ("DEL", "PURGE")
_TTL_TOLERANCE = 0.001


def require_nats(path: str = "") -> None:
    """Raise :class:`MissingConnectorError` with the install command if nats-py is absent."""
    try:
        import nats  # noqa: F401
    except ImportError as exc:
        raise MissingConnectorError("coordination store", "nats", INSTALL_HINT, path=path) from exc


def bucket_names(config: NatsStoreConfig, job: str) -> tuple[str, str]:
    """The durable and the lease bucket of ``job``."""
    durable = f"{config.bucket_prefix}_{job}"
    return durable, f"{durable}_leases"


def _tls_context(config: NatsStoreConfig) -> ssl.SSLContext | None:
    tls = config.tls
    if tls is None:
        return None
    context = ssl.create_default_context(cafile=tls.ca_file)
    if tls.cert_file is not None and tls.key_file is not None:
        context.load_cert_chain(tls.cert_file, tls.key_file)
    if not tls.verify:
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    return context


class NatsStore:
    """Coordination store on NATS JetStream KV; use it from one event loop."""

    def __init__(self, config: NatsStoreConfig, job: str, ttl: float) -> None:
        require_nats()
        if ttl <= 0:
            raise ValueError(f"ttl must be positive, got {ttl}")
        self._config = config
        self._job = job
        self._ttl = ttl
        self._durable_name, self._lease_name = bucket_names(config, job)
        self._nc: Client | None = None
        self._buckets: dict[Keyspace, KeyValue] = {}
        self._js: JetStreamContext | None = None
        self._closing = False

    @property
    def ttl(self) -> float:
        return self._ttl

    @property
    def endpoint(self) -> str:
        return ",".join(self._config.servers)

    # -- lifecycle

    async def open(self) -> None:
        """Connect and create (or check) the job's two buckets; may block up to timeouts."""
        import nats
        import nats.errors
        import nats.js.errors
        from nats.js.api import StorageType

        cfg = self._config
        options: dict[str, Any] = {
            "servers": list(cfg.servers),
            "name": f"spate-coordination:{self._job}",
            "connect_timeout": cfg.connect_timeout,
            "reconnect_time_wait": cfg.reconnect_wait,
            "max_reconnect_attempts": -1,
            "error_cb": self._on_error,
            "disconnected_cb": self._on_disconnected,
            "reconnected_cb": self._on_reconnected,
        }
        if cfg.token is not None:
            options["token"] = cfg.token
        if cfg.user is not None:
            options["user"] = cfg.user
            options["password"] = cfg.password
        if cfg.creds_file is not None:
            options["user_credentials"] = cfg.creds_file
        tls = _tls_context(cfg)
        if tls is not None:
            options["tls"] = tls
            if cfg.tls is not None and cfg.tls.server_name is not None:
                options["tls_hostname"] = cfg.tls.server_name
        try:
            # nats-py keeps retrying the first connect; bound it by connect_timeout.
            self._nc = await asyncio.wait_for(nats.connect(**options), cfg.connect_timeout)
        except (TimeoutError, OSError, nats.errors.Error) as exc:
            raise StoreUnavailableError(
                f"cannot connect to NATS at {self.endpoint} within {cfg.connect_timeout:g}s: "
                f"{exc or type(exc).__name__}"
            ) from exc
        js = self._js = self._nc.jetstream(timeout=cfg.request_timeout)
        try:
            for space, name, ttl in (
                (Keyspace.DURABLE, self._durable_name, None),
                (Keyspace.TTL, self._lease_name, self._ttl),
            ):
                try:
                    kv = await js.key_value(name)
                except nats.js.errors.BucketNotFoundError:
                    kv = await js.create_key_value(
                        bucket=name,
                        history=1,
                        ttl=ttl,
                        storage=StorageType.FILE,
                        replicas=cfg.replicas,
                        description=f"spate coordination for job {self._job}",
                    )
                    logger.info("created NATS KV bucket %s (ttl=%s)", name, ttl)
                status = await kv.status()
                have = status.ttl or None
                if (have is None) != (ttl is None) or (
                    have is not None and ttl is not None and abs(have - ttl) > _TTL_TOLERANCE
                ):
                    raise CoordinationError(
                        f"NATS KV bucket {name} at {self.endpoint} has ttl={have} but this "
                        f"instance needs ttl={ttl} (lease_duration): every instance of job "
                        f"{self._job!r} must use the same lease_duration"
                    )
                self._buckets[space] = kv
        except nats.errors.NoRespondersError as exc:
            await self.close()
            raise StoreUnavailableError(
                f"NATS at {self.endpoint} has no JetStream (start nats-server with -js)"
            ) from exc
        except (TimeoutError, nats.errors.Error) as exc:
            await self.close()
            raise StoreUnavailableError(
                f"cannot open the KV buckets of job {self._job!r} at {self.endpoint}: {exc!r}"
            ) from exc
        except CoordinationError:
            await self.close()
            raise
        logger.info(
            "connected to NATS at %s (buckets %s, %s)",
            self.endpoint,
            self._durable_name,
            self._lease_name,
        )

    async def close(self) -> None:
        self._closing = True
        nc, self._nc = self._nc, None
        self._buckets.clear()
        self._js = None
        if nc is not None and not nc.is_closed:
            try:
                await nc.close()
            except Exception:  # closing is best effort; the connection may already be gone
                logger.debug("error while closing the NATS connection", exc_info=True)

    async def _on_error(self, exc: Exception) -> None:
        nc = self._nc
        if self._closing or (nc is not None and nc.is_reconnecting):
            # Each failed reconnect attempt lands here; the disconnect was logged once.
            logger.debug("NATS client error at %s: %r", self.endpoint, exc)
        else:
            logger.warning("NATS client error at %s: %r", self.endpoint, exc)

    async def _on_disconnected(self) -> None:
        if self._closing:
            return
        logger.warning("disconnected from NATS at %s; reconnecting", self.endpoint)

    async def _on_reconnected(self) -> None:
        logger.info("reconnected to NATS at %s", self.endpoint)

    def _kv(self, space: Keyspace) -> KeyValue:
        kv = self._buckets.get(space)
        if kv is None:
            raise StoreUnavailableError(f"the NATS store at {self.endpoint} is not open")
        return kv

    def _unavailable(self, op: str, key: str, exc: BaseException) -> StoreUnavailableError:
        return StoreUnavailableError(f"NATS KV {op} {key!r} at {self.endpoint} failed: {exc!r}")

    # -- primitives

    async def create(self, space: Keyspace, key: str, value: bytes) -> int | None:
        import nats.errors
        import nats.js.errors

        check_key(key)
        try:
            return int(await self._kv(space).create(key, value))
        except nats.js.errors.KeyWrongLastSequenceError:
            return None
        except (TimeoutError, nats.errors.Error) as exc:
            raise self._unavailable("create", key, exc) from exc

    async def compare_and_set(
        self, space: Keyspace, key: str, value: bytes, revision: int
    ) -> int | None:
        import nats.errors
        import nats.js.errors

        check_key(key)
        if revision <= 0:
            return None
        try:
            return int(await self._kv(space).update(key, value, last=revision))
        except nats.js.errors.KeyWrongLastSequenceError:
            return None
        except (TimeoutError, nats.errors.Error) as exc:
            raise self._unavailable("update", key, exc) from exc

    async def delete(self, space: Keyspace, key: str, revision: int) -> bool:
        import nats.errors
        import nats.js.errors

        check_key(key)
        if revision <= 0:
            return False
        try:
            await self._kv(space).delete(key, last=revision)
        except nats.js.errors.APIError as exc:
            if exc.err_code in _WRONG_LAST_SEQUENCE:
                return False
            raise self._unavailable("delete", key, exc) from exc
        except (TimeoutError, nats.errors.Error) as exc:
            raise self._unavailable("delete", key, exc) from exc
        return True

    async def get(self, space: Keyspace, key: str) -> Entry | None:
        import nats.errors
        import nats.js.errors

        check_key(key)
        try:
            entry = await self._kv(space).get(key)
        except nats.js.errors.KeyNotFoundError:
            return None
        except (TimeoutError, nats.errors.Error) as exc:
            raise self._unavailable("get", key, exc) from exc
        return Entry(key, bytes(entry.value or b""), int(entry.revision or 0))

    async def list(self, space: Keyspace, prefix: str) -> list[Entry]:
        import nats.errors
        import nats.js.errors

        check_prefix(prefix)
        kv = self._kv(space)
        bucket = self._durable_name if space is Keyspace.DURABLE else self._lease_name
        subject_prefix = f"$KV.{bucket}."
        timeout = self._config.request_timeout
        out: dict[str, Entry] = {}
        try:
            # 1. Which keys exist now: the stream's subjects under the prefix.
            if self._js is None:
                raise StoreUnavailableError(f"the NATS store at {self.endpoint} is not open")
            info = await self._js.stream_info(
                f"KV_{bucket}", subjects_filter=f"{subject_prefix}{prefix}>"
            )
            wanted = {s[len(subject_prefix) :] for s in (info.state.subjects or {})}
            if not wanted:
                return []
            # 2. Their values through one ordered consumer (last message per subject).
            # Neither nats-py's "no more values" marker nor a value's pending count is
            # reliable while keys are being rewritten (a rewrite can make the server
            # skip the old message before the new one is counted), so read until every
            # wanted key was seen or nothing is pending, then fetch stragglers one by one.
            seen: set[str] = set()
            watcher: Any = await kv.watch(prefix + ">")
            try:
                while not wanted <= seen:
                    item = await watcher.updates(timeout=timeout)
                    if item is None:
                        continue
                    seen.add(item.key)
                    if item.operation in _DELETE_OPS:
                        out.pop(item.key, None)
                    else:
                        out[item.key] = Entry(item.key, bytes(item.value or b""), item.revision)
                    if item.delta == 0:
                        break
            finally:
                await watcher.stop()
            for key in sorted(wanted - seen):
                try:
                    entry = await kv.get(key)
                except nats.js.errors.KeyNotFoundError:
                    continue
                out[key] = Entry(key, bytes(entry.value or b""), int(entry.revision or 0))
        except (TimeoutError, nats.errors.Error) as exc:
            raise self._unavailable("list", prefix + ">", exc) from exc
        return [out[k] for k in sorted(out)]

    async def watch(self, space: Keyspace, prefix: str) -> AsyncIterator[WatchEvent]:
        import nats.errors

        check_prefix(prefix)
        while True:
            try:
                watcher: Any = await self._kv(space).watch(prefix + ">")
            except (TimeoutError, nats.errors.Error, StoreUnavailableError) as exc:
                logger.debug("watch on %s> failed (%r); retrying", prefix, exc)
                await asyncio.sleep(self._config.reconnect_wait)
                continue
            initial = True
            try:
                async for item in watcher:
                    if item is None:
                        initial = False
                        continue
                    if initial:
                        # Current values before the marker: the caller reads state by list.
                        if item.delta == 0:
                            initial = False
                        continue
                    deleted = item.operation in _DELETE_OPS
                    yield WatchEvent(
                        item.key, None if deleted else bytes(item.value or b""), item.revision
                    )
                # The watcher was stopped (connection closed): subscribe again.
            finally:
                try:
                    await watcher.stop()
                except Exception:  # the subscription may already be gone with the connection
                    logger.debug("stopping a NATS watcher failed", exc_info=True)
            if self._nc is None:
                return
            await asyncio.sleep(self._config.reconnect_wait)
