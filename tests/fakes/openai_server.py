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
import base64
import contextlib
import json
import struct
import threading
import zlib
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

import pydantic
from openai.types import Completion, CompletionChoice
from openai.types.chat import ChatCompletion, ChatCompletionChunk
from openai.types.chat.chat_completion import Choice
from openai.types.chat.chat_completion_chunk import Choice as ChunkChoice
from openai.types.chat.chat_completion_chunk import (
    ChoiceDelta,
    ChoiceDeltaToolCall,
    ChoiceDeltaToolCallFunction,
)
from openai.types.chat.chat_completion_message import ChatCompletionMessage
from openai.types.chat.completion_create_params import CompletionCreateParamsBase
from openai.types.completion_usage import CompletionUsage, PromptTokensDetails
from openai.types.create_embedding_response import CreateEmbeddingResponse
from openai.types.embedding_create_params import EmbeddingCreateParams
from openai.types.responses import Response
from openai.types.responses.response_create_params import ResponseCreateParamsBase
from pydantic import TypeAdapter

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
    # the field and code a mid-stream error names (OpenAI's error object has both keys)
    stream_error_param: str | None = None
    stream_error_code: str | None = None
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
    path: str = "/v1/chat/completions"


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


async def client_left_within(receive: Any, seconds: float) -> bool:
    """Wait `seconds` before a delayed reply, or less if its client hangs up first: an
    answer nobody reads, and a wait that would hold up the fake's shutdown (which waits
    for its requests in flight)."""
    deadline = asyncio.get_running_loop().time() + seconds
    while (left := deadline - asyncio.get_running_loop().time()) > 0:
        try:
            message = await asyncio.wait_for(receive(), left)
        except TimeoutError:
            return False
        if message["type"] == "http.disconnect":
            return True
    return False


