"""One rule for `model` in every answer the codecs write (gateway.wire.served_model): the
model the upstream's answer names, else the served deployment's id; never the name the
client asked for."""

from __future__ import annotations

import json
from typing import Any

from anthropic.types import Message
from openai.types import Completion
from openai.types.chat import ChatCompletionChunk

from gateway.ingress import anthropic_messages
from gateway.ingress.base import EncodeContext
from gateway.ingress.openai_chat import ChatStreamEncoder
from gateway.ingress.openai_completions import OpenAICompletionsCodec
from gateway.usage import Usage
from tests.ingress.anthropic_frames import chunk, completion

DEPLOYMENT = "deployment-model-id"
USAGE = Usage(input_tokens=5, output_tokens=2)


def ctx(wants_usage: bool = True) -> EncodeContext:
    return EncodeContext(request_id="r1", created=1, model=DEPLOYMENT, wants_usage=wants_usage)


def frames(raw: list[bytes]) -> list[dict[str, Any]]:
    out = []
    for frame in b"".join(raw).split(b"\n\n"):
        data = frame.partition(b"data: ")[2]
        if data and data != b"[DONE]":
            out.append(json.loads(data))
    return out


def named(body: bytes, model: str | None) -> bytes:
    decoded = json.loads(body)
    if model is None:
        decoded.pop("model")
    else:
        decoded["model"] = model
    return json.dumps(decoded).encode()


def test_the_usage_chunk_the_gateway_writes_names_the_model_the_stream_named() -> None:
    encoder = ChatStreamEncoder(ctx())
    encoder.feed([named(chunk({"content": "hi"}), "served-snapshot")])
    made_up = frames(encoder.finish([], USAGE, None))
    assert [c["model"] for c in made_up] == ["served-snapshot"]
    ChatCompletionChunk.model_validate(made_up[0])


def test_with_no_name_in_the_stream_the_usage_chunk_names_the_deployment() -> None:
    encoder = ChatStreamEncoder(ctx())
    assert frames(encoder.finish([], USAGE, None))[0]["model"] == DEPLOYMENT


def test_completions_from_chat_name_the_served_model_whole_and_streamed() -> None:
    codec = OpenAICompletionsCodec()
    body = codec.encode_response(named(completion(), "served-snapshot"), False, ctx())
    assert Completion.model_validate_json(body).model == "served-snapshot"
    nameless = codec.encode_response(named(completion(), None), False, ctx())
    assert json.loads(nameless)["model"] == DEPLOYMENT
    encoder = codec.stream_encoder(False, ctx())
    sent = [encoder.feed([named(chunk({"content": "hi"}), "served-snapshot")])]
    sent += encoder.finish([], USAGE, None)
    assert {c["model"] for c in frames(sent)} == {"served-snapshot"}


def test_anthropic_answers_from_chat_name_the_served_model_whole_and_streamed() -> None:
    body = anthropic_messages.encode_message(named(completion(), "served-snapshot"), "r1", "x")
    assert Message.model_validate_json(body).model == "served-snapshot"
    encoder = anthropic_messages.StreamEncoder("r1", DEPLOYMENT)
    sent = encoder.feed([named(chunk({"content": "hi"}), "served-snapshot")])
    start = json.loads(sent.split(b"\n\n")[0].partition(b"data: ")[2])
    assert start["type"] == "message_start" and start["message"]["model"] == "served-snapshot"
