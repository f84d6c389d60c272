"""An upstream that answers with whatever bytes a test scripts: a real HTTP server on
127.0.0.1 (uvicorn in a thread) for misbehaving providers — malformed JSON, a usage that
is not a count, non-object bodies, broken SSE. Without a script it answers a valid
OpenAI chat completion (or stream), so the gateway can be checked to still serve."""

from __future__ import annotations

import json
import threading
from collections import deque
from dataclasses import dataclass
from typing import Any

from tests.fakes.server_thread import ServerThread

VALID_COMPLETION = {
    "id": "chatcmpl-raw",
    "object": "chat.completion",
    "created": 1700000000,
    "model": "raw",
    "choices": [
        {
            "index": 0,
            "finish_reason": "stop",
            "message": {"role": "assistant", "content": "fine", "refusal": None},
        }
    ],
    "usage": {"prompt_tokens": 3, "completion_tokens": 1, "total_tokens": 4},
}


def sse(*payloads: bytes | dict[str, Any]) -> list[bytes]:
    """SSE frames for payloads (dicts are JSON-encoded), ending with [DONE]."""
    frames = [
        b"data: " + (json.dumps(p).encode() if isinstance(p, dict) else p) + b"\n\n"
        for p in payloads
    ]
    return [*frames, b"data: [DONE]\n\n"]


def valid_chunk(content: str | None = None, usage: dict[str, Any] | None = None) -> dict[str, Any]:
    choices = [] if content is None else [{"index": 0, "delta": {"content": content}}]
    chunk: dict[str, Any] = {
        "id": "chatcmpl-raw",
        "object": "chat.completion.chunk",
        "created": 1700000000,
        "model": "raw",
        "choices": choices,
    }
    if usage is not None:
        chunk["usage"] = usage
    return chunk


@dataclass
class RawReply:
    status: int = 200
    # the body's pieces, each sent as one write
    pieces: tuple[bytes, ...] = ()
    content_type: str = "application/json"


class RawUpstream:
    def __init__(self) -> None:
        self.requests: list[dict[str, Any]] = []
        self._script: deque[RawReply] = deque()
        self._lock = threading.Lock()
        self._server = ServerThread(self.app)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self._server.port}/v1"

    def enqueue(self, reply: RawReply) -> None:
        with self._lock:
            self._script.append(reply)

    def answer(self, body: bytes, status: int = 200) -> None:
        self.enqueue(RawReply(status, (body,)))

    def stream(self, frames: list[bytes]) -> None:
        self.enqueue(RawReply(200, tuple(frames), "text/event-stream"))

    def clear(self) -> None:
        with self._lock:
            self._script.clear()

    def __enter__(self) -> RawUpstream:
        self._server.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.stop()

    async def app(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        body = b""
        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        try:
            request = json.loads(body)
        except ValueError:
            request = {}
        with self._lock:
            self.requests.append(request)
            reply = self._script.popleft() if self._script else None
        if reply is None:
            if request.get("stream"):
                reply = RawReply(
                    200,
                    tuple(
                        sse(
                            valid_chunk("fine"),
                            valid_chunk(
                                usage={
                                    "prompt_tokens": 3,
                                    "completion_tokens": 1,
                                    "total_tokens": 4,
                                }
                            ),
                        )
                    ),
                    "text/event-stream",
                )
            else:
                reply = RawReply(200, (json.dumps(VALID_COMPLETION).encode(),))
        headers = [(b"content-type", reply.content_type.encode())]
        await send({"type": "http.response.start", "status": reply.status, "headers": headers})
        for piece in reply.pieces:
            await send({"type": "http.response.body", "body": piece, "more_body": True})
        await send({"type": "http.response.body", "body": b"", "more_body": False})
