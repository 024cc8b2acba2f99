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
"""

from __future__ import annotations

import re
import threading

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