class OpenAIFake:
    """`dialect` says which server it stands for: "openai" (the default) and "deepseek"
    refuse fields their APIs do not know, as those APIs do; "compatible" (SGLang, vLLM)
    takes the extensions those servers read (top_k, min_p, regex, ...).
    `max_output_tokens`: a larger max_tokens is refused, as DeepSeek refuses one above
    8,192. `base64_embeddings=False`: embeddings asked for base64 are refused as vLLM
    before 0.5 refused them (400, its error body)."""

    def __init__(
        self,
        responder: Callable[[dict[str, Any]], Reply | None] | None = None,
        *,
        dialect: Literal["openai", "deepseek", "compatible"] = "openai",
        max_output_tokens: int | None = None,
        base64_embeddings: bool = True,
    ) -> None:
        # answers from the request body (scripted replies come first; None: the default)
        self.responder = responder
        self.dialect = dialect
        self.max_output_tokens = max_output_tokens
        self.base64_embeddings = base64_embeddings
        self.requests: list[Received] = []
        self.disconnects = 0
        self.streams_completed = 0
        self._script: deque[Reply] = deque()
        # OpenAI refuses more inputs than this in one embeddings request
        self.embedding_batch_cap = 2048
        self._responses_made = 0
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

    def _next(self, request: dict[str, Any]) -> Reply:
        with self._lock:
            if self._script:
                return self._script.popleft()
        answered = self.responder(request) if self.responder is not None else None
        return answered or Reply()

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
            self.requests.append(Received(headers, request, scope["path"]))
        refusal = self.refusal(scope["path"], request)
        if refusal is not None:
            await self._json(send, 400, {"error": refusal})
            return
        reply = self._next(request)
        if reply.delay and await client_left_within(receive, reply.delay):
            return
        if reply.status != 200 or reply.body is not None:
            await self._json(send, reply.status, reply.body or {}, reply.headers)
            return
        if scope["path"] == "/v1/embeddings":
            if not self.base64_embeddings and request.get("encoding_format") == "base64":
                await self._json(send, 400, VLLM_NO_BASE64)
                return
            status, answer = embeddings_answer(request, self.embedding_batch_cap)
            await self._json(send, status, answer)
            return
        if scope["path"] == "/v1/responses":
            await self._responses(send, request, reply)
            return
        if scope["path"] == "/v1/completions":
            await self._text_completion(send, request, reply)
            return
        model = request.get("model", "fake")
        messages = request.get("messages") or [{}]
        prompt = str(messages[-1].get("content", ""))
        words = reply.words if reply.words is not None else ["echo:", *prompt.split()]
        if reply.tool_call is not None:
            await self._tool_call(send, model, reply.tool_call, request)
        elif request.get("stream"):
            await self._stream(receive, send, model, words, reply, request)
        else:
            text = " ".join(words)
            payload = completion(model, text, len(prompt.split()) + 5, len(words))
            await self._json(send, 200, payload, reply.headers)

    def refusal(self, path: str, request: dict[str, Any]) -> dict[str, Any] | None:
        """The error the real API answers a request it refuses with, else None."""
        known: frozenset[str] | None = None
        if path == "/v1/chat/completions" and self.dialect != "compatible":
            known = CHAT_FIELDS
        elif path == "/v1/responses":
            known = RESPONSES_FIELDS
        unknown = sorted(set(request) - known) if known is not None else []
        if unknown:
            # OpenAI's words; DeepSeek refuses in the same envelope
            message = f"Unrecognized request argument supplied: {unknown[0]}"
            return {
                "message": message,
                "type": "invalid_request_error",
                "param": None,
                "code": None,
            }
        cap = request.get("max_tokens") or request.get("max_completion_tokens")
        limit = self.max_output_tokens
        if limit is not None and isinstance(cap, int) and cap > limit:
            message = f"Invalid max_tokens value, the valid range of max_tokens is [1, {limit}]"
            return {
                "message": message,
                "type": "invalid_request_error",
                "param": None,
                "code": "invalid_request_error",
            }
        return None

    async def _tool_call(
        self, send: Any, model: str, call: dict[str, Any], request: dict[str, Any]
    ) -> None:
        """The scripted function call, as one answer or as OpenAI streams it (the call's
        id and name first, then its arguments, then the finish and the usage)."""
        arguments = call.get("arguments", "{}")
        usage = CompletionUsage(prompt_tokens=50, completion_tokens=10, total_tokens=60)
        if not request.get("stream"):
            message = {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": call.get("id", "call_fake"),
                        "type": "function",
                        "function": {"name": call["name"], "arguments": arguments},
                    }
                ],
            }
            answer = ChatCompletion.model_validate(
                {
                    "id": "chatcmpl-fake",
                    "object": "chat.completion",
                    "created": 1700000000,
                    "model": model,
                    "choices": [{"index": 0, "finish_reason": "tool_calls", "message": message}],
                    "usage": usage.model_dump(),
                }
            )
            await self._json(send, 200, answer.model_dump(mode="json", exclude_none=True))
            return
        head = ChoiceDeltaToolCall(
            index=0,
            id=call.get("id", "call_fake"),
            type="function",
            function=ChoiceDeltaToolCallFunction(name=call["name"], arguments=""),
        )
        rest = ChoiceDeltaToolCall(
            index=0, function=ChoiceDeltaToolCallFunction(arguments=arguments)
        )
        frames = [
            chunk(model, ChoiceDelta(role="assistant", tool_calls=[head])),
            chunk(model, ChoiceDelta(tool_calls=[rest])),
            chunk(model, ChoiceDelta(), finish="tool_calls"),
        ]
        if (request.get("stream_options") or {}).get("include_usage"):
            frames.append(chunk(model, None, usage=usage))
        await send(
            {
                "type": "http.response.start",
                "status": 200,
                "headers": [(b"content-type", b"text/event-stream")],
            }
        )
        body = b"".join(frames) + b"data: [DONE]\n\n"
        await send({"type": "http.response.body", "body": body, "more_body": False})

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

    async def _responses(self, send: Any, request: dict[str, Any], reply: Reply) -> None:
        try:
            RESPONSE_PARAMS.validate_python(request)
        except pydantic.ValidationError as exc:
            error = {"message": str(exc).splitlines()[0], "type": "invalid_request_error"}
            await self._json(send, 400, {"error": error})
            return
        with self._lock:
            self._responses_made += 1
            number = self._responses_made
        response = responses_answer(request, reply, number)
        if not request.get("stream"):
            await self._json(send, 200, response, reply.headers)
            return
        await send(
            {
                "type": "http.response.start",
                "status": 200,
                "headers": [(b"content-type", b"text/event-stream")],
            }
        )
        for event in responses_events(response):
            frame = f"event: {event['type']}\ndata: {json.dumps(event)}\n\n".encode()
            await send({"type": "http.response.body", "body": frame, "more_body": True})
            if reply.chunk_delay:
                await asyncio.sleep(reply.chunk_delay)
        await send({"type": "http.response.body", "body": b"", "more_body": False})

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
                    error = {
                        "error": {
                            "message": reply.stream_error,
                            "type": "server_error",
                            "param": reply.stream_error_param,
                            "code": reply.stream_error_code,
                        }
                    }
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


