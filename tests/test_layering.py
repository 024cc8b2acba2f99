"""The import structure holds: connectors use only spate's public API, and no package has
an import cycle among its modules (module-level imports; a ``TYPE_CHECKING`` block and an
import inside a function are not counted)."""

from __future__ import annotations

import ast
import importlib
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CORE = ROOT / "packages" / "spate-core" / "src"


def _sources() -> Iterator[tuple[Path, Path]]:
    """``(file, its package's src directory)`` for every package source file."""
    for src in sorted(ROOT.glob("packages/*/src")):
        for path in sorted(src.rglob("*.py")):
            yield path, src


def _module_name(path: Path, src: Path) -> str:
    parts = list(path.relative_to(src).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _top_level_imports(
    tree: ast.Module, module: str, is_package: bool
) -> Iterator[tuple[str, list[str], int]]:
    """``(imported module, names, line)`` of the imports run when the module loads."""
    for node in tree.body:
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            continue
        for inner in ast.walk(node) if not isinstance(node, ast.FunctionDef | ast.ClassDef) else ():
            if isinstance(inner, ast.ImportFrom):
                base = _absolute(inner, module, is_package)
                yield base, [a.name for a in inner.names], inner.lineno
            elif isinstance(inner, ast.Import):
                for alias in inner.names:
                    yield alias.name, [], inner.lineno


def _absolute(node: ast.ImportFrom, module: str, is_package: bool) -> str:
    """The absolute name of the module ``node`` imports from (relative imports resolved)."""
    base = node.module or ""
    if not node.level:
        return base
    anchor = module.split(".")
    anchor = anchor if is_package else anchor[:-1]
    anchor = anchor[: len(anchor) - node.level + 1]
    return ".".join([*anchor, base] if base else anchor)


def test_connectors_import_only_public_spate_names() -> None:
    wrong = []
    for path, src in _sources():
        if src == CORE:
            continue
        tree = ast.parse(path.read_text())
        module = _module_name(path, src)
        for imported, names, line in _top_level_imports(tree, module, path.name == "__init__.py"):
            if imported != "spate" and not imported.startswith("spate."):
                continue
            where = f"{path.relative_to(ROOT)}:{line}"
            if any(part.startswith("_") for part in imported.split(".")):
                wrong.append(f"{where}: imports private module {imported}")
                continue
            hidden = [n for n in names if not _public(imported, n)]
            if hidden:
                wrong.append(f"{where}: {', '.join(hidden)} not in {imported}.__all__")
    assert not wrong, "\n".join(wrong)


def _public(module: str, name: str) -> bool:
    """Whether ``name`` is public in ``module``: listed in its ``__all__``, or, in a module
    without one, not underscored; or a public submodule."""
    loaded = importlib.import_module(module)
    listed = getattr(loaded, "__all__", None)
    if listed is not None and name in listed:
        return True
    if listed is None and not name.startswith("_") and hasattr(loaded, name):
        return True
    return not name.startswith("_") and _is_module(module, name)


def _is_module(package: str, name: str) -> bool:
    try:
        importlib.import_module(f"{package}.{name}")
    except ImportError:
        return False
    return True


def test_no_package_has_an_import_cycle() -> None:
    graph: dict[str, set[str]] = {}
    for path, src in _sources():
        module = _module_name(path, src)
        tree = ast.parse(path.read_text())
        edges = graph.setdefault(module, set())
        for imported, names, _line in _top_level_imports(tree, module, path.name == "__init__.py"):
            top = module.split(".")[0]
            if imported.split(".")[0] != top:
                continue
            for target in (*(f"{imported}.{n}" for n in names), imported):
                if target != module:
                    edges.add(target)
    known = set(graph)
    graph = {m: {t for t in targets if t in known} for m, targets in graph.items()}
    cycles = _cycles(graph)
    assert not cycles, "import cycles:\n" + "\n".join(" -> ".join(c) for c in cycles)


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """One cycle per strongly connected component of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(graph[node]):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                top = stack.pop()
                on_stack.discard(top)
                component.append(top)
                if top == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


# spate-core's layers, lowest first: a module imports its own layer and those below only.
LAYERS: tuple[tuple[str, ...], ...] = (
    ("spate._secrets", "spate._clock", "spate._locks"),
    ("spate.errors", "spate.records", "spate.schema", "spate.cdc"),
    ("spate.config", "spate.metrics"),
    ("spate.checkpoint", "spate.flow", "spate.source", "spate.admin"),
    ("spate.sink", "spate._context"),
    ("spate.ops",),
    ("spate.plugins",),
    ("spate._assembly", "spate._loading"),
    ("spate.pipeline",),
    ("spate._supervised", "spate.testing"),
    ("spate",),
    ("spate.cli",),
)


def _layer(module: str) -> int:
    group = ".".join(module.split(".")[:2])
    for depth, members in enumerate(LAYERS):
        if group in members:
            return depth
    raise AssertionError(f"{module} is in no layer of LAYERS; add its group {group}")


def _every_import(tree: ast.Module, module: str, is_package: bool) -> Iterator[tuple[str, int]]:
    """``(imported module, line)`` of every import in the module: at its top, inside a
    ``TYPE_CHECKING`` block, inside a function, and ``importlib.import_module("…")`` with a
    literal name. A deferred or type-only import up a layer still ties the lower layer
    to the upper one, so the layering counts them all."""
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            yield _absolute(node, module, is_package), node.lineno
        elif isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name, node.lineno
        elif (
            isinstance(node, ast.Call)
            and ast.unparse(node.func).endswith("import_module")
            and node.args
            and isinstance(node.args[0], ast.Constant)
            and isinstance(node.args[0].value, str)
        ):
            yield node.args[0].value, node.lineno


def test_core_modules_import_only_their_layer_and_below() -> None:
    """Counts every import (B185): a module-level one, a type-only one under
    ``TYPE_CHECKING``, one deferred into a function, ``importlib.import_module``."""
    upward = []
    for path, src in _sources():
        if src != CORE:
            continue
        module = _module_name(path, src)
        own = _layer(module)
        for imported, line in _every_import(
            ast.parse(path.read_text()), module, path.name == "__init__.py"
        ):
            if imported != "spate" and not imported.startswith("spate."):
                continue
            if _layer(imported) > own:
                upward.append(f"{path.relative_to(ROOT)}:{line}: {module} imports {imported}")
    assert not upward, "imports up a layer:\n" + "\n".join(upward)


def test_sink_tiers_sit_above_the_pool() -> None:
    """The tiers (spate.sink.tiers) import the pool's contract; nothing else in spate.sink
    imports them, except the package's public face re-exporting their names."""
    downward = []
    for path, src in _sources():
        if src != CORE:
            continue
        module = _module_name(path, src)
        if not module.startswith("spate.sink") or module in ("spate.sink", "spate.sink.tiers"):
            continue
        if module.startswith("spate.sink.tiers."):
            continue
        for imported, _names, line in _top_level_imports(
            ast.parse(path.read_text()), module, path.name == "__init__.py"
        ):
            if imported == "spate.sink.tiers" or imported.startswith("spate.sink.tiers."):
                downward.append(f"{path.relative_to(ROOT)}:{line}: {module} imports {imported}")
    assert not downward, "the pool imports a tier:\n" + "\n".join(downward)


# The sink pool and its collaborators, lowest first: each imports only those before it.
POOL_ORDER = (
    "spate.sink._workers",
    "spate.sink._admission",
    "spate.sink._lanes",
    "spate.sink._pool",
)

# The modules of the sink seam where a capability is read through a declared protocol.
SEAM = ("spate.ops._compile", "spate.ops._columnar", "spate.sink._contract", *POOL_ORDER)


def test_b205_the_pools_collaborators_import_downward() -> None:
    """B205: workers, admission, effectively-once lanes, pool; every import counts."""
    upward = []
    for path, src in _sources():
        module = _module_name(path, src)
        if src != CORE or module not in POOL_ORDER:
            continue
        for imported, line in _every_import(ast.parse(path.read_text()), module, False):
            if imported in POOL_ORDER and POOL_ORDER.index(imported) > POOL_ORDER.index(module):
                upward.append(f"{path.relative_to(ROOT)}:{line}: {module} imports {imported}")
    assert not upward, "a collaborator imports one above it:\n" + "\n".join(upward)


def test_b205_no_attribute_probing_on_the_sink_seam() -> None:
    """B205: capabilities on the seam are declared protocols, not ``getattr``/``hasattr``."""
    probes = []
    for path, src in _sources():
        if src != CORE or _module_name(path, src) not in SEAM:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Name)
                and node.func.id in ("getattr", "hasattr")
            ):
                probes.append(f"{path.relative_to(ROOT)}:{node.lineno}: {node.func.id}")
        if "type: ignore[attr-defined]" in path.read_text():
            probes.append(f"{path.relative_to(ROOT)}: type: ignore[attr-defined]")
    assert not probes, "attribute probing on the sink seam:\n" + "\n".join(probes)


