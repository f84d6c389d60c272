"""The hot endpoints served straight from the HTTP protocol, without ASGI's messages.

A request to one of the pipeline's endpoints (chat, completions, responses, messages,
embeddings, count_tokens) needs none of what ASGI carries between a server and a
framework: no scope for a router, no `receive`/`send` message dicts, no check of every
header against two regular expressions as the answer's head is written. `HotCycle` is
uvicorn's request-response cycle for such a request: it keeps the cycle's state (the
protocol's pipelining, keep-alive, disconnects, flow control and the server's own limits
read and write it as they do any cycle's), and instead of calling the ASGI app it hands
the app's `serve_directly` a `HotConnection`: the pipeline's ClientConnection, written
straight to the connection's transport. A path with a query string or escapes, and every
other route, goes the ASGI way (gateway/api/app.py), which serves the same endpoints the
same way, more slowly.

`DirectBody` is a started answer's body writer for either kind of cycle."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Mapping
from typing import Any, Protocol

import msgspec
from uvicorn.protocols.http.httptools_impl import (
    HEADER_RE,
    HEADER_VALUE_RE,
    STATUS_LINE,
    HttpToolsProtocol,
    RequestResponseCycle,
)

from gateway.api.asgi_io import Receive, body_too_large, parse_content_length, read_body
from gateway.errors import BodyTooLarge, ErrorBody, ErrorEnvelope
from gateway.pipeline.connection import BodyWriter, ClientConnection, RawHeaders


class DirectApp(Protocol):
    """What the gateway's ASGI app offers the protocol (gateway/api/app.py)."""

    def serves_directly(self, path: str) -> bool: ...

    def serve_directly(
        self, method: str, path: str, headers: Mapping[str, str], connection: ClientConnection
    ) -> Awaitable[None]: ...


class HotCycle(RequestResponseCycle):
    """One request to a hot endpoint: uvicorn's cycle, run by the gateway app's
    `serve_directly` in place of the ASGI call (see the module docstring)."""

    def __init__(
        self,
        protocol: HttpToolsProtocol,
        app: DirectApp,
        method: str,
        path: str,
        keep_alive: bool,
    ) -> None:
        super().__init__(
            scope=protocol.scope,
            transport=protocol.transport,
            flow=protocol.flow,
            logger=protocol.logger,
            access_logger=protocol.access_logger,
            access_log=protocol.access_log,
            default_headers=protocol.server_state.default_headers,
            message_event=asyncio.Event(),
            expect_100_continue=protocol.expect_100_continue,
            keep_alive=keep_alive,
            on_response=protocol.on_response_complete,
        )
        self.app = app
        self.method = method
        self.path = path
        # lower-case names, the last of a repeated header winning, as the ASGI way reads them
        self.headers = {k.decode("latin-1"): v.decode("latin-1") for k, v in protocol.headers}

    async def run_asgi(self, app: Any) -> None:
        # (named as uvicorn's protocol calls it, for a request it starts now or after a
        # pipelined one; `app` is uvicorn's, which this cycle does not call)
        headers = self.headers
        connection = HotConnection(
            self, headers.get("content-length"), headers.get("content-encoding")
        )
        try:
            await self.app.serve_directly(self.method, self.path, headers, connection)
        except BaseException as exc:
            self.logger.error("Exception in the gateway's handler", exc_info=exc)
            if not self.response_started:
                await self.send_500_response()
            else:
                self.transport.close()
        else:
            if not self.response_started and not self.disconnected:
                self.logger.error("The gateway's handler returned without an answer.")
                await self.send_500_response()
            elif not self.response_complete and not self.disconnected:
                self.logger.error("The gateway's handler returned with its answer unfinished.")
                self.transport.close()
        finally:
            self.on_response = _nothing

    async def send_500_response(self) -> None:
        # uvicorn's is text/plain; the gateway's clients read errors in the OpenAI shape
        body = _INTERNAL_ERROR
        await self.send(
            {
                "type": "http.response.start",
                "status": 500,
                "headers": [
                    (b"content-type", b"application/json"),
                    (b"content-length", str(len(body)).encode()),
                    (b"connection", b"close"),
                ],
            }
        )
        await self.send({"type": "http.response.body", "body": body, "more_body": False})


_INTERNAL_ERROR = msgspec.json.encode(
    ErrorEnvelope(
        ErrorBody(
            "The gateway failed to serve this request; see its log.",
            "server_error",
            None,
            "internal_error",
        )
    )
)


def _nothing() -> None:
    return None


