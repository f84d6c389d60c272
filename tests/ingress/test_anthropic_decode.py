"""Anthropic Messages request -> the internal (OpenAI chat) request: what every
non-Anthropic upstream receives, checked against the openai SDK's request types."""

from __future__ import annotations

import json
from typing import Any

import pydantic
import pytest
from openai.types.chat import completion_create_params

from gateway.errors import InvalidRequest
from gateway.ingress import anthropic_messages as codec

_chat_params = {
    False: pydantic.TypeAdapter(completion_create_params.CompletionCreateParamsNonStreaming),
    True: pydantic.TypeAdapter(completion_create_params.CompletionCreateParamsStreaming),
}

PNG = "iVBORw0KGgo="


def decode(body: dict[str, Any]) -> dict[str, Any]:
    request, chat_body = codec.to_internal(
        {"model": "claude-sonnet-4-5", "max_tokens": 256, **body}
    )
    # the chat body must be one the openai SDK accepts (extensions aside)
    adapter = _chat_params[bool(chat_body.get("stream"))]
    adapter.validate_python({k: v for k, v in chat_body.items() if k != "top_k"})
    assert request.model == chat_body["model"]
    return chat_body


def test_system_blocks_become_one_system_message_and_cache_markers_stay_behind() -> None:
    body = decode(
        {
            "system": [
                {"type": "text", "text": "You are terse."},
                {
                    "type": "text",
                    "text": "Answer in French.",
                    "cache_control": {"type": "ephemeral"},
                },
            ],
            "messages": [{"role": "user", "content": "hi"}],
        }
    )
    assert body["messages"] == [
        {"role": "system", "content": "You are terse.\n\nAnswer in French."},
        {"role": "user", "content": "hi"},
    ]
    assert "cache_control" not in str(body)


def test_a_tool_round_trip_becomes_tool_calls_then_tool_messages_before_the_user_text() -> None:
    body = decode(
        {
            "tools": [
                {
                    "name": "get_weather",
                    "description": "Weather for a city",
                    "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}},
                }
            ],
            "tool_choice": {"type": "any", "disable_parallel_tool_use": True},
            "messages": [
                {"role": "user", "content": "Weather in Paris?"},
                {
                    "role": "assistant",
                    "content": [
                        {"type": "thinking", "thinking": "I should look", "signature": "sig=="},
                        {"type": "text", "text": "Let me check."},
                        {
                            "type": "tool_use",
                            "id": "toolu_1",
                            "name": "get_weather",
                            "input": {"city": "Paris"},
                        },
                    ],
                },
                {
                    "role": "user",
                    "content": [
                        {"type": "text", "text": "also, thanks"},
                        {
                            "type": "tool_result",
                            "tool_use_id": "toolu_1",
                            "content": [{"type": "text", "text": "18C"}],
                        },
                    ],
                },
            ],
        }
    )
    assert body["messages"][1] == {
        "role": "assistant",
        "content": "Let me check.",
        "tool_calls": [
            {
                "id": "toolu_1",
                "type": "function",
                "function": {"name": "get_weather", "arguments": '{"city":"Paris"}'},
            }
        ],
    }
    assert body["messages"][2:] == [
        {"role": "tool", "tool_call_id": "toolu_1", "content": "18C"},
        {"role": "user", "content": "also, thanks"},
    ]
    assert body["tools"][0]["function"]["parameters"]["properties"] == {"city": {"type": "string"}}
    assert body["tool_choice"] == "required"
    assert body["parallel_tool_calls"] is False


def test_error_results_say_so_and_named_tool_choice_maps_to_a_function() -> None:
    body = decode(
        {
            "tools": [{"name": "f", "input_schema": {"type": "object"}}],
            "tool_choice": {"type": "tool", "name": "f"},
            "messages": [
                {"role": "user", "content": "go"},
                {
                    "role": "assistant",
                    "content": [{"type": "tool_use", "id": "t1", "name": "f", "input": {}}],
                },
                {
                    "role": "user",
                    "content": [
                        {
                            "type": "tool_result",
                            "tool_use_id": "t1",
                            "content": "boom",
                            "is_error": True,
                        }
                    ],
                },
            ],
        }
    )
    assert body["messages"][1]["content"] is None
    assert body["messages"][2] == {"role": "tool", "tool_call_id": "t1", "content": "Error: boom"}
    assert body["tool_choice"] == {"type": "function", "function": {"name": "f"}}


