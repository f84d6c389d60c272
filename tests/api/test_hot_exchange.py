"""The hot endpoints served by the HTTP protocol itself (gateway/api/hot_exchange.py),
against a real gateway process over raw sockets: what HTTP/1.1 asks of a server that the
ASGI way got from uvicorn (pipelining, `Expect: 100-continue`, HTTP/1.0, chunked request
bodies, keep-alive after a stream, HEAD) holds on the direct way too, and a path the
direct way does not take (a query string) is served the same."""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Iterator
from typing import Any

import pytest

from tests.fakes.openai_server import OpenAIFake, Reply
from tests.support.gateway_process import GatewayProcess, key_hash, openai_provider

KEY = "gw-test-key-hot"
PATH = "/v1/chat/completions"
KEEP_ALIVE = 1.0


@pytest.fixture(scope="module")
def fake() -> Iterator[OpenAIFake]:
    with OpenAIFake(dialect="compatible") as server:
        yield server


@pytest.fixture(scope="module")
def gateway(fake: OpenAIFake) -> Iterator[GatewayProcess]:
    config = {
        "server": {
            "max_body_bytes": 64 * 1024,
            "connections": {"keep_alive_timeout_seconds": KEEP_ALIVE},
        },
        "providers": {"fake": openai_provider(fake.base_url)},
    }
    policy = {
        "models": {
            "fast-model": {
                "deployments": [{"provider": "fake", "upstream_model": "upstream-fast"}],
                "prices": {"input": 1.0, "output": 2.0},
            }
        },
        "tenants": {"acme": {"keys": [{"id": "hot", "hash": key_hash(KEY)}]}},
    }
    with GatewayProcess(config, policy) as process:
        yield process


def chat(content: str, *, stream: bool = False) -> bytes:
    body: dict[str, Any] = {
        "model": "fast-model",
        "messages": [{"role": "user", "content": content}],
    }
    if stream:
        body["stream"] = True
    return json.dumps(body).encode()


def request(
    body: bytes, *, path: str = PATH, version: str = "1.1", method: str = "POST", **extra: str
) -> bytes:
    headers = {
        "host": "gateway",
        "authorization": f"Bearer {KEY}",
        "content-type": "application/json",
        "content-length": str(len(body)),
        **{name.replace("_", "-"): value for name, value in extra.items()},
    }
    head = f"{method} {path} HTTP/{version}\r\n"
    head += "".join(f"{name}: {value}\r\n" for name, value in headers.items())
    return head.encode() + b"\r\n" + body


