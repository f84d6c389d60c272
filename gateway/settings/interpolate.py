"""`${VAR}` and `${VAR:-default}` in YAML string values, resolved from the environment."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

_REFERENCE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-(.*?))?\}")


class MissingVariable(ValueError):
    def __init__(self, name: str, path: str) -> None:
        super().__init__(name, path)
        self.name = name
        self.path = path


def interpolate(
    node: Any,
    env: Mapping[str, str],
    path: str = "",
    missing: list[MissingVariable] | None = None,
) -> Any:
    """Return `node` with every reference replaced; raise MissingVariable for an unset
    variable without a default. `$${` escapes a literal `${`. Given a `missing` list,
    every unset variable is appended to it instead (and read as empty), so a check can
    report them all along with the file's other problems."""
    if isinstance(node, str):
        return _interpolate_string(node, env, path, missing)
    if isinstance(node, dict):
        return {
            k: interpolate(v, env, f"{path}.{k}" if path else str(k), missing)
            for k, v in node.items()
        }
    if isinstance(node, list):
        return [interpolate(v, env, f"{path}[{i}]", missing) for i, v in enumerate(node)]
    return node


def _interpolate_string(
    value: str, env: Mapping[str, str], path: str, missing: list[MissingVariable] | None
) -> str:
    if "${" not in value:
        return value
    escaped = value.replace("$${", "\0")

    def substitute(match: re.Match[str]) -> str:
        name, default = match.group(1), match.group(2)
        if name in env and env[name] != "":
            return env[name]
        if default is not None:
            return default
        if missing is None:
            raise MissingVariable(name, path)
        missing.append(MissingVariable(name, path))
        return ""

    return _REFERENCE.sub(substitute, escaped).replace("\0", "${")
