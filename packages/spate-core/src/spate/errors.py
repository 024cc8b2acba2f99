"""The exception tree of spate, and the error classes and policies.

```text
SpateError
├── ConfigError            bad configuration: dotted key path (+ file, line, column)
├── PluginError            a plugin could not be loaded or is not a factory
│   └── MissingConnectorError (also ImportError) names what to install, or close names
├── SourceError            a source failed (ErrorClass + reason)
├── SinkError              a sink write failed (ErrorClass + reason)
├── DeserError             a payload could not be decoded (DeserErrorKind)
└── FatalError             the pipeline cannot go on (component + reason)
    └── AckError           an ack released twice by one holder (a sink bug)
```

Expected outcomes on the hot path are results, not exceptions; these are for the edges.
Upholds B28 (record errors are classified, never crash) and B29 (clear start-up errors).
"""

from __future__ import annotations

import enum
import logging
from collections.abc import Sequence
from typing import Literal, TypeVar

from spate._secrets import redact


class ErrorClass(enum.Enum):
    """How the framework reacts to an error raised by a component."""

    RETRYABLE = "retryable"
    """Transient (network, overload, timeout): retry with backoff."""
    RECORD = "record"
    """Only this record is bad: follow the record error policy."""
    FATAL = "fatal"
    """Retrying cannot help (schema, auth, syntax): fail the batch at once."""


class ErrorPolicy(enum.Enum):
    """What to do with a record that failed: skip it (counted), fail the pipeline, or
    write it to the pipeline's ``dead_letter`` sink with its error (B71)."""

    SKIP = "skip"
    FAIL = "fail"
    DEAD_LETTER = "dead_letter"


PolicyLike = ErrorPolicy | Literal["skip", "fail", "dead_letter"]


def as_policy(policy: PolicyLike, what: str) -> ErrorPolicy:
    """``"skip"``/``"fail"`` or an :class:`ErrorPolicy` → :class:`ErrorPolicy`."""
    if isinstance(policy, ErrorPolicy):
        return policy
    if policy == "skip":
        return ErrorPolicy.SKIP
    if policy == "fail":
        return ErrorPolicy.FAIL
    if policy == "dead_letter":
        return ErrorPolicy.DEAD_LETTER
    raise ValueError(f"{what}: policy must be 'skip', 'fail' or 'dead_letter', got {policy!r}")


class SpateError(Exception):
    """Root of every error spate raises; its text never shows a secret (B67)."""

    def __str__(self) -> str:
        return redact(super().__str__())


class ConfigError(SpateError):
    """An invalid configuration value, reported with its dotted key path (B17, B29)."""

    def __init__(
        self,
        path: str,
        message: str,
        *,
        file: str | None = None,
        line: int | None = None,
        column: int | None = None,
    ) -> None:
        self.path = path
        self.message = message
        self.file = file
        self.line = line
        self.column = column
        super().__init__(self._render())

    def _render(self) -> str:
        where = ""
        if self.file is not None:
            where = self.file
            if self.line is not None:
                where += f":{self.line}"
                if self.column is not None:
                    where += f":{self.column}"
            where += ": "
        return f"{where}{self.path or '<root>'}: {self.message}"

    def with_location(
        self, *, file: str | None = None, line: int | None = None, column: int | None = None
    ) -> ConfigError:
        """A copy that also names where in which file the key stands."""
        return ConfigError(
            self.path,
            self.message,
            file=file if file is not None else self.file,
            line=line if line is not None else self.line,
            column=column if column is not None else self.column,
        )


class PluginError(SpateError):
    """A plugin could not be loaded, or the loaded object is not a factory."""


