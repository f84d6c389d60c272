"""OpenAI legacy text completions (`POST /v1/completions`), which SGLang, vLLM and most
evaluation harnesses call.

To an upstream that serves the completions API itself the client's body goes as it came
(prompt arrays, token ids, `echo`, `logprobs` and all). To one that speaks only chat, the
prompt becomes one user message and the chat answer becomes a `text_completion`; what
has no chat equivalent is refused naming the field, never dropped.
"""

from __future__ import annotations

from collections.abc import Mapping
from decimal import Decimal
from typing import Any

import msgspec

from gateway.errors import GatewayError, InvalidRequest
from gateway.ingress.base import OPENAI_COMPLETIONS, Decoded, EncodeContext
from gateway.ingress.openai_chat import (
    ChatStreamEncoder,
    convert,
    frame,
    openai_api_key,
)
from gateway.json_body import DEFAULT_MAX_DEPTH, decode_json_object
from gateway.usage import Usage
from gateway.wire.openai import ChatRequest
from gateway.wire.served_model import served_model

# OpenAI's default when a completions request names no max_tokens
DEFAULT_MAX_TOKENS = 16
# fields a chat upstream has no equivalent for, and the value that means "not used"
_CHAT_HAS_NO = {"suffix": None, "echo": False, "best_of": 1, "logprobs": None}
# chat finish reasons a text_completion can carry
_FINISH = {"stop": "stop", "length": "length", "content_filter": "content_filter"}


class CompletionsRequest(msgspec.Struct):
    """What the gateway reads of a completions request; the rest passes through."""

    model: str
    # a string, strings, token ids or lists of token ids (checked in _prompt_text)
    prompt: str | list[Any]
    stream: bool | None = False
    max_tokens: int | None = None


def _prompt_text(prompt: str | list[Any]) -> tuple[str, bool]:
    """The prompt as one text (for routing and a chat upstream), and whether a chat
    upstream can be given it as one user message."""
    if isinstance(prompt, str):
        return prompt, True
    if prompt and all(isinstance(p, str) for p in prompt):
        return "\n".join(prompt), len(prompt) == 1
    if (prompt and all(_is_token_ids(p) for p in prompt)) or _is_token_ids(prompt):
        # token ids: nothing to read; a chat upstream cannot take them
        return "", False
    raise InvalidRequest(
        "prompt must be a string, a list of strings, a list of token ids, or a list of "
        "lists of token ids.",
        param="prompt",
    )


def _is_token_ids(value: Any) -> bool:
    return isinstance(value, list) and bool(value) and all(type(t) is int for t in value)


class OpenAICompletionsCodec:
    api = OPENAI_COMPLETIONS

    def __init__(self, max_depth: int = DEFAULT_MAX_DEPTH) -> None:
        self.max_depth = max_depth

    def api_key(self, headers: Mapping[str, str]) -> str | None:
        return openai_api_key(headers)

    def decode(self, body: bytes, headers: Mapping[str, str]) -> Decoded:
        raw = decode_json_object(body, max_depth=self.max_depth)
        typed: CompletionsRequest = convert(raw, CompletionsRequest)
        text, one_message = _prompt_text(typed.prompt)
        chat: dict[str, Any] = {
            key: raw[key]
            for key in (
                "model",
                "stream",
                "stream_options",
                "temperature",
                "top_p",
                "n",
                "stop",
                "presence_penalty",
                "frequency_penalty",
                "seed",
                "user",
                "logit_bias",
            )
            if key in raw
        }
        chat["messages"] = [{"role": "user", "content": text}]
        chat["max_tokens"] = typed.max_tokens or DEFAULT_MAX_TOKENS
        request: ChatRequest = convert(chat, ChatRequest)
        untranslatable = None if one_message else "prompt"
        for field, unused in _CHAT_HAS_NO.items():
            if raw.get(field, unused) != unused:
                untranslatable = untranslatable or field
        return Decoded(request, chat, raw, untranslatable=untranslatable)

    def encode_response(self, completion: bytes, native: bool, ctx: EncodeContext) -> bytes:
        if native:
            return completion
        chat = msgspec.json.decode(completion)
        choices = [
            {
                "text": (choice.get("message") or {}).get("content") or "",
                "index": choice.get("index", i),
                "logprobs": None,
                "finish_reason": _FINISH.get(choice.get("finish_reason") or "stop", "stop"),
            }
            for i, choice in enumerate(chat.get("choices") or [])
        ]
        body = {
            "id": "cmpl-" + ctx.request_id,
            "object": "text_completion",
            "created": ctx.created,
            "model": served_model(chat.get("model"), ctx.model),
            "choices": choices,
        }
        if "usage" in chat:
            body["usage"] = chat["usage"]
        return msgspec.json.encode(body)

    def stream_encoder(self, native: bool, ctx: EncodeContext) -> ChatStreamEncoder:
        if native:
            return ChatStreamEncoder(ctx, chunk_object="text_completion")
        return _FromChatChunks(ctx)

    def error_body(self, error: GatewayError) -> bytes:
        return error.to_json()