def test_images_and_documents_become_chat_parts() -> None:
    body = decode(
        {
            "messages": [
                {
                    "role": "user",
                    "content": [
                        {
                            "type": "image",
                            "source": {"type": "base64", "media_type": "image/png", "data": PNG},
                        },
                        {"type": "image", "source": {"type": "url", "url": "https://x.test/a.jpg"}},
                        {
                            "type": "document",
                            "title": "spec",
                            "source": {
                                "type": "base64",
                                "media_type": "application/pdf",
                                "data": "JVBERi0=",
                            },
                        },
                        {
                            "type": "document",
                            "source": {"type": "text", "media_type": "text/plain", "data": "notes"},
                        },
                        {"type": "text", "text": "Describe."},
                    ],
                }
            ]
        }
    )
    parts = body["messages"][0]["content"]
    assert parts[0] == {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{PNG}"}}
    assert parts[1] == {"type": "image_url", "image_url": {"url": "https://x.test/a.jpg"}}
    assert parts[2] == {
        "type": "file",
        "file": {"filename": "spec.pdf", "file_data": "data:application/pdf;base64,JVBERi0="},
    }
    assert parts[3] == {"type": "text", "text": "notes"}
    assert parts[4] == {"type": "text", "text": "Describe."}


def test_sampling_stop_metadata_and_stream_carry_over() -> None:
    body = decode(
        {
            "messages": [{"role": "user", "content": "hi"}],
            "stop_sequences": ["END"],
            "temperature": 0.5,
            "top_k": 40,
            "metadata": {"user_id": "u-42"},
            "stream": True,
        }
    )
    assert body["stop"] == ["END"]
    assert body["temperature"] == 0.5
    assert body["top_k"] == 40
    assert body["user"] == "u-42"
    assert body["stream"] is True and body["stream_options"] == {"include_usage": True}
    assert body["max_tokens"] == 256


@pytest.mark.parametrize(
    ("thinking", "effort"),
    [
        ({"type": "enabled", "budget_tokens": 1024}, "low"),
        ({"type": "enabled", "budget_tokens": 8000}, "medium"),
        ({"type": "enabled", "budget_tokens": 32000}, "high"),
        ({"type": "adaptive"}, "medium"),
        ({"type": "disabled"}, None),
    ],
)
def test_thinking_budget_becomes_reasoning_effort(
    thinking: dict[str, Any], effort: str | None
) -> None:
    body = decode({"messages": [{"role": "user", "content": "hi"}], "thinking": thinking})
    assert body.get("reasoning_effort") == effort


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"model": "m", "messages": []}, "max_tokens"),
        ({"model": "m", "max_tokens": "x", "messages": []}, "max_tokens"),
        ({"model": "m", "max_tokens": 0, "messages": []}, "max_tokens"),
        (
            {"model": "m", "max_tokens": 5, "messages": [{"role": "tool", "content": "x"}]},
            "messages.0.role",
        ),
        (
            {
                "model": "m",
                "max_tokens": 5,
                "messages": [{"role": "user", "content": [{"text": "x"}]}],
            },
            "messages.0.content.0.type",
        ),
        ({"model": "m", "max_tokens": 5, "temperature": 1.5, "messages": []}, "temperature"),
    ],
)
def test_invalid_requests_name_the_field_in_anthropic_dotted_form(
    body: dict[str, Any], param: str
) -> None:
    with pytest.raises(InvalidRequest) as caught:
        codec.to_internal(body)
    assert caught.value.param == param
    assert codec.error_message(caught.value).startswith(param + ": ")


