# ruff: noqa: F811  (pytest fixtures imported from translation_conftest are parameters here)
"""Issue 3 end to end, the way users meet it: the official `openai` SDK (sync and async)
against the real gateway process, whose providers of kind `anthropic` and `gemini` point
at fake Anthropic and Gemini servers that reject whatever the real APIs would reject.

Every assertion on the upstream side reads what the fake received; every assertion on
the client side goes through the SDK's own types and exception classes.
"""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

import httpx
import openai
import pydantic
import pytest
from google.genai import types as gt

from tests.api.translation_conftest import (  # noqa: F401  (fixtures are used by name)
    ANTHROPIC_KEY,
    CLAUDE_DEFAULT_MAX_TOKENS,
    GEMINI_KEY,
    SECRETS,
    anthropic_fake,
    async_sdk,
    fresh_fakes,
    gemini_fake,
    sdk,
    translating_gateway,
)
from tests.fakes.anthropic_server import (
    AnthropicFake,
    message_events,
    text_message,
    tool_message,
)
from tests.fakes.gemini_server import (
    GeminiFake,
    call_response,
    dump,
    make_response,
    response_chunks,
    text_response,
    usage,
)
from tests.support.gateway_process import GatewayProcess

WEATHER_TOOL: Any = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Current weather for a city",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}},
            "required": ["city"],
        },
    },
}
QUESTION: Any = [{"role": "user", "content": "What is the weather in Paris?"}]
# a 1x1 transparent PNG
PNG_BASE64 = (
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5E"
    "rkJggg=="
)


class Weather(pydantic.BaseModel):
    city: str
    temp_c: int


def assert_no_secret(*texts: object) -> None:
    for text in texts:
        for secret in SECRETS:
            assert secret not in str(text)


def stream_state(chunks: list[Any]) -> dict[str, Any]:
    """What a client accumulates from SDK chunks: text, tool calls, finish reason."""
    text, finish = "", None
    calls: dict[int, dict[str, str]] = {}
    for chunk in chunks:
        for choice in chunk.choices:
            text += choice.delta.content or ""
            for call in choice.delta.tool_calls or ():
                slot = calls.setdefault(call.index, {"id": "", "name": "", "arguments": ""})
                slot["id"] += call.id or ""
                if call.function is not None:
                    slot["name"] += call.function.name or ""
                    slot["arguments"] += call.function.arguments or ""
            finish = choice.finish_reason or finish
    return {"text": text, "tool_calls": [calls[i] for i in sorted(calls)], "finish": finish}


def stream_state_of(final: Any) -> dict[str, Any]:
    """`stream_state` of a completed (non-stream or accumulated) completion."""
    message = final.choices[0].message
    return {
        "text": message.content or "",
        "tool_calls": [
            {"id": c.id, "name": c.function.name, "arguments": c.function.arguments}
            for c in message.tool_calls or ()
        ],
    }


def as_assistant_message(state: dict[str, Any]) -> dict[str, Any]:
    tool_calls = [
        {
            "id": c["id"],
            "type": "function",
            "function": {"name": c["name"], "arguments": c["arguments"]},
        }
        for c in state["tool_calls"]
    ]
    return {"role": "assistant", "content": state["text"] or None, "tool_calls": tool_calls}


# -- conversations and system prompts ----------------------------------------------


def test_claude_gets_system_prompts_top_level_and_alternating_merged_turns(
    sdk: openai.OpenAI, anthropic_fake: AnthropicFake
) -> None:
    raw = sdk.chat.completions.with_raw_response.create(
        model="claude",
        messages=[
            {"role": "system", "content": "You are terse."},
            {"role": "user", "content": "Hi."},
            {"role": "assistant", "content": "Hello."},
            {"role": "developer", "content": "Answer in French."},
            {"role": "user", "content": "Name a colour."},
            {"role": "user", "content": "Just one."},
        ],
    )
    completion = raw.parse()
    body = anthropic_fake.requests[-1].json
    assert body["system"] == [
        {"type": "text", "text": "You are terse."},
        {"type": "text", "text": "Answer in French."},
    ]
    assert [m["role"] for m in body["messages"]] == ["user", "assistant", "user"]
    assert body["messages"][2]["content"] == [
        {"type": "text", "text": "Name a colour."},
        {"type": "text", "text": "Just one."},
    ]
    assert body["max_tokens"] == CLAUDE_DEFAULT_MAX_TOKENS
    assert body["model"] == "claude-sonnet-4-5"
    headers = anthropic_fake.requests[-1].headers
    assert headers["x-api-key"] == ANTHROPIC_KEY
    assert headers["anthropic-version"] == "2023-06-01"
    assert "gw-e2e" not in json.dumps(headers)
    assert (
        completion.choices[0].message.content == "fake Anthropic reply to: Name a colour. Just one."
    )
    assert completion.choices[0].finish_reason == "stop"
    # the served model as Anthropic named it; the client's name is in x-gateway-route
    assert completion.model == "claude-sonnet-4-5"
    assert raw.headers["x-gateway-route"].startswith("claude")
    assert raw.headers["x-gateway-provider"] == "anthropic"
    assert_no_secret(raw.http_response.text, dict(raw.headers))


