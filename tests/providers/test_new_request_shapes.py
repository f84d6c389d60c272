"""The request shapes the permissive schema now accepts (issue 15, item 6), through the
Anthropic and Gemini translations: translated where the API can say the same thing
(`allowed_tools`), refused with a 400 naming the field where it cannot (`custom` tools,
a token cap of 0). And the upstream usage checks: a malformed usage is a 502 naming the
provider."""

from __future__ import annotations

import json
from typing import Any

import pytest

from gateway.errors import InvalidRequest, UpstreamError
from gateway.ingress.openai_chat import OpenAIChatCodec
from gateway.providers.anthropic import AnthropicTranslation
from gateway.providers.base import Call
from gateway.providers.gemini import GeminiTranslation
from gateway.providers.openai_compatible import usage_from_openai
from tests.providers.support import (
    anthropic_target,
    gemini_target,
    validate_anthropic_request,
    validate_gemini_request,
)

USER = [{"role": "user", "content": "hi"}]
CUSTOM = {"type": "custom", "custom": {"name": "sql"}}


def function(name: str) -> dict[str, Any]:
    return {
        "type": "function",
        "function": {
            "name": name,
            "parameters": {"type": "object", "properties": {"q": {"type": "string"}}},
        },
    }


def call(body: dict[str, Any]) -> Call:
    raw = {"model": "client-model", "messages": USER, **body}
    decoded = OpenAIChatCodec().decode(json.dumps(raw).encode(), {})
    return Call(decoded.request, decoded.chat_body, "client-model", "req1", 1_700_000_000)


def anthropic(body: dict[str, Any]) -> dict[str, Any]:
    upstream = AnthropicTranslation().build_request(call(body), anthropic_target())
    return validate_anthropic_request(upstream.body)


def gemini(body: dict[str, Any]) -> dict[str, Any]:
    upstream = GeminiTranslation().build_request(call(body), gemini_target())
    return validate_gemini_request(upstream.body)


BUILDERS = {"anthropic": anthropic, "gemini": gemini}


@pytest.mark.parametrize("build", BUILDERS.values(), ids=BUILDERS.keys())
@pytest.mark.parametrize(
    "body,param",
    [
        ({"tools": [function("f"), CUSTOM]}, "tools[1].type"),
        (
            {"tools": [function("f")], "tool_choice": {"type": "custom", "custom": {"name": "s"}}},
            "tool_choice.type",
        ),
        (
            {
                "messages": [
                    *USER,
                    {
                        "role": "assistant",
                        "tool_calls": [
                            {"id": "c1", "type": "custom", "custom": {"name": "sql", "input": "1"}}
                        ],
                    },
                ]
            },
            "messages[1].tool_calls[0].type",
        ),
        ({"max_tokens": 0}, "max_tokens"),
        ({"max_completion_tokens": 0}, "max_completion_tokens"),
    ],
    ids=["custom-tool", "custom-choice", "custom-call", "max-tokens-0", "max-completion-0"],
)
def test_what_the_api_cannot_express_is_a_400_naming_the_field(
    build: Any, body: dict[str, Any], param: str
) -> None:
    with pytest.raises(InvalidRequest) as caught:
        build(body)
    assert caught.value.param == param


def allowed(mode: str, *names: str) -> dict[str, Any]:
    tools = [{"type": "function", "function": {"name": n}} for n in names]
    return {"type": "allowed_tools", "allowed_tools": {"mode": mode, "tools": tools}}


def test_allowed_tools_become_the_allowed_subset_for_anthropic() -> None:
    tools = [function("a"), function("b"), function("c")]
    body = anthropic({"tools": tools, "tool_choice": allowed("required", "a", "c")})
    assert [tool["name"] for tool in body["tools"]] == ["a", "c"]
    assert body["tool_choice"]["type"] == "any"


def test_allowed_tools_become_the_allowed_subset_for_gemini() -> None:
    body = gemini({"tools": [function("a"), function("b")], "tool_choice": allowed("auto", "b")})
    declarations = body["tools"][0]["functionDeclarations"]
    assert [d["name"] for d in declarations] == ["b"]
    assert body["toolConfig"]["functionCallingConfig"]["mode"] == "AUTO"


def test_allowed_tools_that_name_no_function_tool_is_a_400() -> None:
    with pytest.raises(InvalidRequest) as caught:
        anthropic({"tools": [function("a")], "tool_choice": allowed("auto", "zzz")})
    assert caught.value.param == "tool_choice.allowed_tools.tools"


def test_stream_null_and_whole_floats_translate_like_their_plain_values() -> None:
    body = gemini({"stream": None, "n": 3.0, "seed": 7.0})
    assert body["generationConfig"]["candidateCount"] == 3
    assert body["generationConfig"]["seed"] == 7
    assert (
        not AnthropicTranslation().build_request(call({"stream": None}), anthropic_target()).stream
    )


@pytest.mark.parametrize(
    "usage,detail",
    [
        ({"prompt_tokens": "many"}, "prompt_tokens"),
        ({"prompt_tokens": 3, "completion_tokens": -1}, "completion_tokens"),
        ({"prompt_tokens": True}, "prompt_tokens"),
        ({"prompt_tokens_details": {"cached_tokens": [1]}}, "cached_tokens"),
        ({"completion_tokens_details": "x"}, "completion_tokens_details"),
        ([1, 2], "not an object"),
    ],
)
def test_a_malformed_openai_usage_is_a_502_naming_the_provider(usage: Any, detail: str) -> None:
    with pytest.raises(UpstreamError) as caught:
        usage_from_openai(usage, "deepseek")
    assert caught.value.status == 502
    assert "'deepseek'" in caught.value.message and detail in caught.value.message


def test_a_whole_number_float_count_is_taken_as_a_count() -> None:
    usage = usage_from_openai({"prompt_tokens": 12.0, "completion_tokens": 3}, "vllm")
    assert usage is not None and usage.input_tokens == 12
