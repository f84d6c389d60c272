"""A fake OpenAI-compatible upstream: a real HTTP server on 127.0.0.1 that answers in
OpenAI's wire format (bodies built from the official `openai` SDK types) and can be
scripted to fail, stall or stream.

    with OpenAIFake() as fake:
        fake.base_url            # http://127.0.0.1:PORT/v1
        fake.enqueue(Reply.error(503, "overloaded"))
        fake.requests            # every request received: headers and JSON body
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import threading
from collections import deque
from dataclasses import dataclass, field
from typing import Any

from openai.types import Completion, CompletionChoice
from openai.types.chat import ChatCompletion, ChatCompletionChunk
from openai.types.chat.chat_completion import Choice
from openai.types.chat.chat_completion_chunk import Choice as ChunkChoice
from openai.types.chat.chat_completion_chunk import ChoiceDelta
from openai.types.chat.chat_completion_message import ChatCompletionMessage
from openai.types.completion_usage import CompletionUsage, PromptTokensDetails

from tests.fakes.server_thread import ServerThread


@dataclass
class Reply:
    """One scripted answer. Without a script the fake echoes the last user message."""

    status: int = 200
    body: dict[str, Any] | None = None
    headers: dict[str, str] = field(default_factory=dict)
    words: list[str] | None = None
    chunk_delay: float = 0.0
    fail_after_chunks: int | None = None
    stream_error: str = "upstream crashed"
    usage: bool = True
    tool_call: dict[str, Any] | None = None
    delay: float = 0.0

    @classmethod
    def error(cls, status: int, message: str, **kwargs: Any) -> Reply:
        error = {"message": message, "type": "server_error", "param": None, "code": None}
        return cls(status=status, body={"error": error}, **kwargs)


@dataclass
class Received:
    headers: dict[str, str]
    body: dict[str, Any]


def completion(model: str, text: str, prompt_tokens: int, completion_tokens: int) -> dict[str, Any]:
    return ChatCompletion(
        id="chatcmpl-fake",
        object="chat.completion",
        created=1700000000,
        model=model,
        choices=[
            Choice(
                index=0,
                finish_reason="stop",
                message=ChatCompletionMessage(role="assistant", content=text),
            )
        ],
        usage=CompletionUsage(
            prompt_tokens=prompt_tokens,
            completion_tokens=completion_tokens,
            total_tokens=prompt_tokens + completion_tokens,
            prompt_tokens_details=PromptTokensDetails(cached_tokens=0),
        ),
    ).model_dump(mode="json", exclude_none=True)


def chunk(
    model: str,
    delta: ChoiceDelta | None,
    finish: str | None = None,
    usage: CompletionUsage | None = None,
) -> bytes:
    choices = [] if delta is None else [ChunkChoice(index=0, delta=delta, finish_reason=finish)]  # type: ignore[arg-type]
    payload = ChatCompletionChunk(
        id="chatcmpl-fake",
        object="chat.completion.chunk",
        created=1700000000,
        model=model,
        choices=choices,
        usage=usage,
    ).model_dump(mode="json", exclude_none=True)
    if delta is not None and "usage" not in payload:
        payload["usage"] = None
    return b"data: " + json.dumps(payload).encode() + b"\n\n"


class OpenAIFake:
    def __init__(self) -> None:
        self.requests: list[Received] = []
        self.disconnects = 0
        self.streams_completed = 0
        self._script: deque[Reply] = deque()
        self._lock = threading.Lock()
        self._server = ServerThread(self.app)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self._server.port}/v1"

    def enqueue(self, *replies: Reply) -> None:
        with self._lock:
            self._script.extend(replies)

    def __enter__(self) -> OpenAIFake:
        self._server.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.stop()

    def _next(self) -> Reply:
        with self._lock:
            return self._script.popleft() if self._script else Reply()

    async def app(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        body = b""
        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        headers = {k.decode(): v.decode() for k, v in scope["headers"]}
        if scope["path"] == "/v1/models":
            await self._json(send, 200, {"object": "list", "data": []})
            return
        try:
            request = json.loads(body)
        except ValueError:
            request = {}
        with self._lock:
            self.requests.append(Received(headers, request))
        reply = self._next()
        if reply.delay:
            await asyncio.sleep(reply.delay)
        if reply.status != 200 or reply.body is not None:
            await self._json(send, reply.status, reply.body or {}, reply.headers)
            return
        if scope["path"] == "/v1/completions":
            await self._text_completion(send, request, reply)
            return
        model = request.get("model", "fake")
        messages = request.get("messages") or [{}]
        prompt = str(messages[-1].get("content", ""))
        words = reply.words if reply.words is not None else ["echo:", *prompt.split()]
        if request.get("stream"):
            await self._stream(receive, send, model, words, reply, request)
        else:
            text = " ".join(words)
            payload = completion(model, text, len(prompt.split()) + 5, len(words))
            await self._json(send, 200, payload, reply.headers)

    async def _text_completion(self, send: Any, request: dict[str, Any], reply: Reply) -> None:
        """Legacy completions, as SGLang and vLLM serve them (built from the SDK's types)."""
        model = request.get("model", "fake")
        prompt = request.get("prompt", "")
        prompts = prompt if isinstance(prompt, list) else [prompt]
        words = reply.words if reply.words is not None else ["echo:", *str(prompts[0]).split()]
        prompt_tokens = sum(len(str(p).split()) for p in prompts) + 5
        usage = CompletionUsage(
            prompt_tokens=prompt_tokens,
            completion_tokens=len(words) * len(prompts),
            total_tokens=prompt_tokens + len(words) * len(prompts),
        )
        if not request.get("stream"):
            body = Completion(
                id="cmpl-fake",
                object="text_completion",
                created=1700000000,
                model=model,
                choices=[
                    CompletionChoice(index=i, text=" ".join(words), finish_reason="stop")
                    for i in range(len(prompts))
                ],
                usage=usage,
            ).model_dump(mode="json", exclude_none=True)
            await self._json(send, 200, body, reply.headers)
            return
        events = []
        for i, word in enumerate(words):
            text = word if i == 0 else " " + word
            finish = "stop" if i == len(words) - 1 else None
            choice = {"index": 0, "text": text, "logprobs": None, "finish_reason": finish}
            events.append(self._completion_chunk(model, [choice]))
        if (request.get("stream_options") or {}).get("include_usage"):
            events.append(self._completion_chunk(model, [], usage.model_dump(mode="json")))
        await send(
            {
                "type": "http.response.start",
                "status": 200,
                "headers": [(b"content-type", b"text/event-stream")],
            }
        )
        body = b"".join(events) + b"data: [DONE]\n\n"
        await send({"type": "http.response.body", "body": body})
        self.streams_completed += 1

    @staticmethod
    def _completion_chunk(
        model: str, choices: list[dict[str, Any]], usage: dict[str, Any] | None = None
    ) -> bytes:
        payload: dict[str, Any] = {
            "id": "cmpl-fake",
            "object": "text_completion",
            "created": 1700000000,
            "model": model,
            "choices": choices,
        }
        if usage is not None:
            payload["usage"] = usage
        return b"data: " + json.dumps(payload).encode() + b"\n\n"

    async def _json(
        self, send: Any, status: int, payload: dict[str, Any], headers: dict[str, str] | None = None
    ) -> None:
        data = json.dumps(payload).encode()
        extra = [(k.encode(), v.encode()) for k, v in (headers or {}).items()]
        await send(
            {
                "type": "http.response.start",
                "status": status,
                "headers": [(b"content-type", b"application/json"), *extra],
            }
        )
        await send({"type": "http.response.body", "body": data})

    async def _stream(
        self,
        receive: Any,
        send: Any,
        model: str,
        words: list[str],
        reply: Reply,
        request: dict[str, Any],
    ) -> None:
        disconnected = asyncio.Event()

        async def watch() -> None:
            while (await receive())["type"] != "http.disconnect":
                pass
            disconnected.set()

        watcher = asyncio.ensure_future(watch())
        await send(
            {
                "type": "http.response.start",
                "status": 200,
                "headers": [(b"content-type", b"text/event-stream")],
            }
        )
        try:
            await send(
                {
                    "type": "http.response.body",
                    "body": chunk(model, ChoiceDelta(role="assistant", content="")),
                    "more_body": True,
                }
            )
            for i, word in enumerate(words):
                if disconnected.is_set():
                    self.disconnects += 1
                    return
                if reply.fail_after_chunks is not None and i >= reply.fail_after_chunks:
                    error = {"error": {"message": reply.stream_error, "type": "server_error"}}
                    await send(
                        {
                            "type": "http.response.body",
                            "body": b"data: " + json.dumps(error).encode() + b"\n\n",
                            "more_body": False,
                        }
                    )
                    return
                text = word if i == 0 else " " + word
                await send(
                    {
                        "type": "http.response.body",
                        "body": chunk(model, ChoiceDelta(content=text)),
                        "more_body": True,
                    }
                )
                if reply.chunk_delay:
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(disconnected.wait(), reply.chunk_delay)
            tail = chunk(model, ChoiceDelta(), finish="stop")
            include_usage = (request.get("stream_options") or {}).get("include_usage")
            if reply.usage and include_usage:
                prompt = str((request.get("messages") or [{}])[-1].get("content", ""))
                usage = CompletionUsage(
                    prompt_tokens=len(prompt.split()) + 5,
                    completion_tokens=len(words),
                    total_tokens=len(prompt.split()) + 5 + len(words),
                )
                tail += chunk(model, None, usage=usage)
            await send(
                {
                    "type": "http.response.body",
                    "body": tail + b"data: [DONE]\n\n",
                    "more_body": False,
                }
            )
            self.streams_completed += 1
        finally:
            watcher.cancel()
