"""Entry points and distribution metadata, read once through ``importlib.metadata``.

Owns the scan of installed distributions: which entry points exist in spate's groups,
which distribution (and version) declares each, and the front door's extras (the
install hints of B26). Nothing here imports a plugin: loading is the registry's job and
happens only when a plugin is asked for by name.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from importlib import metadata

FRONT_DOOR = "spate"
"""The distribution whose extras are named after connectors (``spate[kafka]``)."""

FRONT_DOOR_EXTRAS: dict[str, tuple[str, ...]] = {
    "kafka": ("spate-kafka", "spate-avro", "spate-json"),
    "clickhouse": ("spate-clickhouse",),
    "clickhouse-embedded": ("spate-clickhouse",),
    "s3": ("spate-s3",),
    "avro": ("spate-avro",),
    "json": ("spate-json",),
    "protobuf": ("spate-protobuf",),
    "coordination": ("spate-coordination",),
    "coordination-nats": ("spate-coordination",),
    "datagen": ("spate-datagen",),
    "columnar": ("spate-avro", "spate-clickhouse", "spate-json", "spate-protobuf"),
    "parquet": ("spate-parquet",),
    "http": ("spate-http", "spate-json"),
    "huggingface": ("spate-huggingface",),
    "full": (
        "spate-kafka",
        "spate-clickhouse",
        "spate-s3",
        "spate-avro",
        "spate-json",
        "spate-protobuf",
        "spate-coordination",
        "spate-datagen",
        "spate-parquet",
        "spate-http",
        "spate-huggingface",
    ),
}
"""The front door's extras and the spate distributions each pulls in, for install hints
when the front door itself is not installed (a test keeps this equal to the front door's
``pyproject.toml``). Hints name only these real distributions, never a guess (B26)."""


SPATE_CONNECTORS: dict[str, dict[str, str]] = {
    "source": {
        "memory": "spate-core",
        "datagen": "spate-datagen",
        "http_poll": "spate-http",
        "kafka": "spate-kafka",
        "s3": "spate-s3",
    },
    "sink": {
        "capture": "spate-core",
        "file": "spate-core",
        "tee": "spate-core",
        "tiered": "spate-core",
        "clickhouse": "spate-clickhouse",
        "huggingface": "spate-huggingface",
        "kafka": "spate-kafka",
        "parquet": "spate-parquet",
    },
    "deserializer": {"avro": "spate-avro", "json": "spate-json", "protobuf": "spate-protobuf"},
    "coordination_store": {"memory": "spate-coordination", "nats": "spate-coordination"},
    "store": {"jsonl": "spate-core"},
}
"""The connectors spate's own distributions declare, by kind (a test keeps this equal to
their ``pyproject.toml`` entry points): a "did you mean" offers only connector names of
the kind asked for, never an extra such as ``clickhouse-embedded`` (B26)."""


def is_installed(distribution: str, path: Sequence[str] | None = None) -> bool:
    """Whether ``distribution`` is installed (on ``path``, or sys.path)."""
    wanted = normalize(distribution)
    if path is None:
        try:
            metadata.distribution(wanted)
        except metadata.PackageNotFoundError:
            return False
        return True
    return any(
        normalize(d.metadata["Name"] or "") == wanted
        for d in metadata.distributions(path=list(path))
    )


def install_hint(distribution: str, extra: str, *, dist_extra: str | None = None) -> str:
    """How to install one of spate's distributions, for an error message (B26, B45).

    Names the distribution, the front door's extra that brings it, and the install from
    a spate checkout — spate is not on the public package index yet, and the name
    ``spate`` there belongs to another project (ADR 0003), so the hint never sends
    anyone to the index. ``dist_extra`` is the distribution's own extra
    (``spate-clickhouse[embedded]``).
    """
    wanted = f"{distribution}[{dist_extra}]" if dist_extra else distribution
    return (
        f"install {wanted} (the front door's extra {FRONT_DOOR}[{extra}]); spate is not "
        f'on the public package index yet, so from a spate checkout: pip install "./packages/'
        f'{wanted}"'
    )


@dataclass(frozen=True, slots=True)
class EntryPointInfo:
    """One declared entry point and the distribution that declares it."""

    group: str
    name: str
    value: str
    distribution: str
    version: str
    entry_point: metadata.EntryPoint


@dataclass(frozen=True, slots=True)
class Requirement:
    """One ``Requires-Dist`` line of the front door: ``name`` needed by ``extra``."""

    name: str
    extra: str | None


def normalize(name: str) -> str:
    """PEP 503 normalized distribution name (``Spate_Kafka`` → ``spate-kafka``)."""
    return re.sub(r"[-_.]+", "-", name).lower()


def scan(groups: Iterable[str], path: Sequence[str] | None = None) -> list[EntryPointInfo]:
    """Every entry point in ``groups`` declared by a distribution on ``path`` (sys.path).

    A distribution found twice on the path (an editable install and a stale copy) is
    counted once: the first one wins, as it would for an import.
    """
    wanted = set(groups)
    seen_dists: set[str] = set()
    found: list[EntryPointInfo] = []
    dists = metadata.distributions() if path is None else metadata.distributions(path=list(path))
    for dist in dists:
        # The name from the metadata directory when there is one: reading the metadata
        # itself (an email-format parse) for each of hundreds of installed distributions
        # costs a pipeline's start a second on a busy machine; only the few that declare
        # a wanted entry point are read.
        folder: str | None = getattr(dist, "_normalized_name", None)
        dist_name: str | None = None if folder else dist.metadata["Name"]
        named = folder or dist_name
        if not named:
            continue
        key = normalize(named)
        if key in seen_dists:
            continue
        seen_dists.add(key)
        eps = [ep for ep in dist.entry_points if ep.group in wanted]
        if not eps:
            continue
        dist_name = dist_name or dist.metadata["Name"]
        if not dist_name:
            continue
        version = dist.version
        for ep in eps:
            found.append(
                EntryPointInfo(
                    group=ep.group,
                    name=ep.name,
                    value=ep.value,
                    distribution=dist_name,
                    version=version,
                    entry_point=ep,
                )
            )
    return found


def front_door_requirements(path: Sequence[str] | None = None) -> list[Requirement] | None:
    """The front door's requirements with the extra each belongs to; None if not installed."""
    dist: metadata.Distribution | None
    if path is None:
        try:
            dist = metadata.distribution(FRONT_DOOR)
        except metadata.PackageNotFoundError:
            return None
    else:
        dist = next(
            (
                d
                for d in metadata.distributions(path=list(path))
                if normalize(d.metadata["Name"] or "") == FRONT_DOOR
            ),
            None,
        )
        if dist is None:
            return None
    return [parse_requirement(line) for line in dist.requires or ()]


_REQ = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)")
_EXTRA = re.compile(r"""extra\s*==\s*["']([^"']+)["']""")


def parse_requirement(line: str) -> Requirement:
    """``spate-kafka==0.1.0; extra == "kafka"`` → ``Requirement("spate-kafka", "kafka")``."""
    spec, _, marker = line.partition(";")
    match = _REQ.match(spec)
    name = normalize(match.group(1)) if match else spec.strip()
    extra = _EXTRA.search(marker)
    return Requirement(name=name, extra=normalize(extra.group(1)) if extra else None)
