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


def interpolate(node: Any, env: Mapping[str, str], path: str = "") -> Any:
    """Return `node` with every reference replaced; raise MissingVariable for an unset
    variable without a default. `$${` escapes a literal `${`."""
    if isinstance(node, str):
        return _interpolate_string(node, env, path)
    if isinstance(node, dict):
        return {k: interpolate(v, env, f"{path}.{k}" if path else str(k)) for k, v in node.items()}
    if isinstance(node, list):
        return [interpolate(v, env, f"{path}[{i}]") for i, v in enumerate(node)]
    return node


def _interpolate_string(value: str, env: Mapping[str, str], path: str) -> str:
    if "${" not in value:
        return value
    escaped = value.replace("$${", "\0")

    def substitute(match: re.Match[str]) -> str:
        name, default = match.group(1), match.group(2)
        if name in env and env[name] != "":
            return env[name]
        if default is not None:
            return default
        raise MissingVariable(name, path)

    return _REFERENCE.sub(substitute, escaped).replace("\0", "${")