@pytest.mark.parametrize(
    ("extra", "param"),
    [
        ({"tools": [{"type": "web_search_20250305", "name": "web_search"}]}, "tools.0.type"),
        ({"mcp_servers": [{"type": "url", "url": "https://mcp.test", "name": "x"}]}, "mcp_servers"),
        ({"container": "c-1"}, "container"),
    ],
)
def test_what_chat_cannot_express_is_refused_naming_the_field(
    extra: dict[str, Any], param: str
) -> None:
    native = {
        "model": "m",
        "max_tokens": 5,
        "messages": [{"role": "user", "content": "x"}],
        **extra,
    }
    codec.to_internal(native)  # fine for Anthropic itself
    with pytest.raises(InvalidRequest) as caught:
        codec.check_translatable(native)
    assert caught.value.param == param


def test_unknown_blocks_pass_decode_but_are_refused_on_translation_with_their_path() -> None:
    native = {
        "model": "m",
        "max_tokens": 5,
        "messages": [
            {"role": "user", "content": "look"},
            {"role": "assistant", "content": [{"type": "text", "text": "ok"}]},
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "and"},
                    {"type": "search_result", "source": "s", "title": "t", "content": []},
                ],
            },
        ],
    }
    _, chat_body = codec.to_internal(native)  # Anthropic takes it: the passthrough needs it
    assert chat_body["messages"][-1] == {"role": "user", "content": "and"}
    with pytest.raises(InvalidRequest) as caught:
        codec.check_translatable(native)
    assert caught.value.param == "messages.2.content.1.type"


def test_images_in_tool_results_follow_the_tool_message_as_user_parts() -> None:
    body = decode(
        {
            "messages": [
                {"role": "user", "content": "screenshot please"},
                {
                    "role": "assistant",
                    "content": [{"type": "tool_use", "id": "t1", "name": "shot", "input": {}}],
                },
                {
                    "role": "user",
                    "content": [
                        {
                            "type": "tool_result",
                            "tool_use_id": "t1",
                            "content": [
                                {"type": "text", "text": "here"},
                                {
                                    "type": "image",
                                    "source": {
                                        "type": "base64",
                                        "media_type": "image/png",
                                        "data": PNG,
                                    },
                                },
                            ],
                        }
                    ],
                },
            ]
        }
    )
    assert body["messages"][2] == {"role": "tool", "tool_call_id": "t1", "content": "here"}
    assert body["messages"][3]["content"] == [
        {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{PNG}"}}
    ]


def test_count_tokens_counts_system_messages_and_tools() -> None:
    base = {"model": "m", "messages": [{"role": "user", "content": "hello there"}]}
    plain = codec.count_tokens(base)
    with_system = codec.count_tokens({**base, "system": "You are a careful assistant. " * 20})
    with_tools = codec.count_tokens(
        {
            **base,
            "tools": [{"name": "lookup", "input_schema": {"type": "object", "properties": {}}}],
        }
    )
    assert 0 < plain < with_system
    assert plain < with_tools
    assert codec.count_tokens_body(plain) == b'{"input_tokens":%d}' % plain


@pytest.mark.parametrize(
    ("headers", "key"),
    [
        ({"x-api-key": "gw-1"}, "gw-1"),
        ({"authorization": "Bearer gw-2"}, "gw-2"),
        ({"x-api-key": "gw-3", "authorization": "Bearer other"}, "gw-3"),
        ({"authorization": "Basic abc"}, ""),  # malformed: the 401 says so
        ({}, None),
    ],
)
def test_the_key_comes_from_x_api_key_or_a_bearer_token(
    headers: dict[str, str], key: str | None
) -> None:
    assert codec.api_key(headers) == key


def test_claude_codes_newer_fields_translate() -> None:
    body = decode(
        {
            "messages": [
                {"role": "user", "content": [{"type": "text", "text": "fix the bug"}]},
                {"role": "system", "content": "The user switched to plan mode."},
            ],
            "thinking": {"type": "adaptive"},
            "output_config": {"effort": "max"},
            "context_management": {"edits": [{"type": "clear_thinking_20251015", "keep": "all"}]},
        }
    )
    assert body["messages"] == [
        {"role": "user", "content": "fix the bug"},
        {"role": "system", "content": "The user switched to plan mode."},
    ]
    assert body["reasoning_effort"] == "high"


def test_output_format_becomes_a_strict_json_schema_response_format() -> None:
    schema = {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]}
    body = decode(
        {
            "messages": [{"role": "user", "content": "json please"}],
            "output_config": {"format": {"type": "json_schema", "schema": schema}},
        }
    )
    assert body["response_format"] == {
        "type": "json_schema",
        "json_schema": {"name": "output", "schema": schema, "strict": True},
    }


