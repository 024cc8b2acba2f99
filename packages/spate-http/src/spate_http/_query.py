"""Query strings are secrets (B131): an API key often rides in ``url`` (``?appid=...``).

Every query value — of ``url``, ``params``, a cursor or a next link — is shown as ``***``
in spate's log lines, errors and metrics, and in httpx's request log lines, unless its
parameter is listed in ``public_params``. httpx logs each request at INFO with its whole
URL through the ``httpx`` logger; :func:`install_httpx_filter` puts a filter on that
logger (once per process) that masks the query of every URL in its records. The filter
is process-wide, so it masks the query values of any httpx client in the process; the
names every ``http_poll`` source lists as public stay visible.
"""

from __future__ import annotations

import logging
import re
import threading
from collections.abc import Collection
from urllib.parse import unquote_plus, urlsplit, urlunsplit

from spate import REDACTED, display_url, register_secret

_URL = re.compile(r"https?://[^\s'\"<>]+")
_lock = threading.Lock()
_public: frozenset[str] = frozenset()
_installed = False


def masked_url(url: str, public: Collection[str] = ()) -> str:
    """``url`` without its userinfo and with every query value not in ``public`` masked."""
    text = display_url(str(url))
    parts = urlsplit(text)
    if not parts.query:
        return text
    fields = []
    for field in parts.query.split("&"):
        name, sep, _ = field.partition("=")
        if not sep or unquote_plus(name) in public:
            fields.append(field)
        else:
            fields.append(f"{name}={REDACTED}")
    return urlunsplit(parts._replace(query="&".join(fields)))


def mask_urls(text: str, public: Collection[str] = ()) -> str:
    """``text`` with the query of every ``http(s)://`` URL in it masked."""
    return _URL.sub(lambda m: masked_url(m.group(0), public), text)


def register_query_secrets(url: str, params: dict[str, str], public: Collection[str]) -> None:
    """Scrub the non-public query values of ``url`` and ``params`` from every text spate's
    redaction sees (errors, exit reasons, every log record), where long enough (B67)."""
    query = urlsplit(url).query
    for field in query.split("&") if query else ():
        name, sep, value = field.partition("=")
        if sep and unquote_plus(name) not in public:
            register_secret(unquote_plus(value))
            register_secret(value)
    for name, value in params.items():
        if name not in public:
            register_secret(value)


class _HttpxQueryFilter(logging.Filter):
    """Masks the query of every URL in a record of the ``httpx`` logger."""

    def filter(self, record: logging.LogRecord) -> bool:
        public = _public
        if isinstance(record.args, tuple) and record.args:
            record.args = tuple(
                mask_urls(str(arg), public) if _looks_like_url(arg) else arg for arg in record.args
            )
        if isinstance(record.msg, str) and "://" in record.msg:
            record.msg = mask_urls(record.msg, public)
        return True


def _looks_like_url(arg: object) -> bool:
    return type(arg).__name__ == "URL" or (isinstance(arg, str) and "://" in arg)


def install_httpx_filter(public: Collection[str]) -> None:
    """Mask query values in httpx's log records from now on; ``public`` names stay."""
    global _public, _installed
    with _lock:
        _public = _public | frozenset(public)
        if not _installed:
            logging.getLogger("httpx").addFilter(_HttpxQueryFilter())
            _installed = True