# -- embeddings and the Responses API ----------------------------------------------------

EMBEDDING_PARAMS = TypeAdapter(EmbeddingCreateParams)
RESPONSE_PARAMS = TypeAdapter(ResponseCreateParamsBase)
# the top-level fields each API knows (the SDK's request types, plus `stream`, which
# the SDK types per overload)
CHAT_FIELDS = frozenset({*CompletionCreateParamsBase.__annotations__, "stream"})
# Codex sends `client_metadata` to OpenAI's Responses API, which takes it
RESPONSES_FIELDS = frozenset(
    {*ResponseCreateParamsBase.__annotations__, "stream", "client_metadata"}
)
FAKE_DIMENSIONS = 8


def fake_vector(value: str | list[int], dimensions: int = FAKE_DIMENSIONS) -> list[float]:
    """A vector that names its input (tests check order and batching by it)."""
    seed = zlib.crc32(json.dumps(value).encode())
    return [((seed >> (i % 24)) % 1000) / 1000 for i in range(dimensions)]


# vLLM's answer to `encoding_format: base64` before 0.5 (vllm-project/vllm#6174)
VLLM_NO_BASE64 = {
    "object": "error",
    "message": "base64 encoding is not currently supported",
    "type": "BadRequestError",
    "param": None,
    "code": 400,
}


def embeddings_answer(request: dict[str, Any], batch_cap: int) -> tuple[int, dict[str, Any]]:
    try:
        EMBEDDING_PARAMS.validate_python(request)
    except pydantic.ValidationError as exc:
        return 400, {
            "error": {"message": str(exc).splitlines()[0], "type": "invalid_request_error"}
        }
    raw = request["input"]
    inputs = [raw] if isinstance(raw, str) or (raw and isinstance(raw[0], int)) else raw
    if len(inputs) > batch_cap:
        message = f"'$.input' is invalid: at most {batch_cap} inputs per request"
        return 400, {"error": {"message": message, "type": "invalid_request_error"}}
    dimensions = request.get("dimensions") or FAKE_DIMENSIONS
    tokens = sum(len(i) if isinstance(i, list) else len(i.split()) for i in inputs)
    body = CreateEmbeddingResponse.model_validate(
        {
            "object": "list",
            "model": request["model"],
            "data": [
                {"object": "embedding", "index": n, "embedding": fake_vector(item, dimensions)}
                for n, item in enumerate(inputs)
            ],
            "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
        }
    )
    answer = body.model_dump(mode="json")
    if request.get("encoding_format") == "base64":
        # as OpenAI answers it: each vector's float32s, little-endian, in base64 (the SDK's
        # response type says floats, so the strings replace them after its check)
        for item in answer["data"]:
            vector = item["embedding"]
            packed = struct.pack(f"<{len(vector)}f", *vector)
            item["embedding"] = base64.b64encode(packed).decode("ascii")
    return 200, answer


