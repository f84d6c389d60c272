"""What the gateway changed in a request (a clamped max_tokens, a dropped beta, field or
tool), as x-gateway-route's `changed=` list and the access log name it.

Most items carry names the client chose (a field, a beta, a namespace tool), so each is
made safe for one header value that clients split on `;` and `,`: anything outside
printable ASCII, and those two separators, become `_`; an item is cut at
`MAX_ITEM_CHARS`, and past `MAX_ITEMS` the rest is counted (`more:N`), since a client
sending thousands of unknown fields must not get a header its HTTP parser refuses.
"""

from __future__ import annotations

import re

MAX_ITEMS = 24
MAX_ITEM_CHARS = 80

_UNSAFE = re.compile(r"[^\x21-\x2b\x2d-\x3a\x3c-\x7e]")


def change_notes(changes: list[str]) -> list[str]:
    """`changes` each made header-safe, duplicates removed, at most `MAX_ITEMS` named."""
    notes = list(dict.fromkeys(_UNSAFE.sub("_", change)[:MAX_ITEM_CHARS] for change in changes))
    if len(notes) > MAX_ITEMS:
        return [*notes[:MAX_ITEMS], f"more:{len(notes) - MAX_ITEMS}"]
    return notes
