"""OpenAI chat request -> Anthropic Messages request: table-driven cases for each
mapping rule, and a property test that any conversation becomes a request the official
SDK's `MessageCreateParams` accepts, with alternating roles and no system turns."""

from __future__ import annotations

import itertools
import json
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gateway.errors import InvalidRequest
from gateway.providers.anthropic import AnthropicTranslation
from tests.providers.support import (
    ANTHROPIC_KEY,
    anthropic_target,
    make_call,
    validate_anthropic_request,
)

translation = AnthropicTranslation()


def build(raw: dict[str, Any], **target: Any) -> dict[str, Any]:
    upstream = translation.build_request(make_call(raw), anthropic_target(**target))
    return validate_anthropic_request(upstream.body)


def user(text: str) -> dict[str, Any]:
    return {"role": "user", "content": text}


def test_url_headers_and_key_come_from_the_target() -> None:
    target = anthropic_target("https://anthropic.example/", headers={"x-team": "a"})
    upstream = translation.build_request(make_call({"messages": [user("hi")]}), target)
    assert upstream.url == "https://anthropic.example/v1/messages"
    assert upstream.headers["x-api-key"] == ANTHROPIC_KEY
    assert upstream.headers["anthropic-version"] == "2023-06-01"
    assert upstream.headers["x-team"] == "a"
    assert "authorization" not in {k.lower() for k in upstream.headers}
    assert json.loads(upstream.body)["model"] == "claude-sonnet-4-5"
    assert upstream.stream is False


def test_a_base_url_ending_in_v1_is_not_doubled() -> None:
    upstream = translation.build_request(
        make_call({"messages": [user("hi")]}), anthropic_target("https://a.example/v1")
    )
    assert upstream.url == "https://a.example/v1/messages"


def test_system_and_developer_messages_go_to_the_top_level_system_in_order() -> None:
    body = build(
        {
            "messages": [
                {"role": "system", "content": "be terse"},
                user("hi"),
                {"role": "assistant", "content": "hello"},
                {"role": "developer", "content": [{"type": "text", "text": "use French"}]},
                user("again"),
            ]
        }
    )
    assert body["system"] == [
        {"type": "text", "text": "be terse"},
        {"type": "text", "text": "use French"},
    ]
    assert [m["role"] for m in body["messages"]] == ["user", "assistant", "user"]


def test_consecutive_same_role_turns_are_merged() -> None:
    body = build(
        {"messages": [user("one"), user("two"), {"role": "system", "content": "s"}, user("3")]}
    )
    assert body["messages"] == [
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "one"},
                {"type": "text", "text": "two"},
                {"type": "text", "text": "3"},
            ],
        }
    ]


@pytest.mark.parametrize(
    ("fields", "expected"),
    [
        ({}, 1024),  # the target's default
        ({"max_tokens": 77}, 77),
        ({"max_completion_tokens": 55, "max_tokens": 77}, 55),
    ],
)
def test_max_tokens_is_always_sent(fields: dict[str, Any], expected: int) -> None:
    assert build({"messages": [user("hi")], **fields})["max_tokens"] == expected


@pytest.mark.parametrize(
    ("fields", "expected"),
    [
        ({"stop": "END"}, {"stop_sequences": ["END"]}),
        ({"stop": ["a", "b"]}, {"stop_sequences": ["a", "b"]}),
        ({"temperature": 0.3}, {"temperature": 0.3}),
        ({"temperature": 1.7}, {"temperature": 1.0}),
        ({"top_p": 0.9}, {"top_p": 0.9}),
        ({"temperature": 0.2, "top_p": 0.9}, {"temperature": 0.2}),
        ({"user": "u-42"}, {"metadata": {"user_id": "u-42"}}),
        ({"stream": True}, {"stream": True}),
    ],
)
def test_sampling_and_stop_fields(fields: dict[str, Any], expected: dict[str, Any]) -> None:
    body = build({"messages": [user("hi")], **fields})
    for key, value in expected.items():
        assert body[key] == value
    if "top_p" in fields and "temperature" in fields:
        assert "top_p" not in body


WEATHER: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Weather for a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
    },
}


@pytest.mark.parametrize(
    ("tool_choice", "parallel", "expected"),
    [
        (None, None, None),
        ("auto", None, {"type": "auto"}),
        ("none", None, {"type": "none"}),
        ("required", None, {"type": "any"}),
        (
            {"type": "function", "function": {"name": "get_weather"}},
            None,
            {"type": "tool", "name": "get_weather"},
        ),
        (None, False, {"type": "auto", "disable_parallel_tool_use": True}),
        ("required", False, {"type": "any", "disable_parallel_tool_use": True}),
    ],
)
def test_tools_and_tool_choice(
    tool_choice: Any, parallel: bool | None, expected: dict[str, Any] | None
) -> None:
    raw: dict[str, Any] = {"messages": [user("weather?")], "tools": [WEATHER]}
    if tool_choice is not None:
        raw["tool_choice"] = tool_choice
    if parallel is not None:
        raw["parallel_tool_calls"] = parallel
    body = build(raw)
    assert body["tools"] == [
        {
            "name": "get_weather",
            "description": "Weather for a city",
            "input_schema": WEATHER["function"]["parameters"],
        }
    ]
    assert body.get("tool_choice") == expected


