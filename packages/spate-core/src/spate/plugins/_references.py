"""``package.module:name`` references in configuration: a user's function or type.

Owns :func:`import_reference`, which connectors call at build time for settings that
name user code (the JSON deserializer's ``target``, the HTTP source's ``collector`` and
``key``). The current directory is importable, as it is for ``python -m`` and for
``spate run --chain``, so a module next to the configuration is found.
"""

from __future__ import annotations

import importlib
import os
import sys


def import_reference(spec: str) -> object:
    """The object ``package.module:name`` (a dotted ``name`` walks attributes).

    Raises ``ValueError`` naming the module or attribute that cannot be found; the
    caller turns it into a ``ConfigError`` at its key.
    """
    module_name, sep, qualname = spec.partition(":")
    if not sep or not module_name or not qualname:
        raise ValueError(f"expected package.module:name, got {spec!r}")
    cwd = os.getcwd()
    if cwd not in sys.path and "" not in sys.path:
        sys.path.insert(0, cwd)
    try:
        obj: object = importlib.import_module(module_name)
    except ImportError as exc:
        raise ValueError(f"cannot import {module_name!r}: {exc}") from None
    for part in qualname.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise ValueError(f"{module_name!r} has no attribute {qualname!r}") from None
    return obj