class MissingConnectorError(PluginError, ImportError):
    """The configuration names a connector that is not installed (B26).

    ``install`` says how to install the distribution that provides it (when it is one of
    spate's), ``did_you_mean`` lists close installed or known names (a typo), and
    ``installed`` the names of that kind that are installed. ``file``, ``line`` and
    ``column`` say where the configuration names it, once known.
    """

    def __init__(
        self,
        kind: str,
        name: str,
        install: str | None,
        *,
        path: str = "",
        did_you_mean: Sequence[str] = (),
        installed: Sequence[str] = (),
        file: str | None = None,
        line: int | None = None,
        column: int | None = None,
    ) -> None:
        where = ""
        if file is not None:
            where = file + "".join(f":{n}" for n in (line, column) if n is not None) + ": "
        text = f"{where}{path + ': ' if path else ''}no {kind} named {name!r} is installed"
        if install:
            text += f"; {install}"
        elif did_you_mean:
            text += "; did you mean " + " or ".join(repr(n) for n in did_you_mean) + "?"
        elif installed:
            text += f" (installed: {', '.join(sorted(installed))})"
        super().__init__(text)
        # Set after ImportError.__init__, which resets its own ``name`` and ``path``.
        self.kind = kind
        self.name = name
        self.install = install
        self.path = path
        self.did_you_mean = tuple(did_you_mean)
        self.installed = tuple(installed)
        self.file = file
        self.line = line
        self.column = column

    def with_location(
        self, *, file: str | None, line: int | None = None, column: int | None = None
    ) -> MissingConnectorError:
        """A copy that also names where in which file the connector is named."""
        return MissingConnectorError(
            self.kind,
            self.name or "",
            self.install,
            path=self.path or "",
            did_you_mean=self.did_you_mean,
            installed=self.installed,
            file=file,
            line=line,
            column=column,
        )


class SourceError(SpateError):
    """A source failed; ``error_class`` says whether retrying can help."""

    def __init__(self, reason: str, error_class: ErrorClass = ErrorClass.RETRYABLE) -> None:
        self.reason = redact(reason)
        self.error_class = error_class
        super().__init__(self.reason)


class SinkError(SpateError):
    """A sink write failed; ``error_class`` decides retry, record policy or fail."""

    def __init__(self, reason: str, error_class: ErrorClass = ErrorClass.RETRYABLE) -> None:
        self.reason = redact(reason)
        self.error_class = error_class
        super().__init__(self.reason)


class DeserErrorKind(enum.Enum):
    """Why a payload could not be decoded."""

    MALFORMED = "malformed"
    """The bytes are not a valid encoding: a record error (skip or fail by policy)."""
    SCHEMA_UNAVAILABLE = "schema_unavailable"
    """The schema exists but cannot be used (not parseable, not resolvable): a record error."""
    NOT_READY = "not_ready"
    """The schema cannot be had yet (registry down, or not serving the id yet): retry the
    record later, never drop (B21)."""
    UNKNOWN_SCHEMA = "unknown_schema"
    """The schema id stayed unknown for as long as the deserializer waits for it: a record
    error, counted apart; skipped only where the user opted in (B28)."""


class DeserError(SpateError):
    """A payload could not be decoded; ``kind`` decides what happens to the record.

    ``policy`` overrides the deserializer's ``on_error`` for this one error, for a
    deserializer with its own setting for one kind of error (Avro's
    ``on_unknown_schema``); None follows ``on_error``.
    """

    def __init__(
        self,
        reason: str,
        kind: DeserErrorKind = DeserErrorKind.MALFORMED,
        *,
        policy: ErrorPolicy | None = None,
    ) -> None:
        self.reason = redact(reason)
        self.kind = kind
        self.policy = policy
        super().__init__(self.reason)


class FatalError(SpateError):
    """The pipeline cannot continue; ``component`` names who gave up."""

    def __init__(self, component: str, reason: str) -> None:
        self.component = component
        self.reason = redact(reason)
        super().__init__(f"{component}: {self.reason}")


class AckError(FatalError):
    """An ack token was released by a holder that does not hold it (a second release by
    the same holder), or retained twice by one holder: a sink's bookkeeping is broken.

    Raised to the caller of ``retain``/``release``; the token also reports it to the
    pipeline, which fails the run, so a sink that swallows it cannot hide it (B2).
    """

    def __init__(self, reason: str) -> None:
        super().__init__("ack", reason)


_E = TypeVar("_E", bound=SpateError)


def bare(exc: _E, logger: logging.Logger, what: str) -> _E:
    """``exc`` for re-raising at a public entry point (``load_config``,
    ``Pipeline.from_config``, ``Pipeline.run``) as the ``spate`` command reports it: its own
    one-line message without the chain of library exceptions behind it, which can run to
    screens for an unreachable endpoint. The chain goes to ``logger`` at DEBUG. Raise the
    result ``from None``."""
    logger.debug("%s failed", what, exc_info=exc)
    exc.__cause__ = None
    exc.__suppress_context__ = True
    return exc.with_traceback(None)
