"""What the pipeline needs of the client's HTTP exchange, whatever serves it: the HTTP
layer (`gateway/api/`) implements it over ASGI; the pipeline never sees a socket."""

from __future__ import annotations

from collections.abc import Awaitable
from typing import Protocol

RawHeaders = list[tuple[bytes, bytes]]


class ClientGone(Exception):
    """The client closed the connection before the request was read."""


class ClientConnection(Protocol):
    @property
    def response_started(self) -> bool:
        """Whether the status line has gone out (a refusal can then only end the body)."""
        ...

    async def read_body(self, limit: int) -> bytes:
        """The request body; BodyTooLarge past `limit` bytes, ClientGone if it went."""
        ...

    def start(self, status: int, headers: RawHeaders) -> Awaitable[None]:
        """Send the status line and headers."""
        ...

    def send(self, body: bytes, more: bool) -> Awaitable[None]: ...

    async def wait_disconnect(self) -> None:
        """Return when the client goes away (used while a stream is open)."""
        ...
