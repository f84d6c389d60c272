"""Request ids: the client's `x-request-id` when it is safe to echo, else our own."""

from __future__ import annotations

import itertools
import re
import secrets
from collections.abc import Mapping

_SAFE = re.compile(r"^[A-Za-z0-9._:-]{1,128}$")


class RequestIds:
    """`req_<random process prefix><counter>`: unique across processes and restarts
    without a system call per request."""

    def __init__(self) -> None:
        self._prefix = "req_" + secrets.token_hex(8)
        self._next = itertools.count(1).__next__

    def new(self, headers: Mapping[str, str]) -> str:
        return _given(headers) or self.mint()

    def mint(self) -> str:
        return f"{self._prefix}{self._next():08x}"

    def new_pair(self, headers: Mapping[str, str]) -> tuple[str, str]:
        """The request id (the client's own when safe to echo) and the id only the
        gateway makes, unique per request: the ledger's once-only key, since a client
        may send the same `x-request-id` with many requests."""
        minted = self.mint()
        return _given(headers) or minted, minted


def _given(headers: Mapping[str, str]) -> str | None:
    """The client's `x-request-id`, if it is safe to echo."""
    given = headers.get("x-request-id")
    return given if given and _SAFE.match(given) else None
