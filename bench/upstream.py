"""A minimal, fast OpenAI-compatible upstream for benchmarks: asyncio protocol + httptools.

    python bench/upstream.py --port N [--delay-ms 50] [--chunks 32] [--chunk-interval-ms 20]

It answers every POST with a fixed chat completion (or an SSE stream of `--chunks`
content chunks, `--chunk-interval-ms` apart, with a usage chunk when asked), after
`--delay-ms`; a POST to `/v1/messages` gets the same in Anthropic's Messages shape.
Costing a few microseconds per request, it keeps the upstream from being
what a proxy benchmark measures.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
import struct
from functools import lru_cache

import httptools

try:
    import uvloop
except ImportError:  # pragma: no cover
    uvloop = None  # type: ignore[assignment]


# built once per process: a thousand connections opened at once each ask for it
@lru_cache(maxsize=8)
def completion_body(words: int) -> bytes:
    return json.dumps(
        {
            "id": "chatcmpl-bench",
            "object": "chat.completion",
            "created": 1700000000,
            "model": "bench-model",
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": "word " * words},
                    "finish_reason": "stop",
                    "logprobs": None,
                }
            ],
            "usage": {
                "prompt_tokens": 500,
                "completion_tokens": words,
                "total_tokens": 500 + words,
            },
        }
    ).encode()


EMBEDDING_SIZE = 1536


@lru_cache(maxsize=8)
def embeddings_body(size: int, encoding_format: str = "float") -> bytes:
    """One vector of `size` floats, as a list of numbers or (base64, as OpenAI answers
    the official SDK's default) its float32s, little-endian."""
    vector = [round((i % 97) / 97 - 0.5, 6) for i in range(size)]
    embedding: list[float] | str = vector
    if encoding_format == "base64":
        embedding = base64.b64encode(struct.pack(f"<{size}f", *vector)).decode("ascii")
    return json.dumps(
        {
            "object": "list",
            "model": "bench-embed",
            "data": [{"object": "embedding", "index": 0, "embedding": embedding}],
            "usage": {"prompt_tokens": 120, "total_tokens": 120},
        }
    ).encode()


def _json(body: bytes) -> bytes:
    head = (
        b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n"
        b"content-length: " + str(len(body)).encode() + b"\r\n\r\n"
    )
    return head + body


def sse_event(payload: dict[str, object]) -> bytes:
    return b"data: " + json.dumps(payload).encode() + b"\n\n"


def chunk(content: str | None, finish: str | None = None) -> bytes:
    delta = {} if content is None else {"content": content}
    return sse_event(
        {
            "id": "chatcmpl-bench",
            "object": "chat.completion.chunk",
            "created": 1700000000,
            "model": "bench-model",
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish, "logprobs": None}],
        }
    )


def usage_chunk(chunks: int) -> bytes:
    return sse_event(
        {
            "id": "chatcmpl-bench",
            "object": "chat.completion.chunk",
            "created": 1700000000,
            "model": "bench-model",
            "choices": [],
            "usage": {
                "prompt_tokens": 500,
                "completion_tokens": chunks,
                "total_tokens": 500 + chunks,
            },
        }
    )


@lru_cache(maxsize=8)
def anthropic_message(words: int) -> bytes:
    return json.dumps(
        {
            "id": "msg_bench",
            "type": "message",
            "role": "assistant",
            "model": "bench-model",
            "content": [{"type": "text", "text": "word " * words}],
            "stop_reason": "end_turn",
            "stop_sequence": None,
            "usage": {"input_tokens": 500, "output_tokens": words},
        }
    ).encode()


def anthropic_event(payload: dict[str, object]) -> bytes:
    return f"event: {payload['type']}\ndata: ".encode() + json.dumps(payload).encode() + b"\n\n"


