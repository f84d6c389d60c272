"""The fake Anthropic server: the official `anthropic` SDK talks to it as to the real
API, it refuses what the real API refuses, and our translation's requests pass it over
real HTTP, streaming and not, through a tool-call round trip."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import anthropic
import httpx
import pytest

from gateway.errors import UpstreamRejected, UpstreamUnavailable
from gateway.providers import anthropic_native as native
from gateway.providers.anthropic import AnthropicTranslation
from gateway.providers.base import Target
from gateway.providers.sse import SSEParser
from tests.fakes.anthropic_server import AnthropicFake, message_events, text_message, tool_message
from tests.providers.support import ANTHROPIC_KEY, anthropic_target, assemble, make_call

translation = AnthropicTranslation()


@pytest.fixture(scope="module")
def fake() -> Iterator[AnthropicFake]:
    with AnthropicFake(api_key=ANTHROPIC_KEY) as server:
        yield server


@pytest.fixture
def target(fake: AnthropicFake) -> Target:
    fake.script.clear()
    return anthropic_target(fake.base_url)


def post(fake: AnthropicFake, body: dict[str, Any], **headers: str) -> httpx.Response:
    sent = {"x-api-key": ANTHROPIC_KEY, "anthropic-version": "2023-06-01", **headers}
    sent = {k: v for k, v in sent.items() if v}
    return httpx.post(f"{fake.base_url}/v1/messages", json=body, headers=sent)


def test_the_official_sdk_gets_answers_and_streams(fake: AnthropicFake) -> None:
    client = anthropic.Anthropic(base_url=fake.base_url, api_key=ANTHROPIC_KEY, max_retries=0)
    fake.enqueue_message(text_message("Hello from Claude", input_tokens=11))
    message = client.messages.create(
        model="claude-sonnet-4-5", max_tokens=50, messages=[{"role": "user", "content": "hi"}]
    )
    assert message.content[0].type == "text" and message.content[0].text == "Hello from Claude"
    assert message.usage.input_tokens == 11
    fake.enqueue_message(text_message("streamed reply"))
    with client.messages.stream(
        model="claude-sonnet-4-5", max_tokens=50, messages=[{"role": "user", "content": "hi"}]
    ) as stream:
        assert stream.get_final_text() == "streamed reply"


def test_the_official_sdk_sees_a_scripted_529_as_overloaded(fake: AnthropicFake) -> None:
    client = anthropic.Anthropic(base_url=fake.base_url, api_key=ANTHROPIC_KEY, max_retries=0)
    fake.enqueue_error(529, "overloaded_error", "Overloaded")
    with pytest.raises(anthropic.APIStatusError) as caught:
        client.messages.create(
            model="claude-sonnet-4-5", max_tokens=5, messages=[{"role": "user", "content": "x"}]
        )
    assert caught.value.status_code == 529


VALID: dict[str, Any] = {
    "model": "claude-sonnet-4-5",
    "max_tokens": 10,
    "messages": [{"role": "user", "content": "hi"}],
}


@pytest.mark.parametrize(
    ("change", "headers", "status", "message"),
    [
        ({}, {"x-api-key": ""}, 401, "x-api-key header is required"),
        ({}, {"x-api-key": "sk-wrong"}, 401, "invalid x-api-key"),
        ({}, {"anthropic-version": ""}, 400, "anthropic-version: header is required"),
        ({"max_tokens": None}, {}, 400, "max_tokens: Field required"),
        (
            {"messages": [{"role": "system", "content": "s"}, {"role": "user", "content": "u"}]},
            {},
            400,
            'Unexpected role "system"',
        ),
        ({"messages": [{"role": "tool", "content": "s"}]}, {}, 400, "Input should be"),
        (
            {"messages": [{"role": "user", "content": "a"}, {"role": "user", "content": "b"}]},
            {},
            400,
            "roles must alternate",
        ),
        (
            {"messages": [{"role": "user", "content": [{"type": "text", "text": ""}]}]},
            {},
            400,
            "text content blocks must be non-empty",
        ),
        (
            {
                "messages": [
                    {
                        "role": "user",
                        "content": [
                            {"type": "tool_result", "tool_use_id": "toolu_x", "content": "r"}
                        ],
                    }
                ]
            },
            {},
            400,
            "unexpected `tool_use_id`",
        ),
        (
            {
                "messages": [
                    {"role": "user", "content": "q"},
                    {
                        "role": "assistant",
                        "content": [{"type": "tool_use", "id": "t1", "name": "f", "input": {}}],
                    },
                    {"role": "user", "content": "no result"},
                ]
            },
            {},
            400,
            "without `tool_result` blocks",
        ),
        ({"messages": [{"role": "user", "content": [{"type": "picture"}]}]}, {}, 400, "messages"),
        ({"temperature": 0.5, "top_p": 0.5}, {}, 400, "cannot both be specified"),
    ],
)
def test_the_fake_refuses_what_anthropic_refuses(
    fake: AnthropicFake, change: dict[str, Any], headers: dict[str, str], status: int, message: str
) -> None:
    body = {k: v for k, v in {**VALID, **change}.items() if v is not None}
    response = post(fake, body, **headers)
    assert response.status_code == status
    error = anthropic.types.shared.ErrorResponse.model_validate(response.json())
    assert message in error.error.message


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


def test_a_multi_turn_tool_round_trip_passes_the_fake(fake: AnthropicFake, target: Target) -> None:
    tools = [
        {
            "type": "function",
            "function": {
                "name": "get_weather",
                "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
            },
        }
    ]
    conversation: list[dict[str, Any]] = [
        {"role": "system", "content": "You are terse."},
        {"role": "user", "content": "Weather in Paris?"},
    ]
    fake.enqueue_message(tool_message([("toolu_01", "get_weather", {"city": "Paris"})]))
    first, _ = send(target, {"messages": conversation, "tools": tools})
    reply = first["choices"][0]["message"]
    assert first["choices"][0]["finish_reason"] == "tool_calls"
    conversation += [
        reply,
        {"role": "tool", "tool_call_id": reply["tool_calls"][0]["id"], "content": "18C, sunny"},
    ]
    fake.enqueue_message(text_message("18C and sunny.", input_tokens=40, cache_read=100))
    second, usage = send(target, {"messages": conversation, "tools": tools, "stop": ["\n\n"]})
    assert second["choices"][0]["message"]["content"] == "18C and sunny."
    assert usage.input_tokens == 140 and usage.cached_input_tokens == 100
    sent = fake.requests[-1]
    assert sent.headers["x-api-key"] == ANTHROPIC_KEY
    assert sent.json["system"] == [{"type": "text", "text": "You are terse."}]
    assert sent.json["stop_sequences"] == ["\n\n"]


def test_images_pass_the_fake(fake: AnthropicFake, target: Target) -> None:
    content = [
        {"type": "text", "text": "what is it?"},
        {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="}},
        {"type": "image_url", "image_url": {"url": "https://img.example/cat.png"}},
    ]
    completion, _ = send(target, {"messages": [{"role": "user", "content": content}]})
    assert completion["choices"][0]["message"]["content"].startswith("fake Anthropic reply to")


def test_a_streamed_answer_over_http_translates_chunk_by_chunk(
    fake: AnthropicFake, target: Target
) -> None:
    call = make_call({"messages": [{"role": "user", "content": "hi"}], "stream": True})
    upstream = translation.build_request(call, target)
    fake.enqueue_message(tool_message([("toolu_7", "lookup", {"q": "x" * 40})], text="Looking up."))
    stream, parser, payloads = translation.stream(call, target), SSEParser(), []
    with httpx.stream(
        "POST", upstream.url, content=upstream.body, headers=upstream.headers
    ) as response:
        assert response.status_code == 200
        for read in response.iter_raw():
            for event in parser.feed(read):
                payloads += stream.feed(event)
    payloads += stream.finish()
    choice = assemble([json.loads(p) for p in payloads])[0]
    assert choice["content"] == "Looking up."
    assert json.loads(choice["tool_calls"][0]["arguments"]) == {"q": "x" * 40}
    assert choice["finish_reason"] == "tool_calls"


@pytest.mark.parametrize(
    ("status", "error_type", "kind", "retryable"),
    [
        (529, "overloaded_error", UpstreamUnavailable, True),
        (429, "rate_limit_error", UpstreamRejected, True),
        (400, "invalid_request_error", UpstreamRejected, False),
    ],
)
def test_scripted_errors_map_through_http(
    fake: AnthropicFake,
    target: Target,
    status: int,
    error_type: str,
    kind: type[Exception],
    retryable: bool,
) -> None:
    fake.enqueue_error(status, error_type, "scripted failure", headers={"retry-after": "4"})
    with pytest.raises(kind) as caught:
        send(target, {"messages": [{"role": "user", "content": "hi"}]})
    assert caught.value.retryable is retryable  # type: ignore[attr-defined]
    if retryable:
        assert caught.value.retry_after == 4.0  # type: ignore[attr-defined]


def test_an_error_event_mid_stream_raises_after_the_text_so_far(
    fake: AnthropicFake, target: Target
) -> None:
    events = message_events(text_message("partial answer", input_tokens=12))[:4]
    events.append({"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}})
    fake.enqueue_events(events)
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
    assert assemble([json.loads(p) for p in payloads])[0]["content"] == "partial answer"
    assert stream.usage is not None and stream.usage.input_tokens == 12


def test_the_sdk_counts_tokens_with_the_fake_as_with_the_real_api(
    fake: AnthropicFake, target: Target
) -> None:
    client = anthropic.Anthropic(base_url=fake.base_url, api_key=ANTHROPIC_KEY, max_retries=0)
    fake.enqueue_count(77)
    messages: Any = [{"role": "user", "content": "hi"}]
    assert client.messages.count_tokens(model="claude", messages=messages).input_tokens == 77
    # unscripted, the count is the fake's own and grows with the prompt
    short = client.messages.count_tokens(model="claude", messages=messages)
    longer = client.messages.count_tokens(model="claude", messages=messages, system="x " * 200)
    assert short.input_tokens < longer.input_tokens
    with pytest.raises(anthropic.BadRequestError):
        client.messages.count_tokens(model="claude", messages=[{"role": "system", "content": "x"}])
    # and the gateway's request for it passes the same checks
    body = b'{"model": "sonnet", "messages": [{"role": "user", "content": "hi"}]}'
    upstream = native.count_tokens_request(body, {}, "sonnet", target)
    answer = httpx.post(upstream.url, content=upstream.body, headers=upstream.headers)
    assert answer.status_code == 200, answer.text
    assert native.read_token_count(answer.content) == answer.json()["input_tokens"] > 0
