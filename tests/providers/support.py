"""Shared helpers for the provider translation tests: building calls and targets,
validating our upstream bodies against the official SDKs' request types, and running
a stream translation over raw SSE bytes split at arbitrary points."""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterable, Sequence
from functools import lru_cache
from typing import Any

import msgspec
import pydantic
from anthropic.types import (
    DocumentBlockParam,
    ImageBlockParam,
    TextBlockParam,
    ToolParam,
    ToolResultBlockParam,
    ToolUseBlockParam,
    message_create_params,
)
from google.genai import types as gtypes
from openai.types.chat import ChatCompletion, ChatCompletionChunk
from pydantic import SecretStr

from gateway.providers.base import Call, StreamTranslation, Target
from gateway.providers.sse import SSEParser
from gateway.settings.server import ProviderSettings
from gateway.wire.openai import request_decoder

ANTHROPIC_KEY = "sk-ant-test-key-0123456789"
GEMINI_KEY = "AIza-test-key-0123456789"


def make_call(
    raw: dict[str, Any], *, request_id: str = "req1", created: int = 1_700_000_000
) -> Call:
    body = {"model": "client-model", **raw}
    request = request_decoder.decode(msgspec.json.encode(body))
    return Call(
        request=request,
        raw=body,
        client_model=body["model"],
        request_id=request_id,
        created=created,
    )


def anthropic_target(base_url: str = "https://api.anthropic.test", **settings: Any) -> Target:
    provider = ProviderSettings(kind="anthropic", api_key=SecretStr(ANTHROPIC_KEY), **settings)
    return Target("claude-prod", provider, "claude-sonnet-4-5", base_url, default_max_tokens=1024)


def gemini_target(base_url: str = "https://generativelanguage.test", **settings: Any) -> Target:
    provider = ProviderSettings(kind="gemini", api_key=SecretStr(GEMINI_KEY), **settings)
    return Target("gemini-prod", provider, "gemini-2.5-flash", base_url)


# -- SDK request validation ---------------------------------------------------------

_ANTHROPIC_BLOCKS: dict[str, Any] = {
    "text": TextBlockParam,
    "image": ImageBlockParam,
    "document": DocumentBlockParam,
    "tool_use": ToolUseBlockParam,
    "tool_result": ToolResultBlockParam,
}


@lru_cache(maxsize=4)
def _adapter(params_type: Any) -> pydantic.TypeAdapter[Any]:
    return pydantic.TypeAdapter(params_type)


def _typed_dict_keys(cls: Any) -> set[str]:
    return set(cls.__required_keys__) | set(cls.__optional_keys__)


def _materialize(value: Any) -> Any:
    """Pydantic validates `Iterable[...]` fields lazily: walking them validates them."""
    if isinstance(value, dict):
        return {k: _materialize(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)) or type(value).__name__ == "ValidatorIterator":
        return [_materialize(v) for v in value]
    return value


def validate_anthropic_request(body: bytes) -> dict[str, Any]:
    """Fail unless `body` is a valid `MessageCreateParams` with no unknown keys."""
    data: dict[str, Any] = json.loads(body)
    params_type = (
        message_create_params.MessageCreateParamsStreaming
        if data.get("stream")
        else message_create_params.MessageCreateParamsNonStreaming
    )
    # the adapter must outlive the walk: lazy iterators refer to its definitions
    adapter = _adapter(params_type)
    _materialize(adapter.validate_python(data))
    # The pinned SDK (anthropic 2.10) no longer types the sampling fields; the issue asks
    # for them (Claude Sonnet 4.5 takes them), so they are the only keys allowed beyond it.
    unknown = set(data) - _typed_dict_keys(params_type) - {"temperature", "top_p"}
    assert not unknown, f"keys MessageCreateParams does not know: {unknown}"
    for message in data["messages"]:
        assert set(message) == {"role", "content"}
        assert message["role"] in ("user", "assistant")
        blocks = message["content"] if isinstance(message["content"], list) else []
        for block in blocks:
            extra = set(block) - _typed_dict_keys(_ANTHROPIC_BLOCKS[block["type"]])
            assert not extra, f"{block['type']} block has unknown keys {extra}"
    for tool in data.get("tools", []):
        assert not set(tool) - _typed_dict_keys(ToolParam)
    return data


_GEMINI_TOP_LEVEL = {"contents", "systemInstruction", "tools", "toolConfig", "generationConfig"}


