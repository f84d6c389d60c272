"""The client transport joins the writes of one event-loop turn into one send."""

from __future__ import annotations

import asyncio
import logging
import socket
import threading
import time
from typing import Any

import pytest
import uvicorn
import uvloop

from gateway.api.server_limits import CoalescingTransport, GatewayHttpProtocol


class _Sink(asyncio.Protocol):
    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None


async def _pair() -> tuple[asyncio.Transport, socket.socket]:
    """A real socket transport (the loop's own), and the peer socket it writes to."""
    ours, theirs = socket.socketpair()
    loop = asyncio.get_running_loop()
    transport, _ = await loop.create_connection(_Sink, sock=ours)
    theirs.setblocking(False)
    return transport, theirs


class _CountingTransport:
    """Counts the writes that reach the real transport (each is one send)."""

    def __init__(self, real: asyncio.Transport) -> None:
        self.real = real
        self.writes: list[bytes] = []

    def write(self, data: bytes) -> None:
        self.writes.append(data)
        self.real.write(data)

    def close(self) -> None:
        self.real.close()

    def abort(self) -> None:
        self.real.abort()

    def is_closing(self) -> bool:
        return self.real.is_closing()

    def get_write_buffer_size(self) -> int:
        return self.real.get_write_buffer_size()


def _received(peer: socket.socket) -> bytes:
    chunks = []
    while True:
        try:
            chunk = peer.recv(65536)
        except BlockingIOError:
            break
        if not chunk:
            break
        chunks.append(chunk)
    return b"".join(chunks)


def test_writes_in_one_turn_are_one_send_at_the_end_of_the_turn() -> None:
    asyncio.run(_one_send_per_turn())


async def _one_send_per_turn() -> None:
    real, peer = await _pair()
    counting = _CountingTransport(real)
    transport = CoalescingTransport(counting, asyncio.get_running_loop())  # type: ignore[arg-type]
    head = b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\n"
    transport.write(head)
    transport.write(b"")
    transport.write(b"ok")
    assert counting.writes == []  # nothing sent within the turn
    assert transport.get_write_buffer_size() == len(head + b"ok")
    await asyncio.sleep(0)
    assert counting.writes == [head + b"ok"]
    await asyncio.sleep(0.01)
    assert _received(peer) == head + b"ok"
    # a later turn's write is a send of its own
    transport.write(b"data: 1\n\n")
    await asyncio.sleep(0)
    assert counting.writes[-1] == b"data: 1\n\n" and len(counting.writes) == 2
    transport.close()
    peer.close()


def test_the_rest_of_an_answer_writes_through_until_the_next_request() -> None:
    asyncio.run(_writes_through())


async def _writes_through() -> None:
    real, peer = await _pair()
    counting = _CountingTransport(real)
    transport = CoalescingTransport(counting, asyncio.get_running_loop())  # type: ignore[arg-type]
    head = b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n"
    transport.write(head)
    await asyncio.sleep(0)
    assert counting.writes == [head]
    # a stream's chunks: each its own write at once, no flush scheduled per chunk
    transport.write(b"a\r\ndata: 1\n\n\r\n")
    assert counting.writes == [head, b"a\r\ndata: 1\n\n\r\n"]
    assert transport.get_write_buffer_size() == real.get_write_buffer_size()
    # the next request's answer coalesces again
    transport.request_begins()
    transport.write(head)
    transport.write(b"0\r\n\r\n")
    assert len(counting.writes) == 2
    await asyncio.sleep(0)
    assert counting.writes[-1] == head + b"0\r\n\r\n"
    await asyncio.sleep(0.01)
    assert _received(peer) == head + b"a\r\ndata: 1\n\n\r\n" + head + b"0\r\n\r\n"
    # a write through to a client already gone is dropped, as a flush drops it
    real.abort()
    transport.write(b"late")
    assert counting.writes[-1] != b"late"
    peer.close()


def test_close_sends_what_is_pending_first_and_abort_drops_it() -> None:
    asyncio.run(_close_and_abort())


async def _close_and_abort() -> None:
    real, peer = await _pair()
    transport = CoalescingTransport(real, asyncio.get_running_loop())
    transport.write(b"last words")
    transport.close()
    assert transport.is_closing()
    await asyncio.sleep(0.01)
    assert _received(peer) == b"last words"
    peer.close()

    real, peer = await _pair()
    transport = CoalescingTransport(real, asyncio.get_running_loop())
    transport.write(b"never sent")
    transport.abort()
    await asyncio.sleep(0.01)
    assert _received(peer) == b""
    peer.close()


def test_everything_else_is_the_real_transports() -> None:
    asyncio.run(_forwarded())


async def _forwarded() -> None:
    real, peer = await _pair()
    transport = CoalescingTransport(real, asyncio.get_running_loop())
    assert transport.get_extra_info("socket") is real.get_extra_info("socket")
    transport.pause_reading()
    assert not real.is_reading()
    transport.resume_reading()
    assert transport.is_reading()  # through __getattr__
    transport.close()
    peer.close()


async def _writes_after_the_client_left() -> None:
    loop = asyncio.get_running_loop()
    real, peer = await _pair()
    transport = CoalescingTransport(real, loop)
    real.abort()  # the connection is lost; the app has not noticed yet
    for _ in range(8):  # asyncio's transport warns from the fifth write to a lost socket
        transport.write(b"late")
        await asyncio.sleep(0)
    await asyncio.sleep(0.01)
    peer.close()


def test_writes_after_the_client_left_are_dropped_quietly(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with caplog.at_level(logging.WARNING, logger="asyncio"):
        asyncio.run(_writes_after_the_client_left())
    assert [r.getMessage() for r in caplog.records] == []


def test_the_same_under_uvloop() -> None:
    uvloop.run(_writes_after_the_client_left())


class _AnswerThenWork:
    """An ASGI app that answers, then, in the same event-loop turn, does its after-work
    (as the gateway settles a request after answering it): here it waits for the client
    to say it has the whole answer, which it can only say if the answer left first."""

    def __init__(self) -> None:
        self.client_has_answer = threading.Event()
        self.answered_before_work_ended: list[bool] = []

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        await send(
            {"type": "http.response.start", "status": 200, "headers": [(b"content-length", b"2")]}
        )
        await send({"type": "http.response.body", "body": b"ok", "more_body": False})
        # no await from here on: the loop cannot run an end-of-turn flush meanwhile
        self.answered_before_work_ended.append(self.client_has_answer.wait(timeout=5))


def test_a_whole_answer_is_sent_before_the_apps_after_work() -> None:
    app = _AnswerThenWork()
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    config = uvicorn.Config(
        app, http=GatewayHttpProtocol, lifespan="off", log_level="error", loop="asyncio"
    )
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + 10
        while not server.started and time.monotonic() < deadline:
            time.sleep(0.01)
        with socket.create_connection(sock.getsockname(), timeout=10) as client:
            client.sendall(b"GET / HTTP/1.1\r\nhost: x\r\n\r\n")
            answer = b""
            while not answer.endswith(b"\r\n\r\nok"):
                chunk = client.recv(4096)
                assert chunk, answer
                answer += chunk
            app.client_has_answer.set()
            assert answer.startswith(b"HTTP/1.1 200 OK\r\n")
            while not app.answered_before_work_ended:
                assert time.monotonic() < deadline + 10
                time.sleep(0.01)
        assert app.answered_before_work_ended == [True]
    finally:
        server.should_exit = True
        thread.join(timeout=10)