def test_output_options_chat_cannot_honour_are_refused() -> None:
    native = {
        "model": "m",
        "max_tokens": 5,
        "messages": [{"role": "user", "content": "x"}],
        "output_config": {"effort": "low", "task_budget": 5},
    }
    codec.to_internal(native)
    with pytest.raises(InvalidRequest) as caught:
        codec.check_translatable(native)
    assert caught.value.param == "output_config.task_budget"


def test_context_management_is_dropped_with_its_beta_and_said_so_when_translated() -> None:
    body = {
        "model": "m",
        "max_tokens": 5,
        "messages": [{"role": "user", "content": "x"}],
        "context_management": {"edits": [{"type": "clear_tool_uses_20250919"}]},
    }
    headers = {"anthropic-beta": "context-management-2025-06-27, effort-2025-11-24"}
    decoded = codec.AnthropicMessagesCodec().decode(json.dumps(body).encode(), headers)
    assert decoded.untranslatable is None
    assert "context_management" not in decoded.chat_body
    assert decoded.translation_changes == (
        "dropped-beta:context-management-2025-06-27",
        "dropped-beta:effort-2025-11-24",
        "dropped:context_management",
    )


@pytest.mark.parametrize(
    ("headers", "extra", "changes"),
    [
        ({}, {}, ()),
        ({"anthropic-beta": ""}, {}, ()),
        ({"anthropic-beta": " , "}, {}, ()),
        ({}, {"context_management": {"edits": []}}, ("dropped:context_management",)),
        ({"anthropic-beta": "b1"}, {}, ("dropped-beta:b1",)),
    ],
)
def test_translation_changes_name_betas_and_their_fields_only_when_sent(
    headers: dict[str, str], extra: dict[str, Any], changes: tuple[str, ...]
) -> None:
    body = {"model": "m", "max_tokens": 5, "messages": [{"role": "user", "content": "x"}]}
    decoded = codec.AnthropicMessagesCodec().decode(json.dumps({**body, **extra}).encode(), headers)
    assert decoded.translation_changes == changes


def test_the_codec_keeps_the_clients_bytes_and_anthropic_headers_for_the_passthrough() -> None:
    body = b'{"model": "claude", "max_tokens": 5, "messages": [{"role": "user", "content": "x"}]}'
    headers = {
        "anthropic-version": "2023-06-01",
        "anthropic-beta": "b1,b2",
        "x-api-key": "gateway-key",
    }
    decoded = codec.AnthropicMessagesCodec().decode(body, headers)
    assert decoded.untranslatable is None
    assert decoded.request.model == "claude"
    native = decoded.native_body
    assert isinstance(native, codec.NativeBody)
    assert native.raw == body
    assert native == {
        "model": "claude",
        "max_tokens": 5,
        "messages": [{"role": "user", "content": "x"}],
    }
    # the client's key is never among what is forwarded
    assert native.headers == {"anthropic-version": "2023-06-01", "anthropic-beta": "b1,b2"}


def test_the_codec_names_what_only_anthropic_can_serve() -> None:
    body = (
        b'{"model": "m", "max_tokens": 5, "messages": [{"role": "user", "content": "x"}],'
        b' "tools": [{"type": "bash_20250124", "name": "bash"}]}'
    )
    decoded = codec.AnthropicMessagesCodec().decode(body, {})
    assert decoded.untranslatable == "tools.0.type"
    assert "tools" not in decoded.chat_body


@pytest.mark.parametrize("body", [b"", b"[1]", b"{not json"])
def test_a_body_that_is_not_a_json_object_is_a_400(body: bytes) -> None:
    with pytest.raises(InvalidRequest):
        codec.AnthropicMessagesCodec().decode(body, {})