def _last_user_text(request: dict[str, Any]) -> str:
    value = request.get("input")
    if isinstance(value, str):
        return value
    for item in reversed(value or []):
        if item.get("type", "message") == "message" and item.get("role") == "user":
            content = item.get("content")
            if isinstance(content, str):
                return content
            return " ".join(p.get("text", "") for p in content or [])
        if item.get("type") == "function_call_output":
            return f"tool said {item.get('output')}"
    return ""


def responses_answer(request: dict[str, Any], reply: Reply, number: int) -> dict[str, Any]:
    """The Response OpenAI would send: an echo of the last user text, or the scripted
    function call; built from the SDK's type."""
    said = _last_user_text(request)
    words = reply.words if reply.words is not None else ["echo:", *said.split()]
    output: list[dict[str, Any]] = []
    if reply.tool_call is not None:
        output.append(
            {
                "id": f"fc_fake{number}",
                "type": "function_call",
                "status": "completed",
                "call_id": f"call_fake{number}",
                "name": reply.tool_call["name"],
                "arguments": reply.tool_call.get("arguments", "{}"),
            }
        )
    else:
        output.append(
            {
                "id": f"msg_fake{number}",
                "type": "message",
                "role": "assistant",
                "status": "completed",
                "content": [{"type": "output_text", "text": " ".join(words), "annotations": []}],
            }
        )
    prompt = max(1, len(json.dumps(request.get("input"))) // 4)
    response = Response.model_validate(
        {
            "id": f"resp_fake{number}",
            "object": "response",
            "created_at": 1700000000,
            "status": "completed",
            "model": request["model"],
            "output": output,
            "parallel_tool_calls": True,
            "tool_choice": request.get("tool_choice", "auto"),
            "tools": request.get("tools", []),
            "instructions": request.get("instructions"),
            "metadata": request.get("metadata") or {},
            "usage": {
                "input_tokens": prompt,
                "input_tokens_details": {"cached_tokens": 0, "cache_write_tokens": 0},
                "output_tokens": len(words),
                "output_tokens_details": {"reasoning_tokens": 0},
                "total_tokens": prompt + len(words),
            },
        }
    )
    return response.model_dump(mode="json", exclude_none=True)


def responses_events(response: dict[str, Any]) -> list[dict[str, Any]]:
    """The event stream OpenAI sends for `response`."""
    opening = {**response, "status": "in_progress", "output": [], "usage": None}
    events: list[dict[str, Any]] = [
        {"type": "response.created", "response": opening},
        {"type": "response.in_progress", "response": opening},
    ]
    for index, item in enumerate(response["output"]):
        if item["type"] == "message":
            text = item["content"][0]["text"]
            events.append(
                {
                    "type": "response.output_item.added",
                    "output_index": index,
                    "item": {**item, "status": "in_progress", "content": []},
                }
            )
            part = {"type": "output_text", "text": "", "annotations": []}
            where = {"item_id": item["id"], "output_index": index, "content_index": 0}
            events.append({"type": "response.content_part.added", **where, "part": part})
            for n, word in enumerate(text.split(" ")):
                delta = word if n == 0 else " " + word
                events.append(
                    {"type": "response.output_text.delta", **where, "delta": delta, "logprobs": []}
                )
            events.append(
                {"type": "response.output_text.done", **where, "text": text, "logprobs": []}
            )
            events.append(
                {"type": "response.content_part.done", **where, "part": {**part, "text": text}}
            )
        else:
            events.append(
                {
                    "type": "response.output_item.added",
                    "output_index": index,
                    "item": {**item, "status": "in_progress", "arguments": ""},
                }
            )
            where = {"item_id": item["id"], "output_index": index}
            events.append(
                {
                    "type": "response.function_call_arguments.delta",
                    **where,
                    "delta": item["arguments"],
                }
            )
            events.append(
                {
                    "type": "response.function_call_arguments.done",
                    **where,
                    "arguments": item["arguments"],
                }
            )
        events.append({"type": "response.output_item.done", "output_index": index, "item": item})
    events.append({"type": "response.completed", "response": response})
    return [{**event, "sequence_number": n} for n, event in enumerate(events)]