def test_a_tool_without_parameters_gets_an_empty_object_schema() -> None:
    body = build(
        {"messages": [user("x")], "tools": [{"type": "function", "function": {"name": "now"}}]}
    )
    assert body["tools"][0]["input_schema"] == {"type": "object", "properties": {}}


def test_tool_call_round_trip_becomes_tool_use_and_tool_result_blocks() -> None:
    body = build(
        {
            "messages": [
                user("weather in Paris and Rome?"),
                {
                    "role": "assistant",
                    "content": "Checking.",
                    "tool_calls": [
                        {
                            "id": "toolu_1",
                            "type": "function",
                            "function": {"name": "get_weather", "arguments": '{"city":"Paris"}'},
                        },
                        {
                            "id": "toolu_2",
                            "type": "function",
                            "function": {"name": "get_weather", "arguments": ""},
                        },
                    ],
                },
                {"role": "tool", "tool_call_id": "toolu_1", "content": "sunny"},
                {
                    "role": "tool",
                    "tool_call_id": "toolu_2",
                    "content": [{"type": "text", "text": "rain"}],
                },
                user("thanks"),
            ],
            "tools": [WEATHER],
        }
    )
    assistant, results = body["messages"][1], body["messages"][2]
    assert assistant == {
        "role": "assistant",
        "content": [
            {"type": "text", "text": "Checking."},
            {
                "type": "tool_use",
                "id": "toolu_1",
                "name": "get_weather",
                "input": {"city": "Paris"},
            },
            {"type": "tool_use", "id": "toolu_2", "name": "get_weather", "input": {}},
        ],
    }
    assert results == {
        "role": "user",
        "content": [
            {"type": "tool_result", "tool_use_id": "toolu_1", "content": "sunny"},
            {
                "type": "tool_result",
                "tool_use_id": "toolu_2",
                "content": [{"type": "text", "text": "rain"}],
            },
            {"type": "text", "text": "thanks"},
        ],
    }


