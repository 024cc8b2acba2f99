"""What every conformance suite shares: promises, the failure they raise, config checks.

A conformance suite is a plain class whose ``test_*`` methods pytest collects once a
connector's test module subclasses it under a ``Test…`` name. The suites import no
pytest (spate-core does not depend on it): a test that does not apply raises
:class:`unittest.SkipTest`, which pytest reports as skipped, and each test gets a fresh
temporary directory, :attr:`Conformance.workdir`, through xunit-style
``setup_method`` / ``teardown_method`` (a subclass that overrides them calls ``super()``).

A broken promise raises :class:`ConformanceFailure` (an ``AssertionError``) whose message
starts with the promise's number and text, so a red test says which promise broke, not
only which line. :class:`ConfigConformance` holds the config-model convention every
connector kind shares (B17).
"""

from __future__ import annotations

import dataclasses
import shutil
import tempfile
import unittest
import uuid
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, ClassVar, NamedTuple

from spate._clock import Clock, SystemClock
from spate._context import BuildContext
from spate.config._decode import decode
from spate.errors import ConfigError
from spate.flow._budget import InflightBudget
from spate.metrics._meter import Meter
from spate.sink._gate import CommitGates


class Promise(NamedTuple):
    """A promise a connector makes: its number (``B2``) or design section, and its text."""

    code: str
    text: str

    def __str__(self) -> str:
        return f"{self.code}: {self.text}"


class ConformanceFailure(AssertionError):
    """A connector broke a promise; the message names the promise first."""

    def __init__(self, promise: Promise, detail: str) -> None:
        self.promise = promise
        self.detail = detail
        super().__init__(f"{promise.code} broken ({promise.text}): {detail}")


def check(ok: object, promise: Promise, detail: str) -> None:
    """Raise :class:`ConformanceFailure` for ``promise`` unless ``ok`` is true."""
    if not ok:
        raise ConformanceFailure(promise, detail)


def skip(reason: str) -> unittest.SkipTest:
    """The exception that marks a conformance test as not applicable (``raise skip(...)``)."""
    return unittest.SkipTest(reason)


CONFIG_DOTTED = Promise("B17", "unknown keys and bad values are refused with their dotted path")
CONFIG_MODEL = Promise(
    "B17",
    "a connector's config_model is a frozen keyword-only dataclass that "
    "spate.config.decode reads, and the factory has build(config, context)",
)

UNKNOWN_KEY = "surely_not_a_key"
"""The key the suites add to a valid config to see it refused."""


def conformance_context(
    component: str,
    *,
    io_threads: int = 1,
    clock: Clock | None = None,
    commit_gates: CommitGates | None = None,
) -> BuildContext:
    """A :class:`~spate.plugins.BuildContext` of its own for one conformance test.

    A fresh pipeline name and meter (no state shared between tests), a new run nonce, a
    byte budget large enough never to pause anything, the system clock by default, and
    a registry of commit gates of its own unless ``commit_gates`` is given (contexts
    standing for pipelines of one process that share their gates, B231).
    """
    pipeline = f"conformance-{uuid.uuid4().hex[:8]}"
    return BuildContext(
        pipeline=pipeline,
        component=component,
        meter=Meter(pipeline),
        clock=clock if clock is not None else SystemClock(),
        run_nonce=uuid.uuid4().hex[:12],
        budget=InflightBudget(1 << 40),
        io_threads=io_threads,
        commit_gates=commit_gates if commit_gates is not None else CommitGates(),
    )


class Conformance:
    """Base of every suite: a fresh :attr:`workdir` per test."""

    workdir: Path
    """An empty directory of this test's own, removed afterwards."""

    def setup_method(self, method: object = None) -> None:
        self.workdir = Path(tempfile.mkdtemp(prefix="spate-conformance-"))

    def teardown_method(self, method: object = None) -> None:
        shutil.rmtree(self.workdir, ignore_errors=True)


