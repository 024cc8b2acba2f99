"""The Hub's documented commit API, and the per-repository commit gate.

A commit is one request (the format ``huggingface_hub``'s ``create_commit`` sends for
files uploaded inline)::

    POST {endpoint}/api/datasets/{repo}/commit/{revision}
    Authorization: Bearer <token>
    Content-Type: application/x-ndjson

    {"key": "header", "value": {"summary": "...", "description": "..."}}
    {"key": "file", "value": {"content": "<base64>", "path": "data/...", "encoding": "base64"}}
    ...

each JSON object on its own line. The Hub answers 200 with ``{"commitOid": ...,
"commitUrl": ...}``. Start-up probes the repository with ``GET {endpoint}/api/datasets/
{repo}/revision/{revision}`` (B29).

The token is sent only in the ``Authorization`` header; errors name the endpoint, the
repository and the status and quote the Hub's answer, which ``SinkError`` scrubs of
registered secrets (the token is one), so it never reaches a log line (B67).

The sink commits through the core commit gate (``spate.sink.writebehind.CommitGate``,
the same class the Parquet sink uses) named by :attr:`HubClient.where`, built from the
pipeline's registry of gate locks (``BuildContext.commit_gates``, B231), which
serializes the commits of one repository and branch among the pipeline's writers (B80):
simultaneous flushes queue, each holding the gate for one
request, which ``request_timeout`` bounds (a request that makes no progress for that
long fails with a transport error and lets the gate go).
"""

from __future__ import annotations

import base64
import datetime as dt
import email.utils
import json
import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from urllib.parse import quote

import httpx
from spate.errors import ErrorClass, SinkError

logger = logging.getLogger(__name__)

MAX_RETRY_AFTER = 300.0
"""Longest ``Retry-After`` honoured (seconds); a longer one is cut to this."""

_RETRYABLE_STATUS = frozenset({408, 409, 412, 425, 429})
"""Besides 5xx: timeouts, rate limits and commit conflicts (another commit moved the
branch), which a later attempt can pass."""


@dataclass(frozen=True, slots=True)
class CommitFile:
    """One file of a commit: its path in the repository and its bytes."""

    path: str
    data: bytes


class HubError(SinkError):
    """A request to the Hub failed; ``retry_after`` is the server's ``Retry-After``."""

    def __init__(
        self, reason: str, error_class: ErrorClass, status: int | None, retry_after: float | None
    ) -> None:
        super().__init__(reason, error_class)
        self.status = status
        self.retry_after = retry_after


def commit_payload(summary: str, description: str, files: Iterable[CommitFile]) -> bytes:
    """The NDJSON body of a commit: the header line, then one line per file (base64)."""
    lines = [{"key": "header", "value": {"summary": summary, "description": description}}]
    for f in files:
        lines.append(
            {
                "key": "file",
                "value": {
                    "content": base64.b64encode(f.data).decode("ascii"),
                    "path": f.path,
                    "encoding": "base64",
                },
            }
        )
    return b"".join(json.dumps(line).encode() + b"\n" for line in lines)


def retry_after(headers: Mapping[str, str], now: dt.datetime | None = None) -> float | None:
    """Seconds a ``Retry-After`` header asks for (delta-seconds or an HTTP date), capped."""
    value = headers.get("retry-after")
    if value is None:
        return None
    value = value.strip()
    try:
        seconds = float(value)
    except ValueError:
        try:
            when = email.utils.parsedate_to_datetime(value)
        except (TypeError, ValueError):
            return None
        if when.tzinfo is None:
            when = when.replace(tzinfo=dt.UTC)
        seconds = (when - (now or dt.datetime.now(dt.UTC))).total_seconds()
    return min(max(seconds, 0.0), MAX_RETRY_AFTER)


class HubClient:
    """Talks to one dataset repository's branch; thread-safe (one httpx client)."""

    def __init__(self, endpoint: str, repo: str, branch: str, token: str, timeout: float) -> None:
        self.endpoint = endpoint.rstrip("/")
        self.repo = repo
        self.branch = branch
        self.where = f"{self.endpoint}/datasets/{repo}@{branch}"
        """The repository as errors name it."""
        headers = {"User-Agent": "spate-huggingface"}
        if token:
            headers["Authorization"] = f"Bearer {token}"
        self._client = httpx.Client(headers=headers, timeout=timeout, follow_redirects=True)
        revision = quote(branch, safe="")
        self._info_url = f"{self.endpoint}/api/datasets/{repo}/revision/{revision}"
        self._commit_url = f"{self.endpoint}/api/datasets/{repo}/commit/{revision}"

    def probe(self) -> None:
        """Check the repository and branch answer (B29); raise ``HubError`` naming them."""
        response = self._request("GET", self._info_url, "probe")
        if response.status_code != 200:
            raise self._failed(response, "probe")

    def commit(self, body: bytes) -> str:
        """Send one commit; return the new commit's id. Raise ``HubError`` on failure."""
        response = self._request(
            "POST",
            self._commit_url,
            "commit",
            content=body,
            headers={"Content-Type": "application/x-ndjson"},
        )
        if response.status_code != 200:
            raise self._failed(response, "commit")
        try:
            answer = response.json()
        except ValueError:
            answer = {}
        oid = answer.get("commitOid", "") if isinstance(answer, dict) else ""
        return str(oid)

    def close(self) -> None:
        self._client.close()

    def _request(self, method: str, url: str, what: str, **kwargs: object) -> httpx.Response:
        try:
            return self._client.request(method, url, **kwargs)  # type: ignore[arg-type]
        except httpx.TimeoutException as exc:
            raise HubError(
                f"{what} of {self.where} timed out ({type(exc).__name__})",
                ErrorClass.RETRYABLE,
                None,
                None,
            ) from None
        except httpx.HTTPError as exc:
            raise HubError(
                f"{what} of {self.where} failed: {type(exc).__name__}: {exc}",
                ErrorClass.RETRYABLE,
                None,
                None,
            ) from None

    def _failed(self, response: httpx.Response, what: str) -> HubError:
        status = response.status_code
        detail = " ".join(response.text[:300].split())
        reason = f"{what} of {self.where} answered {status}: {detail}".rstrip(": ")
        retryable = status >= 500 or status in _RETRYABLE_STATUS
        return HubError(
            reason,
            ErrorClass.RETRYABLE if retryable else ErrorClass.FATAL,
            status,
            retry_after(response.headers),
        )
