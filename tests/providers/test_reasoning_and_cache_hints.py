"""OpenAI-format requests to Claude and Gemini: `reasoning_effort` becomes a thinking
budget, and prompt-cache hints (the `cache_control` extension, and the automatic policy
for long system prompts and tool lists) reach Anthropic as cache breakpoints. Bodies
are validated against the official SDKs' request types."""

from __future__ import annotations

from typing import Any

import pytest

from gateway.errors import InvalidRequest
from gateway.providers.anthropic import AUTO_CACHE_CHARS, AnthropicTranslation
from gateway.providers.gemini import GeminiTranslation
from gateway.settings.catalog import Prices
from gateway.usage import Usage
from tests.providers.support import (
    anthropic_target,
    gemini_target,
    make_call,
    validate_anthropic_request,
    validate_gemini_request,
)

LONG = "Follow the house style guide. " * (AUTO_CACHE_CHARS // 20)


def claude(raw: dict[str, Any], **target: Any) -> dict[str, Any]:
    upstream = AnthropicTranslation().build_request(make_call(raw), anthropic_target(**target))
    return validate_anthropic_request(upstream.body)


def gemini(raw: dict[str, Any]) -> dict[str, Any]:
    upstream = GeminiTranslation().build_request(make_call(raw), gemini_target())
    return validate_gemini_request(upstream.body)


def user(text: str, **extra: Any) -> dict[str, Any]:
    return {"role": "user", "content": text, **extra}


@pytest.mark.parametrize(
    ("effort", "max_tokens", "budget"),
    [("low", 8000, 2048), ("medium", 16000, 8192), ("high", 64000, 24576), ("high", 4000, 3999)],
)
def test_reasoning_effort_becomes_a_thinking_budget_under_max_tokens(
    effort: str, max_tokens: int, budget: int
) -> None:
    body = claude(
        {
            "messages": [user("hi")],
            "reasoning_effort": effort,
            "max_tokens": max_tokens,
            "temperature": 0.2,
        }
    )
    assert body["thinking"] == {"type": "enabled", "budget_tokens": budget}
    assert "temperature" not in body  # Anthropic refuses temperature beside thinking


@pytest.mark.parametrize(
    "raw",
    [
        {"reasoning_effort": "none"},
        {"reasoning_effort": "high", "max_tokens": 1000},
        {
            "reasoning_effort": "high",
            "tools": [
                {"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}
            ],
            "tool_choice": "required",
        },
    ],
)
def test_no_thinking_where_anthropic_would_refuse_it(raw: dict[str, Any]) -> None:
    assert "thinking" not in claude({"messages": [user("hi")], **raw})


def test_an_unknown_effort_is_a_400_naming_the_field() -> None:
    with pytest.raises(InvalidRequest) as caught:
        claude({"messages": [user("hi")], "reasoning_effort": "maximum"})
    assert caught.value.param == "reasoning_effort"


@pytest.mark.parametrize(
    ("effort", "config"),
    [
        ("low", {"thinkingBudget": 2048, "includeThoughts": True}),
        ("high", {"thinkingBudget": 24576, "includeThoughts": True}),
        ("none", {"thinkingBudget": 0, "includeThoughts": False}),
    ],
)
def test_reasoning_effort_becomes_gemini_thinking_config(
    effort: str, config: dict[str, Any]
) -> None:
    body = gemini({"messages": [user("hi")], "reasoning_effort": effort, "top_k": 20})
    assert body["generationConfig"]["thinkingConfig"] == config
    assert body["generationConfig"]["topK"] == 20


def test_cache_control_on_messages_parts_and_tools_becomes_anthropic_breakpoints() -> None:
    body = claude(
        {
            "messages": [
                {
                    "role": "system",
                    "content": "You are terse.",
                    "cache_control": {"type": "ephemeral"},
                },
                {
                    "role": "user",
                    "content": [
                        {
                            "type": "text",
                            "text": "Here is a document.",
                            "cache_control": {"type": "ephemeral", "ttl": "1h"},
                        },
                        {"type": "text", "text": "Question?"},
                    ],
                },
                {"role": "assistant", "content": "Answer."},
                user("More?", cache_control={"type": "ephemeral"}),
            ],
            "tools": [
                {
                    "type": "function",
                    "function": {"name": "f", "parameters": {"type": "object"}},
                    "cache_control": {"type": "ephemeral"},
                }
            ],
        }
    )
    assert body["system"] == [
        {"type": "text", "text": "You are terse.", "cache_control": {"type": "ephemeral"}}
    ]
    first, _, last = body["messages"]
    assert first["content"][0]["cache_control"] == {"type": "ephemeral", "ttl": "1h"}
    assert "cache_control" not in first["content"][1]
    assert last["content"][-1]["cache_control"] == {"type": "ephemeral"}
    assert body["tools"][0]["cache_control"] == {"type": "ephemeral"}


def test_a_malformed_cache_control_is_a_400_naming_it() -> None:
    with pytest.raises(InvalidRequest) as caught:
        claude({"messages": [user("hi", cache_control={"type": "forever"})]})
    assert caught.value.param == "messages[0].cache_control"


def test_long_system_prompts_and_tool_lists_are_marked_automatically() -> None:
    tools = [
        {
            "type": "function",
            "function": {
                "name": f"tool_{n}",
                "description": LONG[:600],
                "parameters": {"type": "object"},
            },
        }
        for n in range(8)
    ]
    raw = {"messages": [{"role": "system", "content": LONG}, user("hi")], "tools": tools}
    body = claude(raw)
    assert body["system"][-1]["cache_control"] == {"type": "ephemeral"}
    assert body["tools"][-1]["cache_control"] == {"type": "ephemeral"}
    assert all("cache_control" not in tool for tool in body["tools"][:-1])
    # the provider can turn the policy off, and short prompts are never marked
    assert "cache_control" not in str(claude(raw, prompt_cache="off"))
    assert "cache_control" not in str(
        claude({"messages": [{"role": "system", "content": "hi"}, user("x")]})
    )


def test_explicit_hints_replace_the_automatic_policy() -> None:
    raw = {
        "messages": [
            {"role": "system", "content": LONG},
            user("hi", cache_control={"type": "ephemeral"}),
        ]
    }
    body = claude(raw)
    assert "cache_control" not in body["system"][-1]
    assert body["messages"][0]["content"][-1]["cache_control"] == {"type": "ephemeral"}


def test_one_hour_cache_writes_are_priced_at_their_own_rate() -> None:
    prices = Prices(input=3, output=15, cached_input=0.3, cache_write=3.75, cache_write_1h=6)
    five_minute = Usage(input_tokens=1_000_000, cache_write_tokens=1_000_000)
    one_hour = Usage(
        input_tokens=1_000_000, cache_write_tokens=1_000_000, cache_write_1h_tokens=1_000_000
    )
    assert prices.cost_of(five_minute) == 3.75
    assert prices.cost_of(one_hour) == 6


def test_a_model_that_does_not_reason_gets_no_thinking_settings() -> None:
    from dataclasses import replace

    raw = {"messages": [user("hi")], "reasoning_effort": "high", "max_tokens": 8000}
    claude_target = replace(anthropic_target(), reasoning=False)
    body = AnthropicTranslation().build_request(make_call(raw), claude_target).body
    assert "thinking" not in validate_anthropic_request(body)
    gemini_target_ = replace(gemini_target(), reasoning=False)
    body = GeminiTranslation().build_request(make_call(raw), gemini_target_).body
    assert "thinkingConfig" not in validate_gemini_request(body).get("generationConfig", {})
