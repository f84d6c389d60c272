"""Names inside Redis keys, made safe for hash tags: a leaf, so every room that lays out
keys (limits and the response cache) encodes tenant and key ids the same way."""

from __future__ import annotations

import re
from urllib.parse import quote

# what `quote` leaves as it is (ASCII letters, digits, `_.-~` and our safe `:/@`)
_UNCHANGED = re.compile(r"[A-Za-z0-9_.\-~:/@]*")


def clean_name(name: str) -> str:
    # braces would end the hash tag early; percent-encoding keeps names distinct
    if _UNCHANGED.fullmatch(name):
        return name  # most names (request ids, ids from the policy) need no encoding
    return quote(name, safe=":/._-@")


def scope_path(*parts: str) -> str:
    return ":".join(clean_name(part) for part in parts)