class HotConnection:
    """The pipeline's ClientConnection over a `HotCycle`: the body as the protocol
    gathered it; the head and body written to the transport as uvicorn's `send` writes
    them (the same framing, keep-alive and completion), the headers checked in two scans
    instead of two per header."""

    __slots__ = ("_content_encoding", "_content_length", "_cycle")

    def __init__(
        self, cycle: HotCycle, content_length: str | None, content_encoding: str | None
    ) -> None:
        self._cycle = cycle
        self._content_length = content_length
        self._content_encoding = content_encoding

    @property
    def response_started(self) -> bool:
        return self._cycle.response_started

    async def read_body(self, limit: int) -> bytes:
        cycle = self._cycle
        length = parse_content_length(self._content_length)
        if (
            cycle.more_body
            or cycle.waiting_for_100_continue
            or self._content_encoding is not None
            or cycle.disconnected
        ):
            receive: Receive = cycle.receive  # type: ignore[assignment]
            return await read_body(receive, length, limit, self._content_encoding)
        # the whole body came with the headers (nearly every request): take it as it is
        if (length is not None and length > limit) or len(cycle.body) > limit:
            raise BodyTooLarge(body_too_large(limit))
        body = bytes(cycle.body)
        cycle.body = bytearray()
        cycle.message_event.clear()
        return body

    async def start(self, status: int, headers: RawHeaders) -> None:
        cycle = self._cycle
        if cycle.flow.write_paused and not cycle.disconnected:
            await cycle.flow.drain()
        if cycle.disconnected:
            return
        if cycle.response_started:
            raise RuntimeError("The answer's head was already sent.")
        head = [STATUS_LINE[status]]
        for name, value in cycle.default_headers:
            head += (name, b": ", value, b"\r\n")
        names: list[bytes] = []
        values: list[bytes] = []
        chunked: bool | None = None
        length = 0
        keep_alive = cycle.keep_alive
        close = False
        for name, value in headers:
            name = name.lower()
            names.append(name)
            values.append(value)
            if name == b"content-length":
                if chunked is None:
                    length = int(value)
                    chunked = False
            elif name == b"transfer-encoding":
                if value.lower() == b"chunked":
                    length = 0
                    chunked = True
            elif name == b"connection" and b"close" in [
                token.lower().strip() for token in value.split(b",")
            ]:
                keep_alive = False
                close = True
            head += (name, b": ", value, b"\r\n")
        # uvicorn's checks, a scan of all names and one of all values: a value with a
        # line break would let whatever put it there write headers of its own. Nothing
        # is marked sent before they pass, so the caller may still answer with an error
        if HEADER_RE.search(b"".join(names)) is not None:
            raise RuntimeError("Invalid HTTP header name.")
        if HEADER_VALUE_RE.search(b" ".join(values)) is not None:
            raise RuntimeError("Invalid HTTP header value.")
        if not keep_alive and not close:
            head.append(b"connection: close\r\n")
        if chunked is None and cycle.method != "HEAD" and status not in (204, 304):
            chunked = True
            head.append(b"transfer-encoding: chunked\r\n")
        head.append(b"\r\n")
        cycle.response_started = True
        cycle.waiting_for_100_continue = False
        cycle.chunked_encoding = chunked
        cycle.expected_content_length = length
        cycle.keep_alive = keep_alive
        cycle.transport.write(b"".join(head))

    async def send(self, body: bytes, more: bool) -> None:
        cycle = self._cycle
        if cycle.flow.write_paused and not cycle.disconnected:
            await cycle.flow.drain()
        if cycle.disconnected:
            return
        if not cycle.response_started or cycle.response_complete:
            raise RuntimeError("An answer's body before its head, or after its end.")
        if cycle.method == "HEAD":
            cycle.expected_content_length = 0
        elif cycle.chunked_encoding:
            if body:
                framed = b"%x\r\n%b\r\n" % (len(body), body)
                cycle.transport.write(framed if more else framed + b"0\r\n\r\n")
            elif not more:
                cycle.transport.write(b"0\r\n\r\n")
        else:
            if len(body) > cycle.expected_content_length:
                raise RuntimeError("Response content longer than Content-Length")
            cycle.expected_content_length -= len(body)
            cycle.transport.write(body)
        if not more:
            if cycle.expected_content_length != 0:
                raise RuntimeError("Response content shorter than Content-Length")
            cycle.response_complete = True
            cycle.message_event.set()
            if not cycle.keep_alive:
                cycle.transport.close()
            cycle.on_response()

    def body_writer(self) -> BodyWriter | None:
        return DirectBody(self._cycle)

    async def wait_disconnect(self) -> None:
        cycle = self._cycle
        event = cycle.message_event
        while not (cycle.disconnected or cycle.response_complete):
            cycle.flow.resume_reading()
            await event.wait()
            event.clear()


class DirectBody:
    """A request's BodyWriter (gateway/pipeline/connection.py): its answer's body chunks
    written straight to the connection's transport in uvicorn's chunked framing, as
    `RequestResponseCycle.send` writes them, from a callback and without an await or the
    ASGI message. It writes only while `send` would have written at once: the head is
    out and asked for chunked framing, the body is open, the client has not gone and
    its socket is not behind (`send` waits for that: `writable` says so and the caller
    sends instead)."""

    __slots__ = ("_cycle",)

    def __init__(self, cycle: RequestResponseCycle) -> None:
        self._cycle = cycle

    def writable(self) -> bool:
        cycle = self._cycle
        return (
            cycle.chunked_encoding is True
            and not cycle.response_complete
            and not cycle.disconnected
            and not cycle.flow.write_paused
        )

    def write(self, body: bytes) -> None:
        self._cycle.transport.write(b"%x\r\n%b\r\n" % (len(body), body))

    def write_framed(self, frame: bytes) -> bool:
        # `writable`, inline: a stream's every chunk comes here
        cycle = self._cycle
        if (
            cycle.chunked_encoding is not True
            or cycle.response_complete
            or cycle.disconnected
            or cycle.flow.write_paused
        ):
            return False
        cycle.transport.write(frame)
        return True