class _ChatTextDelta(msgspec.Struct):
    content: str | None = None


class _ChatTextChoice(msgspec.Struct):
    index: int | msgspec.UnsetType = msgspec.UNSET
    delta: _ChatTextDelta | None = None
    finish_reason: str | None = None


class _ChatTextChunk(msgspec.Struct):
    """What of a chat chunk `_FromChatChunks`' fast path reads (the rest skipped)."""

    choices: list[_ChatTextChoice] | None = None
    model: Any = None


_chat_text_decoder = msgspec.json.Decoder(_ChatTextChunk)
_json_encode = msgspec.json.encode
# `_convert`'s frame of one choice's text: id, created, model, text (JSON), index
_TEXT_FRAME = (
    b'data: {"id":%b,"object":"text_completion","created":%d,"model":%b,'
    b'"choices":[{"text":%b,"index":%d,"logprobs":null,"finish_reason":null}]}\n\n'
)


class _FromChatChunks(ChatStreamEncoder):
    """Chat chunks from a chat-only upstream, re-written as text_completion chunks."""

    __slots__ = ()

    verbatim = False

    def __init__(self, ctx: EncodeContext) -> None:
        super().__init__(ctx, chunk_object="text_completion")

    def feed(self, payloads: list[bytes]) -> bytes:
        return b"".join(self._convert(p) for p in payloads)

    def _convert(self, payload: bytes) -> bytes:
        converted = self._text_only(payload)
        if converted is not None:
            return converted
        chunk = msgspec.json.decode(payload)
        self._last = payload
        choices = []
        for i, choice in enumerate(chunk.get("choices") or []):
            text = (choice.get("delta") or {}).get("content") or ""
            finish = choice.get("finish_reason")
            if not text and finish is None:
                continue  # the role chunk: a text completion has no roles
            choices.append(
                {
                    "text": text,
                    "index": choice.get("index", i),
                    "logprobs": None,
                    "finish_reason": _FINISH.get(finish, "stop") if finish else None,
                }
            )
        if not choices:
            return b""
        return frame(msgspec.json.encode(self._completion_chunk(choices, chunk.get("model"))))

    def _text_only(self, payload: bytes) -> bytes | None:
        """`_convert` of a chunk that is one choice's text and nothing else (most of a
        stream), written from a template without the chunk's dict or the answer's; None
        for anything else, which `_convert` reads whole."""
        try:
            chunk = _chat_text_decoder.decode(payload)
        except msgspec.ValidationError:
            return None  # a shape `_convert` reads (or refuses) as it does
        choices = chunk.choices
        if choices is None or len(choices) != 1:
            return None
        choice = choices[0]
        delta = choice.delta
        if delta is None or not delta.content or choice.finish_reason is not None:
            return None
        self._last = payload
        ctx = self._ctx
        return _TEXT_FRAME % (
            _json_encode("cmpl-" + ctx.request_id),
            ctx.created,
            _json_encode(served_model(chunk.model, ctx.model)),
            _json_encode(delta.content),
            0 if choice.index is msgspec.UNSET else choice.index,
        )

    def finish(self, held: list[bytes], usage: Usage | None, cost: Decimal | None) -> list[bytes]:
        converted = []
        for payload in held:
            chunk = msgspec.json.decode(payload)
            completion = self._completion_chunk([], chunk.get("model"))
            if "usage" in chunk:
                completion["usage"] = chunk["usage"]
            converted.append(msgspec.json.encode(completion))
        return super().finish(converted, usage, cost)

    def _completion_chunk(
        self, choices: list[dict[str, Any]], model: object = None
    ) -> dict[str, Any]:
        return {
            "id": "cmpl-" + self._ctx.request_id,
            "object": "text_completion",
            "created": self._ctx.created,
            "model": served_model(model, self._ctx.model),
            "choices": choices,
        }