def test_images_become_base64_or_url_image_blocks() -> None:
    body = build(
        {
            "messages": [
                {
                    "role": "user",
                    "content": [
                        {"type": "text", "text": "compare"},
                        {
                            "type": "image_url",
                            "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="},
                        },
                        {"type": "image_url", "image_url": {"url": "https://img.example/cat.jpg"}},
                    ],
                }
            ]
        }
    )
    assert body["messages"][0]["content"][1:] == [
        {
            "type": "image",
            "source": {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="},
        },
        {"type": "image", "source": {"type": "url", "url": "https://img.example/cat.jpg"}},
    ]


def test_a_pdf_file_part_becomes_a_document_block() -> None:
    part = {
        "type": "file",
        "file": {"filename": "a.pdf", "file_data": "data:application/pdf;base64,JVBERi0="},
    }
    body = build({"messages": [{"role": "user", "content": [part]}]})
    assert body["messages"][0]["content"] == [
        {
            "type": "document",
            "source": {"type": "base64", "media_type": "application/pdf", "data": "JVBERi0="},
        }
    ]


@pytest.mark.parametrize(
    ("raw", "param"),
    [
        ({"messages": [user("x")], "n": 2}, "n"),
        ({"messages": [{"role": "system", "content": "only system"}]}, "messages"),
        (
            {
                "messages": [
                    {
                        "role": "user",
                        "content": [
                            {
                                "type": "image_url",
                                "image_url": {"url": "data:image/bmp;base64,Qk0="},
                            }
                        ],
                    }
                ]
            },
            "messages[0].content[0].image_url",
        ),
        (
            {
                "messages": [
                    {
                        "role": "user",
                        "content": [
                            {
                                "type": "input_audio",
                                "input_audio": {"data": "AAA=", "format": "wav"},
                            }
                        ],
                    }
                ]
            },
            "messages[0].content[0]",
        ),
        (
            {
                "messages": [
                    user("x"),
                    {
                        "role": "assistant",
                        "tool_calls": [
                            {
                                "id": "t",
                                "type": "function",
                                "function": {"name": "f", "arguments": "[1]"},
                            }
                        ],
                    },
                ]
            },
            "messages[1].tool_calls[0].function.arguments",
        ),
    ],
)
def test_what_anthropic_cannot_express_is_a_400_naming_the_param(
    raw: dict[str, Any], param: str
) -> None:
    with pytest.raises(InvalidRequest) as caught:
        build(raw)
    assert caught.value.param == param


def test_json_schema_response_format_becomes_a_forced_tool() -> None:
    schema = {
        "type": "object",
        "properties": {"answer": {"type": "integer"}},
        "required": ["answer"],
    }
    body = build(
        {
            "messages": [user("2+2?")],
            "response_format": {
                "type": "json_schema",
                "json_schema": {"name": "math", "schema": schema},
            },
        }
    )
    assert body["tools"][-1]["name"] == "math"
    assert body["tools"][-1]["input_schema"] == schema
    assert body["tool_choice"] == {"type": "tool", "name": "math"}


def test_a_non_object_schema_is_wrapped_in_a_value_property() -> None:
    schema = {"type": "array", "items": {"type": "string"}}
    body = build(
        {
            "messages": [user("list")],
            "response_format": {
                "type": "json_schema",
                "json_schema": {"name": "l", "schema": schema},
            },
        }
    )
    assert body["tools"][-1]["input_schema"] == {
        "type": "object",
        "properties": {"value": schema},
        "required": ["value"],
    }


def test_json_schema_beside_client_tools_lets_the_model_call_either() -> None:
    body = build(
        {
            "messages": [user("weather as json")],
            "tools": [WEATHER],
            "response_format": {
                "type": "json_schema",
                "json_schema": {
                    "name": "get_weather",
                    "schema": {"type": "object", "properties": {}},
                },
            },
        }
    )
    # the schema's name is taken by a client tool: the answer tool gets the default name
    assert [t["name"] for t in body["tools"]] == ["get_weather", "json_response"]
    assert body["tool_choice"] == {"type": "any"}


def test_json_object_response_format_forces_an_open_object_tool() -> None:
    body = build({"messages": [user("json")], "response_format": {"type": "json_object"}})
    assert body["tools"][0]["input_schema"] == {"type": "object"}
    assert body["tool_choice"] == {"type": "tool", "name": "json_response"}


def test_blank_text_is_left_out_and_an_empty_tool_result_has_no_content() -> None:
    body = build(
        {
            "messages": [
                user("go"),
                {
                    "role": "assistant",
                    "content": "  ",
                    "tool_calls": [
                        {
                            "id": "t1",
                            "type": "function",
                            "function": {"name": "f", "arguments": "{}"},
                        }
                    ],
                },
                {"role": "tool", "tool_call_id": "t1", "content": ""},
                user(" \n"),
            ]
        }
    )
    assert body["messages"][1]["content"] == [
        {"type": "tool_use", "id": "t1", "name": "f", "input": {}}
    ]
    assert body["messages"][2]["content"] == [{"type": "tool_result", "tool_use_id": "t1"}]


def test_tool_call_ids_are_mapped_to_anthropics_alphabet_consistently() -> None:
    gemini_id = "call_r1_0__thought__c2ln+/w=="
    body = build(
        {
            "messages": [
                user("go"),
                {
                    "role": "assistant",
                    "tool_calls": [
                        {
                            "id": gemini_id,
                            "type": "function",
                            "function": {"name": "f", "arguments": "{}"},
                        }
                    ],
                },
                {"role": "tool", "tool_call_id": gemini_id, "content": "ok"},
            ]
        }
    )
    used = body["messages"][1]["content"][0]["id"]
    assert used == "call_r1_0__thought__c2ln__w__"
    assert body["messages"][2]["content"][0]["tool_use_id"] == used


def test_a_final_assistant_prefill_loses_trailing_whitespace() -> None:
    body = build({"messages": [user("hi"), {"role": "assistant", "content": "The answer is "}]})
    assert body["messages"][-1]["content"] == [{"type": "text", "text": "The answer is"}]


# -- property: any conversation is a valid Anthropic request ---------------------------

texts = st.text(min_size=0, max_size=20)
tool_ids = st.text(alphabet="abcdefghij0123456789", min_size=1, max_size=8).map(
    lambda s: "toolu_" + s
)


@st.composite
def conversations(draw: st.DrawFn) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = []
    for _ in range(draw(st.integers(1, 8))):
        kind = draw(st.sampled_from(["system", "developer", "user", "assistant", "tools"]))
        if kind in ("system", "developer", "user"):
            messages.append({"role": kind, "content": draw(texts)})
        elif kind == "assistant":
            messages.append({"role": "assistant", "content": draw(texts)})
        else:
            ids = draw(st.lists(tool_ids, min_size=1, max_size=3, unique=True))
            messages.append(
                {
                    "role": "assistant",
                    "content": draw(st.none() | texts),
                    "tool_calls": [
                        {
                            "id": i,
                            "type": "function",
                            "function": {"name": "f", "arguments": json.dumps({"x": draw(texts)})},
                        }
                        for i in ids
                    ],
                }
            )
            messages += [{"role": "tool", "tool_call_id": i, "content": draw(texts)} for i in ids]
    messages.append({"role": "user", "content": draw(texts) + "?"})
    return messages


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(conversations())
def test_any_conversation_becomes_a_valid_alternating_request(
    messages: list[dict[str, Any]],
) -> None:
    body = build({"messages": messages, "tools": [WEATHER]})
    roles = [m["role"] for m in body["messages"]]
    assert all(a != b for a, b in itertools.pairwise(roles))
    system_texts = [m["content"] for m in messages if m["role"] in ("system", "developer")]
    assert [b["text"] for b in body.get("system", [])] == [t for t in system_texts if t.strip()]
    for message in body["messages"]:
        assert message["content"], "no empty turns"
        for block in message["content"]:
            assert block.get("text", "x").strip(), "no blank text blocks"
