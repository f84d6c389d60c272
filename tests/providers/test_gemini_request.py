"""OpenAI chat request -> Gemini generateContent request: table-driven cases for each
mapping rule, the JSON Schema conversion, and a property test that any conversation
becomes a body every part of which the `google-genai` models accept."""

from __future__ import annotations

import itertools
import json
from typing import Any

import pytest
from google.genai import types as gt
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gateway.errors import InvalidRequest
from gateway.providers.gemini import GeminiTranslation, to_gemini_schema
from tests.providers.support import GEMINI_KEY, gemini_target, make_call, validate_gemini_request

translation = GeminiTranslation()


def build(raw: dict[str, Any]) -> dict[str, Any]:
    upstream = translation.build_request(make_call(raw), gemini_target())
    return validate_gemini_request(upstream.body)


def user(text: str) -> dict[str, Any]:
    return {"role": "user", "content": text}


@pytest.mark.parametrize(
    ("stream", "url"),
    [
        (False, "https://g.example/v1beta/models/gemini-2.5-flash:generateContent"),
        (True, "https://g.example/v1beta/models/gemini-2.5-flash:streamGenerateContent?alt=sse"),
    ],
)
def test_url_and_key_header(stream: bool, url: str) -> None:
    call = make_call({"messages": [user("hi")], "stream": stream})
    upstream = translation.build_request(call, gemini_target("https://g.example/"))
    assert upstream.url == url
    assert upstream.stream is stream
    assert upstream.headers["x-goog-api-key"] == GEMINI_KEY
    assert GEMINI_KEY not in upstream.url


def test_system_messages_become_system_instruction_and_roles_user_and_model() -> None:
    body = build(
        {
            "messages": [
                {"role": "system", "content": "be terse"},
                user("hi"),
                {"role": "assistant", "content": "hello"},
                {"role": "developer", "content": "French"},
                user("a"),
                user("b"),
            ]
        }
    )
    assert body["systemInstruction"] == {"parts": [{"text": "be terse"}, {"text": "French"}]}
    assert body["contents"] == [
        {"role": "user", "parts": [{"text": "hi"}]},
        {"role": "model", "parts": [{"text": "hello"}]},
        {"role": "user", "parts": [{"text": "a"}, {"text": "b"}]},
    ]


@pytest.mark.parametrize(
    ("fields", "expected"),
    [
        ({}, None),
        ({"max_tokens": 50}, {"maxOutputTokens": 50}),
        ({"max_completion_tokens": 60, "max_tokens": 50}, {"maxOutputTokens": 60}),
        ({"temperature": 1.5, "top_p": 0.5}, {"temperature": 1.5, "topP": 0.5}),
        ({"stop": "END"}, {"stopSequences": ["END"]}),
        ({"stop": ["a", "b"]}, {"stopSequences": ["a", "b"]}),
        ({"n": 2, "seed": 7}, {"candidateCount": 2, "seed": 7}),
        (
            {"presence_penalty": 0.5, "frequency_penalty": -0.5},
            {"presencePenalty": 0.5, "frequencyPenalty": -0.5},
        ),
        ({"response_format": {"type": "json_object"}}, {"responseMimeType": "application/json"}),
    ],
)
def test_generation_config(fields: dict[str, Any], expected: dict[str, Any] | None) -> None:
    body = build({"messages": [user("hi")], **fields})
    assert body.get("generationConfig") == expected


def test_json_schema_becomes_response_schema() -> None:
    schema = {
        "type": "object",
        "properties": {"answer": {"type": "integer"}, "note": {"type": ["string", "null"]}},
        "required": ["answer"],
        "additionalProperties": False,
    }
    body = build(
        {
            "messages": [user("2+2")],
            "response_format": {
                "type": "json_schema",
                "json_schema": {"name": "m", "schema": schema},
            },
        }
    )
    assert body["generationConfig"] == {
        "responseMimeType": "application/json",
        "responseSchema": {
            "type": "OBJECT",
            "properties": {
                "answer": {"type": "INTEGER"},
                "note": {"type": "STRING", "nullable": True},
            },
            "required": ["answer"],
        },
    }