class ConfigConformance(Conformance):
    """The config-model convention (B17), shared by the source, sink and deserializer suites.

    Set :attr:`factory` to the object the connector's entry point names and :attr:`tag`
    to the entry name, and return a working YAML body from :meth:`config`. List bad bodies
    and the key each must be refused at in :meth:`invalid_configs`. Without a factory
    these tests are skipped.
    """

    factory: ClassVar[Any] = None
    """What the entry point names: an object with ``config_model`` and ``build``."""
    tag: ClassVar[str] = ""
    """The entry-point name, which is the YAML tag (``sqlite`` in ``sink: {sqlite: …}``)."""
    section: ClassVar[str] = "connector"
    """The YAML section the tag stands under, for dotted paths (``sink``, ``source`` …)."""

    def config(self) -> Mapping[str, object]:
        """A YAML body (the mapping under the tag) the connector accepts."""
        raise skip(f"{type(self).__name__} gives no config()")

    def invalid_configs(self) -> Sequence[tuple[Mapping[str, object], str]]:
        """Bodies that must be refused, each with the key (relative to the body) to name."""
        return ()

    # -- helpers --------------------------------------------------------------------

    @property
    def config_path(self) -> str:
        """Where the body stands in a pipeline file (``sink.sqlite``)."""
        return f"{self.section}.{self.tag or 'connector'}"

    def _factory(self) -> Any:
        if self.factory is None:
            raise skip(f"{type(self).__name__} names no factory")
        return self.factory

    def decode_config(self, body: Mapping[str, object] | None = None) -> Any:
        """Decode ``body`` (default :meth:`config`) into the factory's config model."""
        factory = self._factory()
        raw = self.config() if body is None else body
        return decode(factory.config_model, dict(raw), self.config_path)

    # -- the convention -------------------------------------------------------------

    def test_b17_config_model_follows_the_convention(self) -> None:
        factory = self._factory()
        model = getattr(factory, "config_model", None)
        check(
            isinstance(model, type) and dataclasses.is_dataclass(model),
            CONFIG_MODEL,
            f"{factory!r} has no config_model dataclass (got {model!r})",
        )
        assert isinstance(model, type)
        params = getattr(model, "__dataclass_params__", None)
        check(
            params is not None and params.frozen,
            CONFIG_MODEL,
            f"{model.__name__} is not frozen: declare it with "
            "@dataclass(frozen=True, slots=True, kw_only=True)",
        )
        positional = [f.name for f in dataclasses.fields(model) if f.init and not f.kw_only]
        check(
            not positional,
            CONFIG_MODEL,
            f"{model.__name__} has positional fields {positional}: make them keyword-only "
            "so adding a setting never breaks a caller",
        )
        check(
            callable(getattr(factory, "build", None)),
            CONFIG_MODEL,
            f"{factory!r} has no build(config, context)",
        )
        try:
            self.decode_config()
        except ConfigError as exc:
            raise ConformanceFailure(
                CONFIG_MODEL, f"the body from config() is refused: {exc}"
            ) from exc

    def test_b17_unknown_keys_are_refused_with_their_dotted_path(self) -> None:
        factory = self._factory()
        body = dict(self.config())
        cases: list[tuple[dict[str, object], str]] = [
            ({**body, UNKNOWN_KEY: 1}, f"{self.config_path}.{UNKNOWN_KEY}")
        ]
        # Nested sections (batch:, retry:, …) must be just as strict.
        for f in dataclasses.fields(factory.config_model):
            key = str(f.metadata.get("key", f.name))
            nested = body.get(key, {})
            if _is_dataclass_field(f) and isinstance(nested, Mapping):
                bad = {**nested, UNKNOWN_KEY: 1}
                cases.append(({**body, key: bad}, f"{self.config_path}.{key}.{UNKNOWN_KEY}"))
        for raw, path in cases:
            try:
                self.decode_config(raw)
            except ConfigError as exc:
                check(
                    exc.path == path,
                    CONFIG_DOTTED,
                    f"an unknown key was refused at {exc.path!r}, expected {path!r}",
                )
                continue
            raise ConformanceFailure(CONFIG_DOTTED, f"the unknown key {path!r} was accepted")

    def test_b17_invalid_values_are_refused_with_their_dotted_path(self) -> None:
        cases = self.invalid_configs()
        if not cases:
            raise skip(f"{type(self).__name__} lists no invalid_configs()")
        for raw, key in cases:
            path = f"{self.config_path}.{key}" if key else self.config_path
            try:
                self.decode_config(raw)
            except ConfigError as exc:
                check(
                    exc.path == path,
                    CONFIG_DOTTED,
                    f"{dict(raw)!r} was refused at {exc.path!r} ({exc.message}), expected {path!r}",
                )
                continue
            raise ConformanceFailure(CONFIG_DOTTED, f"{dict(raw)!r} was accepted")


def _is_dataclass_field(f: dataclasses.Field[Any]) -> bool:
    """Whether a field's default is a dataclass instance (a nested config section)."""
    if f.default_factory is not dataclasses.MISSING:
        try:
            return dataclasses.is_dataclass(f.default_factory())
        except Exception:  # a factory needing arguments is not a section
            return False
    return dataclasses.is_dataclass(f.default) and not isinstance(f.default, type)


def missing_from(expected: Sequence[object], got: Sequence[object]) -> list[object]:
    """The items of ``expected`` not in ``got``, counting repeats (rows may be unhashable)."""
    pool = list(got)
    missing: list[object] = []
    for item in expected:
        for i, candidate in enumerate(pool):
            if candidate == item:
                del pool[i]
                break
        else:
            missing.append(item)
    return missing


def count_of(item: object, items: Sequence[object]) -> int:
    """How many items of ``items`` equal ``item``."""
    return sum(1 for candidate in items if candidate == item)