def test_gemini_gets_system_instruction_and_user_model_turns(
    sdk: openai.OpenAI, gemini_fake: GeminiFake
) -> None:
    completion = sdk.chat.completions.create(
        model="gemini",
        messages=[
            {"role": "system", "content": "You are terse."},
            {"role": "user", "content": "Hi."},
            {"role": "assistant", "content": "Hello."},
            {"role": "user", "content": "Name a colour."},
        ],
        max_completion_tokens=64,
        temperature=0.2,
    )
    received = gemini_fake.requests[-1]
    assert received.path == "/v1beta/models/gemini-2.5-flash:generateContent"
    assert received.headers["x-goog-api-key"] == GEMINI_KEY
    body = received.json
    assert body["systemInstruction"] == {"parts": [{"text": "You are terse."}]}
    assert [c["role"] for c in body["contents"]] == ["user", "model", "user"]
    assert body["generationConfig"] == {"maxOutputTokens": 64, "temperature": 0.2}
    assert completion.choices[0].message.content == "fake Gemini reply to: Name a colour."
    assert completion.model == "gemini-2.5-flash"


def test_async_client_conversation_passes_its_max_tokens_to_claude(
    translating_gateway: GatewayProcess, anthropic_fake: AnthropicFake, fresh_fakes: None
) -> None:
    async def main() -> openai.types.chat.ChatCompletion:
        async with async_sdk(translating_gateway) as client:
            return await client.chat.completions.create(
                model="claude",
                messages=[{"role": "system", "content": "Be brief."}, *QUESTION],
                max_tokens=77,
            )

    completion = asyncio.run(main())
    body = anthropic_fake.requests[-1].json
    assert body["max_tokens"] == 77
    assert body["system"] == [{"type": "text", "text": "Be brief."}]
    assert completion.choices[0].message.content == (
        "fake Anthropic reply to: What is the weather in Paris?"
    )


# -- tool calls ---------------------------------------------------------------------


def test_claude_tool_call_round_trip(sdk: openai.OpenAI, anthropic_fake: AnthropicFake) -> None:
    anthropic_fake.enqueue_message(
        tool_message([("toolu_01A", "get_weather", {"city": "Paris"})], text="Let me check.")
    )
    first = sdk.chat.completions.create(
        model="claude", messages=QUESTION, tools=[WEATHER_TOOL], tool_choice="auto"
    )
    message = first.choices[0].message
    assert first.choices[0].finish_reason == "tool_calls"
    assert message.content == "Let me check."
    assert message.tool_calls is not None and len(message.tool_calls) == 1
    call = message.tool_calls[0]
    assert call.id == "toolu_01A" and call.type == "function"
    assert call.function.name == "get_weather"
    assert json.loads(call.function.arguments) == {"city": "Paris"}
    sent = anthropic_fake.requests[-1].json
    assert sent["tools"] == [
        {
            "name": "get_weather",
            "description": "Current weather for a city",
            "input_schema": WEATHER_TOOL["function"]["parameters"],
        }
    ]
    assert sent["tool_choice"] == {"type": "auto"}

    anthropic_fake.enqueue_message(text_message("It is 21 degrees in Paris."))
    conversation: list[Any] = [
        *QUESTION,
        message,  # the SDK's own message object, as users append it
        {"role": "tool", "tool_call_id": call.id, "content": '{"temp_c": 21}'},
    ]
    second = sdk.chat.completions.create(
        model="claude", messages=conversation, tools=[WEATHER_TOOL]
    )
    assert second.choices[0].message.content == "It is 21 degrees in Paris."
    turns = anthropic_fake.requests[-1].json["messages"]
    assert [t["role"] for t in turns] == ["user", "assistant", "user"]
    assert turns[1]["content"] == [
        {"type": "text", "text": "Let me check."},
        {"type": "tool_use", "id": "toolu_01A", "name": "get_weather", "input": {"city": "Paris"}},
    ]
    assert turns[2]["content"] == [
        {"type": "tool_result", "tool_use_id": "toolu_01A", "content": '{"temp_c": 21}'}
    ]


