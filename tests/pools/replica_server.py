"""A tiny replica on 127.0.0.1: `/health`, `/metrics` and a slow `/v1/chat/completions`.

Enough of an SGLang server for the pool's own requests (health checks and scrapes) and
for holding a request in flight while a test cancels it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

from tests.fakes.server_thread import ServerThread

Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]

SGLANG_METRICS = """\
# HELP sglang:num_running_reqs The number of running requests.
# TYPE sglang:num_running_reqs gauge
sglang:num_running_reqs{{model_name="llama"}} {running}
# HELP sglang:num_queue_reqs The number of requests in the waiting queue.
# TYPE sglang:num_queue_reqs gauge
sglang:num_queue_reqs{{model_name="llama"}} {queued}
# HELP sglang:token_usage The token usage.
# TYPE sglang:token_usage gauge
sglang:token_usage{{model_name="llama"}} {kv}
# HELP sglang:cache_hit_rate The prefix cache hit rate.
# TYPE sglang:cache_hit_rate gauge
sglang:cache_hit_rate{{model_name="llama"}} 0.5
"""


class TinyReplica:
    def __init__(self) -> None:
        self.healthy = True
        self.running = 0
        self.queued = 0
        self.kv_usage = 0.0
        self.chat_requests = 0
        self._server = ServerThread(self)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self._server.port}/v1"

    def start(self) -> TinyReplica:
        self._server.start()
        return self

    def stop(self) -> None:
        self._server.stop()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return
        path = scope["path"]
        if path == "/health":
            await _respond(send, 200 if self.healthy else 503, b"ok")
        elif path == "/metrics":
            text = SGLANG_METRICS.format(running=self.running, queued=self.queued, kv=self.kv_usage)
            await _respond(send, 200, text.encode())
        elif path == "/v1/chat/completions":
            self.chat_requests += 1
            await _until_client_leaves(receive)
        else:
            await _respond(send, 404, b"not found")


async def _until_client_leaves(receive: Receive) -> None:
    """Hold the request open (a long generation) until the client disconnects."""
    async with asyncio.timeout(30):
        while (await receive())["type"] != "http.disconnect":
            pass


async def _respond(send: Send, status: int, body: bytes) -> None:
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [(b"content-length", str(len(body)).encode())],
        }
    )
    await send({"type": "http.response.body", "body": body})
