"""The Anthropic Messages API through the gateway, judged by the official `anthropic`
SDK (sync and async) against a real `gateway serve`: Claude passes through unconverted
to the Anthropic fake; GPT-4.1 (OpenAI fake), Gemini (Gemini fake) and a self-hosted
model (the emulator) are translated. Every fake validates what it receives with the
providers' own SDK types."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from decimal import Decimal
from typing import Any

import anthropic
import httpx
import openai
import pytest
from anthropic import types as at

from gateway.ingress.anthropic_messages import count_tokens
from gateway.metering.ledger_record import LedgerRecord
from gateway.tokens import count_text
from tests.e2e.anthropic_support import (
    ALLOWED_BETA,
    CLIENT_KEY,
    LIMITED_KEY,
    MODELS,
    SLOW_KEY,
    async_client,
    claude_cost,
    gateway_config,
    gateway_policy,
    sync_client,
)
from tests.e2e.support import ledger_records, wait_for
from tests.emulator.emulator_process import emulator_thread
from tests.fakes.anthropic_server import (
    AnthropicFake,
    cached_usage,
    make_message,
    message_events,
    text_message,
    thinking_message,
    tool_message,
)
from tests.fakes.gemini_server import GeminiFake, call_response, text_response
from tests.fakes.openai_server import OpenAIFake, Reply
from tests.support.gateway_process import GatewayProcess
from tests.support.redis_server import RedisServer

from .anthropic_support import ANTHROPIC_KEY, GEMINI_KEY

HI = [{"role": "user", "content": "Say hi to the gateway"}]
WEATHER_TOOL = {
    "name": "get_weather",
    "description": "Current weather for a city",
    "input_schema": {
        "type": "object",
        "properties": {"city": {"type": "string"}},
        "required": ["city"],
    },
}


@pytest.fixture(scope="module")
def fakes() -> Iterator[tuple[AnthropicFake, GeminiFake, OpenAIFake]]:
    with (
        AnthropicFake(api_key=ANTHROPIC_KEY) as claude,
        GeminiFake(api_key=GEMINI_KEY) as gemini,
        OpenAIFake() as gpt,
    ):
        yield claude, gemini, gpt


@pytest.fixture(scope="module")
def gateway(
    fakes: tuple[AnthropicFake, GeminiFake, OpenAIFake], redis_server: RedisServer
) -> Iterator[GatewayProcess]:
    claude, gemini, gpt = fakes
    with emulator_thread(time_scale=0.0, max_output_tokens=24) as emulator:
        config = gateway_config(
            redis_server.url, claude.base_url, gemini.base_url, gpt.base_url, emulator.base_url
        )
        with GatewayProcess(config, gateway_policy()) as process:
            yield process


@pytest.fixture
def claude(fakes: tuple[AnthropicFake, GeminiFake, OpenAIFake]) -> AnthropicFake:
    for fake in fakes[:2]:
        fake.requests.clear()
        fake.script.clear()
    fakes[2].requests.clear()
    return fakes[0]


@pytest.fixture
def gemini(
    fakes: tuple[AnthropicFake, GeminiFake, OpenAIFake], claude: AnthropicFake
) -> GeminiFake:
    return fakes[1]


@pytest.fixture
def gpt(fakes: tuple[AnthropicFake, GeminiFake, OpenAIFake], claude: AnthropicFake) -> OpenAIFake:
    return fakes[2]


@pytest.fixture
def client(gateway: GatewayProcess, claude: AnthropicFake) -> Iterator[anthropic.Anthropic]:
    with sync_client(gateway) as sdk:
        yield sdk


def text_of(message: at.Message) -> str:
    return "".join(b.text for b in message.content if b.type == "text")


def record_of(redis_url: str, request_id: str) -> LedgerRecord:
    found: list[LedgerRecord] = []

    def settled() -> bool:
        found[:] = [r for r in ledger_records(redis_url) if r.request_id == request_id]
        return bool(found)

    assert wait_for(settled, 10), f"no ledger record for {request_id}"
    return found[0]


# -- create and stream, each model ---------------------------------------------------


@pytest.mark.parametrize("model", list(MODELS))
def test_create_answers_in_anthropics_shape_for_every_model(
    client: anthropic.Anthropic, model: str, redis_server: RedisServer
) -> None:
    raw = client.messages.with_raw_response.create(model=model, max_tokens=64, messages=HI)
    message = raw.parse()
    assert isinstance(message, at.Message)
    # the served model as its upstream named it, whichever API it speaks
    assert message.model == MODELS[model][1]
    assert message.role == "assistant" and message.type == "message"
    assert text_of(message)
    assert message.stop_reason in ("end_turn", "max_tokens")
    assert message.usage.input_tokens > 0 and message.usage.output_tokens > 0
    assert raw.headers["x-gateway-model"] == model
    assert raw.headers["x-gateway-provider"] == MODELS[model][0]
    assert raw.headers["request-id"] == raw.headers["x-request-id"]
    record = record_of(redis_server.url, raw.headers["request-id"])
    assert (record.tenant, record.key_id, record.model, record.status) == (
        "coders",
        "claude-code",
        model,
        200,
    )
    assert Decimal(record.cost_usd) == Decimal(raw.headers["x-gateway-cost-usd"]) > 0


@pytest.mark.parametrize("model", list(MODELS))
def test_stream_is_anthropics_event_sequence_for_every_model(
    client: anthropic.Anthropic, model: str
) -> None:
    with client.messages.stream(model=model, max_tokens=64, messages=HI) as stream:
        kinds = [event.type for event in stream]
        message = stream.get_final_message()
    assert kinds[0] == "message_start"
    assert "content_block_delta" in kinds and kinds[-1] == "message_stop"
    assert message.model == MODELS[model][1]
    assert text_of(message)
    assert message.usage.output_tokens > 0


def test_the_async_sdk_streams_and_creates_concurrently(
    gateway: GatewayProcess, claude: AnthropicFake
) -> None:
    async def run() -> list[str]:
        async with async_client(gateway) as sdk:

            async def one(model: str) -> str:
                if model.startswith("gpt"):
                    async with sdk.messages.stream(model=model, max_tokens=32, messages=HI) as s:
                        return text_of(await s.get_final_message())
                return text_of(await sdk.messages.create(model=model, max_tokens=32, messages=HI))

            return await asyncio.gather(*(one(m) for m in MODELS))

    texts = asyncio.run(run())
    assert all(texts)


# -- passthrough ---------------------------------------------------------------------


def test_passthrough_forwards_the_clients_bytes_with_only_the_model_changed(
    gateway: GatewayProcess, claude: AnthropicFake
) -> None:
    body = (
        b'{"model": "claude-sonnet-4-5", "max_tokens": 2048, "top_k": 7, '
        b'"metadata": {"user_id": "u-1"}, "stop_sequences": ["STOP"], '
        b'"thinking": {"type": "enabled", "budget_tokens": 1024},\n'
        b'"system": [{"type": "text", "text": "Be brief.", "cache_control": '
        b'{"type": "ephemeral", "ttl": "1h"}}],\n'
        b'"messages": [{"role": "user", "content": [{"type": "text", "text": "Read this",'
        b' "cache_control": {"type": "ephemeral"}}, {"type": "document", "source": {"type": '
        b'"base64", "media_type": "application/pdf", "data": "JVBERi0xLjQK"}}, {"type": '
        b'"image", "source": {"type": "base64", "media_type": "image/png", "data": '
        b'"iVBORw0KGgo="}}]}]}'
    )
    answer = httpx.post(
        gateway.url + "/v1/messages",
        content=body,
        headers={
            "x-api-key": CLIENT_KEY,
            "anthropic-version": "2023-06-01",
            "anthropic-beta": f"{ALLOWED_BETA},files-api-2025-04-14",
            "content-type": "application/json",
        },
    )
    assert answer.status_code == 200, answer.text
    at.Message.model_validate_json(answer.content)
    sent = claude.requests[-1]
    assert sent.body == body.replace(b'"claude-sonnet-4-5"', b'"claude-sonnet-4-5-20250929"')
    assert sent.headers["anthropic-beta"] == ALLOWED_BETA
    assert sent.headers["x-api-key"] == ANTHROPIC_KEY
    assert CLIENT_KEY not in json.dumps(sent.headers)


def test_thinking_multi_turn_keeps_signatures_byte_for_byte(
    client: anthropic.Anthropic, claude: AnthropicFake
) -> None:
    signature = "EqQBCkYIBxgCKkB+/9z0Q==" + "x" * 40
    claude.enqueue_message(
        thinking_message("Two plus two is four.", signature, "4", redacted="EmwKAhgBEgy3va3pzi")
    )
    first = client.messages.create(
        model="claude-sonnet-4-5",
        max_tokens=4096,
        thinking={"type": "enabled", "budget_tokens": 2048},
        messages=[{"role": "user", "content": "2+2?"}],
    )
    assert [b.type for b in first.content] == ["thinking", "redacted_thinking", "text"]
    assert first.content[0].signature == signature  # type: ignore[union-attr]
    claude.enqueue_message(text_message("6"))
    with client.messages.stream(
        model="claude-sonnet-4-5",
        max_tokens=4096,
        thinking={"type": "enabled", "budget_tokens": 2048},
        messages=[
            {"role": "user", "content": "2+2?"},
            {
                "role": "assistant",
                "content": [b.model_dump(exclude_none=True) for b in first.content],
            },
            {"role": "user", "content": "and 3+3?"},
        ],
    ) as stream:
        second = stream.get_final_message()
    assert text_of(second) == "6"
    replayed = claude.requests[-1].json["messages"][1]["content"]
    assert replayed[0] == {
        "type": "thinking",
        "thinking": "Two plus two is four.",
        "signature": signature,
    }
    assert replayed[1] == {"type": "redacted_thinking", "data": "EmwKAhgBEgy3va3pzi"}


def test_thinking_streams_with_its_signature_on_the_passthrough(
    client: anthropic.Anthropic, claude: AnthropicFake
) -> None:
    claude.enqueue_message(thinking_message("Let me see.", "c2lnbmF0dXJl+/==", "Done."))
    with client.messages.stream(
        model="claude-sonnet-4-5",
        max_tokens=4096,
        thinking={"type": "enabled", "budget_tokens": 1024},
        messages=HI,
    ) as stream:
        message = stream.get_final_message()
    assert message.content[0].type == "thinking"
    assert message.content[0].signature == "c2lnbmF0dXJl+/=="  # type: ignore[union-attr]


def test_cache_usage_is_read_exactly_and_priced_per_lifetime(
    client: anthropic.Anthropic, claude: AnthropicFake, redis_server: RedisServer
) -> None:
    usage = cached_usage(40, 25, read=3000, write_5m=500, write_1h=1200)
    claude.enqueue_message(
        make_message(
            [at.TextBlock(type="text", text="cached")], stop_reason="end_turn", usage=usage
        )
    )
    raw = client.messages.with_raw_response.create(
        model="claude-sonnet-4-5",
        max_tokens=64,
        system=[
            {
                "type": "text",
                "text": "Long stable prompt",
                "cache_control": {"type": "ephemeral", "ttl": "1h"},
            }
        ],
        messages=HI,
    )
    message = raw.parse()
    assert claude.requests[-1].json["system"][0]["cache_control"] == {
        "type": "ephemeral",
        "ttl": "1h",
    }
    assert message.usage.cache_read_input_tokens == 3000
    assert message.usage.cache_creation_input_tokens == 1700
    expected = claude_cost(uncached=40, read=3000, write_5m=500, write_1h=1200, output=25)
    assert Decimal(raw.headers["x-gateway-cost-usd"]) == expected
    record = record_of(redis_server.url, raw.headers["request-id"])
    assert Decimal(record.cost_usd) == expected
    assert (record.input_tokens, record.cached_input_tokens, record.cache_write_tokens) == (
        4740,
        3000,
        1700,
    )


# -- tool round trips ----------------------------------------------------------------


@pytest.mark.parametrize("stream", [False, True])
def test_tool_round_trip_on_the_passthrough(
    client: anthropic.Anthropic, claude: AnthropicFake, stream: bool
) -> None:
    claude.enqueue_message(tool_message([("toolu_01", "get_weather", {"city": "Paris"})]))
    claude.enqueue_message(text_message("It is 18C in Paris."))
    messages: list[Any] = [{"role": "user", "content": "Weather in Paris?"}]
    first = ask(client, "claude-sonnet-4-5", messages, stream)
    assert first.stop_reason == "tool_use"
    use = first.content[-1]
    assert (use.type, use.name, use.input) == ("tool_use", "get_weather", {"city": "Paris"})  # type: ignore[union-attr]
    messages += [
        {"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in first.content]},
        {
            "role": "user",
            "content": [{"type": "tool_result", "tool_use_id": use.id, "content": "18C"}],
        },  # type: ignore[union-attr]
    ]
    final = ask(client, "claude-sonnet-4-5", messages, stream)
    assert text_of(final) == "It is 18C in Paris."
    assert claude.requests[-1].json["messages"][2]["content"][0]["tool_use_id"] == "toolu_01"


@pytest.mark.parametrize("stream", [False, True])
def test_tool_round_trip_translated_to_gemini(
    client: anthropic.Anthropic, gemini: GeminiFake, stream: bool
) -> None:
    gemini.enqueue_response(call_response([("get_weather", {"city": "Paris"})]))
    gemini.enqueue_response(text_response("18C and sunny"))
    messages: list[Any] = [{"role": "user", "content": "Weather in Paris?"}]
    first = ask(client, "gemini-2.5-flash", messages, stream)
    assert first.stop_reason == "tool_use"
    use = first.content[-1]
    assert (use.type, use.name, use.input) == ("tool_use", "get_weather", {"city": "Paris"})  # type: ignore[union-attr]
    messages += [
        {"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in first.content]},
        {
            "role": "user",
            "content": [{"type": "tool_result", "tool_use_id": use.id, "content": "18C"}],
        },  # type: ignore[union-attr]
    ]
    final = ask(client, "gemini-2.5-flash", messages, stream)
    assert text_of(final) == "18C and sunny"
    parts = gemini.requests[-1].json["contents"][-1]["parts"]
    assert parts[0]["functionResponse"] == {"name": "get_weather", "response": {"output": "18C"}}


def test_tool_round_trip_translated_to_openai(client: anthropic.Anthropic, gpt: OpenAIFake) -> None:
    call = {
        "id": "call_abc",
        "type": "function",
        "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'},
    }
    gpt.enqueue(
        Reply(
            body={
                "id": "chatcmpl-1",
                "object": "chat.completion",
                "created": 1,
                "model": "gpt-4.1-2025-04-14",
                "choices": [
                    {
                        "index": 0,
                        "message": {"role": "assistant", "content": None, "tool_calls": [call]},
                        "finish_reason": "tool_calls",
                    }
                ],
                "usage": {"prompt_tokens": 30, "completion_tokens": 12, "total_tokens": 42},
            }
        )
    )
    first = client.messages.create(
        model="gpt-4.1",
        max_tokens=64,
        tools=[WEATHER_TOOL],
        tool_choice={"type": "auto"},
        messages=[{"role": "user", "content": "Weather in Paris?"}],
    )
    use = first.content[0]
    assert (first.stop_reason, use.type, use.input) == ("tool_use", "tool_use", {"city": "Paris"})  # type: ignore[union-attr]
    sent = gpt.requests[-1].body
    assert sent["tools"][0]["function"]["name"] == "get_weather"
    assert sent["tool_choice"] == "auto"
    client.messages.create(
        model="gpt-4.1",
        max_tokens=64,
        tools=[WEATHER_TOOL],
        messages=[
            {"role": "user", "content": "Weather in Paris?"},
            {"role": "assistant", "content": [use.model_dump(exclude_none=True)]},
            {
                "role": "user",
                "content": [{"type": "tool_result", "tool_use_id": "call_abc", "content": "18C"}],
            },
        ],
    )
    assert gpt.requests[-1].body["messages"][-1] == {
        "role": "tool",
        "tool_call_id": "call_abc",
        "content": "18C",
    }


def ask(client: anthropic.Anthropic, model: str, messages: list[Any], stream: bool) -> at.Message:
    if stream:
        with client.messages.stream(
            model=model, max_tokens=256, tools=[WEATHER_TOOL], messages=messages
        ) as events:
            return events.get_final_message()
    return client.messages.create(
        model=model, max_tokens=256, tools=[WEATHER_TOOL], messages=messages
    )


# -- thinking across APIs -------------------------------------------------------------


def test_thinking_becomes_gemini_thinking_config_and_thoughts_come_back(
    client: anthropic.Anthropic, gemini: GeminiFake
) -> None:
    client.messages.create(
        model="gemini-2.5-flash",
        max_tokens=8192,
        thinking={"type": "enabled", "budget_tokens": 8000},
        messages=HI,
    )
    config = gemini.requests[-1].json["generationConfig"]
    assert config["thinkingConfig"] == {"thinkingBudget": 8192, "includeThoughts": True}


def test_thinking_is_not_sent_to_a_model_that_does_not_reason(
    client: anthropic.Anthropic, gpt: OpenAIFake
) -> None:
    # what Claude Code sends; gpt-4.1's catalog entry does not list `reasoning`
    client.messages.create(
        model="gpt-4.1",
        max_tokens=4096,
        thinking={"type": "adaptive"},
        extra_body={"output_config": {"effort": "high"}},
        messages=HI,
    )
    assert "reasoning_effort" not in gpt.requests[-1].body


# -- errors --------------------------------------------------------------------------


def test_errors_raise_the_sdks_exception_classes(
    gateway: GatewayProcess, client: anthropic.Anthropic, claude: AnthropicFake
) -> None:
    def raises(kind: type[anthropic.APIStatusError], call: Any) -> anthropic.APIStatusError:
        with pytest.raises(kind) as caught:
            call()
        body = caught.value.body
        assert isinstance(body, dict) and body["type"] == "error", body
        assert set(body["error"]) == {"type", "message"}
        assert caught.value.request_id, "request-id header missing"
        return caught.value

    with sync_client(gateway, key="not-a-key") as stranger:
        raises(
            anthropic.AuthenticationError,
            lambda: stranger.messages.create(model="gpt-4.1", max_tokens=5, messages=HI),
        )
    with sync_client(gateway, key=LIMITED_KEY) as limited:
        raises(
            anthropic.PermissionDeniedError,
            lambda: limited.messages.create(model="claude-sonnet-4-5", max_tokens=5, messages=HI),
        )
    raises(
        anthropic.NotFoundError,
        lambda: client.messages.create(model="no-such-model", max_tokens=5, messages=HI),
    )
    bad = raises(
        anthropic.BadRequestError,
        lambda: client.messages.create(model="gpt-4.1", max_tokens=0, messages=HI),
    )
    assert bad.body["error"]["message"].startswith("max_tokens")  # type: ignore[index]
    server_tool = [{"type": "web_search_20250305", "name": "web_search", "max_uses": 1}]
    refused = raises(
        anthropic.BadRequestError,
        lambda: client.messages.create(
            model="gpt-4.1", max_tokens=5, messages=HI, tools=server_tool
        ),  # type: ignore[arg-type]
    )
    assert "tools.0.type" in refused.body["error"]["message"]  # type: ignore[index]
    huge = "x" * (3 * 1024 * 1024)
    raises(
        anthropic.ContentTooLargeError,
        lambda: client.messages.create(
            model="gpt-4.1", max_tokens=5, messages=[{"role": "user", "content": huge}]
        ),
    )
    with sync_client(gateway, key=SLOW_KEY) as slow:
        slow.messages.create(model="gpt-4.1", max_tokens=5, messages=HI)
        limited_error = raises(
            anthropic.RateLimitError,
            lambda: slow.messages.create(model="gpt-4.1", max_tokens=5, messages=HI),
        )
        assert limited_error.body["error"]["type"] == "rate_limit_error"  # type: ignore[index]
    # Anthropic's own refusal passes through with its type
    claude.enqueue_error(400, "invalid_request_error", "messages.0: bad turn")
    upstream = raises(
        anthropic.BadRequestError,
        lambda: client.messages.create(model="claude-sonnet-4-5", max_tokens=5, messages=HI),
    )
    assert "bad turn" in upstream.body["error"]["message"]  # type: ignore[index]
    for _ in range(2):  # every attempt overloaded
        claude.enqueue_error(529, "overloaded_error", "Overloaded")
    raises(
        anthropic.InternalServerError,
        lambda: client.messages.create(model="claude-sonnet-4-5", max_tokens=5, messages=HI),
    )


def test_a_failure_mid_stream_ends_with_an_error_event(
    client: anthropic.Anthropic, claude: AnthropicFake
) -> None:
    message = text_message("this stream will break " * 5)
    events = [
        *message_events(message)[:4],
        {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}},
    ]
    claude.enqueue_events(events)
    with (
        pytest.raises(anthropic.APIStatusError) as caught,
        client.messages.stream(model="claude-sonnet-4-5", max_tokens=64, messages=HI) as stream,
    ):
        for _ in stream:
            pass
    assert "Overloaded" in str(caught.value)


# -- count_tokens and models ---------------------------------------------------------


def test_the_offline_count_grows_with_the_prompt(client: anthropic.Anthropic) -> None:
    short = client.messages.count_tokens(model="gpt-4.1", messages=HI)
    longer = client.messages.count_tokens(
        model="gpt-4.1",
        messages=HI,
        system="You are a meticulous assistant. " * 30,
        tools=[WEATHER_TOOL],
    )
    assert 0 < short.input_tokens < longer.input_tokens
    with pytest.raises(anthropic.NotFoundError):
        client.messages.count_tokens(model="no-such-model", messages=HI)


def test_count_tokens_for_claude_is_anthropics_own_count_of_the_forwarded_prompt(
    client: anthropic.Anthropic, claude: AnthropicFake
) -> None:
    count = at.MessageTokensCount(input_tokens=4321)
    claude.enqueue_count(count.input_tokens)
    raw = client.messages.with_raw_response.count_tokens(
        model="claude-sonnet-4-5",
        messages=HI,
        system="Be brief.",
        tools=[WEATHER_TOOL],
        extra_headers={"anthropic-beta": f"{ALLOWED_BETA},files-api-2025-04-14"},
    )
    assert raw.parse() == count
    assert raw.headers["x-gateway-token-count"] == "upstream"
    sent = claude.requests[-1]
    assert sent.path == "/v1/messages/count_tokens"
    assert sent.json["model"] == MODELS["claude-sonnet-4-5"][1]
    assert sent.json["tools"] == [WEATHER_TOOL] and sent.json["system"] == "Be brief."
    assert sent.headers["x-api-key"] == ANTHROPIC_KEY
    # the client's own version (it fixes the answer's shape), and only the allowed beta
    assert sent.headers["anthropic-version"] == raw.http_request.headers["anthropic-version"]
    assert sent.headers["anthropic-beta"] == ALLOWED_BETA
    assert CLIENT_KEY not in json.dumps(sent.headers)


@pytest.mark.parametrize(
    ("status", "error_type"),
    [(500, "api_error"), (529, "overloaded_error"), (429, "rate_limit_error")],
)
def test_count_tokens_falls_back_to_the_offline_estimate_when_anthropic_fails(
    client: anthropic.Anthropic, claude: AnthropicFake, status: int, error_type: str
) -> None:
    claude.enqueue_error(status, error_type, "Overloaded")
    raw = client.messages.with_raw_response.count_tokens(model="claude-sonnet-4-5", messages=HI)
    offline = count_tokens({"model": "claude-sonnet-4-5", "messages": HI})
    assert raw.parse().input_tokens == offline
    assert raw.headers["x-gateway-token-count"] == "estimate"
    assert [r.path for r in claude.requests] == ["/v1/messages/count_tokens"]


def test_count_tokens_for_other_providers_is_the_offline_estimate(
    client: anthropic.Anthropic, claude: AnthropicFake, gpt: OpenAIFake
) -> None:
    raw = client.messages.with_raw_response.count_tokens(model="gpt-4.1", messages=HI)
    assert raw.parse().input_tokens == count_tokens({"model": "gpt-4.1", "messages": HI})
    assert raw.headers["x-gateway-token-count"] == "estimate"
    assert claude.requests == [] and gpt.requests == []


def test_count_tokens_relays_anthropics_refusal_of_the_prompt(
    client: anthropic.Anthropic, claude: AnthropicFake
) -> None:
    claude.enqueue_error(400, "invalid_request_error", "messages.0.content: bad block")
    with pytest.raises(anthropic.BadRequestError) as caught:
        client.messages.count_tokens(model="claude-sonnet-4-5", messages=HI)
    assert "bad block" in str(caught.value)
    assert ANTHROPIC_KEY not in str(caught.value.body)


def test_models_list_in_anthropics_shape(client: anthropic.Anthropic) -> None:
    page = client.models.list()
    ids = [model.id for model in page.data]
    assert set(MODELS) <= set(ids)
    assert all(model.type == "model" for model in page.data)


# -- disconnect ----------------------------------------------------------------------


def test_client_disconnect_mid_stream_is_recorded(
    client: anthropic.Anthropic, claude: AnthropicFake, redis_server: RedisServer
) -> None:
    long = text_message(" ".join(f"w{i}" for i in range(300)), input_tokens=50, output_tokens=300)
    claude.enqueue_message(long, chunk_delay=0.02)
    seen: list[str] = []
    with client.messages.stream(model="claude-sonnet-4-5", max_tokens=512, messages=HI) as stream:
        request_id = stream.response.headers["request-id"]
        for event in stream:
            if event.type == "content_block_delta" and event.delta.type == "text_delta":
                seen.append(event.delta.text)
                if len(seen) == 5:
                    break
    record = record_of(redis_server.url, request_id)
    assert record.status == 499
    assert record.input_tokens >= 50
    assert Decimal(record.cost_usd) > 0
    assert (record.tenant, record.model) == ("coders", "claude-sonnet-4-5")
    # billed for the text streamed (message_start said 1 output token), and marked so
    assert count_text("".join(seen)) <= record.output_tokens < 300
    assert record.estimated is True


def test_client_disconnect_mid_translated_stream_bills_the_text_streamed(
    gateway: GatewayProcess, claude: AnthropicFake, redis_server: RedisServer
) -> None:
    long = text_message(" ".join(f"w{i}" for i in range(300)), input_tokens=50, output_tokens=300)
    claude.enqueue_message(long, chunk_delay=0.02)
    seen: list[str] = []
    with openai.OpenAI(base_url=gateway.base_url, api_key=CLIENT_KEY, max_retries=0) as sdk:
        stream = sdk.chat.completions.create(
            model="claude-sonnet-4-5",
            max_tokens=512,
            messages=[{"role": "user", "content": "tell me a long story"}],
            stream=True,
        )
        request_id = stream.response.headers["x-request-id"]
        for chunk in stream:
            if chunk.choices and chunk.choices[0].delta.content:
                seen.append(chunk.choices[0].delta.content)
                if len(seen) == 5:
                    break
        stream.close()
    record = record_of(redis_server.url, request_id)
    assert record.status == 499
    assert record.input_tokens >= 50
    assert count_text("".join(seen)) <= record.output_tokens < 300
    assert record.estimated is True
