"""Environment interpolation inside string values, after YAML parsing (B18).

Runs over the parsed document, so a substituted value is never read as YAML again: an
empty variable stays an empty string, ``no`` stays the string ``no`` and ``#`` stays
literal text. Only string *values* are interpolated; mapping keys are not.

Syntax (the shell's, restricted to what configuration needs):

=================  ==========================================================
``${V}``           the value of ``V``; an error naming ``V`` and the key if unset
``${V:-default}``  ``default`` when ``V`` is unset *or empty*
``${V-default}``   ``default`` only when ``V`` is unset
``${V:?message}``  an error with ``message`` when ``V`` is unset or empty
``${V?message}``   an error with ``message`` only when ``V`` is unset
``${file:PATH}``   the contents of file ``PATH`` (one trailing newline dropped), as
                   Kubernetes and Docker mount secrets; an error naming the file
``$$``             a literal ``$``
=================  ==========================================================

A ``$`` followed by anything else is kept as it is. Defaults are plain text (no nested
``${...}``). A substituted value (from the environment or a default) that contains a
newline is refused: configuration values are single lines, and a stray newline in a
secret is almost always a copy-paste accident.

Errors name the variable and the key, never a value: the text around a reference may be a
secret (B67). After interpolation :func:`mark_secrets` turns every value under a
secret-looking key into a :class:`~spate.Secret`, reads ``<key>_file: PATH`` into
``<key>`` for those keys (``password_file: /run/secrets/ch``), and registers the values
for redaction.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from spate._secrets import Secret, SecretUrl, is_secret_key, register_secret, url_secrets
from spate.config._decode import join_path
from spate.errors import ConfigError

_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def interpolate_string(text: str, env: Mapping[str, str], path: str) -> str:
    """Substitute every ``${...}`` and ``$$`` in ``text``; raise ``ConfigError`` at ``path``."""
    if "$" not in text:
        return text
    out: list[str] = []
    i = 0
    n = len(text)
    while i < n:
        j = text.find("$", i)
        if j < 0:
            out.append(text[i:])
            break
        out.append(text[i:j])
        nxt = text[j + 1] if j + 1 < n else ""
        if nxt == "$":
            out.append("$")
            i = j + 2
            continue
        if nxt != "{":
            out.append("$")
            i = j + 1
            continue
        end = text.find("}", j + 2)
        if end < 0:
            raise ConfigError(path, "unterminated ${ in the value: expected a closing }")
        out.append(_expand(text[j + 2 : end], env, path))
        i = end + 1
    return "".join(out)


def _expand(expr: str, env: Mapping[str, str], path: str) -> str:
    match = _NAME.match(expr)
    if match is None:
        raise ConfigError(
            path, "invalid variable reference in the value: expected a name such as ${HOME}"
        )
    name = match.group(0)
    rest = expr[match.end() :]
    if name == "file" and rest.startswith(":") and not rest.startswith((":-", ":?")):
        return read_secret_file(rest[1:], path)
    value = env.get(name)
    if rest == "":
        if value is None:
            raise ConfigError(path, f"environment variable {name} is not set")
        return _checked(value, name, path)
    colon = rest.startswith(":")
    op_text = rest[1:] if colon else rest
    op, arg = op_text[:1], op_text[1:]
    if op == "-":
        if value is None or (colon and value == ""):
            return _checked(arg, name, path, what="default")
        return _checked(value, name, path)
    if op == "?":
        if value is None or (colon and value == ""):
            if arg:
                raise ConfigError(path, f"{name}: {arg}")
            state = "is not set" if value is None else "is empty"
            raise ConfigError(path, f"environment variable {name} {state}")
        return _checked(value, name, path)
    raise ConfigError(
        path,
        f"invalid variable reference to {name}: after the name expected }}, :-, -, :? or ?",
    )


def read_secret_file(file: str, path: str) -> str:
    """The contents of ``file`` without one trailing newline; ``ConfigError`` at ``path``."""
    if not file.strip():
        raise ConfigError(path, "${file:PATH} needs a path")
    try:
        with open(file, encoding="utf-8") as handle:
            text = handle.read()
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else type(exc).__name__
        raise ConfigError(path, f"cannot read secret file {file}: {reason}") from None
    if text.endswith("\n"):
        text = text[:-1]
        if text.endswith("\r"):
            text = text[:-1]
    text = _checked(text, f"file {file}", path, what="content")
    register_secret(text)
    return text


def _checked(value: str, name: str, path: str, what: str = "value") -> str:
    if "\n" in value or "\r" in value:
        raise ConfigError(path, f"the {what} of {name} contains a newline, which is not allowed")
    return value


def interpolate(data: object, env: Mapping[str, str], path: str = "") -> object:
    """A copy of parsed YAML ``data`` with every string value interpolated."""
    if isinstance(data, str):
        return interpolate_string(data, env, path)
    if isinstance(data, Mapping):
        return {
            key: interpolate(value, env, join_path(path, str(key))) for key, value in data.items()
        }
    if isinstance(data, list):
        return [interpolate(item, env, join_path(path, i)) for i, item in enumerate(data)]
    return data


def mark_secrets(data: object, path: str = "") -> object:
    """A copy of interpolated ``data`` with secret values marked and registered (B67).

    A string under a secret-looking key becomes a :class:`~spate.Secret`; ``<key>_file``
    for such a key is read into ``<key>`` (giving both is an error); the password of a
    URL anywhere is registered for redaction.
    """
    if isinstance(data, str):
        secrets = url_secrets(data)
        for secret in secrets:
            register_secret(secret)
        return SecretUrl(data) if secrets else data
    if isinstance(data, list):
        return [mark_secrets(item, join_path(path, i)) for i, item in enumerate(data)]
    if not isinstance(data, Mapping):
        return data
    out: dict[object, object] = {}
    for key, value in data.items():
        name = str(key)
        key_path = join_path(path, name)
        base = name[: -len("_file")] if name.endswith("_file") else ""
        if base and is_secret_key(base) and isinstance(value, str):
            if base in data:
                raise ConfigError(key_path, f"give {base} or {name}, not both")
            key, name, value = base, base, read_secret_file(value, key_path)
        if is_secret_key(name) and isinstance(value, str):
            register_secret(value)
            out[key] = Secret(value)
        else:
            out[key] = mark_secrets(value, key_path)
    return out
