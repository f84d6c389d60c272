"""OpenAI chat completions, the internal API itself: decoding validates the body into a
ChatRequest, encoding only frames the chat answer as OpenAI sends it."""

from __future__ import annotations

import re
from collections.abc import Mapping
from decimal import Decimal
from typing import Any

import msgspec

from gateway.authorization import bearer_token
from gateway.errors import GatewayError, InvalidRequest
from gateway.ingress.base import OPENAI_CHAT, Decoded, EncodeContext
from gateway.json_body import DEFAULT_MAX_DEPTH, decode_json_object
from gateway.usage import Usage
from gateway.wire.openai import ChatRequest
from gateway.wire.served_model import served_model

DONE = b"data: [DONE]\n\n"
_PATH = re.compile(r" - at `\$\.?(.*)`$")


def convert(raw: dict[str, Any], kind: type[Any]) -> Any:
    """`raw` as the msgspec type `kind`, or a 400 naming the field that is wrong."""
    try:
        # lax: whole-number floats where an integer goes (`"n": 18.0`), as OpenAI takes them
        return msgspec.convert(raw, kind, strict=False)
    except msgspec.ValidationError as exc:
        message = str(exc)
        match = _PATH.search(message)
        param = match.group(1) if match else None
        detail = _PATH.sub("", message)
        if param is None and "missing required field" in detail:
            param = detail.rsplit("`", 2)[-2] if detail.count("`") >= 2 else None
        where = f" at '{param}'" if param else ""
        raise InvalidRequest(f"Invalid request{where}: {detail}.", param=param) from None


def frame(payload: bytes) -> bytes:
    return b"data: " + payload + b"\n\n"


def openai_api_key(headers: Mapping[str, str]) -> str | None:
    return bearer_token(headers.get("authorization"))


class ChatStreamEncoder:
    """Chunks pass through as `data:` lines; the usage chunk goes out only if the client
    asked for it, with the cost in an `x_gateway` extension field (clients that do not
    know it ignore it), then `[DONE]`."""

    __slots__ = ("_ctx", "_last", "_last_frames", "_object")

    # `feed` frames each payload as `data: <payload>` and nothing else: a read of such
    # frames can go to the client as the upstream sent it (see `relayed`)
    verbatim = True

    def __init__(self, ctx: EncodeContext, chunk_object: str = "chat.completion.chunk") -> None:
        self._ctx = ctx
        self._object = chunk_object
        # the last chunk sent, whose `model` a usage chunk the gateway writes repeats
        self._last = b""
        # or the last frames relayed as they came, when they came after it
        self._last_frames = b""

    def feed(self, payloads: list[bytes]) -> bytes:
        if payloads:
            self._last = payloads[-1]
            self._last_frames = b""
        return b"".join([b"data: " + p + b"\n\n" for p in payloads])

    def relayed(self, frames: bytes) -> None:
        """`frames` (whole `data: ` events, what `feed` would have written for their
        payloads) went to the client as they came; the last one's payload is taken from
        them only if the usage chunk must be written."""
        self._last_frames = frames

    def _last_payload(self) -> bytes:
        frames = self._last_frames
        if not frames:
            return self._last
        events = frames[:-2]
        at = events.rfind(b"\n\ndata: ")
        return events[at + 8 :] if at >= 0 else events[6:]

    def finish(self, held: list[bytes], usage: Usage | None, cost: Decimal | None) -> list[bytes]:
        if not self._ctx.wants_usage:
            return [DONE]
        frames = [frame(p) for p in held[:-1]]
        if held:
            chunk = msgspec.json.decode(held[-1])
        else:
            # the upstream sent no usage: report the gateway's own count, marked estimated
            chunk = {
                "id": "chatcmpl-" + self._ctx.request_id,
                "object": self._object,
                "created": self._ctx.created,
                "model": served_model(_model_of(self._last_payload()), self._ctx.model),
                "choices": [],
            }
        if usage is not None:
            chunk["usage"] = usage.to_openai()
        chunk["x_gateway"] = {
            "cost_usd": str(cost) if cost is not None else None,
            "estimated": bool(usage and usage.estimated),
        }
        frames.append(frame(msgspec.json.encode(chunk)))
        frames.append(DONE)
        return frames

    def error(self, error: GatewayError) -> list[bytes]:
        return [frame(error.to_json()), DONE]


def _model_of(chunk: bytes) -> object:
    """The `model` a chunk names (None for none, or for what is not a JSON object)."""
    try:
        decoded = msgspec.json.decode(chunk) if chunk else None
    except msgspec.DecodeError:
        return None
    return decoded.get("model") if isinstance(decoded, dict) else None


class OpenAIChatCodec:
    api = OPENAI_CHAT

    def __init__(self, max_depth: int = DEFAULT_MAX_DEPTH) -> None:
        self.max_depth = max_depth

    def api_key(self, headers: Mapping[str, str]) -> str | None:
        return openai_api_key(headers)

    def decode(self, body: bytes, headers: Mapping[str, str]) -> Decoded:
        raw = decode_json_object(body, max_depth=self.max_depth)
        request: ChatRequest = convert(raw, ChatRequest)
        return Decoded(request, raw, raw)

    def encode_response(self, completion: bytes, native: bool, ctx: EncodeContext) -> bytes:
        return completion

    def stream_encoder(self, native: bool, ctx: EncodeContext) -> ChatStreamEncoder:
        return ChatStreamEncoder(ctx)

    def error_body(self, error: GatewayError) -> bytes:
        return error.to_json()