def _protocol_members(protocol: type) -> set[str]:
    """The public members a Protocol declares, its bases' included."""
    names: set[str] = set()
    for klass in protocol.__mro__:
        if klass.__module__ in ("typing", "builtins"):
            continue
        names |= {name for name in vars(klass) if not name.startswith("_")}
        names |= set(vars(klass).get("__annotations__", {}))
    return names


def _seam_capabilities() -> dict[str, str]:
    """Every member of a Protocol ``spate.sink`` or ``spate.ops`` exports, beyond the base
    ``Sink`` contract every sink has, mapped to the protocol declaring it; read from the
    protocols themselves, so a capability added later is covered at once."""
    found: dict[str, str] = {}
    base: set[str] = set()
    for module_name in ("spate.sink", "spate.ops"):
        module = importlib.import_module(module_name)
        for name in module.__all__:
            obj = vars(module)[name]
            if not isinstance(obj, type) or not vars(obj).get("_is_protocol", False):
                continue
            if name == "Sink":
                base = _protocol_members(obj)
                continue
            for member in _protocol_members(obj):
                found.setdefault(member, f"{module_name}.{name}")
    return {member: where for member, where in found.items() if member not in base}


def test_b230_no_seam_capability_is_probed_by_attribute() -> None:
    """B230: no ``hasattr(x, "<capability>")`` or ``getattr(x, "<capability>", …)`` of a
    member of a seam protocol anywhere in spate-core or a connector (use ``isinstance``
    against the protocol), and no ``type: ignore[attr-defined]`` in ``spate.ops`` or
    ``spate.sink`` (a call the protocols do not declare)."""
    capabilities = _seam_capabilities()
    assert {"offer_frame", "prepare_frame", "takes_frames", "frame_needs_keys"} <= set(
        capabilities
    ), "the seam protocols were not found"
    assert {"offer_rows", "takes_bytes", "many", "begin_identified", "lanes_revoked"} <= set(
        capabilities
    )
    probes = []
    for path, src in _sources():
        text = path.read_text()
        for node in ast.walk(ast.parse(text)):
            if not (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Name)
                and node.func.id in ("getattr", "hasattr")
                and len(node.args) >= 2
                and isinstance(node.args[1], ast.Constant)
                and node.args[1].value in capabilities
            ):
                continue
            name = node.args[1].value
            probes.append(
                f"{path.relative_to(ROOT)}:{node.lineno}: {node.func.id}(…, {name!r}): "
                f"isinstance(…, {capabilities[name]}) instead"
            )
        module = _module_name(path, src)
        if src == CORE and module.split(".")[:2] in (["spate", "ops"], ["spate", "sink"]):
            for number, line in enumerate(text.splitlines(), 1):
                if "type: ignore[attr-defined]" in line:
                    probes.append(f"{path.relative_to(ROOT)}:{number}: type: ignore[attr-defined]")
    assert not probes, "a seam capability probed by attribute:\n" + "\n".join(probes)
