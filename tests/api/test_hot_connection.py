"""The ClientConnection the HTTP protocol hands the pipeline for a hot endpoint
(gateway/api/hot_exchange.py), driven by a small app through real uvicorn and real
sockets: a head with a bad header goes nowhere and leaves room for an error answer, a
client that leaves is seen, a slow reader gets every byte (the writes wait for it), and
a handler that fails gets a 500 without taking the server down."""

from __future__ import annotations

import asyncio
import json
import socket
import threading
import time
from collections.abc import Awaitable, Callable, Iterator, Mapping
from typing import Any

import pytest

from gateway.pipeline.connection import ClientConnection
from tests.support.uvicorn_thread import serving

Handler = Callable[["_App", ClientConnection], Awaitable[None]]


class _App:
    """Serves `/hot` directly with `handler`; anything else would be ASGI (unused)."""

    def __init__(self) -> None:
        self.handler: Handler | None = None
        self.notes: dict[str, Any] = {}
        self.done = threading.Event()

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            return
        raise AssertionError(f"{scope.get('path')} went the ASGI way")

    def serves_directly(self, path: str) -> bool:
        return path == "/hot"

    async def serve_directly(
        self, method: str, path: str, headers: Mapping[str, str], connection: ClientConnection
    ) -> None:
        assert self.handler is not None
        try:
            await self.handler(self, connection)
        finally:
            self.done.set()


@pytest.fixture(params=["asyncio", "uvloop"])
def served(request: pytest.FixtureRequest) -> Iterator[tuple[_App, tuple[str, int]]]:
    app = _App()
    with serving(app, request.param, log_level="critical") as address:
        yield app, address


REQUEST = b"POST /hot HTTP/1.1\r\nhost: x\r\ncontent-length: 2\r\n\r\n{}"


def _read_answer(client: socket.socket, deadline: float = 10) -> bytes:
    """One content-length answer, whole."""
    stop = time.monotonic() + deadline
    data = b""
    while b"\r\n\r\n" not in data:
        assert time.monotonic() < stop, data[-200:]
        chunk = client.recv(1 << 16)
        assert chunk, data[-200:]
        data += chunk
    head, _, first = data.partition(b"\r\n\r\n")
    length = int(head.lower().split(b"content-length:")[1].split(b"\r\n")[0])
    body = [first]
    received = len(first)
    while received < length:
        assert time.monotonic() < stop, received
        chunk = client.recv(1 << 16)
        assert chunk, received
        body.append(chunk)
        received += len(chunk)
    return head + b"\r\n\r\n" + b"".join(body)


def test_a_head_with_a_line_break_in_a_value_is_refused_before_anything_is_sent(
    served: tuple[_App, tuple[str, int]],
) -> None:
    app, address = served

    async def handler(app: _App, connection: ClientConnection) -> None:
        await connection.read_body(1024)
        try:
            await connection.start(200, [(b"x-note", b"ok\r\nset-cookie: stolen=1")])
        except RuntimeError as refused:
            app.notes["refused"] = str(refused)
        app.notes["started"] = connection.response_started
        body = b'{"error":{"message":"bad header"}}'
        await connection.start(
            500, [(b"content-type", b"application/json"), (b"content-length", b"%d" % len(body))]
        )
        await connection.send(body, more=False)

    app.handler = handler
    with socket.create_connection(address, timeout=10) as client:
        client.sendall(REQUEST)
        answer = _read_answer(client)
    assert app.notes["refused"] == "Invalid HTTP header value."
    assert app.notes["started"] is False
    assert answer.startswith(b"HTTP/1.1 500 ")
    assert b"stolen" not in answer
    assert answer.endswith(b'{"error":{"message":"bad header"}}')


def test_a_client_that_leaves_mid_answer_is_seen_by_wait_disconnect(
    served: tuple[_App, tuple[str, int]],
) -> None:
    app, address = served
    began = threading.Event()

    async def handler(app: _App, connection: ClientConnection) -> None:
        await connection.read_body(1024)
        await connection.start(200, [(b"content-type", b"text/event-stream")])
        await connection.send(b"data: one\n\n", more=True)
        began.set()
        try:
            await asyncio.wait_for(connection.wait_disconnect(), 10)
            app.notes["seen"] = True
        except TimeoutError:
            app.notes["seen"] = False

    app.handler = handler
    with socket.create_connection(address, timeout=10) as client:
        client.sendall(REQUEST)
        assert began.wait(10)
        first = client.recv(1 << 16)
        assert b"transfer-encoding: chunked" in first
    assert app.done.wait(10)
    assert app.notes["seen"] is True


def test_a_slow_reader_gets_every_byte_of_a_large_answer(
    served: tuple[_App, tuple[str, int]],
) -> None:
    app, address = served
    piece = bytes(range(256)) * 256  # 64 KiB
    pieces = 256  # 16 MiB: past what the sockets hold, so the transport's buffer fills

    async def handler(app: _App, connection: ClientConnection) -> None:
        await connection.read_body(1024)
        await connection.start(200, [(b"content-length", b"%d" % (len(piece) * pieces))])
        waited = 0
        for n in range(pieces):
            # a piece a turn, as a stream's chunks come (the server's transport joins
            # what one turn writes, and learns it is full when the turn's bytes go out)
            await asyncio.sleep(0)
            began = time.monotonic()
            await connection.send(piece, more=n < pieces - 1)
            waited += time.monotonic() - began > 0.05
        app.notes["waited"] = waited

    app.handler = handler
    with socket.create_connection(address, timeout=10) as client:
        client.sendall(REQUEST)
        time.sleep(0.3)  # the server fills the socket and its buffer, then waits
        answer = _read_answer(client, deadline=30)
    body = answer.partition(b"\r\n\r\n")[2]
    assert len(body) == len(piece) * pieces
    assert body == piece * pieces
    # some writes waited for the reader: the answer was not all buffered in the server
    assert app.notes["waited"] >= 1


def test_a_handler_that_fails_gets_a_500_and_the_server_goes_on(
    served: tuple[_App, tuple[str, int]],
) -> None:
    app, address = served

    async def failing(app: _App, connection: ClientConnection) -> None:
        raise ValueError("a bug")

    app.handler = failing
    with socket.create_connection(address, timeout=10) as client:
        client.sendall(REQUEST)
        answer = _read_answer(client)
    assert answer.startswith(b"HTTP/1.1 500 ")
    head, _, body = answer.partition(b"\r\n\r\n")
    assert b"content-type: application/json" in head.lower()
    error = json.loads(body)["error"]
    assert error["type"] == "server_error" and error["code"] == "internal_error"
    assert "a bug" not in error["message"]  # the exception stays in the log

    async def fine(app: _App, connection: ClientConnection) -> None:
        body = await connection.read_body(1024)
        await connection.start(200, [(b"content-length", b"%d" % len(body))])
        await connection.send(body, more=False)

    app.handler = fine
    with socket.create_connection(address, timeout=10) as client:
        client.sendall(REQUEST)
        answer = _read_answer(client)
    assert answer.startswith(b"HTTP/1.1 200 ")
    assert answer.endswith(b"{}")
