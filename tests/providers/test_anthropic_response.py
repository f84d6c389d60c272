"""Anthropic answers -> OpenAI: messages built with the official SDK types, dumped to
JSON as the API sends them, must become completions the openai SDK parses, with the
right finish reason, tool calls and normalized usage."""

from __future__ import annotations

import json
from typing import Any

import pytest
from anthropic import types as at

from gateway.errors import UpstreamUnavailable
from gateway.providers.anthropic import AnthropicTranslation
from gateway.usage import Usage
from tests.fakes.anthropic_server import make_message, text_message, tool_message
from tests.providers.support import anthropic_target, completion_choices, make_call

translation = AnthropicTranslation()
CALL = make_call({"messages": [{"role": "user", "content": "hi"}]}, request_id="abc")


def parse(message: at.Message, call: Any = CALL) -> tuple[dict[str, Any], Usage]:
    body = message.model_dump_json().encode()
    translated = translation.parse_response(body, call, anthropic_target())
    return json.loads(translated.body), translated.usage


def test_a_text_answer_becomes_a_chat_completion_named_by_the_served_model() -> None:
    completion, _ = parse(text_message("Hello!", model="claude-sonnet-4-5-20250929"))
    choices = completion_choices(json.dumps(completion).encode())
    # as Anthropic named it, not the client's name (which x-gateway-route carries)
    assert completion["model"] == "claude-sonnet-4-5-20250929"
    assert completion["id"] == "chatcmpl-abc"
    assert completion["created"] == CALL.created
    assert completion["object"] == "chat.completion"
    assert choices[0]["content"] == "Hello!"
    assert choices[0]["finish_reason"] == "stop"


@pytest.mark.parametrize(
    ("stop_reason", "finish"),
    [
        ("end_turn", "stop"),
        ("stop_sequence", "stop"),
        ("max_tokens", "length"),
        ("model_context_window_exceeded", "length"),
        ("refusal", "content_filter"),
        ("pause_turn", "stop"),
    ],
)
def test_stop_reasons_map_to_finish_reasons(stop_reason: str, finish: str) -> None:
    completion, _ = parse(text_message("x", stop_reason=stop_reason))
    assert completion["choices"][0]["finish_reason"] == finish


def test_usage_counts_cache_reads_and_writes_as_input() -> None:
    completion, usage = parse(
        text_message("x", input_tokens=100, output_tokens=20, cache_read=1000, cache_write=50)
    )
    assert usage == Usage(
        input_tokens=1150, cached_input_tokens=1000, cache_write_tokens=50, output_tokens=20
    )
    assert completion["usage"] == {
        "prompt_tokens": 1150,
        "completion_tokens": 20,
        "total_tokens": 1170,
        "prompt_tokens_details": {"cached_tokens": 1000, "cache_write_tokens": 50},
    }


def test_tool_use_blocks_become_tool_calls() -> None:
    message = tool_message(
        [("toolu_1", "get_weather", {"city": "Paris"}), ("toolu_2", "get_time", {})],
        text="Let me check.",
    )
    completion, _ = parse(message)
    choice = completion_choices(json.dumps(completion).encode())[0]
    assert choice["finish_reason"] == "tool_calls"
    assert choice["content"] == "Let me check."
    assert [
        (c["id"], c["name"], json.loads(c["arguments"])) for c in choice["tool_calls"].values()
    ] == [
        ("toolu_1", "get_weather", {"city": "Paris"}),
        ("toolu_2", "get_time", {}),
    ]


def test_tool_calls_without_text_have_null_content() -> None:
    completion, _ = parse(tool_message([("toolu_1", "f", {"a": 1})]))
    assert completion["choices"][0]["message"]["content"] is None


def test_thinking_becomes_reasoning_content_and_reasoning_tokens() -> None:
    usage = at.Usage.model_validate(
        {"input_tokens": 5, "output_tokens": 30, "output_tokens_details": {"thinking_tokens": 12}}
    )
    message = make_message(
        [
            at.ThinkingBlock(type="thinking", thinking="step by step", signature="sig"),
            at.TextBlock(type="text", text="42"),
        ],
        stop_reason="end_turn",
        usage=usage,
    )
    completion, normalized = parse(message)
    assert completion["choices"][0]["message"]["reasoning_content"] == "step by step"
    assert completion["choices"][0]["message"]["content"] == "42"
    assert normalized.reasoning_tokens == 12
    assert completion["usage"]["completion_tokens_details"] == {"reasoning_tokens": 12}


def json_call(schema: dict[str, Any]) -> Any:
    return make_call(
        {
            "messages": [{"role": "user", "content": "json please"}],
            "response_format": {
                "type": "json_schema",
                "json_schema": {"name": "out", "schema": schema},
            },
        }
    )


def test_the_forced_json_tool_answer_becomes_message_content() -> None:
    message = tool_message([("toolu_9", "out", {"answer": 4})])
    completion, _ = parse(message, json_call({"type": "object", "properties": {}}))
    choice = completion["choices"][0]
    assert json.loads(choice["message"]["content"]) == {"answer": 4}
    assert "tool_calls" not in choice["message"]
    assert choice["finish_reason"] == "stop"


def test_a_wrapped_json_answer_is_unwrapped() -> None:
    message = tool_message([("toolu_9", "out", {"value": ["a", "b"]})])
    completion, _ = parse(message, json_call({"type": "array", "items": {"type": "string"}}))
    assert json.loads(completion["choices"][0]["message"]["content"]) == ["a", "b"]


def test_a_body_that_is_not_a_message_is_an_upstream_failure() -> None:
    with pytest.raises(UpstreamUnavailable) as caught:
        translation.parse_response(b"<html>oops</html>", CALL, anthropic_target())
    assert "claude-prod" in caught.value.message
