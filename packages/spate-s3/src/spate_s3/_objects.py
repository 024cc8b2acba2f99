"""Object access for the backfill: list a prefix and read byte ranges pinned by ETag.

Owns the :class:`ObjectStore` seam and its two implementations — :class:`S3ObjectStore`
(aioboto3; ranged GETs with ``If-Match`` on the planned ETag) and
:class:`LocalObjectStore` (``file://`` directories; the "ETag" is size and mtime) — and
the translation of every client exception into a :class:`~spate.errors.SourceError` of
the right class at this boundary:

* :class:`ObjectChangedError` — the object is not the version the plan pinned (412 on
  ``If-Match``, deleted, or a local file whose size/mtime moved): its split fails
  instead of mixing versions (B25);
* ``RETRYABLE`` — network errors, timeouts, throttling and 5xx answers (botocore has
  already retried them a few times);
* ``FATAL`` — missing bucket, denied access, missing credentials, bad endpoint: start-up
  fails with one line naming the endpoint (B29).

All methods are coroutines for the source's I/O loop. Does not own decoding, framing or
any coordination.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from spate.errors import ErrorClass, SourceError

from spate_s3.config import S3SourceConfig

logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class ObjectInfo:
    """One object as listed: key, ETag (as the store returns it, quotes included) and size."""

    key: str
    etag: str
    size: int


class ObjectChangedError(SourceError):
    """The object no longer has the ETag the plan pinned (rewritten or deleted) (B25)."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason, ErrorClass.FATAL)


class ObjectStore(Protocol):
    """Lists and reads objects under one :class:`~spate_s3.config.Location`."""

    @property
    def endpoint(self) -> str:
        """Where the objects live, for log lines and errors."""
        ...

    async def open(self) -> None:
        """Create clients; nothing is contacted yet."""
        ...

    async def close(self) -> None: ...

    async def probe(self) -> bool:
        """Check the location answers; whether at least one object is under the prefix.

        Raises a FATAL ``SourceError`` naming the endpoint for a missing bucket or
        directory, denied access or an unreachable endpoint (B29).
        """
        ...

    def list(self) -> AsyncIterator[ObjectInfo]:
        """Every object under the prefix (in the store's order)."""
        ...

    async def read(self, obj: ObjectInfo, start: int, end: int) -> bytes:
        """Bytes ``[start, end)`` of ``obj``, only if it still has ``obj.etag``."""
        ...


# ---------------------------------------------------------------- S3

_CHANGED_CODES = frozenset({"PreconditionFailed", "412", "NoSuchKey", "404"})
_FATAL_CODES = frozenset(
    {
        "NoSuchBucket",
        "AccessDenied",
        "403",
        "InvalidAccessKeyId",
        "SignatureDoesNotMatch",
        "InvalidBucketName",
        "AllAccessDisabled",
        "AuthorizationHeaderMalformed",
        "PermanentRedirect",
        "301",
        "400",
    }
)
_THROTTLE_CODES = frozenset(
    {"SlowDown", "Throttling", "ThrottlingException", "RequestTimeout", "503", "500"}
)