def test_gemini_tool_call_round_trip(sdk: openai.OpenAI, gemini_fake: GeminiFake) -> None:
    gemini_fake.enqueue_response(call_response([("get_weather", {"city": "Paris"})]))
    first = sdk.chat.completions.create(
        model="gemini", messages=QUESTION, tools=[WEATHER_TOOL], tool_choice="required"
    )
    message = first.choices[0].message
    assert first.choices[0].finish_reason == "tool_calls"
    assert message.tool_calls is not None
    call = message.tool_calls[0]
    assert call.function.name == "get_weather"  # type: ignore[union-attr]
    assert json.loads(call.function.arguments) == {"city": "Paris"}  # type: ignore[union-attr]
    sent = gemini_fake.requests[-1].json
    declaration = sent["tools"][0]["functionDeclarations"][0]
    assert declaration["name"] == "get_weather"
    assert declaration["parameters"]["properties"] == {"city": {"type": "STRING"}}
    assert sent["toolConfig"] == {"functionCallingConfig": {"mode": "ANY"}}

    gemini_fake.enqueue_response(text_response("It is 21 degrees in Paris."))
    conversation: list[Any] = [
        *QUESTION,
        message,
        {"role": "tool", "tool_call_id": call.id, "content": '{"temp_c": 21}'},
    ]
    second = sdk.chat.completions.create(
        model="gemini", messages=conversation, tools=[WEATHER_TOOL]
    )
    assert second.choices[0].message.content == "It is 21 degrees in Paris."
    contents = gemini_fake.requests[-1].json["contents"]
    assert [c["role"] for c in contents] == ["user", "model", "user"]
    assert contents[1]["parts"] == [
        {"functionCall": {"name": "get_weather", "args": {"city": "Paris"}}}
    ]
    assert contents[2]["parts"] == [
        {"functionResponse": {"name": "get_weather", "response": {"temp_c": 21}}}
    ]


def test_claude_streamed_tool_call_round_trip(
    sdk: openai.OpenAI, anthropic_fake: AnthropicFake
) -> None:
    calls = [
        ("toolu_01A", "get_weather", {"city": "Paris"}),
        ("toolu_01B", "get_weather", {"city": "Lyon, a city with a long name"}),
    ]
    # the fake cuts each tool's JSON into 8-character input_json_delta events
    anthropic_fake.enqueue_message(tool_message(calls, text="Checking both."))
    with sdk.chat.completions.stream(
        model="claude", messages=QUESTION, tools=[WEATHER_TOOL]
    ) as stream:
        final = stream.get_final_completion()
    message = final.choices[0].message
    assert final.choices[0].finish_reason == "tool_calls"
    assert message.content == "Checking both."
    assert message.tool_calls is not None
    got = [(c.id, c.function.name, json.loads(c.function.arguments)) for c in message.tool_calls]
    assert got == calls
    assert anthropic_fake.requests[-1].json["stream"] is True

    anthropic_fake.enqueue_message(text_message("Paris 21, Lyon 23."))
    conversation: list[Any] = [*QUESTION, as_assistant_message(stream_state_of(final))]
    conversation += [
        {"role": "tool", "tool_call_id": call_id, "content": f"result for {call_id}"}
        for call_id, _, _ in calls
    ]
    chunks = list(
        sdk.chat.completions.create(
            model="claude", messages=conversation, tools=[WEATHER_TOOL], stream=True
        )
    )
    assert stream_state(chunks)["text"] == "Paris 21, Lyon 23."
    turns = anthropic_fake.requests[-1].json["messages"]
    assert [b["type"] for b in turns[1]["content"]] == ["text", "tool_use", "tool_use"]
    assert [b["tool_use_id"] for b in turns[2]["content"]] == ["toolu_01A", "toolu_01B"]


def test_async_gemini_streamed_tool_call_round_trip_keeps_thought_signature(
    translating_gateway: GatewayProcess, gemini_fake: GeminiFake, fresh_fakes: None
) -> None:
    answer = make_response(
        [
            gt.Part(
                function_call=gt.FunctionCall(name="get_weather", args={"city": "Paris"}),
                thought_signature=b"opaque-signature",
            )
        ],
        finish_reason="STOP",
        usage=usage(12, 6),
    )
    signature = dump(answer)["candidates"][0]["content"]["parts"][0]["thoughtSignature"]
    gemini_fake.enqueue_response(answer)
    gemini_fake.enqueue_response(text_response("It is 21 degrees."))

    async def main() -> tuple[dict[str, Any], dict[str, Any]]:
        async with async_sdk(translating_gateway) as client:
            stream = await client.chat.completions.create(
                model="gemini", messages=QUESTION, tools=[WEATHER_TOOL], stream=True
            )
            first = stream_state([c async for c in stream])
            call_id = first["tool_calls"][0]["id"]
            conversation: list[Any] = [
                *QUESTION,
                as_assistant_message(first),
                {"role": "tool", "tool_call_id": call_id, "content": "21 degrees"},
            ]
            answer_stream = await client.chat.completions.create(
                model="gemini", messages=conversation, tools=[WEATHER_TOOL], stream=True
            )
            return first, stream_state([c async for c in answer_stream])

    first, second = asyncio.run(main())
    assert first["finish"] == "tool_calls"
    assert [(c["name"], json.loads(c["arguments"])) for c in first["tool_calls"]] == [
        ("get_weather", {"city": "Paris"})
    ]
    assert second["text"] == "It is 21 degrees."
    assert gemini_fake.requests[0].path.endswith(":streamGenerateContent")
    assert gemini_fake.requests[0].query["alt"] == ["sse"]
    contents = gemini_fake.requests[-1].json["contents"]
    assert contents[1]["parts"] == [
        {
            "functionCall": {"name": "get_weather", "args": {"city": "Paris"}},
            "thoughtSignature": signature,
        }
    ]
    assert contents[2]["parts"] == [
        {"functionResponse": {"name": "get_weather", "response": {"output": "21 degrees"}}}
    ]