def validate_gemini_request(body: bytes) -> dict[str, Any]:
    """Fail unless each part of `body` validates against the google-genai models (which
    forbid unknown fields)."""
    data: dict[str, Any] = json.loads(body)
    assert set(data) <= _GEMINI_TOP_LEVEL, set(data) - _GEMINI_TOP_LEVEL
    for content in data["contents"]:
        assert content["role"] in ("user", "model")
        gtypes.Content.model_validate_json(json.dumps(content))
    if "systemInstruction" in data:
        gtypes.Content.model_validate_json(json.dumps(data["systemInstruction"]))
    for tool in data.get("tools", []):
        gtypes.Tool.model_validate_json(json.dumps(tool))
    if "toolConfig" in data:
        gtypes.ToolConfig.model_validate_json(json.dumps(data["toolConfig"]))
    if "generationConfig" in data:
        gtypes.GenerationConfig.model_validate_json(json.dumps(data["generationConfig"]))
    return data


# -- streams ------------------------------------------------------------------------


def split_bytes(data: bytes, cuts: Iterable[int]) -> list[bytes]:
    """`data` cut at the given offsets (taken modulo its length, sorted, deduplicated)."""
    points = sorted({c % (len(data) + 1) for c in cuts} | {0, len(data)})
    return [data[a:b] for a, b in itertools.pairwise(points)]


def run_stream(stream: StreamTranslation, reads: Sequence[bytes]) -> list[dict[str, Any]]:
    """Feed network reads through the SSE parser and the translation; every payload must
    parse as the openai SDK's ChatCompletionChunk."""
    parser = SSEParser()
    payloads: list[bytes] = []
    for read in reads:
        for event in parser.feed(read):
            payloads.extend(stream.feed(event))
    for event in parser.flush():
        payloads.extend(stream.feed(event))
    payloads.extend(stream.finish())
    chunks = [json.loads(p) for p in payloads]
    for chunk in chunks:
        ChatCompletionChunk.model_validate(chunk)
    return chunks


def assemble(chunks: list[dict[str, Any]]) -> dict[int, dict[str, Any]]:
    """What a client accumulates from a chunk stream, per choice index, as a message
    dict shaped like a non-streaming choice."""
    choices: dict[int, dict[str, Any]] = {}
    for chunk in chunks:
        for choice in chunk["choices"]:
            state = choices.setdefault(
                choice["index"],
                {"content": None, "reasoning": None, "tool_calls": {}, "finish_reason": None},
            )
            delta = choice["delta"]
            if delta.get("content") is not None:
                state["content"] = (state["content"] or "") + delta["content"]
            if delta.get("reasoning_content"):
                state["reasoning"] = (state["reasoning"] or "") + delta["reasoning_content"]
            for call in delta.get("tool_calls", []):
                slot = state["tool_calls"].setdefault(call["index"], {"arguments": ""})
                if "id" in call:
                    assert "id" not in slot, "a tool call id was sent twice"
                    slot["id"] = call["id"]
                    slot["name"] = call["function"]["name"]
                slot["arguments"] += call.get("function", {}).get("arguments", "")
            if choice.get("finish_reason"):
                assert state["finish_reason"] is None, "finish_reason sent twice"
                state["finish_reason"] = choice["finish_reason"]
    return choices


def completion_choices(body: bytes) -> dict[int, dict[str, Any]]:
    """The same shape as `assemble`, from a non-streaming completion body (validated
    against the openai SDK's ChatCompletion)."""
    completion = json.loads(body)
    ChatCompletion.model_validate(completion)
    out: dict[int, dict[str, Any]] = {}
    for choice in completion["choices"]:
        message = choice["message"]
        out[choice["index"]] = {
            "content": message.get("content"),
            "reasoning": message.get("reasoning_content"),
            "tool_calls": {
                k: {
                    "id": call["id"],
                    "name": call["function"]["name"],
                    "arguments": call["function"]["arguments"],
                }
                for k, call in enumerate(message.get("tool_calls") or [])
            },
            "finish_reason": choice["finish_reason"],
        }
    return out


def usage_chunk(chunks: list[dict[str, Any]]) -> dict[str, Any]:
    last = chunks[-1]
    assert last["choices"] == [] and last["usage"] is not None
    return dict(last["usage"])


def encode_sse(payloads: Sequence[tuple[str | None, Any]]) -> bytes:
    """SSE bytes for (event name, JSON-able payload) pairs."""
    out = bytearray()
    for name, payload in payloads:
        if name is not None:
            out += f"event: {name}\n".encode()
        out += b"data: " + json.dumps(payload, separators=(",", ":")).encode() + b"\n\n"
    return bytes(out)