class Answers:
    """Reads HTTP/1.1 answers off one socket, one at a time, framed by their headers."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.buffer = b""

    def _fill(self, deadline: float) -> bool:
        assert time.monotonic() < deadline, self.buffer[-300:]
        chunk = self.sock.recv(1 << 16)
        self.buffer += chunk
        return bool(chunk)

    def head(self, deadline: float) -> tuple[int, dict[str, str]]:
        while b"\r\n\r\n" not in self.buffer:
            assert self._fill(deadline), f"closed before a head: {self.buffer!r}"
        raw, self.buffer = self.buffer.split(b"\r\n\r\n", 1)
        lines = raw.decode("latin-1").split("\r\n")
        status = int(lines[0].split()[1])
        headers = {}
        for line in lines[1:]:
            name, _, value = line.partition(":")
            headers[name.strip().lower()] = value.strip()
        return status, headers

    def next(
        self, *, head_only: bool = False, wait: float = 10
    ) -> tuple[int, dict[str, str], bytes]:
        deadline = time.monotonic() + wait
        status, headers = self.head(deadline)
        if head_only:
            return status, headers, b""
        if "content-length" in headers:
            length = int(headers["content-length"])
            while len(self.buffer) < length:
                assert self._fill(deadline), "closed inside a body"
            body, self.buffer = self.buffer[:length], self.buffer[length:]
            return status, headers, body
        assert headers.get("transfer-encoding") == "chunked", headers
        body = b""
        while True:
            while b"\r\n" not in self.buffer:
                assert self._fill(deadline), "closed inside a chunked body"
            size_line, rest = self.buffer.split(b"\r\n", 1)
            size = int(size_line, 16)
            while len(rest) < size + 2:
                assert self._fill(deadline), "closed inside a chunk"
                rest = self.buffer.split(b"\r\n", 1)[1]
            body += rest[:size]
            self.buffer = rest[size + 2 :]
            if size == 0:
                return status, headers, body

    def closed(self, wait: float = 10) -> bool:
        deadline = time.monotonic() + wait
        self.sock.settimeout(wait)
        while True:
            try:
                if not self._fill(deadline):
                    return True
            except ConnectionResetError:
                return True


def connect(gateway: GatewayProcess) -> tuple[socket.socket, Answers]:
    sock = socket.create_connection(("127.0.0.1", gateway.port), timeout=10)
    return sock, Answers(sock)


def content_of(body: bytes) -> str:
    text: str = json.loads(body)["choices"][0]["message"]["content"]
    return text


def test_pipelined_requests_are_answered_in_order_on_one_connection(
    gateway: GatewayProcess, fake: OpenAIFake
) -> None:
    # the first is slow upstream: a server that started the next ones before it was
    # answered would answer them first
    fake.enqueue(Reply(delay=0.4, words=["slow", "first"]))
    sock, answers = connect(gateway)
    with sock:
        sock.sendall(b"".join(request(chat(f"question {n}")) for n in range(3)))
        seen = [answers.next() for _ in range(3)]
        assert [status for status, _, _ in seen] == [200, 200, 200]
        ids = {headers["x-request-id"] for _, headers, _ in seen}
        assert len(ids) == 3
        assert content_of(seen[0][2]) == "slow first"
        # the fake echoes the prompt: each answer is its own request's
        for n, (_, _, body) in enumerate(seen[1:], start=1):
            assert f"question {n}" in content_of(body)


def test_expect_100_continue_gets_its_interim_answer_before_the_body_is_sent(
    gateway: GatewayProcess,
) -> None:
    body = chat("after the continue")
    sock, answers = connect(gateway)
    with sock:
        whole = request(body, expect="100-continue")
        sock.sendall(whole[: len(whole) - len(body)])
        status, _, _ = answers.next(head_only=True)
        assert status == 100
        sock.sendall(body)
        status, _, answer = answers.next()
        assert status == 200
        assert "after the continue" in content_of(answer)


def test_an_http_1_0_request_is_answered_and_the_connection_closed(
    gateway: GatewayProcess,
) -> None:
    sock, answers = connect(gateway)
    with sock:
        sock.sendall(request(chat("old client"), version="1.0"))
        status, headers, body = answers.next()
        assert status == 200
        assert headers["connection"] == "close"
        assert "old client" in content_of(body)
        assert answers.closed()


def test_a_chunked_request_body_sent_in_pieces_is_read_whole(gateway: GatewayProcess) -> None:
    body = chat("in two pieces")
    head = (
        f"POST {PATH} HTTP/1.1\r\nhost: gateway\r\nauthorization: Bearer {KEY}\r\n"
        "content-type: application/json\r\ntransfer-encoding: chunked\r\n\r\n"
    ).encode()
    half = len(body) // 2
    sock, answers = connect(gateway)
    with sock:
        sock.sendall(head + b"%x\r\n%b\r\n" % (half, body[:half]))
        time.sleep(0.2)
        sock.sendall(b"%x\r\n%b\r\n0\r\n\r\n" % (len(body) - half, body[half:]))
        status, _, answer = answers.next()
        assert status == 200
        assert "in two pieces" in content_of(answer)


def test_a_declared_body_over_the_limit_is_a_413_and_the_connection_closed(
    gateway: GatewayProcess,
) -> None:
    sock, answers = connect(gateway)
    with sock:
        # the head alone: a body that size is refused before any of it is read
        sock.sendall(request(b"", content_length=str(10 * 1024 * 1024)))
        status, headers, body = answers.next()
        assert status == 413
        assert headers["connection"] == "close"
        assert json.loads(body)["error"]["code"] == "request_too_large"
        assert answers.closed()


def test_after_a_stream_the_connection_serves_the_next_request(gateway: GatewayProcess) -> None:
    sock, answers = connect(gateway)
    with sock:
        sock.sendall(request(chat("streamed first", stream=True)))
        status, headers, body = answers.next()
        assert status == 200
        assert headers["content-type"].startswith("text/event-stream")
        assert body.rstrip().endswith(b"data: [DONE]")
        sock.sendall(request(chat("then whole")))
        status, _, answer = answers.next()
        assert status == 200
        assert "then whole" in content_of(answer)


def test_head_gets_a_405_head_without_a_body_and_the_connection_goes_on(
    gateway: GatewayProcess,
) -> None:
    sock, answers = connect(gateway)
    with sock:
        sock.sendall(request(b"", method="HEAD"))
        status, headers, _ = answers.next(head_only=True)
        assert status == 405
        assert headers["allow"] == "POST"
        assert int(headers["content-length"]) > 0
        # no body bytes followed the head: the next answer starts right after it
        sock.sendall(request(chat("after the head")))
        status, _, answer = answers.next()
        assert status == 200
        assert "after the head" in content_of(answer)


def test_a_path_with_a_query_string_is_served_the_same(gateway: GatewayProcess) -> None:
    sock, answers = connect(gateway)
    with sock:
        sock.sendall(request(chat("by the other way"), path=PATH + "?trace=1"))
        status, headers, answer = answers.next()
        assert status == 200
        assert "x-request-id" in headers
        assert "by the other way" in content_of(answer)
        sock.sendall(request(b"{", path=PATH))
        status, _, refusal = answers.next()
        assert status == 400
        assert json.loads(refusal)["error"]["type"] == "invalid_request_error"


def test_a_connection_in_use_stays_open_and_an_idle_one_closes_after_the_keep_alive(
    gateway: GatewayProcess,
) -> None:
    sock, answers = connect(gateway)
    with sock:
        # requests 0.6 s apart for longer than the keep-alive period: each answer starts
        # the period again, so none finds the connection closed
        for n in range(4):
            sock.sendall(request(chat(f"turn {n}")))
            status, _, answer = answers.next()
            assert status == 200
            assert f"turn {n}" in content_of(answer)
            if n < 3:
                time.sleep(0.6)
        answered = time.monotonic()
        assert answers.closed(wait=KEEP_ALIVE + 5)
        idle = time.monotonic() - answered
        assert KEEP_ALIVE - 0.1 <= idle <= KEEP_ALIVE + 1.5, idle