# -- images and stop sequences ------------------------------------------------------

IMAGE_QUESTION: Any = [
    {
        "role": "user",
        "content": [
            {"type": "text", "text": "What is in this picture?"},
            {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{PNG_BASE64}"}},
        ],
    }
]


def test_data_url_image_reaches_claude_as_a_base64_image_block(
    sdk: openai.OpenAI, anthropic_fake: AnthropicFake
) -> None:
    sdk.chat.completions.create(model="claude", messages=IMAGE_QUESTION)
    content = anthropic_fake.requests[-1].json["messages"][0]["content"]
    assert content == [
        {"type": "text", "text": "What is in this picture?"},
        {
            "type": "image",
            "source": {"type": "base64", "media_type": "image/png", "data": PNG_BASE64},
        },
    ]


def test_data_url_image_reaches_gemini_as_inline_data(
    sdk: openai.OpenAI, gemini_fake: GeminiFake
) -> None:
    sdk.chat.completions.create(model="gemini", messages=IMAGE_QUESTION)
    parts = gemini_fake.requests[-1].json["contents"][0]["parts"]
    assert parts == [
        {"text": "What is in this picture?"},
        {"inlineData": {"mimeType": "image/png", "data": PNG_BASE64}},
    ]


def test_stop_sequences_reach_claude_and_a_stop_is_finish_reason_stop(
    sdk: openai.OpenAI, anthropic_fake: AnthropicFake
) -> None:
    anthropic_fake.enqueue_message(text_message("one, two", stop_reason="stop_sequence"))
    completion = sdk.chat.completions.create(model="claude", messages=QUESTION, stop=["three"])
    assert anthropic_fake.requests[-1].json["stop_sequences"] == ["three"]
    assert completion.choices[0].finish_reason == "stop"
    anthropic_fake.enqueue_message(text_message("one, two, th", stop_reason="max_tokens"))
    completion = sdk.chat.completions.create(model="claude", messages=QUESTION, stop="END")
    assert anthropic_fake.requests[-1].json["stop_sequences"] == ["END"]
    assert completion.choices[0].finish_reason == "length"


def test_stop_sequences_reach_gemini(sdk: openai.OpenAI, gemini_fake: GeminiFake) -> None:
    gemini_fake.enqueue_response(text_response("one, two"))
    completion = sdk.chat.completions.create(
        model="gemini", messages=QUESTION, stop=["three", "END"]
    )
    assert gemini_fake.requests[-1].json["generationConfig"]["stopSequences"] == ["three", "END"]
    assert completion.choices[0].finish_reason == "stop"


# -- usage and cost -----------------------------------------------------------------


# 100 fresh + 1000 cache-read + 200 cache-write input tokens, 50 output, at Claude's list
# prices: 100*3 + 1000*0.3 + 200*3.75 + 50*15 = 2100 micro-USD
def claude_cached_message(text: str) -> Any:
    return text_message(text, input_tokens=100, output_tokens=50, cache_read=1000, cache_write=200)


CLAUDE_CACHED_COST = Decimal("0.0021")


# 1000 prompt tokens of which 600 cached, 50 answer + 200 thought tokens, at Gemini Flash's
# prices: 400*0.3 + 600*0.075 + 250*2.5 = 790 micro-USD
def gemini_thinking_response(text: str) -> Any:
    return text_response(
        text, prompt_tokens=1000, cached_tokens=600, output_tokens=50, thoughts_tokens=200
    )


GEMINI_THINKING_COST = Decimal("0.00079")


def test_claude_cache_tokens_reach_usage_and_the_cost_header(
    sdk: openai.OpenAI, anthropic_fake: AnthropicFake
) -> None:
    anthropic_fake.enqueue_message(claude_cached_message("cached answer"))
    raw = sdk.chat.completions.with_raw_response.create(model="claude", messages=QUESTION)
    used = raw.parse().usage
    assert used is not None
    # OpenAI counts every prompt token in prompt_tokens, cache reads and writes included
    assert (used.prompt_tokens, used.completion_tokens, used.total_tokens) == (1300, 50, 1350)
    assert used.prompt_tokens_details is not None
    assert used.prompt_tokens_details.cached_tokens == 1000
    assert Decimal(raw.headers["x-gateway-cost-usd"]) == CLAUDE_CACHED_COST


def test_claude_stream_usage_chunk_reports_cache_tokens_and_their_cost(
    sdk: openai.OpenAI, anthropic_fake: AnthropicFake
) -> None:
    anthropic_fake.enqueue_message(claude_cached_message("a cached answer, streamed"))
    chunks = list(
        sdk.chat.completions.create(
            model="claude",
            messages=QUESTION,
            stream=True,
            stream_options={"include_usage": True},
        )
    )
    assert stream_state(chunks)["text"] == "a cached answer, streamed"
    last = chunks[-1]
    assert last.choices == [] and last.usage is not None
    assert (last.usage.prompt_tokens, last.usage.completion_tokens) == (1300, 50)
    assert last.usage.prompt_tokens_details is not None
    assert last.usage.prompt_tokens_details.cached_tokens == 1000
    assert all(c.usage is None for c in chunks[:-1])
    extension = (last.model_extra or {})["x_gateway"]
    assert Decimal(extension["cost_usd"]) == CLAUDE_CACHED_COST
    assert extension["estimated"] is False


def test_gemini_cached_and_thought_tokens_reach_usage_and_the_cost_header(
    sdk: openai.OpenAI, gemini_fake: GeminiFake
) -> None:
    gemini_fake.enqueue_response(gemini_thinking_response("thought it through"))
    raw = sdk.chat.completions.with_raw_response.create(model="gemini", messages=QUESTION)
    used = raw.parse().usage
    assert used is not None
    assert (used.prompt_tokens, used.completion_tokens, used.total_tokens) == (1000, 250, 1250)
    assert used.prompt_tokens_details is not None
    assert used.prompt_tokens_details.cached_tokens == 600
    assert used.completion_tokens_details is not None
    assert used.completion_tokens_details.reasoning_tokens == 200
    assert Decimal(raw.headers["x-gateway-cost-usd"]) == GEMINI_THINKING_COST


def test_async_gemini_stream_usage_chunk_reports_cached_and_thought_tokens(
    translating_gateway: GatewayProcess, gemini_fake: GeminiFake, fresh_fakes: None
) -> None:
    gemini_fake.enqueue_response(gemini_thinking_response("thought it through, streamed"))

    async def main() -> list[Any]:
        async with async_sdk(translating_gateway) as client:
            stream = await client.chat.completions.create(
                model="gemini",
                messages=QUESTION,
                stream=True,
                stream_options={"include_usage": True},
            )
            return [c async for c in stream]

    chunks = asyncio.run(main())
    assert stream_state(chunks)["text"] == "thought it through, streamed"
    last = chunks[-1]
    assert last.usage.prompt_tokens == 1000 and last.usage.completion_tokens == 250
    assert last.usage.prompt_tokens_details.cached_tokens == 600
    assert last.usage.completion_tokens_details.reasoning_tokens == 200
    assert Decimal(last.model_extra["x_gateway"]["cost_usd"]) == GEMINI_THINKING_COST


@pytest.mark.parametrize("model", ["claude", "gemini"])
@pytest.mark.parametrize("include_usage", [False, True])
def test_async_stream_has_a_usage_chunk_only_when_asked(
    translating_gateway: GatewayProcess, fresh_fakes: None, model: str, include_usage: bool
) -> None:
    async def main() -> list[Any]:
        async with async_sdk(translating_gateway) as client:
            stream = await client.chat.completions.create(
                model=model,
                messages=QUESTION,
                stream=True,
                stream_options={"include_usage": include_usage},
            )
            return [c async for c in stream]

    chunks = asyncio.run(main())
    state = stream_state(chunks)
    assert state["text"].endswith("reply to: What is the weather in Paris?")
    assert state["finish"] == "stop"
    with_usage = [c for c in chunks if c.usage is not None]
    if include_usage:
        assert with_usage == [chunks[-1]] and chunks[-1].choices == []
        assert chunks[-1].usage.completion_tokens > 0
    else:
        assert with_usage == []
    served = {"claude": "claude-sonnet-4-5", "gemini": "gemini-2.5-flash"}[model]
    assert all(c.model == served for c in chunks)


# -- JSON output --------------------------------------------------------------------


def test_json_schema_from_sdk_parse_is_a_forced_claude_tool(
    sdk: openai.OpenAI, anthropic_fake: AnthropicFake
) -> None:
    anthropic_fake.enqueue_message(
        tool_message([("toolu_json", "Weather", {"city": "Paris", "temp_c": 21})])
    )
    completion = sdk.chat.completions.parse(
        model="claude", messages=QUESTION, response_format=Weather
    )
    choice = completion.choices[0]
    assert choice.message.parsed == Weather(city="Paris", temp_c=21)
    assert choice.message.tool_calls in (None, [])
    assert choice.finish_reason == "stop"
    sent = anthropic_fake.requests[-1].json
    assert sent["tool_choice"] == {"type": "tool", "name": "Weather"}
    assert sent["tools"][0]["name"] == "Weather"
    assert sent["tools"][0]["input_schema"]["required"] == ["city", "temp_c"]


def test_json_schema_streamed_from_claude_arrives_as_content_the_sdk_parses(
    sdk: openai.OpenAI, anthropic_fake: AnthropicFake
) -> None:
    # the forced tool's input arrives as 8-character input_json_delta events
    anthropic_fake.enqueue_message(
        tool_message([("toolu_json", "Weather", {"city": "Paris", "temp_c": 21})])
    )
    with sdk.chat.completions.stream(
        model="claude", messages=QUESTION, response_format=Weather
    ) as stream:
        final = stream.get_final_completion()
    assert final.choices[0].message.parsed == Weather(city="Paris", temp_c=21)
    assert final.choices[0].finish_reason == "stop"
    assert not final.choices[0].message.tool_calls


def test_json_schema_from_sdk_parse_is_gemini_response_schema(
    sdk: openai.OpenAI, gemini_fake: GeminiFake
) -> None:
    gemini_fake.enqueue_response(text_response('{"city": "Paris", "temp_c": 21}'))
    completion = sdk.chat.completions.parse(
        model="gemini", messages=QUESTION, response_format=Weather
    )
    assert completion.choices[0].message.parsed == Weather(city="Paris", temp_c=21)
    config = gemini_fake.requests[-1].json["generationConfig"]
    assert config["responseMimeType"] == "application/json"
    schema = config["responseSchema"]
    assert schema["type"] == "OBJECT" and schema["required"] == ["city", "temp_c"]
    assert schema["properties"]["temp_c"]["type"] == "INTEGER"
    assert "additionalProperties" not in json.dumps(schema)


# -- errors -------------------------------------------------------------------------


@dataclass(frozen=True)
class UpstreamFailure:
    """An error a fake answers with, and what the SDK must see once retries are spent."""

    model: str
    status: int
    code: str
    message: str
    raises: type[openai.APIStatusError]
    client_status: int

    def script(self, anthropic_fake: AnthropicFake, gemini_fake: GeminiFake, times: int) -> Any:
        fake = anthropic_fake if self.model == "claude" else gemini_fake
        for _ in range(times):
            fake.enqueue_error(self.status, self.code, self.message)
        return fake


RETRYABLE = [
    UpstreamFailure(
        "claude", 529, "overloaded_error", "Overloaded", openai.InternalServerError, 502
    ),
    UpstreamFailure(
        "gemini", 429, "RESOURCE_EXHAUSTED", "Resource exhausted", openai.RateLimitError, 429
    ),
    UpstreamFailure(
        "gemini", 503, "UNAVAILABLE", "The model is overloaded", openai.InternalServerError, 502
    ),
]
REFUSED = [
    UpstreamFailure(
        "claude",
        400,
        "invalid_request_error",
        "messages.0.content.1.image.source.base64: image exceeds 5 MB maximum",
        openai.BadRequestError,
        400,
    ),
    UpstreamFailure(
        "gemini",
        400,
        "INVALID_ARGUMENT",
        "Invalid value at 'generation_config.temperature' (TYPE_FLOAT), 9",
        openai.BadRequestError,
        400,
    ),
]


def _failure_id(failure: UpstreamFailure) -> str:
    return f"{failure.model}-{failure.status}"


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("failure", RETRYABLE, ids=_failure_id)
def test_a_retryable_upstream_error_once_is_retried_by_the_gateway(
    sdk: openai.OpenAI,
    anthropic_fake: AnthropicFake,
    gemini_fake: GeminiFake,
    failure: UpstreamFailure,
    stream: bool,
) -> None:
    fake = failure.script(anthropic_fake, gemini_fake, times=1)
    if stream:
        chunks = sdk.chat.completions.create(model=failure.model, messages=QUESTION, stream=True)
        text = stream_state(list(chunks))["text"]
    else:
        completion = sdk.chat.completions.create(model=failure.model, messages=QUESTION)
        text = completion.choices[0].message.content or ""
    assert text.endswith("reply to: What is the weather in Paris?")
    assert len(fake.requests) == 2


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("failure", RETRYABLE, ids=_failure_id)
def test_a_retryable_upstream_error_that_persists_reaches_the_sdk_as_its_class(
    sdk: openai.OpenAI,
    anthropic_fake: AnthropicFake,
    gemini_fake: GeminiFake,
    failure: UpstreamFailure,
    stream: bool,
) -> None:
    fake = failure.script(anthropic_fake, gemini_fake, times=3)
    with pytest.raises(failure.raises) as caught:
        sdk.chat.completions.create(model=failure.model, messages=QUESTION, stream=stream)
    assert caught.value.status_code == failure.client_status
    assert failure.message in caught.value.message
    assert len(fake.requests) == 3, "the provider's retry budget: max_attempts 3"


@pytest.mark.parametrize("failure", REFUSED, ids=_failure_id)
def test_an_invalid_request_is_a_bad_request_with_the_providers_message(
    sdk: openai.OpenAI,
    anthropic_fake: AnthropicFake,
    gemini_fake: GeminiFake,
    failure: UpstreamFailure,
) -> None:
    fake = failure.script(anthropic_fake, gemini_fake, times=1)
    with pytest.raises(openai.BadRequestError) as caught:
        sdk.chat.completions.create(model=failure.model, messages=QUESTION)
    assert caught.value.status_code == 400
    assert isinstance(caught.value.body, dict)
    assert caught.value.body["message"] == failure.message
    assert caught.value.body["type"] == "invalid_request_error"
    assert len(fake.requests) == 1, "a refused request is not retried"


def test_anthropics_refusal_keeps_the_field_it_names_as_param(
    sdk: openai.OpenAI, anthropic_fake: AnthropicFake
) -> None:
    # Anthropic names the field at the start of its message
    message = "max_tokens: 200000 > 64000, which is the maximum allowed for this model"
    anthropic_fake.enqueue_error(400, "invalid_request_error", message)
    with pytest.raises(openai.BadRequestError) as caught:
        sdk.chat.completions.create(model="claude", messages=QUESTION)
    assert caught.value.param == "max_tokens"
    assert "64000" in caught.value.message


def test_geminis_refusal_keeps_the_field_violation_as_param(
    sdk: openai.OpenAI, gemini_fake: GeminiFake
) -> None:
    violation = {
        "@type": "type.googleapis.com/google.rpc.BadRequest",
        "fieldViolations": [
            {"field": "generation_config.temperature", "description": "must be at most 2"}
        ],
    }
    gemini_fake.enqueue_error(
        400,
        "INVALID_ARGUMENT",
        "Invalid value at 'generation_config.temperature'",
        details=[violation],
    )
    with pytest.raises(openai.BadRequestError) as caught:
        sdk.chat.completions.create(model="gemini", messages=QUESTION)
    assert caught.value.param == "generation_config.temperature"


def test_a_provider_message_quoting_the_key_is_redacted(
    sdk: openai.OpenAI, anthropic_fake: AnthropicFake
) -> None:
    anthropic_fake.enqueue_error(400, "invalid_request_error", f"bad key {ANTHROPIC_KEY} here")
    with pytest.raises(openai.BadRequestError) as caught:
        sdk.chat.completions.create(model="claude", messages=QUESTION)
    assert "[redacted]" in caught.value.message
    assert_no_secret(caught.value.response.text, dict(caught.value.response.headers))


@pytest.mark.parametrize(
    ("model", "provider"),
    [("claude-misconfigured", "anthropic-wrong-key"), ("gemini-misconfigured", "google-wrong-key")],
)
def test_a_wrong_upstream_key_is_a_502_naming_the_provider_config(
    sdk: openai.OpenAI,
    anthropic_fake: AnthropicFake,
    gemini_fake: GeminiFake,
    model: str,
    provider: str,
) -> None:
    with pytest.raises(openai.InternalServerError) as caught:
        sdk.chat.completions.create(model=model, messages=QUESTION)
    assert caught.value.status_code == 502
    assert f"providers.{provider}.api_key" in caught.value.message
    assert (
        isinstance(caught.value.body, dict) and caught.value.body["code"] == "upstream_auth_failed"
    )
    assert_no_secret(caught.value.response.text, dict(caught.value.response.headers))
    assert len(anthropic_fake.requests) + len(gemini_fake.requests) == 1, "not retried"


def test_claude_error_event_mid_stream_raises_api_error_with_its_message(
    sdk: openai.OpenAI, anthropic_fake: AnthropicFake
) -> None:
    events = message_events(text_message("a partial answer that breaks"))
    started = [e for e in events if e["type"] in ("message_start", "content_block_start")]
    first_delta = next(e for e in events if e["type"] == "content_block_delta")
    error = {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}
    # in one write: the text before the error arrives in the same network read as the error
    anthropic_fake.enqueue_events([*started, first_delta, error], one_write=True)
    received: list[Any] = []
    stream = sdk.chat.completions.create(model="claude", messages=QUESTION, stream=True)
    with pytest.raises(openai.APIError) as caught:
        for chunk in stream:
            received.append(chunk)
    assert not isinstance(caught.value, openai.APIStatusError)
    assert "Overloaded" in caught.value.message
    assert stream_state(received)["text"] == first_delta["delta"]["text"] == "a partia"
    assert len(anthropic_fake.requests) == 1, "a started stream is never retried"


def test_gemini_error_mid_stream_raises_api_error_with_its_message(
    sdk: openai.OpenAI, gemini_fake: GeminiFake
) -> None:
    chunks = response_chunks(text_response("a partial answer that breaks"))
    error = {
        "error": {"code": 500, "message": "An internal error has occurred", "status": "INTERNAL"}
    }
    gemini_fake.enqueue_chunks([chunks[0], error])
    stream = sdk.chat.completions.create(model="gemini", messages=QUESTION, stream=True)
    with pytest.raises(openai.APIError) as caught:
        list(stream)
    assert "An internal error has occurred" in caught.value.message


def test_async_client_gets_the_same_exception_classes(
    translating_gateway: GatewayProcess,
    anthropic_fake: AnthropicFake,
    gemini_fake: GeminiFake,
    fresh_fakes: None,
) -> None:
    anthropic_fake.enqueue_error(400, "invalid_request_error", "prompt is too long")
    for _ in range(3):
        gemini_fake.enqueue_error(429, "RESOURCE_EXHAUSTED", "Quota exceeded")
    events = message_events(text_message("cut short"))
    error = {"type": "error", "error": {"type": "api_error", "message": "Internal server error"}}
    anthropic_fake.enqueue_events([*events[:3], error])

    async def main() -> list[BaseException]:
        caught: list[BaseException] = []
        async with async_sdk(translating_gateway) as client:
            for model in ("claude", "gemini", "claude-misconfigured"):
                try:
                    await client.chat.completions.create(model=model, messages=QUESTION)
                except openai.APIError as exc:
                    caught.append(exc)
            stream = await client.chat.completions.create(
                model="claude", messages=QUESTION, stream=True
            )
            try:
                async for _ in stream:
                    pass
            except openai.APIError as exc:
                caught.append(exc)
        return caught

    caught = asyncio.run(main())
    assert [type(e) for e in caught] == [
        openai.BadRequestError,
        openai.RateLimitError,
        openai.InternalServerError,
        openai.APIError,
    ]
    assert "prompt is too long" in str(caught[0])
    assert "Internal server error" in str(caught[3])


def test_raw_anthropic_stream_bytes_reach_the_client_as_openai_sse(
    translating_gateway: GatewayProcess, anthropic_fake: AnthropicFake, fresh_fakes: None
) -> None:
    """The wire, not the SDK's view: `data:` lines only, ending in `data: [DONE]`; the
    upstream's `ping` events are not forwarded."""
    anthropic_fake.enqueue_events(
        message_events(text_message("raw bytes"), pings=(1, 3)), chunk_delay=0.001
    )
    with httpx.stream(
        "POST",
        translating_gateway.base_url + "/chat/completions",
        headers={"authorization": "Bearer gw-e2e-translation-key"},
        json={"model": "claude", "messages": QUESTION, "stream": True},
        timeout=10,
    ) as response:
        text = response.read().decode()
    assert response.headers["content-type"].startswith("text/event-stream")
    events = [e for e in text.split("\n\n") if e]
    assert all(e.startswith("data: ") for e in events)
    assert events[-1] == "data: [DONE]"
    payloads = [json.loads(e[6:]) for e in events[:-1]]
    assert "".join(p["choices"][0]["delta"].get("content", "") for p in payloads) == "raw bytes"
    assert all(p["object"] == "chat.completion.chunk" for p in payloads)


def test_upstream_keys_never_reach_the_gateway_log(
    sdk: openai.OpenAI,
    translating_gateway: GatewayProcess,
    anthropic_fake: AnthropicFake,
    gemini_fake: GeminiFake,
) -> None:
    for model in ("claude-misconfigured", "gemini-misconfigured"):
        with pytest.raises(openai.InternalServerError):
            sdk.chat.completions.create(model=model, messages=QUESTION)
    anthropic_fake.enqueue_error(400, "invalid_request_error", f"key {ANTHROPIC_KEY} refused")
    gemini_fake.enqueue_error(400, "INVALID_ARGUMENT", f"key {GEMINI_KEY} refused")
    for model in ("claude", "gemini"):
        with pytest.raises(openai.BadRequestError):
            sdk.chat.completions.create(model=model, messages=QUESTION)
    raw = sdk.chat.completions.with_raw_response.create(
        model="claude", messages=QUESTION, stream=True
    )
    request_id = raw.headers["x-request-id"]
    list(raw.parse())
    # the access line is written once the response is settled, just after the last byte
    deadline = time.monotonic() + 10
    while request_id not in translating_gateway.log() and time.monotonic() < deadline:
        time.sleep(0.02)
    log = translating_gateway.log()
    assert request_id in log, "the access log records every request, so this one was read"
    assert_no_secret(log)
