"""The fake Gemini server: the official `google-genai` client talks to it as to the real
API, it refuses what the real API refuses, and our translation's requests pass it over
real HTTP, streaming and not, through a function-call round trip."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from google import genai
from google.genai import errors as genai_errors
from google.genai import types as gt

from gateway.errors import UpstreamMisconfigured, UpstreamRejected, UpstreamUnavailable
from gateway.providers.base import Target
from gateway.providers.gemini import GeminiTranslation
from gateway.providers.sse import SSEParser
from tests.fakes.gemini_server import GeminiFake, call_response, response_chunks, text_response
from tests.providers.support import GEMINI_KEY, assemble, gemini_target, make_call

translation = GeminiTranslation()


@pytest.fixture(scope="module")
def fake() -> Iterator[GeminiFake]:
    with GeminiFake(api_key=GEMINI_KEY) as server:
        yield server


@pytest.fixture
def target(fake: GeminiFake) -> Target:
    fake.script.clear()
    return gemini_target(fake.base_url)


def client(fake: GeminiFake, key: str = GEMINI_KEY) -> genai.Client:
    options = gt.HttpOptions(base_url=fake.base_url, retry_options=gt.HttpRetryOptions(attempts=1))
    return genai.Client(api_key=key, http_options=options)


def test_the_official_client_gets_answers_and_streams(fake: GeminiFake) -> None:
    sdk = client(fake)
    fake.enqueue_response(text_response("Hello from Gemini", prompt_tokens=8))
    response = sdk.models.generate_content(model="gemini-2.5-flash", contents="hi")
    assert response.text == "Hello from Gemini"
    assert response.usage_metadata is not None
    assert response.usage_metadata.prompt_token_count == 8
    fake.enqueue_response(text_response("streamed from Gemini"))
    pieces = sdk.models.generate_content_stream(model="gemini-2.5-flash", contents="hi")
    assert "".join(chunk.text or "" for chunk in pieces) == "streamed from Gemini"


def test_the_official_client_sees_a_wrong_key_as_a_client_error(fake: GeminiFake) -> None:
    sdk = client(fake, "AIza-wrong")
    with pytest.raises(genai_errors.ClientError) as caught:
        sdk.models.generate_content(model="gemini-2.5-flash", contents="x")
    assert caught.value.code == 400
    assert "API key not valid" in str(caught.value.message)


def post(fake: GeminiFake, body: dict[str, Any], key: str | None = GEMINI_KEY) -> httpx.Response:
    headers = {"x-goog-api-key": key} if key else {}
    url = f"{fake.base_url}/v1beta/models/gemini-2.5-flash:generateContent"
    return httpx.post(url, json=body, headers=headers)


HI = {"contents": [{"role": "user", "parts": [{"text": "hi"}]}]}


@pytest.mark.parametrize(
    ("body", "key", "status", "code", "message"),
    [
        (HI, None, 403, "PERMISSION_DENIED", "unregistered callers"),
        (HI, "AIza-wrong", 400, "INVALID_ARGUMENT", "API key not valid"),
        ({"contents": []}, GEMINI_KEY, 400, "INVALID_ARGUMENT", "contents is not specified"),
        (
            {"contents": [{"role": "assistant", "parts": [{"text": "x"}]}]},
            GEMINI_KEY,
            400,
            "INVALID_ARGUMENT",
            "valid role",
        ),
        (
            {"contents": [{"role": "system", "parts": [{"text": "x"}]}]},
            GEMINI_KEY,
            400,
            "INVALID_ARGUMENT",
            "valid role",
        ),
        (
            {"contents": [{"role": "user", "parts": []}]},
            GEMINI_KEY,
            400,
            "INVALID_ARGUMENT",
            "must not be empty",
        ),
        ({**HI, "messages": []}, GEMINI_KEY, 400, "INVALID_ARGUMENT", 'Unknown name "messages"'),
        (
            {"contents": [{"role": "user", "parts": [{"txt": "x"}]}]},
            GEMINI_KEY,
            400,
            "INVALID_ARGUMENT",
            "Invalid JSON payload",
        ),
        (
            {
                **HI,
                "tools": [
                    {
                        "functionDeclarations": [
                            {
                                "name": "f",
                                "parameters": {
                                    "type": "OBJECT",
                                    "properties": {"a": {"type": "STRING"}},
                                    "additionalProperties": False,
                                },
                            }
                        ]
                    }
                ],
            },
            GEMINI_KEY,
            400,
            "INVALID_ARGUMENT",
            'Unknown name "additionalProperties"',
        ),
        (
            {
                **HI,
                "tools": [
                    {"functionDeclarations": [{"name": "f", "parameters": {"type": "OBJECT"}}]}
                ],
            },
            GEMINI_KEY,
            400,
            "INVALID_ARGUMENT",
            "should be non-empty for OBJECT type",
        ),
        (
            {
                "contents": [
                    {"role": "user", "parts": [{"text": "q"}]},
                    {
                        "role": "user",
                        "parts": [{"functionResponse": {"name": "f", "response": {}}}],
                    },
                ]
            },
            GEMINI_KEY,
            400,
            "INVALID_ARGUMENT",
            "function response turn comes immediately after a function call",
        ),
    ],
)
def test_the_fake_refuses_what_gemini_refuses(
    fake: GeminiFake, body: dict[str, Any], key: str | None, status: int, code: str, message: str
) -> None:
    response = post(fake, body, key)
    assert response.status_code == status
    error = response.json()["error"]
    assert error["status"] == code and error["code"] == status
    assert message in error["message"]


def send(target: Target, raw: dict[str, Any]) -> tuple[dict[str, Any], Any]:
    call = make_call(raw)
    upstream = translation.build_request(call, target)
    response = httpx.post(upstream.url, content=upstream.body, headers=upstream.headers)
    if response.status_code != 200:
        raise translation.map_error(
            response.status_code, response.content, response.headers, target
        )
    translated = translation.parse_response(response.content, call, target)
    return json.loads(translated.body), translated.usage


TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "parameters": {
                "type": "object",
                "properties": {"city": {"type": "string"}},
                "required": ["city"],
                "additionalProperties": False,
            },
        },
    }
]


def test_a_multi_turn_function_round_trip_passes_the_fake(fake: GeminiFake, target: Target) -> None:
    conversation: list[dict[str, Any]] = [
        {"role": "system", "content": "You are terse."},
        {"role": "user", "content": "Weather in Paris?"},
    ]
    fake.enqueue_response(call_response([("get_weather", {"city": "Paris"})]))
    first, _ = send(target, {"messages": conversation, "tools": TOOLS, "tool_choice": "auto"})
    reply = first["choices"][0]["message"]
    assert first["choices"][0]["finish_reason"] == "tool_calls"
    conversation += [
        reply,
        {"role": "tool", "tool_call_id": reply["tool_calls"][0]["id"], "content": "18C"},
    ]
    fake.enqueue_response(
        text_response("18C.", prompt_tokens=30, cached_tokens=20, thoughts_tokens=4)
    )
    second, usage = send(target, {"messages": conversation, "tools": TOOLS, "stop": ["END"]})
    assert second["choices"][0]["message"]["content"] == "18C."
    assert (usage.input_tokens, usage.cached_input_tokens, usage.reasoning_tokens) == (30, 20, 4)
    sent = fake.requests[-1]
    assert sent.headers["x-goog-api-key"] == GEMINI_KEY
    assert sent.json["systemInstruction"] == {"parts": [{"text": "You are terse."}]}
    assert sent.json["generationConfig"]["stopSequences"] == ["END"]


def test_images_and_json_schema_pass_the_fake(fake: GeminiFake, target: Target) -> None:
    content = [
        {"type": "text", "text": "describe"},
        {"type": "image_url", "image_url": {"url": "data:image/jpeg;base64,/9j/4AAQ"}},
        {"type": "image_url", "image_url": {"url": "https://img.example/a.webp"}},
    ]
    schema = {
        "type": "object",
        "properties": {"label": {"type": "string"}},
        "required": ["label"],
        "additionalProperties": False,
    }
    completion, _ = send(
        target,
        {
            "messages": [{"role": "user", "content": content}],
            "response_format": {
                "type": "json_schema",
                "json_schema": {"name": "d", "schema": schema},
            },
        },
    )
    assert completion["choices"][0]["message"]["content"].startswith("fake Gemini reply to")


def test_a_streamed_answer_over_http_translates_chunk_by_chunk(
    fake: GeminiFake, target: Target
) -> None:
    call = make_call({"messages": [{"role": "user", "content": "hi"}], "stream": True})
    upstream = translation.build_request(call, target)
    fake.enqueue_response(call_response([("lookup", {"q": "x" * 30})], text="Looking up."))
    stream, parser, payloads = translation.stream(call, target), SSEParser(), []
    with httpx.stream(
        "POST", upstream.url, content=upstream.body, headers=upstream.headers
    ) as response:
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream")
        for read in response.iter_raw():
            for event in parser.feed(read):
                payloads += stream.feed(event)
    payloads += stream.finish()
    choice = assemble([json.loads(p) for p in payloads])[0]
    assert choice["content"] == "Looking up."
    assert json.loads(choice["tool_calls"][0]["arguments"]) == {"q": "x" * 30}
    assert choice["finish_reason"] == "tool_calls"


@pytest.mark.parametrize(
    ("status", "code", "kind", "retryable"),
    [
        (429, "RESOURCE_EXHAUSTED", UpstreamRejected, True),
        (503, "UNAVAILABLE", UpstreamUnavailable, True),
        (500, "INTERNAL", UpstreamUnavailable, True),
        (400, "INVALID_ARGUMENT", UpstreamRejected, False),
        (403, "PERMISSION_DENIED", UpstreamMisconfigured, False),
    ],
)
def test_scripted_errors_map_through_http(
    fake: GeminiFake, target: Target, status: int, code: str, kind: type[Exception], retryable: bool
) -> None:
    fake.enqueue_error(status, code, "scripted failure")
    with pytest.raises(kind) as caught:
        send(target, {"messages": [{"role": "user", "content": "hi"}]})
    assert caught.value.retryable is retryable  # type: ignore[attr-defined]


def test_an_error_chunk_mid_stream_raises_after_the_text_so_far(
    fake: GeminiFake, target: Target
) -> None:
    chunks = response_chunks(text_response("partial answer", prompt_tokens=12))[:1]
    chunks.append({"error": {"code": 503, "message": "overloaded", "status": "UNAVAILABLE"}})
    fake.enqueue_chunks(chunks)
    call = make_call({"messages": [{"role": "user", "content": "hi"}], "stream": True})
    upstream = translation.build_request(call, target)
    stream, parser, payloads = translation.stream(call, target), SSEParser(), []
    with (
        httpx.stream(
            "POST", upstream.url, content=upstream.body, headers=upstream.headers
        ) as response,
        pytest.raises(UpstreamUnavailable) as caught,
    ):
        for read in response.iter_raw():
            for event in parser.feed(read):
                payloads += stream.feed(event)
    assert caught.value.retryable
    assert assemble([json.loads(p) for p in payloads])[0]["content"] == "partial "
    assert stream.usage is not None and stream.usage.input_tokens == 12