@pytest.mark.parametrize(
    ("schema", "expected"),
    [
        ({"type": "string", "format": "email"}, {"type": "STRING"}),
        ({"type": "string", "format": "date-time"}, {"type": "STRING", "format": "date-time"}),
        ({"const": "x"}, {"type": "STRING", "enum": ["x"]}),
        ({"enum": [1, 2]}, {}),
        ({"anyOf": [{"type": "integer"}, {"type": "null"}]}, {"type": "INTEGER", "nullable": True}),
        (
            {"anyOf": [{"type": "integer"}, {"type": "string"}]},
            {"anyOf": [{"type": "INTEGER"}, {"type": "STRING"}]},
        ),
        (
            {
                "type": "array",
                "items": {"$ref": "#/$defs/Item"},
                "$defs": {"Item": {"type": "boolean"}},
            },
            {"type": "ARRAY", "items": {"type": "BOOLEAN"}},
        ),
        (
            {
                "type": "object",
                "properties": {"a": {"type": "number", "default": 1}},
                "$schema": "x",
            },
            {"type": "OBJECT", "properties": {"a": {"type": "NUMBER"}}},
        ),
    ],
)
def test_json_schema_conversion_keeps_what_gemini_understands(
    schema: dict[str, Any], expected: dict[str, Any]
) -> None:
    converted = to_gemini_schema(schema)
    assert converted == expected
    gt.Schema.model_validate(converted)


def test_a_recursive_schema_is_cut_off_instead_of_looping() -> None:
    schema = {
        "$ref": "#/$defs/Node",
        "$defs": {"Node": {"type": "object", "properties": {"child": {"$ref": "#/$defs/Node"}}}},
    }
    converted = to_gemini_schema(schema)
    assert converted["type"] == "OBJECT"
    assert "child" in converted["properties"]


WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Weather for a city",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}},
            "required": ["city"],
            "additionalProperties": False,
        },
    },
}


@pytest.mark.parametrize(
    ("tool_choice", "expected"),
    [
        (None, None),
        ("auto", {"functionCallingConfig": {"mode": "AUTO"}}),
        ("none", {"functionCallingConfig": {"mode": "NONE"}}),
        ("required", {"functionCallingConfig": {"mode": "ANY"}}),
        (
            {"type": "function", "function": {"name": "get_weather"}},
            {"functionCallingConfig": {"mode": "ANY", "allowedFunctionNames": ["get_weather"]}},
        ),
    ],
)
def test_tools_become_function_declarations(
    tool_choice: Any, expected: dict[str, Any] | None
) -> None:
    raw: dict[str, Any] = {"messages": [user("weather?")], "tools": [WEATHER]}
    if tool_choice is not None:
        raw["tool_choice"] = tool_choice
    body = build(raw)
    assert body["tools"] == [
        {
            "functionDeclarations": [
                {
                    "name": "get_weather",
                    "description": "Weather for a city",
                    "parameters": {
                        "type": "OBJECT",
                        "properties": {"city": {"type": "STRING"}},
                        "required": ["city"],
                    },
                }
            ]
        }
    ]
    assert body.get("toolConfig") == expected


def test_a_function_without_arguments_has_no_parameters() -> None:
    body = build(
        {
            "messages": [user("now?")],
            "tools": [
                {
                    "type": "function",
                    "function": {"name": "now", "parameters": {"type": "object", "properties": {}}},
                }
            ],
        }
    )
    assert body["tools"][0]["functionDeclarations"] == [{"name": "now"}]


def test_tool_round_trip_becomes_function_call_and_function_response() -> None:
    body = build(
        {
            "messages": [
                user("weather in Paris?"),
                {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [
                        {
                            "id": "call_1",
                            "type": "function",
                            "function": {"name": "get_weather", "arguments": '{"city":"Paris"}'},
                        },
                        {
                            "id": "call_2__thought__c2ln",
                            "type": "function",
                            "function": {"name": "get_time", "arguments": "{}"},
                        },
                    ],
                },
                {"role": "tool", "tool_call_id": "call_1", "content": "sunny"},
                {
                    "role": "tool",
                    "tool_call_id": "call_2__thought__c2ln",
                    "content": '{"t": "noon"}',
                },
            ],
            "tools": [WEATHER],
        }
    )
    assert body["contents"][1:] == [
        {
            "role": "model",
            "parts": [
                {"functionCall": {"name": "get_weather", "args": {"city": "Paris"}}},
                {"functionCall": {"name": "get_time", "args": {}}, "thoughtSignature": "c2ln"},
            ],
        },
        {
            "role": "user",
            "parts": [
                {"functionResponse": {"name": "get_weather", "response": {"output": "sunny"}}},
                {"functionResponse": {"name": "get_time", "response": {"t": "noon"}}},
            ],
        },
    ]