def translate_error(exc: BaseException, what: str, endpoint: str) -> SourceError:
    """Map an exception from aioboto3/botocore/aiohttp to a ``SourceError`` (B29).

    ``what`` says what was attempted (``GET s3://b/k bytes 0-99``); the result names it
    and the endpoint. Every client exception class lands in exactly one error class.
    """
    import botocore.exceptions as bex

    if isinstance(exc, SourceError):
        return exc
    if isinstance(exc, bex.ClientError):
        error = exc.response.get("Error", {})
        code = str(error.get("Code", ""))
        status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
        message = error.get("Message") or code or str(exc)
        if code in _CHANGED_CODES:
            return ObjectChangedError(f"{what}: the object changed or was deleted ({message})")
        if code in _FATAL_CODES or status in (301, 400, 403):
            return SourceError(f"{what} at {endpoint}: {code}: {message}", ErrorClass.FATAL)
        if code in _THROTTLE_CODES or (isinstance(status, int) and status >= 500):
            return SourceError(f"{what} at {endpoint}: {code}: {message}", ErrorClass.RETRYABLE)
        return SourceError(f"{what} at {endpoint}: {code}: {message}", ErrorClass.FATAL)
    if isinstance(exc, bex.NoCredentialsError | bex.PartialCredentialsError):
        return SourceError(
            f"{what}: no usable AWS credentials (environment, shared credentials file or "
            f"instance role): {exc}",
            ErrorClass.FATAL,
        )
    if isinstance(exc, bex.NoRegionError):
        return SourceError(
            f"{what}: no AWS region configured (set source.s3.region)", ErrorClass.FATAL
        )
    if isinstance(exc, bex.EndpointConnectionError | bex.ConnectionError):
        return SourceError(f"{what}: cannot reach {endpoint}: {exc}", ErrorClass.RETRYABLE)
    if isinstance(exc, bex.ParamValidationError | bex.InvalidS3AddressingStyleError):
        return SourceError(f"{what}: {exc}", ErrorClass.FATAL)
    if isinstance(exc, bex.BotoCoreError):
        return SourceError(f"{what} at {endpoint}: {exc}", ErrorClass.RETRYABLE)
    if isinstance(exc, TimeoutError):
        return SourceError(f"{what} at {endpoint}: timed out", ErrorClass.RETRYABLE)
    if isinstance(exc, OSError):
        return SourceError(f"{what} at {endpoint}: {exc}", ErrorClass.RETRYABLE)
    try:
        import aiohttp
    except ImportError:  # pragma: no cover - aiobotocore always brings aiohttp
        aiohttp = None  # type: ignore[assignment]
    if aiohttp is not None and isinstance(exc, aiohttp.ClientError):
        return SourceError(f"{what} at {endpoint}: {exc!r}", ErrorClass.RETRYABLE)
    return SourceError(f"{what} at {endpoint}: unexpected {exc!r}", ErrorClass.FATAL)


class S3ObjectStore:
    """:class:`ObjectStore` on aioboto3: paginated listing and ``If-Match`` ranged GETs."""

    def __init__(self, config: S3SourceConfig) -> None:
        self._config = config
        self._location = config.location
        self._client: Any = None
        self._client_cm: Any = None

    @property
    def endpoint(self) -> str:
        return self._config.endpoint_url or "AWS S3"

    async def open(self) -> None:
        import aioboto3
        from aiobotocore.config import AioConfig

        cfg = self._config
        path_style = cfg.path_style if cfg.path_style is not None else bool(cfg.endpoint_url)
        client_config = AioConfig(
            connect_timeout=cfg.request_timeout,
            read_timeout=cfg.request_timeout,
            retries={"mode": "standard", "max_attempts": 3},
            s3={"addressing_style": "path" if path_style else "virtual"}
            if path_style or cfg.path_style is False
            else {},
            max_pool_connections=32,
        )
        keys: dict[str, str] = {}
        if cfg.access_key_id:
            keys = {
                "aws_access_key_id": cfg.access_key_id,
                "aws_secret_access_key": cfg.secret_access_key.reveal(),
            }
            if cfg.session_token:
                keys["aws_session_token"] = cfg.session_token.reveal()
        try:
            session = aioboto3.Session(profile_name=cfg.profile or None)
            self._client_cm = session.client(
                "s3",
                endpoint_url=cfg.endpoint_url or None,
                region_name=cfg.region or None,
                config=client_config,
                verify=cfg.ca or None,
                **keys,
            )
            self._client = await self._client_cm.__aenter__()
        except Exception as exc:
            raise translate_error(exc, "creating the S3 client", self.endpoint) from exc

    async def close(self) -> None:
        cm, self._client_cm, self._client = self._client_cm, None, None
        if cm is not None:
            try:
                await cm.__aexit__(None, None, None)
            except Exception:
                logger.debug("closing the S3 client raised", exc_info=True)

    async def probe(self) -> bool:
        loc = self._location
        what = f"listing {loc}"
        try:
            reply = await self._client.list_objects_v2(
                Bucket=loc.bucket, Prefix=loc.prefix, MaxKeys=1
            )
        except Exception as exc:
            error = translate_error(exc, what, self.endpoint)
            # At start-up nothing is worth waiting for: name the endpoint and stop (B29).
            raise SourceError(error.reason, ErrorClass.FATAL) from exc
        return bool(reply.get("Contents"))

    async def list(self) -> AsyncIterator[ObjectInfo]:
        loc = self._location
        paginator = self._client.get_paginator("list_objects_v2")
        try:
            async for page in paginator.paginate(Bucket=loc.bucket, Prefix=loc.prefix):
                for item in page.get("Contents", ()):
                    key = item["Key"]
                    size = int(item["Size"])
                    if key.endswith("/") and size == 0:
                        continue  # a "directory" marker, not data
                    yield ObjectInfo(key, str(item["ETag"]), size)
        except Exception as exc:
            raise translate_error(exc, f"listing {loc}", self.endpoint) from exc

    async def read(self, obj: ObjectInfo, start: int, end: int) -> bytes:
        loc = self._location
        what = f"GET {loc.describe(obj.key)} bytes {start}-{end - 1}"
        try:
            async with asyncio.timeout(self._config.request_timeout * 2):
                reply = await self._client.get_object(
                    Bucket=loc.bucket,
                    Key=obj.key,
                    Range=f"bytes={start}-{end - 1}",
                    IfMatch=obj.etag,
                )
                async with reply["Body"] as body:
                    data: bytes = await body.read()
        except Exception as exc:
            raise translate_error(exc, what, self.endpoint) from exc
        etag = reply.get("ETag")
        if etag is not None and etag.strip('"') != obj.etag.strip('"'):
            raise ObjectChangedError(f"{what}: ETag {etag} is not the planned {obj.etag}")
        if len(data) != end - start:
            raise SourceError(
                f"{what}: got {len(data)} bytes, expected {end - start}", ErrorClass.RETRYABLE
            )
        return data


