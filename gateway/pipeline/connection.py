"""What the pipeline needs of the client's HTTP exchange, whatever serves it: the HTTP
layer (`gateway/api/`) implements it over ASGI; the pipeline never sees a socket."""

from __future__ import annotations

from collections.abc import Awaitable
from typing import Protocol

RawHeaders = list[tuple[bytes, bytes]]


class ClientGone(Exception):
    """The client closed the connection before the request was read."""


class BodyWriter(Protocol):
    """Writes a started answer's body to the client's socket at once, with no await: a
    stream's chunks relayed from where the upstream's read arrives (its read callback),
    without waking the request's task. Only the HTTP server's own connection has one."""

    def writable(self) -> bool:
        """Whether `write` may go now: the answer's head went out and its body is open,
        the client is still there and not behind in reading (else the caller sends,
        which waits for it)."""
        ...

    def write(self, body: bytes) -> None:
        """Write `body` (not empty) as the answer's next body bytes."""
        ...

    def write_framed(self, frame: bytes) -> bool:
        """Write `frame`, one whole chunk of a chunked body as it goes on the wire (size
        line, payload, line end), as the answer's next body bytes if `writable` and the
        answer is chunked (what `write` writes for that payload, already framed: an
        upstream's chunk relayed as it came); False, and nothing written, if not."""
        ...


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

    def body_writer(self) -> BodyWriter | None:
        """What writes the started answer's body without an await, if the server has it
        (None: every byte goes through `send`)."""
        ...

    async def wait_disconnect(self) -> None:
        """Return when the client goes away (used while a stream is open)."""
        ...