def test_images_and_audio_become_inline_or_file_data() -> None:
    body = build(
        {
            "messages": [
                {
                    "role": "user",
                    "content": [
                        {
                            "type": "image_url",
                            "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="},
                        },
                        {
                            "type": "image_url",
                            "image_url": {"url": "https://img.example/cat.JPG?x=1"},
                        },
                        {"type": "image_url", "image_url": {"url": "https://img.example/render"}},
                        {
                            "type": "input_audio",
                            "input_audio": {"data": "UklGRg==", "format": "wav"},
                        },
                    ],
                }
            ]
        }
    )
    assert body["contents"][0]["parts"] == [
        {"inlineData": {"mimeType": "image/png", "data": "iVBORw0KGgo="}},
        {"fileData": {"fileUri": "https://img.example/cat.JPG?x=1", "mimeType": "image/jpeg"}},
        {"fileData": {"fileUri": "https://img.example/render"}},
        {"inlineData": {"mimeType": "audio/wav", "data": "UklGRg=="}},
    ]


@pytest.mark.parametrize(
    ("raw", "param"),
    [
        ({"messages": [{"role": "system", "content": "only"}]}, "messages"),
        (
            {"messages": [user("x"), {"role": "tool", "tool_call_id": "nope", "content": "r"}]},
            "messages[1].tool_call_id",
        ),
        (
            {
                "messages": [
                    {
                        "role": "user",
                        "content": [{"type": "image_url", "image_url": {"url": "ftp://x/y.png"}}],
                    }
                ]
            },
            "messages[0].content[0].image_url",
        ),
    ],
)
def test_what_gemini_cannot_express_is_a_400_naming_the_param(
    raw: dict[str, Any], param: str
) -> None:
    with pytest.raises(InvalidRequest) as caught:
        build(raw)
    assert caught.value.param == param


# -- property: any conversation is a valid Gemini request -------------------------------

texts = st.text(min_size=0, max_size=20)


@st.composite
def conversations(draw: st.DrawFn) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = []
    calls = 0
    for _ in range(draw(st.integers(1, 8))):
        kind = draw(st.sampled_from(["system", "user", "assistant", "tools"]))
        if kind in ("system", "user", "assistant"):
            messages.append({"role": kind, "content": draw(texts)})
        else:
            count = draw(st.integers(1, 3))
            ids = [f"call_{calls + k}" for k in range(count)]
            calls += count
            messages.append(
                {
                    "role": "assistant",
                    "content": draw(st.none() | texts),
                    "tool_calls": [
                        {
                            "id": i,
                            "type": "function",
                            "function": {
                                "name": "get_weather",
                                "arguments": json.dumps({"city": draw(texts)}),
                            },
                        }
                        for i in ids
                    ],
                }
            )
            messages += [{"role": "tool", "tool_call_id": i, "content": draw(texts)} for i in ids]
    messages.append(user(draw(texts) + "?"))
    return messages


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(conversations())
def test_any_conversation_becomes_a_valid_request(messages: list[dict[str, Any]]) -> None:
    body = build({"messages": messages, "tools": [WEATHER]})
    roles = [c["role"] for c in body["contents"]]
    assert all(a != b for a, b in itertools.pairwise(roles))
    for content in body["contents"]:
        assert content["parts"], "no empty turns"
        assert all(part.get("text", "x") for part in content["parts"]), "no empty text parts"


def test_a_free_form_object_argument_sends_the_functions_schema_as_json_schema() -> None:
    # Claude Code's tools have `metadata: {type: object}` arguments, which Gemini's
    # OpenAPI subset refuses ("should be non-empty for OBJECT type")
    parameters = {
        "type": "object",
        "properties": {
            "subject": {"type": "string"},
            "metadata": {"type": "object", "additionalProperties": {}},
        },
        "required": ["subject"],
    }
    tool = {"type": "function", "function": {"name": "TaskCreate", "parameters": parameters}}
    plain = {
        "type": "function",
        "function": {
            "name": "Read",
            "parameters": {"type": "object", "properties": {"file_path": {"type": "string"}}},
        },
    }
    call = make_call({"messages": [{"role": "user", "content": "x"}], "tools": [tool, plain]})
    body = json.loads(GeminiTranslation().build_request(call, gemini_target()).body)
    free_form, typed = body["tools"][0]["functionDeclarations"]
    assert free_form["parametersJsonSchema"] == parameters and "parameters" not in free_form
    assert typed["parameters"]["properties"]["file_path"] == {"type": "STRING"}
    gt.Tool.model_validate(body["tools"][0])
