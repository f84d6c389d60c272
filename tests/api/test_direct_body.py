"""The server's BodyWriter (`DirectBody`): a started answer's body written at once, from
a callback, in the framing uvicorn's `send` gives it; it declines (the caller then sends,
which waits) while the client is behind in reading or gone. Real uvicorn, real sockets."""

from __future__ import annotations

import asyncio
import socket
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from gateway.api.asgi_connection import BODY_WRITER
from gateway.pipeline.connection import BodyWriter
from tests.support.uvicorn_thread import serving

START = {
    "type": "http.response.start",
    "status": 200,
    "headers": [(b"content-type", b"text/event-stream")],
}


class _App:
    """Runs `scenario` for each request, handing it the writer and the ASGI callables;
    what it notes goes to `notes`."""

    def __init__(self) -> None:
        self.scenario: Any = None
        self.notes: dict[str, Any] = {}
        self.done = threading.Event()
        self.client_may_read = threading.Event()

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        writer = scope["extensions"][BODY_WRITER]
        try:
            await self.scenario(self, writer, receive, send)
        finally:
            self.done.set()


@pytest.fixture(params=["asyncio", "uvloop"])
def served(request: pytest.FixtureRequest) -> Iterator[tuple[_App, tuple[str, int]]]:
    app = _App()
    with serving(app, request.param) as address:
        yield app, address


def _read_until(client: socket.socket, end: bytes, deadline: float = 10) -> bytes:
    data = b""
    stop = time.monotonic() + deadline
    while not data.endswith(end):
        assert time.monotonic() < stop, data[-200:]
        chunk = client.recv(1 << 16)
        assert chunk, data[-200:]
        data += chunk
    return data


def _dechunk(body: bytes) -> list[bytes]:
    pieces: list[bytes] = []
    while True:
        size_line, _, body = body.partition(b"\r\n")
        size = int(size_line, 16)
        if size == 0:
            assert body == b"\r\n"
            return pieces
        pieces.append(body[:size])
        assert body[size : size + 2] == b"\r\n"
        body = body[size + 2 :]


def test_writes_go_out_at_once_in_the_answers_chunked_framing(
    served: tuple[_App, tuple[str, int]],
) -> None:
    app, address = served

    async def scenario(app: _App, writer: BodyWriter, receive: Any, send: Any) -> None:
        app.notes["before_start"] = writer.writable()
        await send(START)
        app.notes["after_start"] = writer.writable()
        writer.write(b"data: 1\n\n")
        await send({"type": "http.response.body", "body": b"data: 2\n\n", "more_body": True})
        writer.write(b"data: 3\n\n")
        await send({"type": "http.response.body", "body": b"data: [DONE]\n\n"})
        app.notes["after_end"] = writer.writable()

    app.scenario = scenario
    with socket.create_connection(address, timeout=10) as client:
        client.sendall(b"GET / HTTP/1.1\r\nhost: x\r\n\r\n")
        answer = _read_until(client, b"0\r\n\r\n")
    assert app.done.wait(timeout=10)
    head, _, body = answer.partition(b"\r\n\r\n")
    assert b"transfer-encoding: chunked" in head.lower()
    assert _dechunk(body) == [b"data: 1\n\n", b"data: 2\n\n", b"data: 3\n\n", b"data: [DONE]\n\n"]
    assert app.notes == {"before_start": False, "after_start": True, "after_end": False}


def test_a_framed_write_goes_out_as_given_only_where_a_write_would(
    served: tuple[_App, tuple[str, int]],
) -> None:
    """`write_framed`: an upstream's chunk, framed already, is the answer's next chunk as
    it came (upper-case hex and leading zeros are chunked framing too); before the head
    and after the end it writes nothing and says so."""
    app, address = served

    async def scenario(app: _App, writer: BodyWriter, receive: Any, send: Any) -> None:
        app.notes["before_start"] = writer.write_framed(b"5\r\nearly\r\n")
        await send(START)
        app.notes["framed"] = [
            writer.write_framed(b"9\r\ndata: 1\n\n\r\n"),
            writer.write_framed(b"0009\r\ndata: 2\n\n\r\n"),
        ]
        writer.write(b"data: 3\n\n")
        await send({"type": "http.response.body", "body": b"data: [DONE]\n\n"})
        app.notes["after_end"] = writer.write_framed(b"4\r\nlate\r\n")

    app.scenario = scenario
    with socket.create_connection(address, timeout=10) as client:
        client.sendall(b"GET / HTTP/1.1\r\nhost: x\r\n\r\n")
        answer = _read_until(client, b"0\r\n\r\n")
    assert app.done.wait(timeout=10)
    body = answer.partition(b"\r\n\r\n")[2]
    assert b"0009\r\ndata: 2" in body
    assert _dechunk(body) == [b"data: 1\n\n", b"data: 2\n\n", b"data: 3\n\n", b"data: [DONE]\n\n"]
    assert app.notes == {"before_start": False, "framed": [True, True], "after_end": False}


def test_a_client_behind_in_reading_makes_it_decline_until_it_catches_up(
    served: tuple[_App, tuple[str, int]],
) -> None:
    app, address = served
    piece = b"data: " + b"x" * 65530 + b"\n\n"

    async def scenario(app: _App, writer: BodyWriter, receive: Any, send: Any) -> None:
        await send(START)
        written = 0
        while writer.writable():  # the client reads nothing yet
            writer.write(piece)
            written += 1
            await asyncio.sleep(0.001)
            assert written < 2000, "the writer never declined a client that reads nothing"
        app.notes["written_before_declining"] = written
        app.client_may_read.set()
        # what the pump does then: send, which waits until the client has caught up
        await send({"type": "http.response.body", "body": piece, "more_body": True})
        app.notes["writable_once_sent"] = writer.writable()
        writer.write(piece)
        await send({"type": "http.response.body", "body": b"", "more_body": False})
        app.notes["written"] = written + 2

    app.scenario = scenario
    with socket.create_connection(address, timeout=10) as client:
        client.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 16)
        client.sendall(b"GET / HTTP/1.1\r\nhost: x\r\n\r\n")
        assert app.client_may_read.wait(timeout=20)
        answer = _read_until(client, b"0\r\n\r\n", deadline=30)
    body = answer.partition(b"\r\n\r\n")[2]
    assert _dechunk(body) == [piece] * app.notes["written"]
    assert app.notes["written_before_declining"] >= 1
    assert app.notes["writable_once_sent"] is True


def test_a_client_gone_makes_it_decline(served: tuple[_App, tuple[str, int]]) -> None:
    app, address = served
    started = threading.Event()

    async def scenario(app: _App, writer: BodyWriter, receive: Any, send: Any) -> None:
        await send(START)
        writer.write(b"data: 1\n\n")
        started.set()
        while (await receive())["type"] != "http.disconnect":
            pass  # (the request's own body message first)
        app.notes["after_disconnect"] = writer.writable()

    app.scenario = scenario
    with socket.create_connection(address, timeout=10) as client:
        client.sendall(b"GET / HTTP/1.1\r\nhost: x\r\n\r\n")
        _read_until(client, b"data: 1\n\n\r\n")
        assert started.wait(timeout=10)
    assert app.done.wait(timeout=10)
    assert app.notes == {"after_disconnect": False}
