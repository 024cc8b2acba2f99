"""Secret values: what counts as one, and how text is scrubbed of them (B67).

A :class:`Secret` is a ``str`` whose ``repr()`` is ``'***'``, so a config object that
holds one (a dataclass, a dict of passthrough settings) prints without it, while a client
library handed the value still gets the real text. The configuration loader marks as a
secret every string value whose key looks secret (:func:`is_secret_key`: passwords,
tokens, ``sasl.password``, ``ssl.key.password``, secret access keys, ...), registers it
here, and registers the password of every URL with ``user:password@`` in it.

:func:`redact` replaces every registered secret, and the password of any URL, with
``***``. It is applied where text leaves the process: log lines of the ``spate`` command,
exception messages of :class:`~spate.errors.SpateError`, ``ExitReport.reason``, the
admin endpoints and metric label values (:func:`display_url` drops the userinfo).
Values shorter than :data:`MIN_SECRET_LENGTH` are not registered: scrubbing them would
mangle ordinary text.

Log records are scrubbed when they are created, whoever configured logging: the first
registered secret wraps :func:`logging.getLogRecordFactory` (:func:`_scrub_record`), so an
application that embeds spate and sets up its own handlers and formatters (or a client
library logging request headers at DEBUG) never sees a secret either.
"""

from __future__ import annotations

import logging
import re
import threading
from typing import Any

REDACTED = "***"
"""What a secret is replaced with."""

MIN_SECRET_LENGTH = 8
"""Shorter values are still secrets in ``repr()``, but not scrubbed from free text."""

_SECRET_KEY = re.compile(
    r"(?:^|[._-])(?:password|passwd|secret|token|api[._-]?key|apikey|private[._-]?key"
    r"|secret[._-]?(?:access[._-]?)?key|key[._-]?password|key[._-]?pem|user[._-]?info|authorization|credentials?)$",
    re.IGNORECASE,
)
_URL_USERINFO = re.compile(r"(?P<head>[A-Za-z][A-Za-z0-9+.-]*://[^/@\s:'\"]*):(?P<pw>[^/@\s'\"]*)@")
_URL_CREDENTIALS = re.compile(r"(?P<head>[A-Za-z][A-Za-z0-9+.-]*://)[^/@\s'\"]*@")

_lock = threading.Lock()
_known: frozenset[str] = frozenset()
_pattern: re.Pattern[str] | None = None
_factory_installed = False
_traceback_formatter = logging.Formatter()


class Secret(str):
    """A string that never shows itself in ``repr()`` (config objects print ``'***'``)."""

    __slots__ = ()

    def __repr__(self) -> str:
        return f"'{REDACTED}'" if self else "''"

    def reveal(self) -> str:
        """The value as a plain ``str`` (for a client library that wants exactly ``str``)."""
        return str.__str__(self)


class SecretUrl(str):
    """A string holding a URL with ``user:password@``: ``repr()`` shows it redacted."""

    __slots__ = ()

    def __repr__(self) -> str:
        return repr(redact(self))


NO_SECRET = Secret("")
"""The empty secret: the default of an optional secret field."""


def is_secret_key(key: str) -> bool:
    """Whether a config key names a secret value (``password``, ``sasl.password``, ...)."""
    return _SECRET_KEY.search(key) is not None


def register_secret(value: str) -> None:
    """Scrub ``value`` from every text :func:`redact` sees from now on (process-wide)."""
    global _known, _pattern
    text = str.__str__(value)
    if len(text) < MIN_SECRET_LENGTH or text in _known:
        return
    with _lock:
        known = _known | {text}
        ordered = sorted(known, key=len, reverse=True)  # longest first: no partial leftovers
        _pattern = re.compile("|".join(re.escape(s) for s in ordered))
        _known = known
        _install_record_factory()


def _install_record_factory() -> None:
    """Wrap the process's log record factory once, so every record is scrubbed (B67).

    A filter on spate's loggers would miss records of client libraries (botocore logs
    request headers at DEBUG) and records handled by the application's own handlers; the
    factory sees every record of every logger before any handler or formatter does.
    """
    global _factory_installed
    if _factory_installed:
        return
    previous = logging.getLogRecordFactory()

    def factory(*args: Any, **kwargs: Any) -> logging.LogRecord:
        record = previous(*args, **kwargs)
        _scrub_record(record)
        return record

    logging.setLogRecordFactory(factory)
    _factory_installed = True


def _scrub_record(record: logging.LogRecord) -> None:
    """Replace secrets in ``record``'s message, traceback and stack with ``***``.

    A record without a secret is left as it was (its ``msg`` and ``args`` untouched); one
    with a secret gets the scrubbed message as ``msg`` with no ``args``, and its traceback
    pre-formatted, scrubbed, as ``exc_text`` (what :class:`logging.Formatter` prints).
    """
    try:
        message = record.getMessage()
    except Exception:
        return  # a broken format: logging reports it when a handler formats the record
    clean = redact(message)
    if clean != message:
        record.msg, record.args = clean, None
    if record.exc_info and record.exc_info[0] is not None and not record.exc_text:
        text = _traceback_formatter.formatException(record.exc_info)
        clean = redact(text)
        if clean != text:
            record.exc_text = clean
    if record.stack_info:
        record.stack_info = redact(record.stack_info)


def url_secrets(text: str) -> list[str]:
    """The passwords of every ``scheme://user:password@`` URL in ``text``."""
    return [m.group("pw") for m in _URL_USERINFO.finditer(text) if m.group("pw")]


def redact(text: str) -> str:
    """``text`` with every registered secret and every URL password replaced by ``***``."""
    text = str.__str__(text)
    pattern = _pattern
    if pattern is not None:
        text = pattern.sub(REDACTED, text)
    if "@" in text:
        text = _URL_USERINFO.sub(lambda m: f"{m.group('head')}:{REDACTED}@", text)
    return text


def display_url(url: str) -> str:
    """``url`` without its userinfo (``http://bob:pw@h:8123`` → ``http://h:8123``)."""
    return redact(_URL_CREDENTIALS.sub(lambda m: m.group("head"), str.__str__(url)))
