"""Where files go: a local directory or an S3 prefix, behind one small synchronous seam.

:class:`LocalStore` makes every write durable before it returns — the bytes go to a
temporary name in the target directory, the file is fsynced, renamed into place and
the directory fsynced — so a crash leaves either the old state or the new file, never
a torn one. :meth:`Store.create` is an atomic create-if-absent (``link`` locally,
``If-None-Match: *`` on S3) that the manifest uses as its compare-and-set.

:class:`S3Store` runs aioboto3 on a private event loop (the sink's writer thread calls
it synchronously); a PUT that returned is durable on S3 (B2). Every client exception is
translated into ``SinkError`` at this boundary: throttling, 5xx and network errors are
RETRYABLE, a missing bucket or denied access FATAL and named with the endpoint (B29).
"""

from __future__ import annotations

import asyncio
import builtins
import contextlib
import fcntl
import logging
import os
import threading
import uuid
from collections.abc import Coroutine, Iterator
from pathlib import Path
from typing import Any, Protocol, TypeVar

from spate.errors import ErrorClass, SinkError

from spate_parquet.config import ParquetSinkConfig

logger = logging.getLogger(__name__)

T = TypeVar("T")


class Store(Protocol):
    """Objects under one root, addressed by relative keys (``a/b/c.parquet``)."""

    @property
    def endpoint(self) -> str:
        """The root as a URL, for log lines and errors."""
        ...

    def probe(self) -> None:
        """Check the root is usable; raise FATAL ``SinkError`` naming it (B29)."""
        ...

    def put(self, key: str, data: bytes) -> None:
        """Write ``data`` durably at ``key`` (replacing what is there)."""
        ...

    def create(self, key: str, data: bytes) -> bool:
        """Write ``data`` at ``key`` only if nothing is there; False if something is."""
        ...

    def get(self, key: str) -> bytes | None:
        """The object's bytes, or None when there is none."""
        ...

    def get_tagged(self, key: str) -> tuple[bytes, str] | None:
        """The object's bytes and a tag of its version (S3: the ETag), or None."""
        ...

    def replace(self, key: str, data: bytes, tag: str | None) -> bool:
        """Write ``data`` at ``key`` only if the object still has ``tag`` (None: is absent).

        False when someone else changed it first. S3 checks this atomically
        (``If-Match`` / ``If-None-Match``); a local directory checks and renames under
        one exclusive file lock.
        """
        ...

    def list(self, prefix: str) -> list[str]:
        """Every key under ``prefix`` (a directory-like prefix ending in ``/`` or empty)."""
        ...

    def list_dated(self, prefix: str) -> builtins.list[tuple[str, float]]:
        """Every key under ``prefix`` with the time it was last written (epoch seconds)."""
        ...

    def delete(self, key: str) -> None:
        """Remove the object if present."""
        ...

    def close(self) -> None: ...


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class LocalStore:
    """:class:`Store` over a local directory; every write is fsynced and renamed into place."""

    def __init__(self, root: str) -> None:
        self._root = Path(root.removeprefix("file://"))

    @property
    def endpoint(self) -> str:
        return f"file://{self._root}"

    def probe(self) -> None:
        try:
            self._root.mkdir(parents=True, exist_ok=True)
            probe = self._root / f".spate-probe-{uuid.uuid4().hex}"
            probe.write_bytes(b"")
            probe.unlink()
        except OSError as exc:
            raise SinkError(f"{self.endpoint}: not writable: {exc}", ErrorClass.FATAL) from exc

    def _staged(self, key: str, data: bytes) -> tuple[Path, Path]:
        target = self._root / key
        target.parent.mkdir(parents=True, exist_ok=True)
        temp = target.parent / f".{target.name}.{uuid.uuid4().hex}.tmp"
        with temp.open("wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        return temp, target

    def put(self, key: str, data: bytes) -> None:
        try:
            temp, target = self._staged(key, data)
            os.replace(temp, target)
            _fsync_dir(target.parent)
        except OSError as exc:
            raise SinkError(f"writing {self.endpoint}/{key}: {exc}", ErrorClass.RETRYABLE) from exc

    def create(self, key: str, data: bytes) -> bool:
        try:
            temp, target = self._staged(key, data)
            try:
                os.link(temp, target)  # atomic, and fails if the name is taken
            except FileExistsError:
                return False
            finally:
                temp.unlink()
            _fsync_dir(target.parent)
            return True
        except OSError as exc:
            raise SinkError(f"writing {self.endpoint}/{key}: {exc}", ErrorClass.RETRYABLE) from exc

    def get(self, key: str) -> bytes | None:
        try:
            return (self._root / key).read_bytes()
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise SinkError(f"reading {self.endpoint}/{key}: {exc}", ErrorClass.RETRYABLE) from exc

    def get_tagged(self, key: str) -> tuple[bytes, str] | None:
        try:
            with (self._root / key).open("rb") as handle:
                stat = os.fstat(handle.fileno())
                return handle.read(), f"{stat.st_ino:x}-{stat.st_mtime_ns:x}"
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise SinkError(f"reading {self.endpoint}/{key}: {exc}", ErrorClass.RETRYABLE) from exc

    def replace(self, key: str, data: bytes, tag: str | None) -> bool:
        if tag is None:
            return self.create(key, data)
        # The check and the rename under one exclusive lock, so that two writers (threads
        # or processes) holding the same tag cannot both pass the check and the later
        # rename move the object back to an older content (B52).
        with self._locked(key):
            current = self.get_tagged(key)
            if current is None or current[1] != tag:
                return False
            self.put(key, data)  # a new inode: the next tag differs
            return True

    @contextlib.contextmanager
    def _locked(self, key: str) -> Iterator[None]:
        """An exclusive ``flock`` on ``.<name>.lock`` beside ``key`` (hidden from
        :meth:`list`, like every temporary); released when its descriptor closes."""
        target = self._root / key
        try:
            target.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(target.parent / f".{target.name}.lock", os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as exc:
            raise SinkError(f"locking {self.endpoint}/{key}: {exc}", ErrorClass.RETRYABLE) from exc
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)

    def list(self, prefix: str) -> list[str]:
        base = self._root / prefix
        found: list[str] = []
        for dirpath, _dirs, files in os.walk(base):
            for name in files:
                if name.startswith("."):
                    continue  # temporaries of writes in progress
                found.append(Path(dirpath, name).relative_to(self._root).as_posix())
        return sorted(found)

    def list_dated(self, prefix: str) -> builtins.list[tuple[str, float]]:
        found: builtins.list[tuple[str, float]] = []
        for key in self.list(prefix):
            with contextlib.suppress(FileNotFoundError):
                found.append((key, (self._root / key).stat().st_mtime))
        return found

    def delete(self, key: str) -> None:
        with contextlib.suppress(FileNotFoundError):
            (self._root / key).unlink()

    def close(self) -> None:
        return None


_FATAL_CODES = frozenset(
    {
        "NoSuchBucket",
        "AccessDenied",
        "InvalidAccessKeyId",
        "SignatureDoesNotMatch",
        "InvalidBucketName",
        "AllAccessDisabled",
        "AuthorizationHeaderMalformed",
        "PermanentRedirect",
    }
)


def translate_error(exc: BaseException, what: str, endpoint: str) -> SinkError:
    """Map an exception from aioboto3/botocore/aiohttp to a ``SinkError`` (B12, B29)."""
    import botocore.exceptions as bex

    if isinstance(exc, SinkError):
        return exc
    if isinstance(exc, bex.ClientError):
        error = exc.response.get("Error", {})
        code = str(error.get("Code", ""))
        status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
        message = error.get("Message") or code or str(exc)
        text = f"{what} at {endpoint}: {code}: {message}"
        if code in _FATAL_CODES or status in (301, 400, 403, 404):
            return SinkError(text, ErrorClass.FATAL)
        return SinkError(text, ErrorClass.RETRYABLE)
    if isinstance(exc, bex.NoCredentialsError | bex.PartialCredentialsError):
        return SinkError(f"{what}: no usable AWS credentials: {exc}", ErrorClass.FATAL)
    if isinstance(exc, bex.NoRegionError):
        return SinkError(f"{what}: no AWS region configured (set s3.region)", ErrorClass.FATAL)
    if isinstance(exc, bex.ParamValidationError):
        return SinkError(f"{what}: {exc}", ErrorClass.FATAL)
    if isinstance(exc, bex.BotoCoreError | TimeoutError | OSError):
        return SinkError(f"{what} at {endpoint}: {exc!r}", ErrorClass.RETRYABLE)
    import aiohttp

    if isinstance(exc, aiohttp.ClientError):
        return SinkError(f"{what} at {endpoint}: {exc!r}", ErrorClass.RETRYABLE)
    return SinkError(f"{what} at {endpoint}: unexpected {exc!r}", ErrorClass.FATAL)


def _is_code(exc: BaseException, *codes: str) -> bool:
    import botocore.exceptions as bex

    if not isinstance(exc, bex.ClientError):
        return False
    error = exc.response.get("Error", {})
    status = str(exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode", ""))
    return str(error.get("Code", "")) in codes or status in codes


class S3Store:
    """:class:`Store` on aioboto3, run on a private event loop by whichever thread calls it."""

    def __init__(self, config: ParquetSinkConfig) -> None:
        rest = config.path.removeprefix("s3://")
        bucket, _, prefix = rest.partition("/")
        self._bucket = bucket
        self._prefix = prefix.strip("/") + "/" if prefix.strip("/") else ""
        self._config = config.s3
        self._loop: asyncio.AbstractEventLoop | None = None
        self._client: Any = None
        self._client_cm: Any = None
        self._lock = threading.Lock()

    @property
    def endpoint(self) -> str:
        where = self._config.endpoint_url or "AWS S3"
        return f"s3://{self._bucket}/{self._prefix} ({where})"

    def _run(self, make: Coroutine[Any, Any, T]) -> T:
        with self._lock:
            if self._loop is None:
                self._loop = asyncio.new_event_loop()
            return self._loop.run_until_complete(make)

    async def _open(self) -> None:
        if self._client is not None:
            return
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
        )
        session = aioboto3.Session(
            aws_access_key_id=cfg.access_key_id or None,
            aws_secret_access_key=cfg.secret_access_key.reveal() or None,
            aws_session_token=cfg.session_token.reveal() or None,
            profile_name=cfg.profile or None,
        )
        self._client_cm = session.client(
            "s3",
            endpoint_url=cfg.endpoint_url or None,
            region_name=cfg.region or None,
            config=client_config,
            verify=cfg.ca or None,
        )
        try:
            self._client = await self._client_cm.__aenter__()
        except Exception as exc:
            self._client_cm = None
            raise translate_error(exc, "creating the S3 client", self.endpoint) from exc

    def _call(self, what: str, method: str, **kwargs: Any) -> Any:
        async def go() -> Any:
            await self._open()
            reply = await getattr(self._client, method)(Bucket=self._bucket, **kwargs)
            if method == "get_object":
                async with reply["Body"] as body:
                    return await body.read()
            return reply

        try:
            return self._run(go())
        except SinkError:
            raise
        except Exception as exc:
            raise translate_error(exc, what, self.endpoint) from exc

    def probe(self) -> None:
        try:
            self._call(
                f"listing {self.endpoint}", "list_objects_v2", Prefix=self._prefix, MaxKeys=1
            )
        except SinkError as exc:
            # At start-up nothing is worth waiting for: name the endpoint and stop (B29).
            raise SinkError(exc.reason, ErrorClass.FATAL) from exc

    def put(self, key: str, data: bytes) -> None:
        self._call(f"PUT {key}", "put_object", Key=self._prefix + key, Body=data)

    def create(self, key: str, data: bytes) -> bool:
        try:
            self._run(self._create(key, data))
        except Exception as exc:
            if _is_code(exc, "PreconditionFailed", "412", "ConditionalRequestConflict", "409"):
                return False
            raise translate_error(exc, f"PUT (If-None-Match) {key}", self.endpoint) from exc
        return True

    async def _create(self, key: str, data: bytes) -> None:
        await self._open()
        await self._client.put_object(
            Bucket=self._bucket, Key=self._prefix + key, Body=data, IfNoneMatch="*"
        )

    def get(self, key: str) -> bytes | None:
        try:
            data: bytes = self._run(self._get(key))
        except Exception as exc:
            if _is_code(exc, "NoSuchKey", "404"):
                return None
            raise translate_error(exc, f"GET {key}", self.endpoint) from exc
        return data

    async def _get(self, key: str) -> bytes:
        await self._open()
        reply = await self._client.get_object(Bucket=self._bucket, Key=self._prefix + key)
        async with reply["Body"] as body:
            data: bytes = await body.read()
        return data

    def get_tagged(self, key: str) -> tuple[bytes, str] | None:
        async def go() -> tuple[bytes, str]:
            await self._open()
            reply = await self._client.get_object(Bucket=self._bucket, Key=self._prefix + key)
            async with reply["Body"] as body:
                data: bytes = await body.read()
            return data, str(reply["ETag"])

        try:
            return self._run(go())
        except Exception as exc:
            if _is_code(exc, "NoSuchKey", "404"):
                return None
            raise translate_error(exc, f"GET {key}", self.endpoint) from exc

    def replace(self, key: str, data: bytes, tag: str | None) -> bool:
        condition = {"IfNoneMatch": "*"} if tag is None else {"IfMatch": tag}

        async def go() -> None:
            await self._open()
            await self._client.put_object(
                Bucket=self._bucket, Key=self._prefix + key, Body=data, **condition
            )

        try:
            self._run(go())
        except Exception as exc:
            if _is_code(exc, "PreconditionFailed", "412", "ConditionalRequestConflict", "409"):
                return False
            raise translate_error(exc, f"PUT (conditional) {key}", self.endpoint) from exc
        return True

    def list(self, prefix: str) -> list[str]:
        return [key for key, _ in self.list_dated(prefix)]

    def list_dated(self, prefix: str) -> builtins.list[tuple[str, float]]:
        async def go() -> builtins.list[tuple[str, float]]:
            await self._open()
            found: builtins.list[tuple[str, float]] = []
            paginator = self._client.get_paginator("list_objects_v2")
            async for page in paginator.paginate(Bucket=self._bucket, Prefix=self._prefix + prefix):
                found.extend(
                    (item["Key"][len(self._prefix) :], item["LastModified"].timestamp())
                    for item in page.get("Contents", ())
                )
            return found

        try:
            return sorted(self._run(go()))
        except Exception as exc:
            raise translate_error(exc, f"listing {prefix}", self.endpoint) from exc

    def delete(self, key: str) -> None:
        self._call(f"DELETE {key}", "delete_object", Key=self._prefix + key)

    def close(self) -> None:
        async def go() -> None:
            cm, self._client_cm, self._client = self._client_cm, None, None
            if cm is not None:
                await cm.__aexit__(None, None, None)

        with self._lock:
            loop, self._loop = self._loop, None
        if loop is None:
            return
        try:
            loop.run_until_complete(go())
        except Exception:
            logger.debug("closing the S3 client raised", exc_info=True)
        finally:
            loop.close()


def open_store(config: ParquetSinkConfig) -> Store:
    """The store for the configured path's scheme."""
    if config.is_s3:
        return S3Store(config)
    return LocalStore(config.path)
