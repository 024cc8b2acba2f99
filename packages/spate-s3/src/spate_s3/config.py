"""Configuration of the S3 backfill source (``source: {s3: ...}``).

Owns :class:`S3SourceConfig` (decoded strictly by :func:`spate.config.decode`, so unknown
keys fail with their dotted path, B17) and :func:`parse_url`, which splits
``s3://bucket/prefix`` and ``file:///directory`` into a :class:`Location`. Does not own
the coordination section: that is the top-level ``coordination`` key, decoded by
spate-coordination (B24).

```yaml
source:
  s3:
    url: s3://datalake/events/2024/
    endpoint_url: https://minio.internal:9000   # MinIO, moto or another S3-compatible store
    ca: /etc/ssl/private-ca.pem           # CA that signed its certificate (optional)
    compression: auto                     # auto | none | gzip | zstd
    framing: ndjson                       # ndjson | lines | avro_ocf
    split_target_bytes: 256MiB
    prefetch_bytes: 16MiB
```

Credentials come from the usual AWS chain (environment, shared files, instance roles);
the configuration never holds them.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Literal
from urllib.parse import unquote, urlsplit

from spate import NO_SECRET, Secret
from spate.config import ByteSize, Duration, tls_file_errors

__all__ = [
    "Compression",
    "Framing",
    "Location",
    "S3SourceConfig",
]

Compression = Literal["auto", "none", "gzip", "zstd"]
Framing = Literal["ndjson", "lines", "avro_ocf"]

_MIB = 1024 * 1024


@dataclass(frozen=True, slots=True)
class Location:
    """Where the objects live: ``scheme`` ``s3`` (bucket + key prefix) or ``file``
    (``bucket`` is the directory, ``prefix`` a path prefix relative to it)."""

    scheme: Literal["s3", "file"]
    bucket: str
    prefix: str

    def __str__(self) -> str:
        if self.scheme == "s3":
            return f"s3://{self.bucket}/{self.prefix}"
        return f"file://{self.bucket}/{self.prefix}".rstrip("/")

    def describe(self, key: str) -> str:
        """The full address of one object, for error messages."""
        if self.scheme == "s3":
            return f"s3://{self.bucket}/{key}"
        return f"file://{self.bucket}/{key}"


def parse_url(url: str) -> Location:
    """``s3://bucket/prefix`` or ``file:///abs/dir[/prefix]``; raise ``ValueError`` otherwise.

    For ``file://`` the whole path must name a directory: every file below it (recursively)
    is an object, with the path relative to that directory as its key.
    """
    parts = urlsplit(url)
    if parts.scheme == "s3":
        if not parts.netloc:
            raise ValueError(f"{url!r}: expected s3://bucket/prefix")
        if parts.query or parts.fragment:
            raise ValueError(f"{url!r}: query strings and fragments are not allowed")
        return Location("s3", parts.netloc, unquote(parts.path.lstrip("/")))
    if parts.scheme == "file":
        if parts.netloc not in ("", "localhost"):
            raise ValueError(f"{url!r}: file URLs name a local directory (file:///path)")
        path = unquote(parts.path)
        if not path.startswith("/"):
            raise ValueError(f"{url!r}: file URLs need an absolute path (file:///path)")
        return Location("file", path.rstrip("/") or "/", "")
    raise ValueError(f"{url!r}: expected an s3:// or file:// URL")


@dataclass(frozen=True, slots=True, kw_only=True)
class S3SourceConfig:
    """``source: {s3: ...}`` — a bounded backfill of every object under a prefix (B25).

    Objects are packed into splits of about ``split_target_bytes`` (an object is never
    cut in two); instances of the same coordination job share the splits. The job ends
    (exit 0) once every split is completed.
    """

    url: str
    """``s3://bucket/prefix`` (every key starting with the prefix) or ``file:///dir``."""
    endpoint_url: str | None = None
    """S3-compatible endpoint (MinIO, moto, Ceph); AWS when unset or empty."""
    region: str | None = None
    """AWS region; the usual chain (``AWS_REGION``, profile) when unset or empty."""
    path_style: bool | None = None
    """Path-style addressing (``true``) or virtual-hosted (``false``); by default on when
    ``endpoint_url`` is set, else AWS's choice."""
    access_key_id: str = ""
    """Explicit access key (with ``secret_access_key``); empty: the AWS credential chain
    (environment, ``profile``, shared files, instance or pod role)."""
    secret_access_key: Secret = NO_SECRET
    """Secret of ``access_key_id`` (``secret_access_key_file:`` reads it from a file)."""
    session_token: Secret = NO_SECRET
    """Session token of temporary credentials (with the two keys above)."""
    profile: str = ""
    """A named profile of the shared AWS config and credentials files."""
    ca: str = ""
    """CA bundle (PEM) that signed the endpoint's certificate (a private CA of an
    S3-compatible store); empty: the CAs botocore trusts by default."""
    compression: Compression = "auto"
    """``auto`` recognises gzip and zstd by their magic bytes; ``none`` reads bytes as is."""
    framing: Framing = "ndjson"
    """``ndjson``: one record per non-blank line; ``lines``: one per line, blank ones too;
    ``avro_ocf``: one record (a schemaless Avro datum) per entry of an object container."""
    split_target_bytes: ByteSize = 256 * _MIB
    """Objects are packed into splits of about this many (stored) bytes."""
    prefetch_bytes: ByteSize = 16 * _MIB
    """Bytes downloaded ahead of the pipeline, per owned split (ranged GETs of at most
    8 MiB or this size, whichever is smaller)."""
    batch_records: int = 2000
    """Records handed to the pipeline per poll and split."""
    refresh_listing: bool = False
    """List the prefix again when a plan is already published, and fail if it changed.
    Off: a restarted job reuses its published plan without listing (B25)."""
    split_attempts: int = 3
    """Transient read failures of a split in a row (no record read in between) before
    the run fails; a record read starts the count again (B37)."""
    retry_backoff: Duration = 1.0
    """Pause before a split is read again after a transient error (doubles with each
    failure in a row)."""
    request_timeout: Duration = 30.0
    """Timeout of one S3 request (connect and read)."""
    startup_timeout: Duration = 30.0
    """How long start-up waits for the endpoint and the coordination store."""

    def config_errors(self) -> Iterator[tuple[str, str]]:
        try:
            location = parse_url(self.url)
        except ValueError as exc:
            yield "url", str(exc)
        else:
            if location.scheme == "file" and self.endpoint_url:
                yield "endpoint_url", "only applies to s3:// URLs"
        if self.endpoint_url and "://" not in self.endpoint_url:
            yield "endpoint_url", f"expected http(s)://host:port, got {self.endpoint_url!r}"
        if self.ca and (self.endpoint_url or "").startswith("http://"):
            yield "ca", "only used with an https:// endpoint_url"
        yield from tls_file_errors(self.ca, "", "")
        if bool(self.access_key_id) != bool(self.secret_access_key):
            yield "access_key_id", "access_key_id and secret_access_key are given together"
        if self.session_token and not self.access_key_id:
            yield "session_token", "needs access_key_id and secret_access_key"
        if self.profile and self.access_key_id:
            yield "profile", "give a profile or explicit keys, not both"
        if self.split_target_bytes < 1:
            yield "split_target_bytes", "must be positive"
        if self.prefetch_bytes < 64 * 1024:
            yield "prefetch_bytes", "must be at least 64KiB"
        if self.batch_records < 1:
            yield "batch_records", "must be at least 1"
        if self.split_attempts < 1:
            yield "split_attempts", "must be at least 1"
        if self.retry_backoff < 0:
            yield "retry_backoff", "must not be negative"
        for name in ("request_timeout", "startup_timeout"):
            if getattr(self, name) <= 0:
                yield name, "must be positive"

    @property
    def location(self) -> Location:
        return parse_url(self.url)

    @property
    def chunk_bytes(self) -> int:
        """Size of one ranged GET."""
        return min(self.prefetch_bytes, 8 * _MIB)
