"""Legacy text completions (`POST /v1/completions`), served as SGLang and vLLM serve them:
the prompt is generated from like a chat turn, and the answer is written back as a
`text_completion` (the same scheduler, KV cache and metrics as chat)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

import msgspec

Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]

# OpenAI's default max_tokens for a completions request
DEFAULT_MAX_TOKENS = 16
_PASSED_ON = ("model", "stream", "stream_options", "max_tokens", "stop", "ignore_eos")


def as_chat_request(body: bytes) -> bytes:
    """A completions request as the chat request the emulator generates for; a body it
    cannot read goes on as it is, for the chat decoder to refuse."""
    try:
        request = msgspec.json.decode(body)
    except msgspec.DecodeError:
        return body
    if not isinstance(request, dict):
        return body
    prompt = request.get("prompt", "")
    if isinstance(prompt, list):
        prompt = "\n".join(str(p) for p in prompt)
    chat = {k: request[k] for k in _PASSED_ON if k in request}
    chat.setdefault("max_tokens", DEFAULT_MAX_TOKENS)
    chat["messages"] = [{"role": "user", "content": str(prompt)}]
    return msgspec.json.encode(chat)


def body_receive(body: bytes, receive: Receive) -> Receive:
    """A receive callable that hands over `body` (the original already read), then
    what the client's connection says (its disconnect)."""
    sent = False

    async def receive_body_first() -> Message:
        nonlocal sent
        if sent:
            return await receive()
        sent = True
        return {"type": "http.request", "body": body, "more_body": False}

    return receive_body_first


def completions_send(send: Send) -> Send:
    """Wraps `send`: chat completion bodies and chunks go out as text completions."""

    async def send_completion(message: Message) -> None:
        if message["type"] == "http.response.body" and message.get("body"):
            message = {**message, "body": _convert(message["body"])}
        await send(message)

    return send_completion


def _convert(body: bytes) -> bytes:
    if body.startswith(b"data: "):
        events = body.split(b"\n\n")
        return b"\n\n".join(_convert_event(e) for e in events)
    try:
        chat = msgspec.json.decode(body)
    except msgspec.DecodeError:
        return body
    if not isinstance(chat, dict) or "choices" not in chat:
        return body  # an error body: the same in both APIs
    chat["id"] = str(chat.get("id", "")).replace("chatcmpl-", "cmpl-")
    chat["object"] = "text_completion"
    chat["choices"] = [
        {
            "text": (c.get("message") or {}).get("content") or "",
            "index": c.get("index", 0),
            "logprobs": None,
            "finish_reason": c.get("finish_reason"),
        }
        for c in chat["choices"]
    ]
    return msgspec.json.encode(chat)


def _convert_event(event: bytes) -> bytes:
    if not event.startswith(b"data: ") or event == b"data: [DONE]":
        return event
    chunk = msgspec.json.decode(event[6:])
    chunk["id"] = str(chunk.get("id", "")).replace("chatcmpl-", "cmpl-")
    chunk["object"] = "text_completion"
    chunk["choices"] = [
        {
            "text": (c.get("delta") or {}).get("content") or "",
            "index": c.get("index", 0),
            "logprobs": None,
            "finish_reason": c.get("finish_reason"),
        }
        for c in chunk.get("choices") or []
    ]
    return b"data: " + msgspec.json.encode(chunk)
