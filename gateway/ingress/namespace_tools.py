"""Namespace tools (OpenAI Responses `{"type": "namespace", "name": "multi_agent_v1",
"tools": [...]}`, as Codex sends them) for APIs that know only flat functions.

Each function inside a namespace becomes one function named `<namespace>__<name>`
(kept to the 64 characters and `[A-Za-z0-9_-]` every provider accepts: a longer or
odder pair gets a short hash instead). The name is reversible through the request's own
tools, never by parsing: `NamespaceNames.of(tools)` maps each flat name back to its
(namespace, name), so an answer's calls come back in the namespace form and a
conversation's earlier calls (`function_call` items with a `namespace`) go up flat.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

_SAFE = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
_UNSAFE_CHARS = re.compile(r"[^A-Za-z0-9_-]")
SEPARATOR = "__"


def flat_name(namespace: str, name: str) -> str:
    """The one function name a provider sees for `name` in `namespace`."""
    joined = f"{namespace}{SEPARATOR}{name}"
    if _SAFE.match(joined):
        return joined
    digest = hashlib.sha256(joined.encode()).hexdigest()[:10]
    readable = _UNSAFE_CHARS.sub("_", f"{namespace[:20]}{SEPARATOR}{name}")[:52]
    return f"{readable}_{digest}"


@dataclass(frozen=True, slots=True)
class NamespaceNames:
    """Flat name -> (namespace, name) for one request's namespace tools."""

    by_flat: Mapping[str, tuple[str, str]]

    @classmethod
    def of(cls, tools: Iterable[Any] | None) -> NamespaceNames:
        found: dict[str, tuple[str, str]] = {}
        for tool in tools or ():
            if not isinstance(tool, dict) or tool.get("type") != "namespace":
                continue
            namespace = str(tool.get("name") or "")
            for inner in tool.get("tools") or ():
                if isinstance(inner, dict) and isinstance(inner.get("name"), str):
                    found[flat_name(namespace, inner["name"])] = (namespace, inner["name"])
        return cls(found)

    def item_fields(self, name: str) -> dict[str, str]:
        """A function_call item's `name` (and `namespace`, for a namespaced function)."""
        pair = self.by_flat.get(name)
        if pair is None:
            return {"name": name}
        return {"name": pair[1], "namespace": pair[0]}
