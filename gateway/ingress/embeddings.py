"""`POST /v1/embeddings` as an ingress codec: pure functions.

Decode checks the input (a string, strings, token ids, or token-id lists; never empty)
and says where it is wrong. The internal request that routing and limits read is a chat
request of one user message holding the input text (so the prompt estimate is the
input's tokens) and one output token; `input` is marked untranslatable, so only an
embeddings translation (OpenAI-compatible, Gemini) serves it and any other upstream
refuses it naming the field. Those translations answer in OpenAI's embeddings shape, in
the client's `encoding_format`, so encoding only passes the body on.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from gateway.errors import GatewayError, InvalidRequest
from gateway.ingress.base import Decoded, EncodeContext
from gateway.ingress.openai_chat import ChatStreamEncoder, convert, openai_api_key
from gateway.ingress.openai_responses import json_object
from gateway.wire.apis import OPENAI_EMBEDDINGS
from gateway.wire.embeddings import (
    EmbeddingsBody,
    EmbeddingsRequest,
    InvalidInput,
    normalise_inputs,
)
from gateway.wire.openai import ChatRequest, Message


def decode(body: bytes) -> EmbeddingsBody:
    native = json_object(body)
    request: EmbeddingsRequest = convert(native, EmbeddingsRequest)
    try:
        inputs = normalise_inputs(request.input)
    except InvalidInput as bad:
        raise InvalidRequest(str(bad), param=bad.param) from None
    return EmbeddingsBody(native, request, inputs)


def input_tokens(call: EmbeddingsBody, count_text: Callable[[str], int]) -> int:
    """The input's tokens, as limits and prices count them: token ids as sent, text by
    the gateway's tokenizer."""
    return sum(count_text(item) if isinstance(item, str) else len(item) for item in call.inputs)


class EmbeddingsCodec:
    api = OPENAI_EMBEDDINGS

    def api_key(self, headers: Mapping[str, str]) -> str | None:
        return openai_api_key(headers)

    def decode(self, body: bytes, headers: Mapping[str, str]) -> Decoded:
        call = decode(body)
        text = "\n".join(item for item in call.inputs if isinstance(item, str))
        chat: dict[str, Any] = {
            "model": call.request.model,
            "messages": [{"role": "user", "content": text}],
            "max_tokens": 1,
        }
        if call.request.user is not None:
            chat["user"] = call.request.user
        # built as `chat` says, not converted from it: every value is one decode checked
        request = ChatRequest(
            model=call.request.model,
            messages=[Message(role="user", content=text)],
            max_tokens=1,
            user=call.request.user,
        )
        return Decoded(request, chat, call, untranslatable="input")

    def encode_response(self, completion: bytes, native: bool, ctx: EncodeContext) -> bytes:
        # only embeddings translations serve this API (`input` is untranslatable)
        return completion

    def stream_encoder(self, native: bool, ctx: EncodeContext) -> ChatStreamEncoder:
        # embeddings never stream (the internal request's `stream` is always false)
        return ChatStreamEncoder(ctx)

    def error_body(self, error: GatewayError) -> bytes:
        body: bytes = error.to_json()
        return body
