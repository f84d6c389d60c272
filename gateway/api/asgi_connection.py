"""The pipeline's ClientConnection over ASGI: reads the bounded body, writes what the
pipeline gives it, and tells it when the client has gone."""

from __future__ import annotations

from collections.abc import Awaitable

from gateway.api.asgi_io import Receive, Send, parse_content_length, read_body
from gateway.pipeline.connection import BodyWriter, ClientGone, RawHeaders

# the scope extension under which the gateway's HTTP protocol puts a request's BodyWriter
# (gateway/api/server_limits.py)
BODY_WRITER = "gateway.body_writer"


class AsgiConnection:
    __slots__ = (
        "_body_writer",
        "_content_encoding",
        "_content_length",
        "_receive",
        "_send",
        "response_started",
    )

    def __init__(
        self,
        receive: Receive,
        send: Send,
        content_length: str | None,
        content_encoding: str | None = None,
        body_writer: BodyWriter | None = None,
    ) -> None:
        self._receive = receive
        self._body_writer = body_writer
        self._send = send
        self._content_length = content_length
        self._content_encoding = content_encoding
        self.response_started = False

    async def read_body(self, limit: int) -> bytes:
        length = parse_content_length(self._content_length)
        return await read_body(self._receive, length, limit, self._content_encoding)

    # plain functions returning the server's awaitable: no coroutine of our own per chunk
    def start(self, status: int, headers: RawHeaders) -> Awaitable[None]:
        self.response_started = True
        return self._send({"type": "http.response.start", "status": status, "headers": headers})

    def send(self, body: bytes, more: bool) -> Awaitable[None]:
        return self._send({"type": "http.response.body", "body": body, "more_body": more})

    def body_writer(self) -> BodyWriter | None:
        return self._body_writer

    async def wait_disconnect(self) -> None:
        while True:
            message = await self._receive()
            if message["type"] == "http.disconnect":
                return


__all__ = ["BODY_WRITER", "AsgiConnection", "ClientGone"]