# ---------------------------------------------------------------- local directories


def local_etag(stat: os.stat_result) -> str:
    """The stand-in ETag of a local file: size and modification time in nanoseconds."""
    return f'"{stat.st_size:x}-{stat.st_mtime_ns:x}"'


class LocalObjectStore:
    """:class:`ObjectStore` over a local directory (``file://``); keys are relative paths."""

    def __init__(self, config: S3SourceConfig) -> None:
        self._root = Path(config.location.bucket)

    @property
    def endpoint(self) -> str:
        return f"file://{self._root}"

    async def open(self) -> None:
        return None

    async def close(self) -> None:
        return None

    def _walk(self) -> list[ObjectInfo]:
        found: list[ObjectInfo] = []
        for dirpath, dirnames, filenames in os.walk(self._root):
            dirnames.sort()
            for name in sorted(filenames):
                path = Path(dirpath, name)
                stat = path.stat()
                key = path.relative_to(self._root).as_posix()
                found.append(ObjectInfo(key, local_etag(stat), stat.st_size))
        return found

    async def probe(self) -> bool:
        if not self._root.is_dir():
            raise SourceError(f"{self.endpoint}: not a directory", ErrorClass.FATAL)
        return bool(await asyncio.to_thread(self._walk))

    async def list(self) -> AsyncIterator[ObjectInfo]:
        for obj in await asyncio.to_thread(self._walk):
            yield obj

    def _read(self, obj: ObjectInfo, start: int, end: int) -> bytes:
        path = self._root / obj.key
        what = f"reading {self.endpoint}/{obj.key} bytes {start}-{end - 1}"
        try:
            with path.open("rb") as handle:
                if local_etag(os.fstat(handle.fileno())) != obj.etag:
                    raise ObjectChangedError(f"{what}: the file changed since it was planned")
                handle.seek(start)
                data = handle.read(end - start)
                if local_etag(os.fstat(handle.fileno())) != obj.etag:
                    raise ObjectChangedError(f"{what}: the file changed while it was read")
        except FileNotFoundError as exc:
            raise ObjectChangedError(f"{what}: the file was deleted") from exc
        except OSError as exc:
            raise SourceError(f"{what}: {exc}", ErrorClass.RETRYABLE) from exc
        if len(data) != end - start:
            raise ObjectChangedError(f"{what}: the file is shorter than planned")
        return data

    async def read(self, obj: ObjectInfo, start: int, end: int) -> bytes:
        return await asyncio.to_thread(self._read, obj, start, end)


def open_object_store(config: S3SourceConfig) -> ObjectStore:
    """The store for the configured URL's scheme."""
    if config.location.scheme == "file":
        return LocalObjectStore(config)
    return S3ObjectStore(config)