def anthropic_events(chunks: int) -> list[bytes]:
    start = json.loads(anthropic_message(0))
    start.update(content=[], stop_reason=None)
    start["usage"] = {"input_tokens": 500, "output_tokens": 1}
    head = [
        anthropic_event({"type": "message_start", "message": start}),
        anthropic_event(
            {
                "type": "content_block_start",
                "index": 0,
                "content_block": {"type": "text", "text": ""},
            }
        ),
    ]
    delta = anthropic_event(
        {
            "type": "content_block_delta",
            "index": 0,
            "delta": {"type": "text_delta", "text": "word "},
        }
    )
    tail = [
        anthropic_event({"type": "content_block_stop", "index": 0}),
        anthropic_event(
            {
                "type": "message_delta",
                "delta": {"stop_reason": "end_turn", "stop_sequence": None},
                "usage": {"output_tokens": chunks},
            }
        ),
        anthropic_event({"type": "message_stop"}),
    ]
    return [*head, *([delta] * chunks), *tail]


class Upstream(asyncio.Protocol):
    def __init__(self, options: argparse.Namespace) -> None:
        self.options = options
        self.parser = httptools.HttpRequestParser(self)
        self.transport: asyncio.Transport | None = None
        self.body = bytearray()
        self.json_response = self._json_response(options.words)
        self.embeddings_response = _json(embeddings_body(EMBEDDING_SIZE))
        self.embeddings_base64_response = _json(embeddings_body(EMBEDDING_SIZE, "base64"))
        self.anthropic_response = _json(anthropic_message(options.words))
        self.url = b""

    @staticmethod
    def _json_response(words: int) -> bytes:
        return _json(completion_body(words))

    def on_url(self, url: bytes) -> None:
        self.url = url

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserError:
            if self.transport is not None:
                self.transport.close()

    def on_body(self, body: bytes) -> None:
        self.body += body

    def on_message_complete(self) -> None:
        body, self.body = bytes(self.body), bytearray()
        if self.url.endswith(b"/embeddings") and self.transport is not None:
            # one input per bench request: one vector, in the format asked for
            base64_asked = body.find(b'"base64"') != -1
            self.transport.write(
                self.embeddings_base64_response if base64_asked else self.embeddings_response
            )
            return
        stream = b'"stream":true' in body or b'"stream": true' in body
        anthropic, usage = self.url.startswith(b"/v1/messages"), b"include_usage" in body
        asyncio.get_running_loop().create_task(self.answer(stream, usage, anthropic))

    async def answer(self, stream: bool, usage: bool, anthropic: bool = False) -> None:
        transport = self.transport
        assert transport is not None
        if self.options.delay_ms:
            await asyncio.sleep(self.options.delay_ms / 1000)
        if not stream:
            transport.write(self.anthropic_response if anthropic else self.json_response)
            return
        transport.write(
            b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
            b"transfer-encoding: chunked\r\n\r\n"
        )
        interval = self.options.chunk_interval_ms / 1000

        def write(data: bytes) -> None:
            transport.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")

        if anthropic:
            write(b"".join(anthropic_events(self.options.chunks)))
            transport.write(b"0\r\n\r\n")
            return
        if interval == 0:
            # everything at once, as an instant upstream would
            parts = [chunk("word ") for _ in range(self.options.chunks)]
            parts.append(chunk(None, "stop"))
            if usage:
                parts.append(usage_chunk(self.options.chunks))
            parts.append(b"data: [DONE]\n\n")
            write(b"".join(parts))
        else:
            for _ in range(self.options.chunks):
                if transport.is_closing():
                    return
                write(chunk("word "))
                await asyncio.sleep(interval)
            tail = chunk(None, "stop") + (usage_chunk(self.options.chunks) if usage else b"")
            write(tail + b"data: [DONE]\n\n")
        transport.write(b"0\r\n\r\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--delay-ms", type=float, default=0.0)
    parser.add_argument("--chunks", type=int, default=32)
    parser.add_argument("--chunk-interval-ms", type=float, default=0.0)
    parser.add_argument("--words", type=int, default=16)
    options = parser.parse_args()
    if uvloop is not None:
        uvloop.install()

    async def serve() -> None:
        loop = asyncio.get_running_loop()
        server = await loop.create_server(
            lambda: Upstream(options), options.host, options.port, backlog=4096
        )
        async with server:
            await server.serve_forever()

    asyncio.run(serve())


if __name__ == "__main__":
    main()
