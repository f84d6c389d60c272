"""Fake paid providers: real HTTP servers on 127.0.0.1 that speak the providers' wire
formats, reject what the real APIs reject, and answer what a test scripts.

`FakeServer` is the shared part of the Anthropic and Gemini fakes: a pure ASGI app run
by `server_thread.ServerThread` (uvicorn in a background thread),
a record of every request received, and a queue of scripted replies.

    with AnthropicFake() as fake:
        fake.enqueue_message(...)
        ... point a client at fake.base_url ...
        fake.requests[-1].json
"""

from __future__ import annotations

import asyncio
import json
import threading
from collections import deque
from collections.abc import Awaitable, Callable, MutableMapping, Sequence
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any
from urllib.parse import parse_qs

from tests.fakes.server_thread import ServerThread

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]


@dataclass
class Received:
    """One request as the fake saw it (header names lowercased)."""

    method: str
    path: str
    query: dict[str, list[str]]
    headers: dict[str, str]
    body: bytes

    @property
    def json(self) -> Any:
        return json.loads(self.body)


@dataclass
class Reply:
    """What the fake sends back: a JSON body, or SSE chunks (raw bytes) written one by
    one, `chunk_delay` seconds apart, after `delay` seconds."""

    status: int = 200
    body: Any = None
    chunks: Sequence[bytes] | None = None
    headers: dict[str, str] = field(default_factory=dict)
    delay: float = 0.0
    chunk_delay: float = 0.0


class FakeServer:
    """Subclasses implement `respond(request) -> Reply`; scripted replies queue up in
    `self.script` and are taken in order by `respond`."""

    def __init__(self) -> None:
        self.requests: list[Received] = []
        self.script: deque[Any] = deque()
        self.base_url = ""
        self._lock = threading.Lock()
        self._thread: ServerThread | None = None

    # -- lifecycle --

    def start(self) -> None:
        self._thread = ServerThread(self._asgi)
        self._thread.start()
        self.base_url = f"http://127.0.0.1:{self._thread.port}"

    def stop(self) -> None:
        if self._thread is not None:
            self._thread.stop()

    def __enter__(self) -> FakeServer:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    # -- scripting --

    def enqueue(self, item: Any) -> None:
        with self._lock:
            self.script.append(item)

    def next_scripted(self) -> Any | None:
        with self._lock:
            return self.script.popleft() if self.script else None

    def respond(self, request: Received) -> Reply:
        raise NotImplementedError

    # -- ASGI --

    async def _asgi(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return
        body = bytearray()
        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        request = Received(
            method=scope["method"],
            path=scope["path"],
            query=parse_qs(scope.get("query_string", b"").decode()),
            headers={k.decode().lower(): v.decode() for k, v in scope["headers"]},
            body=bytes(body),
        )
        with self._lock:
            self.requests.append(request)
        reply = self.respond(request)
        if reply.delay:
            await asyncio.sleep(reply.delay)
        if reply.chunks is None:
            payload = json.dumps(reply.body).encode()
            headers = {"content-type": "application/json", **reply.headers}
            await _start(send, reply.status, headers)
            await send({"type": "http.response.body", "body": payload})
            return
        headers = {"content-type": "text/event-stream", "cache-control": "no-cache"}
        await _start(send, reply.status, {**headers, **reply.headers})
        for chunk in reply.chunks:
            await send({"type": "http.response.body", "body": chunk, "more_body": True})
            if reply.chunk_delay:
                await asyncio.sleep(reply.chunk_delay)
        await send({"type": "http.response.body", "body": b""})


async def _start(send: Send, status: int, headers: dict[str, str]) -> None:
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [(k.encode(), v.encode()) for k, v in headers.items()],
        }
    )


def sse(name: str | None, payload: Any) -> bytes:
    """One SSE event carrying a JSON payload."""
    head = f"event: {name}\n".encode() if name else b""
    return head + b"data: " + json.dumps(payload, separators=(",", ":")).encode() + b"\n\n"


def pieces(text: str, size: int) -> list[str]:
    """`text` cut into pieces of `size` characters (at least one piece)."""
    if not text:
        return [text]
    return [text[i : i + size] for i in range(0, len(text), size)]
